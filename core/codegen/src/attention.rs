//! The attention kernel (`Item::Attention`): `out = softmax(scores) @ v`
//! with `scores = epilogue(q @ kt)`, never storing the scores (flash
//! attention, Dao et al. 2022). A workgroup takes [`QUERIES`] queries of
//! one batch entry, an invocation each, with its query and its output row
//! in registers. It walks the keys a few at a time, shared among its
//! invocations ([`KeySharing`]: a tile in workgroup memory, or each lane
//! of a subgroup loading one row for the others), and each invocation
//! folds them into an online softmax (a running maximum, whose rise
//! rescales the running sum and output).
//!
//! Meta: 0 tq, 1 tk, 2..4 q's offset and row and column strides, 5..7
//! kt's, 8..10 v's, 11 query blocks per batch entry, 12 workgroups, then
//! the batch shape and q's, kt's and v's batch strides, then the scores'
//! epilogue ([`attention_epilogue_base`]).

use crate::fused::Emitter;
use crate::math::Needs;
use crate::{META_DECL, META_WORDS, load_expr, unravel};
use kiln_ir::dtype::DType;
use kiln_sched::lower::{Sig, meta_words};
use std::fmt::Write;

/// Queries per workgroup, one per invocation.
pub const QUERIES: u32 = 64;
/// Widest query, key or value row held in registers.
pub const MAX_HEAD_DIM: usize = 128;
/// Workgroup memory WebGPU guarantees (bytes); the key and value tiles fit in it.
const WORKGROUP_BYTES: usize = 16384;
/// Most keys per tile.
const MAX_TILE: usize = 64;
/// Meta word where the batch shape starts (after the output's row stride,
/// word 13).
const BATCH_BASE: usize = 14;

/// Meta word where the scores' epilogue starts, past the batch shape and
/// q's, kt's, v's and the output's strides along it.
pub fn attention_epilogue_base(batch_rank: usize) -> usize {
    BATCH_BASE + 5 * batch_rank
}

/// Meta words a launch needs.
pub fn attention_meta_words(batch_rank: usize, scores: &Sig) -> usize {
    attention_epilogue_base(batch_rank) + scores.rank + meta_words(scores)
}

/// Whether the meta block holds a launch's parameters.
pub fn attention_meta_fits(batch_rank: usize, scores: &Sig) -> bool {
    attention_meta_words(batch_rank, scores) <= META_WORDS
}

/// Keys per tile for rows of `dk` (keys) and `dv` (values) elements: the
/// most, up to 64, whose tiles fit in the 16 KiB of workgroup memory
/// WebGPU guarantees.
pub fn key_tile(dk: usize, dv: usize) -> usize {
    let per_key = 16 * (dk.div_ceil(4) + dv.div_ceil(4));
    let mut tile = MAX_TILE;
    while tile > 1 && tile * per_key > WORKGROUP_BYTES {
        tile /= 2;
    }
    tile
}

/// How the invocations of a workgroup share each key's and value's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeySharing {
    /// A tile of rows in workgroup memory, loaded by all of them (GPUs).
    Workgroup,
    /// Each lane of a subgroup this wide loads one row, and
    /// `subgroupBroadcast` hands it to the others (CPU adapters, whose
    /// lanes read an address they share one by one).
    Subgroup(u32),
}

