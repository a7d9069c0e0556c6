//! The family's generator: a config, operand dtype, batch rank and
//! optional epilogue to one matmul kernel's WGSL.

use super::config::{MatmulConfig, STAGE_K};
use crate::reduce::{MATMUL_SHAPE_BASE, matmul_epilogue_base};
use crate::{META_DECL, load_expr, load4_expr, storage_type, unravel, vec4_storage_type};
use kiln_ir::dtype::DType;
use kiln_sched::lower::Sig;
use std::fmt::Write;

/// WGSL of one family member; the epilogue is body 0 of `epilogue`,
/// reading the accumulator as `acc`.
/// Meta: 0 M, 1 K, 2 N, 3 k0, 4 k1, 5 accumulate, 6 first batch,
/// 7 A row stride, 8 A col stride, 9 B row stride, 10 B col stride,
/// 11 A offset, 12 B offset, 13 apply the epilogue (last k chunk), 14 B's
/// panel stride (vec4 kernels: elements from one workgroup's columns of B
/// to the next's; `tile_n` in a row-major B, K · `tile_n` in a copy laid
/// out as column panels), then the batch shape and A's and B's batch
/// strides, then the epilogue's meta.
/// The k loop runs over [k0, k1), which the runtime keeps at most
/// `MATMUL_K_CHUNK` long (Mesa ends loops after 65,535 iterations).
pub fn matmul_kernel(c: &MatmulConfig, dtype: DType, batch_rank: usize, epilogue: Option<&Sig>) -> String {
    // No `enable subgroups;`: naga 30 rejects it (not implemented) and
    // accepts subgroup builtins without it.
    let mut s = String::from(META_DECL);
    let loads = match (c.tex, c.vec) {
        (true, _) => Loads::Textures,
        (false, true) => Loads::Fours,
        (false, false) => Loads::Elements,
    };
    s += &preamble(dtype, batch_rank, epilogue, loads);
    if c.staged {
        s += &main_staged(c);
    } else if c.tex {
        // A and B as f32 texture arrays (whatever their dtype: the copy
        // into the texture unpacks) in the bindings of their buffers.
        let word = storage_type(dtype);
        for (b, name) in [(2, "a"), (3, "b")] {
            let buffer = format!("@group(0) @binding({b}) var<storage, read> in{}: array<{word}>;\n", b - 2);
            s = s.replace(&buffer, &format!("@group(0) @binding({b}) var t{name}: texture_2d_array<f32>;\n"));
        }
        s = s.replace("out: array<f32>", "out: array<vec4<f32>>");
        return s + &main_tex(c) + STORE_VEC4_FN;
    } else if c.vec {
        // Same bindings, read and written by fours (N is a multiple of 4,
        // so a row's vec4s never straddle two rows): f32 operands as
        // vec4s, packed ones as pairs of words.
        let (word, four) = (storage_type(dtype), vec4_storage_type(dtype));
        for buf in ["in0", "in1"] {
            s = s.replace(&format!("{buf}: array<{word}>"), &format!("{buf}: array<{four}>"));
        }
        s = s.replace("out: array<f32>", "out: array<vec4<f32>>");
        return s + &main_vec(c) + STORE_VEC4_FN;
    } else {
        s += &main_fn(c);
    }
    s + STORE_FN
}

/// How a kernel reads its operands' buffers.
#[derive(Clone, Copy, PartialEq)]
enum Loads {
    /// `load_a(e)`, `load_b(e)`: element e.
    Elements,
    /// `load4_a(i)`, `load4_b(i)`: elements 4i..4i+3 (vec4 kernels; a pair
    /// of words of a packed operand).
    Fours,
    /// None: the kernel reads textures.
    Textures,
}

