//! kiln-codegen: kernel structures (`kiln_sched::lower::Sig`) to WGSL source,
//! and naga's checks of that source (`validate`, and `spirv` for Vulkan).
//! Kernels read their sizes, strides and scalars from a uniform block
//! (`meta`), so a kernel's source depends only on its ops, dtypes, rank and
//! which inputs are contiguous: one compiled pipeline serves every shape.

pub mod attention;
pub mod ceilings;
pub mod cuda;
pub mod dump;
pub mod fused;
pub mod launch;
pub mod math;
pub mod matmul;
pub mod operand_textures;
pub mod quant_matmul;
pub mod reduce;
pub mod row_stream;
pub mod spirv;
mod target;
pub mod transpose;
pub use target::runs_attention;
pub mod validate;

use fused::Walk;
use kiln_ir::dtype::DType;
use kiln_ir::ir::ReduceOp;
use kiln_sched::lower::{Op, Sig};
use reduce::{Monoid, ReduceSource};

/// The name suffix of a kernel whose workgroup works together on one output.
fn cooperative_suffix(cooperative: bool) -> &'static str {
    if cooperative { "_wg" } else { "" }
}

/// What codegen may assume of a device: a small value the runtime fills
/// from its adapter, so that choosing and rendering kernels touches no GPU API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caps {
    /// The adapter's name, or its backend where the name is empty (the web),
    /// for messages.
    pub adapter: String,
    /// "vulkan", "gl", "metal", "dx12" or "webgpu".
    pub backend: String,
    /// A CPU adapter (SwiftShader, llvmpipe), whose compilers and costs
    /// differ from a GPU's.
    pub cpu: bool,
    pub subgroups: bool,
    /// The subgroup width, where the adapter reports one fixed width.
    pub subgroup_size: Option<u32>,
    /// Whether kernels may use workgroup memory (not on a Vulkan device
    /// without passthrough shaders: see [`spirv`]).
    pub workgroup_memory: bool,
    pub storage_textures: bool,
    /// Storage buffers one shader stage may bind.
    pub max_storage_buffers: u32,
    pub max_texture_side: u32,
    pub max_texture_layers: u32,
    /// Workgroups a dispatch may have along one dimension.
    pub max_workgroups_per_dimension: u32,
    /// Elementwise kernels compute f16 as WGSL's `f16` (the adapter has
    /// `shader-f16`); otherwise f16 is packed in words and computed in f32.
    pub f16_compute: bool,
}

impl Caps {
    /// What WebGPU guarantees every adapter: no subgroups, 8 storage
    /// buffers and textures of 8192 × 8192 × 256, on a GPU. For schedules
    /// made without an adapter.
    pub fn webgpu() -> Caps {
        Caps {
            adapter: "webgpu".into(),
            backend: "webgpu".into(),
            cpu: false,
            subgroups: false,
            subgroup_size: None,
            workgroup_memory: true,
            storage_textures: true,
            max_storage_buffers: 8,
            max_texture_side: 8192,
            max_texture_layers: 256,
            max_workgroups_per_dimension: 65535,
            f16_compute: false,
        }
    }
}

impl Caps {
    /// An NVIDIA GPU under CUDA: warps of 32 as subgroups, shared memory,
    /// no textures (kernels take pointers, so bindings are many).
    pub fn cuda() -> Caps {
        Caps {
            adapter: "cuda".into(),
            backend: "cuda".into(),
            cpu: false,
            subgroups: true,
            subgroup_size: Some(32),
            workgroup_memory: true,
            storage_textures: false,
            max_storage_buffers: 16,
            max_texture_side: 0,
            max_texture_layers: 0,
            max_workgroups_per_dimension: 65535,
            f16_compute: false,
        }
    }
}

/// Words in one kernel's uniform block (512 bytes, a multiple of the
/// largest uniform offset alignment any adapter asks for, 256).
pub const META_WORDS: usize = 128;

/// Invocations per workgroup for 1-D kernels (WebGPU's guaranteed maximum).
pub const WG: u32 = 256;

