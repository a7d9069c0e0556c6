//! A matmul item's launches: the variant of its config that fits the
//! operands (vec4, textures), whether B is first copied into column panels,
//! and one kernel launch per K chunk and batch slice.

use super::{Launch, Variants, elementwise, grid};
use crate::fused::VEC;
use crate::matmul::MatmulConfig;
use crate::operand_textures::{OperandTexture, PACK_WG};
use crate::reduce::MATMUL_K_CHUNK;
use crate::{Caps, KernelKey, Meta};
use kiln_ir::dtype::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::shape::{Layout, numel};
use kiln_sched::lower::{Access, Args, Body, LeafDesc, Op, Sig};
use kiln_sched::schedule::product_dims;

/// Fewest bytes of B (K × N) for which a CPU adapter reads B from a copy in
/// column panels. Walking a column panel of a row-major B touches a new
/// page at every k, and at 2048 × 2048 (rows 8 KiB apart) the panel's pages
/// outnumber what the TLB holds: in a scratch kernel of kiln's layout on
/// lavapipe, 2048³ ran 1.14–1.18× as fast from panels, 1024³ 1.04×
/// (docs/BENCHMARKS.md, 'What was tried' (matmul)).
const PANELS_MIN_BYTES: u64 = 8 << 20;

/// How a matmul kernel reads A and B.
#[derive(Debug, Clone)]
pub enum MatmulOperands {
    /// From their buffers.
    Buffers,
    /// B from a copy in column panels, `[N / tile_n, K, tile_n]` f32.
    Panels { shape: Vec<usize> },
    /// A and B from textures laid out as these.
    Textures { a: OperandTexture, b: OperandTexture },
}

/// Everything a matmul item launches.
#[derive(Debug, Clone)]
pub struct MatmulLaunch {
    pub operands: MatmulOperands,
    /// The copies of the operands that come first: B into its panels
    /// (bindings: the panels, then B's buffer), or A and B into their
    /// textures (each: the operand's buffer, then its texture).
    pub copies: Vec<Launch>,
    /// One per K chunk and batch slice. Bindings: the output, A and B (or
    /// their textures, or A and B's panels), then the epilogue's buffers.
    pub launches: Vec<Launch>,
}

/// The launches of `out = epilogue(a @ b)` (an f32 output of `shape` from
/// `operand_dtype` operands) with the kernel family's `config`; `None`
/// when the output is empty. `args` holds the epilogue's layouts and
/// params.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    caps: &Caps,
    variants: &Variants,
    config: MatmulConfig,
    op: &'static str,
    a: &Layout,
    b: &Layout,
    operand_dtype: DType,
    shape: &[usize],
    epilogue: Option<Sig>,
    args: &Args,
) -> Result<Option<MatmulLaunch>> {
    let r = shape.len();
    let (m, k, n) = product_dims(a, b);
    if numel(shape) == 0 {
        return Ok(None);
    }
    let batch_shape = &shape[..r - 2];
    let batch: usize = batch_shape.iter().product();
    let max = caps.max_workgroups_per_dimension as usize;
    // Packed operands too: four elements are two whole words.
    let vec_ok = matches!(operand_dtype, DType::F32 | DType::F16 | DType::BF16)
        && k.is_multiple_of(VEC)
        && n.is_multiple_of(VEC)
        && a.strides[r - 1] == 1
        && b.strides[r - 1] == 1
        && [a.offset as isize, b.offset as isize]
            .iter()
            .chain(&a.strides[..r - 1])
            .chain(&b.strides[..r - 1])
            .all(|s| s % VEC as isize == 0);
    let (tile_m, tile_n) = config.tile();
    let textures = (OperandTexture::a(m, k, tile_m), OperandTexture::b(k, n, tile_n));
    let tex = config.tex && reads_textures(caps, operand_dtype, batch, n, textures);
    let config = MatmulConfig { tex, vec: tex || config.vec && vec_ok, ..config };
    let (gx, gy) = (n.div_ceil(tile_n), m.div_ceil(tile_m));
    if gx > max || gy > max {
        return Err(KilnError::Invalid { op, detail: format!("an output of {m}×{n} exceeds the adapter's grid") });
    }
    let (operands, copies, b, panel_stride) = if config.tex {
        let texture = |l, t| operand_texture(caps, op, l, t, operand_dtype);
        let copies = vec![texture(a, textures.0)?, texture(b, textures.1)?];
        (MatmulOperands::Textures { a: textures.0, b: textures.1 }, copies, b.clone(), 0)
    } else if operand_dtype == DType::F32 && reads_b_in_panels(caps, variants, &config, b, k, n) {
        let (shape, copy) = column_panels(caps, op, b, k, n, tile_n)?;
        let mut strides = vec![0; r];
        (strides[r - 2], strides[r - 1]) = (tile_n as isize, 1);
        let panels = Layout { shape: b.shape.clone(), strides, offset: 0 };
        (MatmulOperands::Panels { shape }, vec![copy], panels, (k * tile_n) as isize)
    } else {
        (MatmulOperands::Buffers, Vec::new(), b.clone(), tile_n as isize * b.strides[r - 1])
    };
    let batch_rank = batch_shape.len();
    let key = KernelKey::Matmul { dtype: operand_dtype, batch_rank, epilogue, config };
    let mut launches = Vec::new();
    for b0 in (0..batch).step_by(max) {
        for k0 in (0..k.max(1)).step_by(MATMUL_K_CHUNK) {
            let k1 = (k0 + MATMUL_K_CHUNK).min(k);
            let mut meta = Meta::default();
            meta.u(m).u(k).u(n).u(k0).u(k1).u((k0 > 0) as usize).u(b0);
            meta.i(a.strides[r - 2]).i(a.strides[r - 1]).i(b.strides[r - 2]).i(b.strides[r - 1]);
            meta.u(a.offset).u(b.offset).u((k1 == k) as usize).i(panel_stride);
            batch_shape.iter().for_each(|&d| {
                meta.u(d);
            });
            a.strides[..r - 2].iter().chain(&b.strides[..r - 2]).for_each(|&s| {
                meta.i(s);
            });
            if let KernelKey::Matmul { epilogue: Some(sig), .. } = &key {
                super::fused_meta(&mut meta, sig, args, shape);
            }
            let groups = [gx as u32, gy as u32, (batch - b0).min(max) as u32];
            launches.push(Launch { key: key.clone(), meta, groups, elements: m * n });
        }
    }
    Ok(Some(MatmulLaunch { operands, copies, launches }))
}