/// Bindings, loads, batch offsets and the epilogue.
fn preamble(dtype: DType, batch_rank: usize, epilogue: Option<&Sig>, loads: Loads) -> String {
    let st = storage_type(dtype);
    let mut s = String::from("@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n");
    match epilogue {
        Some(sig) => {
            let e = crate::fused::Emitter::new(sig, matmul_epilogue_base(batch_rank), false);
            s += &e.input_decls(1);
            s += "fn epilogue(f: u32, acc: f32) -> f32 {\n";
            let v = e.body(0, "f", "", &mut s);
            s += &format!("    return {};\n}}\n", v[0]);
        }
        None => {
            s += &format!("@group(0) @binding(2) var<storage, read> in0: array<{st}>;\n");
            s += &format!("@group(0) @binding(3) var<storage, read> in1: array<{st}>;\n");
            s += "fn epilogue(f: u32, acc: f32) -> f32 { return acc; }\n";
        }
    }
    for (name, buf) in [("a", "in0"), ("b", "in1")] {
        s += &match loads {
            Loads::Elements => {
                format!("fn load_{name}(e: i32) -> f32 {{ return {}; }}\n", load_expr(dtype, buf, "u32(e)"))
            }
            Loads::Fours => {
                format!("fn load4_{name}(i: i32) -> vec4<f32> {{ return {}; }}\n", load4_expr(dtype, buf, "u32(i)"))
            }
            Loads::Textures => String::new(),
        };
    }
    let b = MATMUL_SHAPE_BASE;
    s += "fn batch_offsets(batch: u32) -> vec2<i32> {\n";
    s += &unravel(batch_rank, b, "batch");
    s += "    var at_a = i32(m(11u));\n    var at_b = i32(m(12u));\n";
    for d in 0..batch_rank {
        s += &format!("    at_a += i32(c{d}) * bitcast<i32>(m({}u));\n", b + batch_rank + d);
        s += &format!("    at_b += i32(c{d}) * bitcast<i32>(m({}u));\n", b + 2 * batch_rank + d);
    }
    s + "    return vec2<i32>(at_a, at_b);\n}\n"
}

/// A's and B's batch offsets and strides, in elements.
const OPERAND_STRIDES: &str = "    let base = batch_offsets(batch);
    let sar = bitcast<i32>(m(7u));
    let sac = bitcast<i32>(m(8u));
    let sbr = bitcast<i32>(m(9u));
    let sbc = bitcast<i32>(m(10u));
";

/// The entry point. Accumulators are named scalars' vec4s, not arrays:
/// naga 30 gives arrays an explicit layout, which Vulkan forbids in function
/// memory (VUID-StandaloneSpirv-None-10684, wgpu issue 7696).
fn main_fn(c: &MatmulConfig) -> String {
    let (tn, wx) = (c.tn, c.wx);
    let mut s = entry(c);
    s += OPERAND_STRIDES;
    s += &rows_and_accumulators(c);
    let _ = writeln!(s, "    let col0 = wg.x * {}u + lx;", wx * tn);
    for j in 0..tn {
        let _ = writeln!(s, "    let cb{j} = base.y + i32(min(col0 + {}u, N - 1u)) * sbc;", j * wx);
    }
    let a = |at: String| format!("load_a({at})");
    s +=
        &k_loops(c, &|i| a(format!("ra{i} + ka")), &|q, first, last| buffer_lane_row(q, first, last, &a), &|a, pre| {
            k_loop(c, a, pre)
        });
    s + &store_blocks(c) + "}\n"
}

/// The lane's row `lx + first` of the block (clamped to its row `last`) in
/// A's buffer: a `let rs{q}` before the loops and the load at this k step.
fn buffer_lane_row(q: u32, first: u32, last: u32, load: &dyn Fn(String) -> String) -> (String, String) {
    let at = format!("    let rs{q} = base.x + i32(min(row0 + min(lx + {first}u, {last}u), M - 1u)) * sar;\n");
    (at, load(format!("rs{q} + ka")))
}