/// Longest loop a kernel may run: Mesa ends a shader loop after 65,535
/// iterations.
pub const MAX_LOOP: usize = 65_535;

/// The uniform block and its accessor, and `f32_bits` (an f32 from its bit
/// pattern, for infinities and NaN), shared by every kernel.
pub const META_DECL: &str = "@group(0) @binding(0) var<uniform> kparams: array<vec4<u32>, 32>;
fn m(i: u32) -> u32 { return kparams[i >> 2u][i & 3u]; }
fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }
";

/// A kernel's scalar parameters, in the order the kernel reads them.
#[derive(Debug, Default, Clone)]
pub struct Meta(pub Vec<u32>);

impl Meta {
    pub fn u(&mut self, v: usize) -> &mut Self {
        self.0.push(v as u32);
        self
    }
    pub fn i(&mut self, v: isize) -> &mut Self {
        self.0.push(v as i32 as u32);
        self
    }
    /// A scalar of `dtype`'s compute type, as its bit pattern.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> &mut Self {
        self.0.push(match dtype {
            DType::F32 | DType::F16 | DType::BF16 => (v as f32).to_bits(),
            DType::I32 => v as i64 as i32 as u32,
            DType::U32 => v as i64 as u32,
            DType::Bool => (v != 0.0) as u32,
        });
        self
    }
    pub fn layout(&mut self, offset: usize, strides: &[isize]) -> &mut Self {
        self.u(offset);
        strides.iter().for_each(|&s| {
            self.i(s);
        });
        self
    }
}

/// WGSL type a value of `dtype` is computed in.
pub fn compute_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => "f32",
        DType::I32 => "i32",
        DType::U32 => "u32",
        DType::Bool => "bool",
    }
}

/// WGSL element type of a storage buffer holding `dtype`.
pub fn storage_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "f32",
        DType::I32 => "i32",
        DType::U32 | DType::F16 | DType::BF16 | DType::Bool => "u32",
    }
}

/// Expression reading element `j` (a u32 expression) of buffer `buf`.
pub fn load_expr(dtype: DType, buf: &str, j: &str) -> String {
    match dtype {
        DType::F16 => format!("unpack2x16float({buf}[({j}) >> 1u])[({j}) & 1u]"),
        // A bf16 is an f32's upper half: shift the element's half word there.
        DType::BF16 => format!("bitcast<f32>(({buf}[({j}) >> 1u] >> ((({j}) & 1u) * 16u)) << 16u)"),
        DType::Bool => format!("({buf}[{j}] != 0u)"),
        _ => format!("{buf}[{j}]"),
    }
}

/// Expression reading elements `4i..4i+3` (`i` a u32 expression) of buffer
/// `buf` as a `vec4<f32>`: a vec4 of f32, or a pair of words of a packed
/// dtype (four f16 or bf16), as [`vec4_storage_type`] declares it.
pub fn load4_expr(dtype: DType, buf: &str, i: &str) -> String {
    let w = format!("{buf}[{i}]");
    match dtype {
        DType::F16 => format!("vec4<f32>(unpack2x16float({w}.x), unpack2x16float({w}.y))"),
        // A bf16 is an f32's upper half.
        DType::BF16 => format!(
            "bitcast<vec4<f32>>(vec4<u32>({w}.x << 16u, {w}.x & 0xffff0000u, {w}.y << 16u, {w}.y & 0xffff0000u))"
        ),
        _ => w,
    }
}

/// The element type of a storage buffer of `dtype` read four elements at
/// a time ([`load4_expr`]).
pub fn vec4_storage_type(dtype: DType) -> &'static str {
    if dtype.is_packed() { "vec2<u32>" } else { "vec4<f32>" }
}