/// Whether a texture config reads this product's operands from textures
/// (`textures`: A's and B's): float operands (packed ones are unpacked by
/// the copy into the texture), one batch, N a multiple of 4 (the kernel
/// stores vec4s) and textures within the adapter's limits. Otherwise its
/// vec4 twin runs.
fn reads_textures(
    caps: &Caps,
    dtype: DType,
    batch: usize,
    n: usize,
    textures: (OperandTexture, OperandTexture),
) -> bool {
    dtype.is_float() && batch == 1 && n.is_multiple_of(VEC) && textures.0.fits(caps) && textures.1.fits(caps)
}

/// Whether the matmul `config` reads B (`b`, K × N) from a copy laid out
/// as column panels: only for vec4 kernels, B split evenly into more than
/// one panel and the same B for every batch; by size on CPU adapters
/// unless pinned ([`Variants::matmul_panels`]).
fn reads_b_in_panels(caps: &Caps, variants: &Variants, config: &MatmulConfig, b: &Layout, k: usize, n: usize) -> bool {
    let r = b.shape.len();
    let (_, tile_n) = config.tile();
    let possible =
        config.vec && k > 0 && n > tile_n && n.is_multiple_of(tile_n) && b.strides[..r - 2].iter().all(|&s| s == 0);
    let by_size = || caps.cpu && DType::F32.storage_bytes(k * n) >= PANELS_MIN_BYTES;
    possible && variants.matmul_panels.unwrap_or_else(by_size)
}

/// The launch copying operand `l` (its last two axes, one batch, of
/// `dtype`) into a texture laid out as `tex`.
fn operand_texture(caps: &Caps, op: &'static str, l: &Layout, tex: OperandTexture, dtype: DType) -> Result<Launch> {
    let r = l.shape.len();
    let (rows, cols, row_stride, col_stride) = (l.shape[r - 2], l.shape[r - 1], l.strides[r - 2], l.strides[r - 1]);
    let vec4 = col_stride == 1
        && cols.is_multiple_of(VEC)
        && l.offset.is_multiple_of(VEC)
        && row_stride.rem_euclid(VEC as isize) == 0;
    let mut meta = Meta::default();
    meta.u(tex.width as usize).u(tex.height as usize).u(tex.layers as usize);
    meta.u(rows).u(cols).u(l.offset).i(row_stride).i(col_stride);
    tex.coefficients().iter().for_each(|&c| {
        meta.u(c as usize);
    });
    let texels = tex.texels() as usize;
    let groups = grid(caps, op, texels.div_ceil(PACK_WG as usize))?;
    Ok(Launch { key: KernelKey::OperandTexture { vec4, dtype }, meta, groups, elements: texels })
}

/// The shape of B's column panels of `tile_n` (`[N / tile_n, K, tile_n]`,
/// contiguous; B `b` is K × N, the same for every batch) and the
/// elementwise launch copying B into them through a strided view whose
/// rows are vec4s.
fn column_panels(
    caps: &Caps,
    op: &'static str,
    b: &Layout,
    k: usize,
    n: usize,
    tile_n: usize,
) -> Result<(Vec<usize>, Launch)> {
    let r = b.shape.len();
    let (row, column) = (b.strides[r - 2], b.strides[r - 1]);
    let view = Layout {
        shape: vec![n / tile_n, k, tile_n],
        strides: vec![tile_n as isize * column, row, column],
        offset: b.offset,
    };
    let leaf = LeafDesc { dtype: DType::F32, buffer: Some(0), access: Access::of(&view).0 };
    let copy = Body { ops: vec![(Op::Load(0), DType::F32)], roots: vec![0] };
    let sig = Sig { rank: 3, leaves: vec![leaf], params: vec![], buffers: vec![DType::F32], bodies: vec![copy] };
    let shape = view.shape.clone();
    let args = Args { layouts: vec![view], ..Default::default() };
    let launch = elementwise(caps, op, sig, &args, &shape, &[DType::F32], None)?;
    Ok((shape, launch.expect("B has elements where the output has")))
}