/// The vec4 entry point: loads by vec4 index (element index / 4).
fn main_vec(c: &MatmulConfig) -> String {
    let (tn, wx) = (c.tn, c.wx);
    let nv = tn / 4;
    let mut s = entry(c);
    s += "    let base = batch_offsets(batch) >> vec2<u32>(2u);\n";
    s += "    let sar = bitcast<i32>(m(7u)) >> 2u;\n    let sbr = bitcast<i32>(m(9u)) >> 2u;\n";
    s += &rows_and_accumulators(c);
    // Column vec4 v of this lane, clamped into B, and where it lies in
    // this workgroup's panel of B.
    let _ = writeln!(s, "    let nvec = N >> 2u;");
    let _ = writeln!(s, "    let panel0 = wg.x * {}u;", wx * nv);
    let _ = writeln!(s, "    let panel = base.y + i32(wg.x) * (bitcast<i32>(m(14u)) >> 2u);");
    for v in 0..nv {
        let _ = writeln!(s, "    let cv{v} = panel0 + lx + {}u;", v * wx);
        let _ = writeln!(s, "    let cb{v} = panel + i32(min(cv{v}, nvec - 1u) - panel0);");
    }
    let a = |at: String| format!("load4_a({at})");
    let b_step = |kk: u32| {
        let mut s = format!("        let kb{kk} = i32(k + {kk}u) * sbr;\n");
        for v in 0..nv {
            let _ = writeln!(s, "        let b{kk}_{v} = load4_b(cb{v} + kb{kk});");
        }
        s
    };
    let lane = |q, first, last| buffer_lane_row(q, first, last, &a);
    s += &k_loops(c, &|i| a(format!("ra{i} + ka")), &lane, &|a, pre| {
        vec_k_loop(c, a, pre, "        let ka = i32(k >> 2u);\n", &b_step)
    });
    s + &store4_blocks(c) + "}\n"
}

/// The texture entry point ([`MatmulConfig::tex`]). A's row block is layer
/// `wg.y` of `ta` (texel x: row in the block, y: k / 4, four k each), B's
/// column panel layer `wg.x` of `tb` (x: column vec4 in the panel, y: k);
/// texels past M, N or K hold 0, so no load is clamped.
fn main_tex(c: &MatmulConfig) -> String {
    assert_eq!(c.wy, 1, "{}: texture configs are one row of lanes", c.name());
    let (tm, wx, nv) = (c.tm, c.wx, c.tn / 4);
    let mut s = entry(c);
    let _ = writeln!(s, "    let lx = li % {wx}u;\n    let row0 = wg.y * {tm}u;");
    s += &accumulators(c);
    for v in 0..nv {
        let _ = writeln!(s, "    let cv{v} = wg.x * {}u + lx + {}u;", wx * nv, v * wx);
    }
    let b_step = |kk: u32| {
        let load = |v: u32| format!("textureLoad(tb, vec2<u32>(lx + {}u, k + {kk}u), wg.x, 0)", v * wx);
        (0..nv).map(|v| format!("        let b{kk}_{v} = {};\n", load(v))).collect::<String>()
    };
    let a = |x: String| format!("textureLoad(ta, vec2<u32>({x}, kq), wg.y, 0)");
    let lane = |_q, first, last| (String::new(), a(format!("min(lx + {first}u, {last}u)")));
    s += &k_loops(c, &|i| a(format!("{i}u")), &lane, &|a, pre| {
        vec_k_loop(c, a, pre, "        let kq = k >> 2u;\n", &b_step)
    });
    s + &store4_blocks(c) + "}\n"
}