/// `f16_bits(x)` and `bf16_bits(x)`: the f32 `x` rounded to the nearest f16
/// or bf16 (ties to even), in the low 16 bits, the same on every adapter:
/// past the largest finite value is ±inf and NaN stays a quiet NaN.
/// `pack2x16float` leaves both undefined (adapters gave inf or garbage),
/// and a bf16's rounding could carry a NaN into infinity. Declared by the
/// kernels that write a packed dtype.
pub const PACK_DECL: &str = "fn f16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let sign = (b >> 16u) & 0x8000u;
    if ((b & 0x7fffffffu) > 0x7f800000u) { return sign | 0x7e00u; }
    if (abs(x) >= 65520.0) { return sign | 0x7c00u; }
    return pack2x16float(vec2<f32>(x, 0.0)) & 0xffffu;
}
fn bf16_bits(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}
";

/// Expression packing two computed values of a packed dtype (f16 or bf16)
/// into the word that stores them, `lo` first (needs [`PACK_DECL`]).
pub fn pack_pair_expr(dtype: DType, lo: &str, hi: &str) -> String {
    let bits = if dtype == DType::BF16 { "bf16_bits" } else { "f16_bits" };
    format!("({bits}({lo}) | ({bits}({hi}) << 16u))")
}

/// Expression converting a computed value to what a 4-byte buffer stores.
pub fn store_expr(dtype: DType, v: &str) -> String {
    match dtype {
        DType::Bool => format!("select(0u, 1u, {v})"),
        _ => v.to_string(),
    }
}

/// A literal of `dtype`'s compute type.
pub fn literal(dtype: DType, v: f64) -> String {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => {
            // Through a function call, a runtime expression: WGSL const
            // evaluation rejects a non-finite f32 (Dawn enforces it, naga
            // does not), so `bitcast<f32>(0x7f800000u)` fails in browsers.
            if v.is_infinite() { format!("f32_bits({}u)", (v as f32).to_bits()) } else { format!("f32({v:?})") }
        }
        DType::I32 => format!("i32({})", v as i64),
        DType::U32 => format!("{}u", v as i64 as u32),
        DType::Bool => (v != 0.0).to_string(),
    }
}

/// A finite literal of WGSL's `f16` (in kernels computing f16 natively).
pub fn half_literal(v: f64) -> String {
    format!("f16({v:?})")
}

/// Whether a kernel computing f16 natively (`half`) or not holds `dtype`
/// packed two per word: bf16 always, f16 unless `half`.
pub fn held_packed(dtype: DType, half: bool) -> bool {
    dtype == DType::BF16 || (dtype == DType::F16 && !half)
}

/// Statements computing the strided element index `at_{name}` of an input
/// from coordinates `c0..c{rank-1}`, with its layout in meta at `base`.
pub fn strided_index(name: &str, rank: usize, base: usize) -> String {
    let mut s = format!("    var at_{name} = i32(m({base}u));\n");
    for d in 0..rank {
        s += &format!("    at_{name} += i32(c{d}) * bitcast<i32>(m({}u));\n", base + 1 + d);
    }
    s
}

/// Statements unravelling flat index `i` into `c0..c{rank-1}` over the shape
/// stored in meta at `shape_base`.
pub fn unravel(rank: usize, shape_base: usize, i: &str) -> String {
    let mut s = format!("    var rem = {i};\n");
    for d in (0..rank).rev() {
        if d == 0 {
            s += "    let c0 = rem;\n";
        } else {
            s += &format!("    let c{d} = rem % m({}u);\n    rem = rem / m({}u);\n", shape_base + d, shape_base + d);
        }
    }
    s
}