/// The kernel for `batch_rank` batch dims, rows of `dk` (queries and keys)
/// and `dv` (values) elements, keys shared as `keys`, scores computed by
/// `scores` (a matmul epilogue: its accumulator is q·k). When `causal`
/// (the scores hide each key after its query behind a fill whose weight is
/// exactly zero), the walk stops after the workgroup's last query: a
/// causal product does about half the work.
pub fn attention_wgsl(batch_rank: usize, dk: usize, dv: usize, keys: KeySharing, causal: bool, scores: &Sig) -> String {
    let (d4, v4) = (dk.div_ceil(4), dv.div_ceil(4));
    let mut s = String::from(META_DECL);
    s += "@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n";
    let e = Emitter::new(scores, attention_epilogue_base(batch_rank), false).with_periodic();
    s += &e.input_decls_needing(1, Needs { exp: true, ..Needs::default() });
    for (name, buf) in [("q", "in0"), ("k", "in1"), ("v", "in2")] {
        let _ = writeln!(s, "fn load_{name}(e: i32) -> f32 {{ return {}; }}", load_expr(DType::F32, buf, "u32(e)"));
    }
    s += &batch_offsets(batch_rank);
    let lane_id = match keys {
        KeySharing::Workgroup => {
            let tile = key_tile(dk, dv);
            let _ = writeln!(s, "var<workgroup> keys: array<vec4<f32>, {}>;", tile * d4);
            let _ = writeln!(s, "var<workgroup> values: array<vec4<f32>, {}>;", tile * v4);
            ""
        }
        KeySharing::Subgroup(_) => ", @builtin(subgroup_invocation_id) sub: u32",
    };
    let _ = writeln!(s, "@compute @workgroup_size({QUERIES})");
    let _ = writeln!(s, "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32,");
    let _ = writeln!(s, "        @builtin(num_workgroups) grid: vec3<u32>{lane_id}) {{");
    s += &"    let w = wid.y * grid.x + wid.x;
    // Past the last block (the grid rounds up): uniform per workgroup.
    if (w >= m(12u)) {
        return;
    }
    let tq = m(0u);
    let tk = m(1u);
    let batch = w / m(11u);
    let first = (w % m(11u)) * QUERIES;
    let i = first + lane;
    // Queries past the end compute the last one's row and store nothing.
    let row = min(i, tq - 1u);
    let base = batch_offsets(batch);
    let q_at = base.x + i32(row) * bitcast<i32>(m(3u));
    let qc = bitcast<i32>(m(4u));
    let kr = bitcast<i32>(m(6u));
    let kc = bitcast<i32>(m(7u));
    let vr = bitcast<i32>(m(9u));
    let vc = bitcast<i32>(m(10u));
"
    .replace("QUERIES", &format!("{QUERIES}u"));
    for c in 0..d4 {
        let parts: Vec<String> = (0..4).map(|x| element(dk, 4 * c + x, "load_q(q_at + {} * qc)")).collect();
        let _ = writeln!(s, "    let q{c} = vec4<f32>({});", parts.join(", "));
    }
    for c in 0..v4 {
        let _ = writeln!(s, "    var o{c} = vec4<f32>(0.0);");
    }
    // The lowest finite f32 by its bits (Tint rejects the decimal literal).
    s += "    var top = f32_bits(0xff7fffffu);\n    var total = 0.0;\n";
    // The scores' leaves are read at indices stepped key by key, with no
    // division per score.
    s += "    let f_row = (batch * tq + row) * tk;\n";
    if causal {
        // Keys after the workgroup's last query are hidden from all of its queries.
        let _ = writeln!(s, "    let seen = min(tk, min(first + {QUERIES}u, tq));");
    } else {
        s += "    let seen = tk;\n";
    }
    s += &e.periodic_start("f_row", "1u");
    s += &match keys {
        KeySharing::Workgroup => tiles(&e, d4, v4, dk, dv),
        KeySharing::Subgroup(width) => subgroup_rows(&e, d4, v4, dk, dv, width),
    };
    s += "    if (i < tq) {\n";
    s += "        let at = u32(base.w + i32(i) * bitcast<i32>(m(13u)));\n";
    for x in 0..dv {
        let _ = writeln!(s, "        out[at + {x}u] = o{}.{} / total;", x / 4, ["x", "y", "z", "w"][x % 4]);
    }
    s + "    }\n}\n"
}

/// The walk over the keys a tile at a time, through workgroup memory.
fn tiles(e: &Emitter, d4: usize, v4: usize, dk: usize, dv: usize) -> String {
    let tile = key_tile(dk, dv);
    let mut s = format!("    let tiles = (seen + {}u) / {tile}u;\n", tile - 1);
    s += "    for (var t = 0u; t < tiles; t++) {\n";
    let _ = writeln!(s, "        let key0 = t * {tile}u;");
    s += "        workgroupBarrier();\n";
    s += &tile_load("keys", "base.y", "kc", "kr", d4, dk, tile, "load_k");
    s += &tile_load("values", "base.z", "vr", "vc", v4, dv, tile, "load_v");
    s += "        workgroupBarrier();\n";
    let _ = writeln!(s, "        let here = min({tile}u, seen - key0);");
    s += "        for (var j = 0u; j < here; j++) {\n";
    let dots: Vec<String> = (0..d4).map(|c| format!("dot(q{c}, keys[j * {d4}u + {c}u])")).collect();
    s += &score(e, &dots.join(" + "));
    let values: Vec<String> = (0..v4).map(|c| format!("values[j * {v4}u + {c}u]")).collect();
    s += &fold("            ", &values);
    s += &e.periodic_advance();
    s + "        }\n    }\n"
}