/// The staged entry point. Per `STAGE_K` slice of k, each invocation
/// loads its share of the workgroup's A tile (tm·wy rows, stored k-major)
/// and B tile (tn·wx columns) into registers, then into the buffer half
/// the others are not reading; one barrier per slice then suffices. Loads
/// past K read 0, so every k sum keeps the same in-order terms. Both tiles
/// are read as vec4s (a GPU's 128-bit shared loads: a quarter of the load
/// instructions per FMA): an invocation's tm rows are consecutive, and its
/// columns come in vec4s interleaved with stride wx, so neighbouring lanes
/// read neighbouring vec4s.
fn main_staged(c: &MatmulConfig) -> String {
    let (tm, tn, wx, wy) = (c.tm, c.tn, c.wx, c.wy);
    let (rows, cols, threads) = (tm * wy, tn * wx, wx * wy);
    let (a_len, b_len) = (rows * STAGE_K, cols * STAGE_K);
    assert!(
        a_len % threads == 0 && b_len % threads == 0 && tm % 4 == 0 && tn % 4 == 0,
        "{}: the slices must split evenly among the invocations, in vec4s",
        c.name()
    );
    let mut s = format!(
        "var<workgroup> stage_a: array<vec4<f32>, {}>;\nvar<workgroup> stage_b: array<vec4<f32>, {}>;\n",
        2 * a_len / 4,
        2 * b_len / 4
    );
    s += &entry(c);
    s += OPERAND_STRIDES;
    s += "    let k1 = m(4u);\n    let k_last = max(k1, 1u) - 1u;\n";
    let _ =
        writeln!(s, "    let lx = li % {wx}u;\n    let ly = li / {wx}u;\n    let row0 = (wg.y * {wy}u + ly) * {tm}u;");
    s += &accumulators(c);
    // This invocation's share of each slice: element e of the A slice is
    // row e / STAGE_K, k e % STAGE_K; of the B slice k e / cols, column
    // e % cols. Loads past K are clamped in range and then replaced by 0.
    let (a_loads, b_loads) = (a_len / threads, b_len / threads);
    for q in 0..a_loads {
        let _ = writeln!(s, "    let ea{q} = li + {}u;", q * threads);
        let _ = writeln!(s, "    let ga{q} = base.x + i32(min(wg.y * {rows}u + ea{q} / {STAGE_K}u, M - 1u)) * sar;");
    }
    for q in 0..b_loads {
        let _ = writeln!(s, "    let eb{q} = li + {}u;", q * threads);
        let _ = writeln!(s, "    let gb{q} = base.y + i32(min(wg.x * {cols}u + eb{q} % {cols}u, N - 1u)) * sbc;");
    }
    // The slice at k0 read into registers (`loads`), and those registers
    // written to buffer half `half` (`stores`), one component at a time.
    let fetch = |half: &str, k0: &str| {
        let (mut loads, mut stores) = (String::new(), String::new());
        for q in 0..a_loads {
            let _ = writeln!(loads, "        let ka{q} = {k0} + ea{q} % {STAGE_K}u;");
            let _ = writeln!(
                loads,
                "        let va{q} = select(0.0, load_a(ga{q} + i32(min(ka{q}, k_last)) * sac), ka{q} < k1);"
            );
            let at = format!("{half} * {a_len}u + (ea{q} % {STAGE_K}u) * {rows}u + ea{q} / {STAGE_K}u");
            let _ = writeln!(stores, "        let sa{q} = {at};\n        stage_a[sa{q} >> 2u][sa{q} & 3u] = va{q};");
        }
        for q in 0..b_loads {
            let _ = writeln!(loads, "        let kb{q} = {k0} + eb{q} / {cols}u;");
            let _ = writeln!(
                loads,
                "        let vb{q} = select(0.0, load_b(gb{q} + i32(min(kb{q}, k_last)) * sbr), kb{q} < k1);"
            );
            let _ = writeln!(
                stores,
                "        let sb{q} = {half} * {b_len}u + eb{q};\n        stage_b[sb{q} >> 2u][sb{q} & 3u] = vb{q};"
            );
        }
        (loads, stores)
    };
    let (loads, stores) = fetch("0u", "m(3u)");
    s += &format!("    {{\n{loads}{stores}    }}\n    workgroupBarrier();\n");
    let _ = writeln!(s, "    for (var k = m(3u); k < k1; k += {STAGE_K}u) {{");
    let _ = writeln!(s, "        let half = ((k - m(3u)) / {STAGE_K}u) & 1u;");
    // Prefetch the next slice into registers before reading this one.
    let _ = writeln!(s, "        let next = k + {STAGE_K}u;");
    let (loads, stores) = fetch("(1u - half)", "next");
    s += &loads;
    let (a_vecs, b_vecs) = (a_len / 4, b_len / 4);
    for kk in 0..STAGE_K {
        for v in 0..tn / 4 {
            let at = format!("half * {b_vecs}u + {}u + lx", (kk * cols + 4 * v * wx) / 4);
            let _ = writeln!(s, "        let b{kk}_{v} = stage_b[{at}];");
        }
        for q in 0..tm / 4 {
            let at = format!("half * {a_vecs}u + {}u + ly * {}u", (kk * rows + 4 * q) / 4, tm / 4);
            let _ = writeln!(s, "        let a{kk}_{q} = stage_a[{at}];");
        }
        for i in 0..tm {
            for v in 0..tn / 4 {
                let a = format!("a{kk}_{}[{}]", i / 4, i % 4);
                let _ = writeln!(s, "        c{i}_{v} = fma(vec4<f32>({a}), b{kk}_{v}, c{i}_{v});");
            }
        }
    }
    let _ = writeln!(s, "        if (next < k1) {{\n{stores}        }}");
    s += "        workgroupBarrier();\n    }\n";
    // Column vec4 v of this invocation starts at column 4 · cv{v}.
    for v in 0..tn / 4 {
        let _ = writeln!(s, "    let cv{v} = wg.x * {}u + lx + {}u;", cols / 4, v * wx);
    }
    s + &store_vec_blocks(c) + "}\n"
}