/// Everything a kernel's WGSL depends on: the kernel cache's key. Shapes,
/// strides and scalars are not in it (they travel in meta), so one compiled
/// pipeline serves every batch size.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KernelKey {
    Elementwise {
        sig: Sig,
        outputs: Vec<DType>,
        out_strided: bool,
        walk: Walk,
        /// A vec4 walk's grid covers the elements exactly: no bounds checks.
        whole: bool,
        /// f16 values are WGSL `f16`s ([`Caps::f16_compute`]).
        half: bool,
    },
    /// First pass (`prologue`) or a later pass over partials of `dtype`.
    Reduce {
        monoid: Monoid,
        prologue: Option<Sig>,
        partials: DType,
        pass: reduce::ReducePass,
    },
    Row {
        sig: Sig,
        stages: Vec<ReduceOp>,
        outputs: Vec<DType>,
        per_row: bool,
        vec4: bool,
        layout: RowLayout,
    },
    Matmul {
        dtype: DType,
        batch_rank: usize,
        epilogue: Option<Sig>,
        config: matmul::MatmulConfig,
    },
    /// `softmax(scores) @ v` without the scores in memory ([`attention`]).
    Attention {
        batch_rank: usize,
        dk: u32,
        dv: u32,
        keys: attention::KeySharing,
        /// Keys after a workgroup's last query are skipped (a causal mask).
        causal: bool,
        scores: Sig,
    },
    /// The integer-weight product ([`quant_matmul`]).
    QuantMatmul {
        bits: u32,
        rows_per: u32,
        cooperative: bool,
        /// x as int8 codes packed four per u32 (int8 weights only).
        packed_x: bool,
        /// The scales' float dtype.
        scales: DType,
    },
    /// A matmul operand of `dtype` copied into an f32 texture
    /// ([`operand_textures`]).
    OperandTexture {
        vec4: bool,
        dtype: DType,
    },
    /// A transposed f32 operand copied into rows in 4 × 4 blocks
    /// ([`transpose`]).
    Transpose {
        batch_rank: usize,
    },
}

/// How a row kernel's invocations share the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowLayout {
    /// A row per invocation ([`fused::row_wgsl`]).
    Invocation,
    /// A few lanes per row holding it in registers ([`fused::RowLanes`]).
    Lanes(fused::RowLanes),
    /// A workgroup of `lanes` lanes per row, each walking its share of
    /// the row once per stage ([`row_stream::row_stream_wgsl`]); with
    /// `straddling`, in the 4-aligned vec4s covering a row that does not
    /// split into vec4s.
    Stream { lanes: u32, straddling: bool },
}

impl RowLayout {
    /// The kernel name's suffix (a stream's says how it reads its rows).
    fn suffix(self, vec4: bool) -> &'static str {
        match self {
            RowLayout::Invocation => "",
            RowLayout::Lanes(_) => "_lanes",
            RowLayout::Stream { straddling: true, .. } => "_stream_straddling",
            RowLayout::Stream { .. } if vec4 => "_stream_vec4",
            RowLayout::Stream { .. } => "_stream",
        }
    }
}

impl KernelKey {
    pub fn wgsl(&self) -> String {
        match self {
            KernelKey::Elementwise { sig, outputs, out_strided, walk, whole, half } => {
                fused::elementwise_wgsl(sig, outputs, *out_strided, *walk, *whole, *half)
            }
            KernelKey::Reduce { monoid, prologue, partials, pass } => {
                let src = match prologue {
                    Some(sig) => ReduceSource::Prologue(sig),
                    None => ReduceSource::Partials { dtype: *partials },
                };
                reduce::reduce_wgsl(*monoid, src, *pass)
            }
            KernelKey::Row { sig, stages, outputs, layout: RowLayout::Lanes(lanes), .. } => {
                fused::row_lanes_wgsl(sig, stages, outputs, *lanes)
            }
            KernelKey::Row { sig, stages, outputs, per_row, vec4, layout: RowLayout::Stream { lanes, straddling } } => {
                row_stream::row_stream_wgsl(sig, stages, outputs, *per_row, *vec4, *lanes, *straddling)
            }
            KernelKey::Row { sig, stages, outputs, per_row, vec4, layout: RowLayout::Invocation } => {
                fused::row_wgsl(sig, stages, outputs, *per_row, *vec4)
            }
            KernelKey::Matmul { dtype, batch_rank, epilogue, config } => {
                matmul::matmul_kernel(config, *dtype, *batch_rank, epilogue.as_ref())
            }
            KernelKey::Attention { batch_rank, dk, dv, keys, causal, scores } => {
                attention::attention_wgsl(*batch_rank, *dk as usize, *dv as usize, *keys, *causal, scores)
            }
            KernelKey::OperandTexture { vec4, dtype } => operand_textures::pack_wgsl(*vec4, *dtype),
            KernelKey::Transpose { batch_rank } => transpose::transpose_wgsl(*batch_rank),
            KernelKey::QuantMatmul { bits, rows_per, cooperative, packed_x, scales } => {
                quant_matmul::quant_matmul_wgsl(*bits, *rows_per, *cooperative, *packed_x, *scales)
            }
        }
    }