/// The walk over the keys a subgroup's width at a time: each lane loads
/// one key's and value's row, and every lane takes each in turn from it.
fn subgroup_rows(e: &Emitter, d4: usize, v4: usize, dk: usize, dv: usize, width: u32) -> String {
    let mut s = format!("    let chunks = (seen + {}u) / {width}u;\n", width - 1);
    s += "    for (var t = 0u; t < chunks; t++) {\n";
    let _ = writeln!(s, "        let key0 = t * {width}u;");
    s += "        let mine = min(key0 + sub, tk - 1u);\n";
    s += "        let ka = base.y + i32(mine) * kc;\n        let va = base.z + i32(mine) * vr;\n";
    for c in 0..d4 {
        let parts: Vec<String> = (0..4).map(|x| element(dk, 4 * c + x, "load_k(ka + {} * kr)")).collect();
        let _ = writeln!(s, "        let k{c} = vec4<f32>({});", parts.join(", "));
    }
    for c in 0..v4 {
        let parts: Vec<String> = (0..4).map(|x| element(dv, 4 * c + x, "load_v(va + {} * vc)")).collect();
        let _ = writeln!(s, "        let v{c} = vec4<f32>({});", parts.join(", "));
    }
    for j in 0..width {
        // Broadcasts outside the branch: every lane of the subgroup takes part.
        let dots: Vec<String> = (0..d4).map(|c| format!("dot(q{c}, subgroupBroadcast(k{c}, {j}u))")).collect();
        let _ = writeln!(s, "        let dot{j} = {};", dots.join(" + "));
        let values: Vec<String> = (0..v4).map(|c| format!("subgroupBroadcast(v{c}, {j}u)")).collect();
        for (c, v) in values.iter().enumerate() {
            let _ = writeln!(s, "        let v{j}_{c} = {v};");
        }
        let _ = writeln!(s, "        if (key0 + {j}u < seen) {{");
        s += &score(e, &format!("dot{j}"));
        let names: Vec<String> = (0..v4).map(|c| format!("v{j}_{c}")).collect();
        s += &fold("            ", &names);
        s += "        }\n";
        s += &e.periodic_advance();
    }
    s + "    }\n"
}

/// `let score = ...`: the scores' epilogue of `dot` (q·k) at the current
/// key, in a block of its own (the body's names are not unique).
fn score(e: &Emitter, dot: &str) -> String {
    let mut s = format!("            let acc = {dot};\n");
    let v = e.body(0, "0u", "", &mut s);
    s + &format!("            let score = {};\n", v[0])
}

/// One key folded into the online softmax: `score`, its value row's vec4s
/// `values`.
fn fold(indent: &str, values: &[String]) -> String {
    let mut s = format!("{indent}if (score > top) {{\n");
    let _ = writeln!(s, "{indent}    let shrink = kiln_exp_no_overflow(top - score);");
    let _ = writeln!(s, "{indent}    total *= shrink;");
    for c in 0..values.len() {
        let _ = writeln!(s, "{indent}    o{c} *= shrink;");
    }
    let _ = writeln!(s, "{indent}    top = score;\n{indent}}}");
    let _ = writeln!(s, "{indent}let p = kiln_exp_no_overflow(score - top);\n{indent}total += p;");
    for (c, v) in values.iter().enumerate() {
        let _ = writeln!(s, "{indent}o{c} += p * {v};");
    }
    s
}

/// Element `x` of a row of `len` read by `load` (its `{}` the element's
/// index), or zero past the row's end (vec4 padding).
fn element(len: usize, x: usize, load: &str) -> String {
    if x < len { load.replace("{}", &x.to_string()) } else { "0.0".to_string() }
}

/// The invocations' shared load of a tile of `tile` rows (keys) of `len`
/// elements into workgroup array `name` (`fours` vec4s per row); a row's
/// key is at stride `key_stride`, its elements at `elem_stride`, from
/// `base`. Keys past the end read the last key (and are not used).
#[allow(clippy::too_many_arguments)]
fn tile_load(
    name: &str,
    base: &str,
    key_stride: &str,
    elem_stride: &str,
    fours: usize,
    len: usize,
    tile: usize,
    load: &str,
) -> String {
    let mut s = format!("        for (var x = lane; x < {}u; x += {QUERIES}u) {{\n", tile * fours);
    let _ = writeln!(s, "            let key = min(key0 + x / {fours}u, tk - 1u);");
    let _ = writeln!(s, "            let d = (x % {fours}u) * 4u;");
    let _ = writeln!(s, "            let at = {base} + i32(key) * {key_stride};");
    let parts: Vec<String> = (0..4)
        .map(|c| {
            if len.is_multiple_of(4) {
                format!("{load}(at + i32(d + {c}u) * {elem_stride})")
            } else {
                // The row's last vec4 is padded with zeros; its index is clamped.
                let d = format!("min(d + {c}u, {}u)", len - 1);
                format!("select(0.0, {load}(at + i32({d}) * {elem_stride}), d + {c}u < {len}u)")
            }
        })
        .collect();
    let _ = writeln!(s, "            {name}[x] = vec4<f32>({});", parts.join(", "));
    s + "        }\n"
}

/// `batch_offsets(batch)`: q's, kt's, v's and the output's element offsets
/// for a batch entry.
fn batch_offsets(batch_rank: usize) -> String {
    let mut s = String::from("fn batch_offsets(batch: u32) -> vec4<i32> {\n");
    s += &unravel(batch_rank, BATCH_BASE, "batch");
    s += "    var at = vec4<i32>(i32(m(2u)), i32(m(5u)), i32(m(8u)), 0);\n";
    for d in 0..batch_rank {
        let strides: Vec<String> =
            (1..=4).map(|o| format!("bitcast<i32>(m({}u))", BATCH_BASE + o * batch_rank + d)).collect();
        let _ = writeln!(s, "    at += i32(c{d}) * vec4<i32>({});", strides.join(", "));
    }
    s + "    return at;\n}\n"
}