/// Block rows per group of the launch order ([`GROUPED_ORDER`]).
const GROUP_ROWS: u32 = 8;

/// The workgroup's output block `wg` (x: column block, y: row block, z:
/// batch), from its place in the launch order: groups of `GROUP_ROWS` row
/// blocks, each walked column block by column block, every row block of
/// the group in turn (the last group may be shorter). Row-major order
/// streams all of B past each A row block; this order keeps a B column
/// panel and the group's A row blocks in cache while they are reused.
/// lavapipe at 2048³ (32x8/8x1+sg+vec4, GFLOP/s): 25.2 row-major, 29.8
/// with groups of 4, 32.1–33.4 with 8, 27.9 with 16; at 1024³ 34.5–38.8
/// with any of them (noise). CPU adapters run workgroups in launch order,
/// GPUs roughly so, which is how their L2 sees the same reuse.
const GROUPED_ORDER: &str = "    let per_group = {G}u * grid.x;
    let linear = grid_id.y * grid.x + grid_id.x;
    let first = (linear / per_group) * {G}u;
    let height = min(grid.y - first, {G}u);
    let within = linear % per_group;
    let wg = vec3<u32>(within / height, first + within % height, grid_id.z);
";

/// `@compute` and `fn main(` with the builtins `c` reads, through the
/// common lets and the block `wg` this workgroup computes. One-dimensional
/// workgroups: naga allows subgroup lane ids only there.
fn entry(c: &MatmulConfig) -> String {
    let mut s = format!("@compute @workgroup_size({})\n", c.wx * c.wy);
    s += "fn main(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) grid_id: vec3<u32>";
    s += ", @builtin(num_workgroups) grid: vec3<u32>";
    if c.share {
        s += ", @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_lane: u32";
    }
    s += ") {\n    let M = m(0u);\n    let N = m(2u);\n";
    s += &GROUPED_ORDER.replace("{G}", &GROUP_ROWS.to_string());
    s + "    let batch = wg.z + m(6u);\n"
}