    /// A short readable name for logs and dumps, e.g. `ew_sub_exp_div`.
    pub fn name(&self) -> String {
        let (kind, sig, extra) = match self {
            KernelKey::Elementwise { sig, walk, .. } => {
                let suffix = match walk {
                    Walk::Flat => "",
                    Walk::Vec4 => "_vec4",
                    Walk::Vec4Rows => "_rows",
                    Walk::Vec4Segments => "_segments",
                    Walk::Vec4Straddling => "_straddling",
                };
                ("ew", Some(sig), suffix)
            }
            KernelKey::Reduce { monoid, prologue, pass, .. } => {
                let kind = match monoid {
                    Monoid::Reduce(op) => op.name(),
                    Monoid::Arg(op) => op.name(),
                };
                let suffix = match (prologue.is_some(), pass.workgroup, pass.runs) {
                    _ if pass.columns => "_columns",
                    (true, false, reduce::Runs::Straddling) => "_straddling",
                    (true, true, reduce::Runs::Straddling) => "_wg_straddling",
                    (true, false, _) => "",
                    (true, true, _) => "_wg",
                    (false, false, _) => "_partials",
                    (false, true, _) => "_partials_wg",
                };
                (kind, prologue.as_ref(), suffix)
            }
            KernelKey::Row { sig, layout, vec4, .. } => ("row", Some(sig), layout.suffix(*vec4)),
            KernelKey::Matmul { epilogue, .. } => ("matmul", epilogue.as_ref(), ""),
            KernelKey::Attention { scores, keys, causal, .. } => {
                let suffix = match (keys, causal) {
                    (attention::KeySharing::Workgroup, false) => "_tiles",
                    (attention::KeySharing::Workgroup, true) => "_tiles_causal",
                    (attention::KeySharing::Subgroup(_), false) => "_subgroup",
                    (attention::KeySharing::Subgroup(_), true) => "_subgroup_causal",
                };
                ("attention", Some(scores), suffix)
            }
            KernelKey::Transpose { .. } => ("transpose", None, ""),
            KernelKey::OperandTexture { vec4, dtype } => {
                let suffix = match (dtype, vec4) {
                    (DType::F16, true) => "_f16_vec4",
                    (DType::F16, false) => "_f16",
                    (DType::BF16, true) => "_bf16_vec4",
                    (DType::BF16, false) => "_bf16",
                    (_, true) => "_vec4",
                    (_, false) => "",
                };
                ("operand_texture", None, suffix)
            }
            KernelKey::QuantMatmul { packed_x: true, cooperative, .. } => {
                ("quant_matmul_w8a8", None, cooperative_suffix(*cooperative))
            }
            KernelKey::QuantMatmul { bits: 8, cooperative, .. } => {
                ("quant_matmul_int8", None, cooperative_suffix(*cooperative))
            }
            KernelKey::QuantMatmul { cooperative, .. } => ("quant_matmul_int4", None, cooperative_suffix(*cooperative)),
        };
        let mut name = kind.to_string();
        let mut seen = Vec::new();
        for (op, _) in sig.iter().flat_map(|s| s.bodies.iter()).flat_map(|b| b.ops.iter()) {
            let op_name = match op {
                Op::Pointwise(p) => p.name(),
                Op::Gather { .. } => "gather",
                Op::Iota { .. } => "arange",
                Op::Load(_) | Op::Row(_) | Op::Acc | Op::Param(_) => continue,
            };
            if !seen.contains(&op_name) && seen.len() < 6 {
                seen.push(op_name);
                name += "_";
                name += op_name;
            }
        }
        name + extra
    }
}