/// The lane's column index `lx`, the block's first row `row0`, A's row
/// offsets `ra{i}` (in the units of `base` and `sar`) and the zeroed
/// accumulators `c{i}_{v}`. Rows past the edge read the last valid one;
/// their results are never stored. No early return: subgroups stay whole.
fn rows_and_accumulators(c: &MatmulConfig) -> String {
    let (tm, wx, wy) = (c.tm, c.wx, c.wy);
    let mut s = format!("    let lx = li % {wx}u;\n");
    if wy == 1 {
        // Rows uniform across the workgroup: CPU adapters load A as scalars.
        let _ = writeln!(s, "    let row0 = wg.y * {tm}u;");
    } else {
        let _ = writeln!(s, "    let row0 = (wg.y * {wy}u + li / {wx}u) * {tm}u;");
    }
    for i in 0..tm {
        let _ = writeln!(s, "    let ra{i} = base.x + i32(min(row0 + {i}u, M - 1u)) * sar;");
    }
    s + &accumulators(c)
}

/// The zeroed accumulators `c{i}_{v}`: row i, columns 4v..4v + 3 of the block.
fn accumulators(c: &MatmulConfig) -> String {
    let mut s = String::new();
    for i in 0..c.tm {
        for v in 0..c.tn / 4 {
            let _ = writeln!(s, "    var c{i}_{v} = vec4<f32>(0.0);");
        }
    }
    s
}

/// Stores the block of a vec4 kernel by vec4s: column vec4 v is `cv{v}`.
fn store4_blocks(c: &MatmulConfig) -> String {
    let mut s = String::new();
    for i in 0..c.tm {
        for v in 0..c.tn / 4 {
            let _ = writeln!(s, "    store4(batch, row0 + {i}u, cv{v}, c{i}_{v});");
        }
    }
    s
}

/// Stores the block of a kernel whose column vec4 v starts at `4 · cv{v}`.
fn store_vec_blocks(c: &MatmulConfig) -> String {
    let mut s = String::new();
    for i in 0..c.tm {
        for v in 0..c.tn / 4 {
            for e in 0..4 {
                let _ = writeln!(s, "    store(batch, row0 + {i}u, cv{v} * 4u + {e}u, c{i}_{v}[{e}]);");
            }
        }
    }
    s
}

/// Stores the block of a kernel whose columns are `col0 + j·wx`.
fn store_blocks(c: &MatmulConfig) -> String {
    let mut s = String::new();
    for i in 0..c.tm {
        for j in 0..c.tn {
            let _ = writeln!(s, "    store(batch, row0 + {i}u, col0 + {}u, c{i}_{}[{}]);", j * c.wx, j / 4, j % 4);
        }
    }
    s
}

/// Writes a k loop given A's value for row i and statements to run first.
type KLoop<'a> = dyn Fn(&dyn Fn(u32) -> String, &str) -> String + 'a;

/// A k loop (`k_loop` or `vec_k_loop`, given A's value for row i of the
/// block and statements to run first) over A's rows `row(i)`. With
/// `share`, lane l loads rows l, l + wx, … of A before each k step
/// (`lane(q, first, last)`: statements before the loops, and the load of
/// the lane's row `lx + first` clamped to the block's row `last`) and the
/// others' rows come by `subgroupBroadcast`, when the workgroup row is one
/// whole subgroup of wx lanes; otherwise the plain loop runs.
fn k_loops(
    c: &MatmulConfig,
    row: &dyn Fn(u32) -> String,
    lane: &dyn Fn(u32, u32, u32) -> (String, String),
    k_loop: &KLoop,
) -> String {
    let plain = k_loop(row, "");
    if !c.share {
        return plain;
    }
    let (mut s, mut loads) = (String::new(), String::new());
    for q in 0..c.tm.div_ceil(c.wx) {
        let (setup, load) = lane(q, q * c.wx, c.tm - 1);
        s += &setup;
        let _ = writeln!(loads, "        let s{q} = {load};");
    }
    let wx = c.wx;
    let shared = k_loop(&|i| format!("subgroupBroadcast(s{}, {}u)", i / wx, i % wx), &loads);
    s + &format!("    if (subgroupAll(sg_size == {wx}u && sg_lane == lx)) {{\n{shared}    }} else {{\n{plain}    }}\n")
}

/// The vec4 k loop, four k at a time: the statements `head`, then `pre`,
/// then `b_step(kk)` loading B's vec4s `b{kk}_{v}` at k + kk; A's vec4 for
/// row i is `a(i)`.
fn vec_k_loop(
    c: &MatmulConfig,
    a: &dyn Fn(u32) -> String,
    pre: &str,
    head: &str,
    b_step: &dyn Fn(u32) -> String,
) -> String {
    let nv = c.tn / 4;
    let mut s = String::from("    for (var k = m(3u); k < m(4u); k += 4u) {\n");
    s += head;
    s += pre;
    for kk in 0..4 {
        s += &b_step(kk);
    }
    for i in 0..c.tm {
        let _ = writeln!(s, "        let a{i} = {};", a(i));
        for kk in 0..4 {
            let comp = ["x", "y", "z", "w"][kk];
            for v in 0..nv {
                let _ = writeln!(s, "        c{i}_{v} = fma(vec4<f32>(a{i}.{comp}), b{kk}_{v}, c{i}_{v});");
            }
        }
    }
    s + "    }\n"
}

/// The k loop over [k0, k1): A's value for row i is `a(i)`, computed after
/// the statements `pre`.
fn k_loop(c: &MatmulConfig, a: &dyn Fn(u32) -> String, pre: &str) -> String {
    let mut s = String::from("    for (var k = m(3u); k < m(4u); k++) {\n");
    s += "        let ka = i32(k) * sac;\n        let kb = i32(k) * sbr;\n";
    s += pre;
    for v in 0..c.tn / 4 {
        let b: Vec<String> = (0..4).map(|e| format!("load_b(cb{} + kb)", 4 * v + e)).collect();
        let _ = writeln!(s, "        let b{v} = vec4<f32>({});", b.join(", "));
    }
    for i in 0..c.tm {
        let _ = writeln!(s, "        let a{i} = {};", a(i));
        for v in 0..c.tn / 4 {
            let _ = writeln!(s, "        c{i}_{v} = fma(vec4<f32>(a{i}), b{v}, c{i}_{v});");
        }
    }
    s + "    }\n"
}

/// The vec4 kernels' store: output vec4 `cv` of row `r` (the epilogue
/// still runs per element).
const STORE_VEC4_FN: &str = "
fn store4(batch: u32, r: u32, cv: u32, v: vec4<f32>) {
    let M = m(0u);
    let N = m(2u);
    if (r >= M || cv >= N >> 2u) {
        return;
    }
    let at = (((batch * M + r) * N) >> 2u) + cv;
    var x = v;
    if (m(5u) != 0u) {
        x += out[at];
    }
    if (m(13u) != 0u) {
        let f = at * 4u;
        x = vec4<f32>(epilogue(f, x.x), epilogue(f + 1u, x.y), epilogue(f + 2u, x.z), epilogue(f + 3u, x.w));
    }
    out[at] = x;
}
";

const STORE_FN: &str = "
fn store(batch: u32, r: u32, c: u32, v: f32) {
    let M = m(0u);
    let N = m(2u);
    if (r >= M || c >= N) {
        return;
    }
    let at = (batch * M + r) * N + c;
    var x = v;
    if (m(5u) != 0u) {
        x += out[at];
    }
    if (m(13u) != 0u) {
        x = epilogue(at, x);
    }
    out[at] = x;
}
";
