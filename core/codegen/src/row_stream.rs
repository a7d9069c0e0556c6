//! The streaming row kernel: a workgroup per row, its invocations (the
//! row's lanes, [`ROW_STREAM_LANES`] on CPU adapters) each walking every
//! lanes-th element (or vec4) of the row once per stage, then combining their partials through
//! workgroup memory. For rows too long to hold in registers (a vocabulary's
//! logits) on CPU adapters: one kernel instead of a tree reduction per
//! stage and an elementwise pass, each lane's loads contiguous with its
//! neighbours'. Softmax's max and sum of exp(x − max) share one online pass,
//! so the input is read twice (statistics, outputs) rather than three times.
//! Bodies, stages and meta as in [`super::fused::row_wgsl`].

use super::fused::{
    Emitter, RowWalk, VEC, fold_stage, online_max_and_exp_sum, row_decls, stage_dtype, strided_trips,
    sums_exp_of_shifted_max, trip_prefix,
};
use super::reduce::IN_ROW_FN;
use super::{compute_type, store_expr};
use kiln_ir::dtype::DType;
use kiln_ir::ir::ReduceOp;
use kiln_sched::lower::Sig;

/// A row's lanes, one workgroup, where the row's loops allow (see
/// [`stream_lanes`]): one SIMD batch of llvmpipe, whose
/// invocations' loads are then contiguous and the batch walks the row in
/// order (llvmpipe runs a workgroup's batches one after the other between
/// barriers: with 64 lanes per row, each batch walked the whole row for an
/// eighth of its bytes, and softmax [16, 262144] took 74 ms of device time
/// on lavapipe against 53 for three tree passes).
pub const ROW_STREAM_LANES: u32 = 8;
/// Elements (or vec4s) a lane folds in one block before adding the block
/// to its partial.
const LANE_BLOCK: usize = 64;
/// Strides a lane takes per loop trip: on llvmpipe every trip pays the
/// loop's masks and branches, and with one vec4 per trip softmax
/// [16, 262144] ran 8% slower on lavapipe (docs/BENCHMARKS.md, 'What was
/// tried' (softmax/rows)). The loop budget below counts trips as if not unrolled.
const UNROLL: usize = 4;
/// Longest row streamed (with the most lanes, a kernel of up to 7 passes
/// over such a row stays within [`LOOP_BUDGET`]).
pub const ROW_STREAM_MAX_LEN: usize = 1 << 21;
/// Loop iterations one invocation may run: Mesa's llvmpipe counts every
/// loop iteration of an invocation, all loops together, and silently ends
/// loops past 65,535 (a softmax over rows of 2^20 with 8 lanes, two
/// passes of 32,768, lost the end of each row's output).
pub const LOOP_BUDGET: usize = 60_000;
/// Lanes a row may take when its loops need more than [`ROW_STREAM_LANES`].
pub const MOST_LANES: u32 = 256;

/// The passes over the row the kernel makes: one per stage (a max and the
/// sum of exp(x − max) after it together), and one writing the outputs.
fn passes(sig: &Sig, stages: &[ReduceOp], per_row: bool) -> usize {
    let pairs = (0..stages.len()).filter(|&k| sums_exp_of_shifted_max(sig, stages, k)).count();
    stages.len() - pairs + usize::from(!per_row)
}

/// Lanes per row for the streaming kernel over rows of `len`: the fewest
/// from [`ROW_STREAM_LANES`] (doubling) whose loops stay within
/// [`LOOP_BUDGET`], or `None` when even [`MOST_LANES`] would not.
pub fn stream_lanes(sig: &Sig, stages: &[ReduceOp], per_row: bool, len: usize, vec4: bool) -> Option<u32> {
    let (passes, step) = (passes(sig, stages, per_row), if vec4 { VEC } else { 1 });
    let iterations = |l: usize| {
        let (walk, blocks) = (len.div_ceil(l * step), len.div_ceil(LANE_BLOCK * l * step));
        passes * (walk + blocks) + stages.len() * l
    };
    let mut lanes = ROW_STREAM_LANES;
    while iterations(lanes as usize) > LOOP_BUDGET {
        lanes *= 2;
        if lanes > MOST_LANES {
            return None;
        }
    }
    Some(lanes)
}

/// The streaming row kernel for `stages` (folded in order), then the last
/// body's roots written per element, or with `per_row` once per row by
/// its first lane. With `vec4` (rows a multiple of 4 long, 4-aligned
/// leaves) every lane reads and writes vec4s. With `straddling` (4-aligned
/// leaves, rows that do not split into vec4s: a vocabulary's 50257) the
/// lanes read the 4-aligned vec4s covering the row, which may hold a
/// neighbour's elements: those count as each stage's identity. They write
/// the row's whole vec4s as vec4s, and in the (at most two) vec4s it
/// shares with its neighbours only its own elements, each a component
/// store (a memory location of its own in WGSL, so no race with the
/// neighbour's). With `per_row` and either, the last body must read row
/// statistics only.
pub fn row_stream_wgsl(
    sig: &Sig,
    stages: &[ReduceOp],
    outputs: &[DType],
    per_row: bool,
    vec4: bool,
    lanes: u32,
    straddling: bool,
) -> String {
    assert!(!(straddling && vec4), "rows are read either in their own vec4s or in those covering them");
    let wide = vec4 || straddling;
    let e = Emitter::new(sig, 3, wide).with_meta_lets().with_stages(stages).with_straddling(straddling);
    let (l, step) = (lanes as usize, if wide { VEC } else { 1 });
    let mut s = row_decls(&e, stages, outputs, wide, wide && !per_row);
    if straddling {
        s += IN_ROW_FN;
    }
    for k in 0..stages.len() {
        s += &format!("var<workgroup> part{k}: array<{}, {l}>;\n", compute_type(stage_dtype(sig, k)));
    }
    s += &format!(
        "@compute @workgroup_size({l})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lane: u32) {{\n"
    );
    // Workgroups past the last row (the grid rounds up) redo it, storing
    // the same values: every lane must reach the barriers.
    s += &format!("    let row = min((gid.y * m(2u) + gid.x) / {l}u, m(0u) - 1u);\n    let len = m(1u);\n");
    s += &e.meta_lets();
    let first = format!("lane * {step}u");
    let (origin, end, mask) = if straddling {
        s += "    let lo = row * len;\n    let hi = lo + len;\n    let base = lo & ~3u;\n    let span = hi - base;\n";
        ("base", "span", Some(in_row as fn(&str) -> String))
    } else {
        ("row * len", "len", None)
    };
    let (stride, span) = (l * step, LANE_BLOCK * l * step);
    let walk = RowWalk { first: &first, stride, span, origin, end, mask, unroll: UNROLL };
    let mut k = 0;
    while k < stages.len() {
        if sums_exp_of_shifted_max(sig, stages, k) {
            s += &online_max_and_exp_sum(&e, k, wide, walk);
            s += &combine_max_and_exp_sum(k, wide, lanes);
            k += 2;
            continue;
        }
        s += &fold_stage(&e, k, wide, walk, None);
        s += &combine(k, lanes);
        k += 1;
    }
    let last = stages.len();
    if per_row {
        // In vec4s, the last body reads only row statistics: its vec4's
        // elements are the same value.
        s += "    if (lane == 0u) {\n    let f = row * len;\n";
        let roots = e.body(last, "f", "", &mut s);
        for (o, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            let r = if wide { format!("{r}.x") } else { r.clone() };
            s += &format!("    out{o}[row] = {};\n", store_expr(d, &r));
        }
        return s + "    }\n}\n";
    }
    if straddling {
        return s + &straddling_outputs(&e, last, outputs, walk) + "}\n";
    }
    output_trips(&e, last, outputs, &first, end, walk, vec4, &mut s);
    s + "}\n"
}

/// The last body's outputs written along `walk` from `from` to `to` (in a
/// scope of their own), as vec4s with `vec4`.
#[allow(clippy::too_many_arguments)]
fn output_trips(
    e: &Emitter,
    last: usize,
    outputs: &[DType],
    from: &str,
    to: &str,
    walk: RowWalk,
    vec4: bool,
    s: &mut String,
) {
    let at = |f: &str| if vec4 { format!("{f} >> 2u") } else { f.to_string() };
    *s += "    {\n";
    strided_trips(from, to, walk, s, |fs, s| {
        for (u, f) in fs.iter().enumerate() {
            let roots = e.body(last, f, &trip_prefix(u), s);
            for (o, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
                *s += &format!("    out{o}[{}] = {};\n", at(f), store_expr(d, r));
            }
        }
    });
    *s += "    }\n";
}

/// Whether the four elements at flat index `f` lie in the row `[lo, hi)`.
fn in_row(f: &str) -> String {
    format!("in_row({f}, lo, hi)")
}

/// A straddling row's outputs (see [`row_stream_wgsl`]): its whole vec4s,
/// from `whole_lo` to `whole_hi`, by every lane; then the vec4s it shares
/// at either end element by element, by lane 0.
fn straddling_outputs(e: &Emitter, last_body: usize, outputs: &[DType], walk: RowWalk) -> String {
    let mut s = String::from(
        "    let whole_lo = (lo + 3u) & ~3u;\n    let whole_hi = hi & ~3u;\n    let whole = select(0u, whole_hi - whole_lo, whole_hi > whole_lo);\n",
    );
    let inner = RowWalk { origin: "whole_lo", ..walk };
    output_trips(e, last_body, outputs, walk.first, "whole", inner, true, &mut s);
    s += "    if (lane == 0u) {\n";
    // The head (elements before `whole_lo`) and the tail (from
    // `whole_hi`), each only where the row has elements there.
    let ends =
        [("lo != base", "base", "min(whole_lo, hi)"), ("whole_hi >= whole_lo && whole_hi < hi", "whole_hi", "hi")];
    for (u, (cond, at, end)) in ends.into_iter().enumerate() {
        s += &format!("    if ({cond}) {{\n    let f = {at};\n    let in_row_f = in_row(f, lo, {end});\n");
        let roots = e.body(last_body, "f", &format!("e{u}_"), &mut s);
        for (o, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            for c in ["x", "y", "z", "w"] {
                let v = store_expr(d, &format!("{r}.{c}"));
                s += &format!("    if (in_row_f.{c}) {{ out{o}[f >> 2u].{c} = {v}; }}\n");
            }
        }
        s += "    }\n";
    }
    s + "    }\n"
}

/// Stage `k`'s lanes' partials `s{k}` merged in lane order, every lane
/// getting the same bits.
fn combine(k: usize, lanes: u32) -> String {
    let s = format!("    part{k}[lane] = s{k};\n    workgroupBarrier();\n    s{k} = part{k}[0];\n");
    s + &format!("    for (var i = 1u; i < {lanes}u; i++) {{\n        s{k} = merge{k}(s{k}, part{k}[i]);\n    }}\n")
}

/// The lanes' (max, sum of exp(x − max)) pairs of stages `max` and
/// `max + 1` merged as [`combine`] merges: each sum rescaled to the larger
/// max (by exactly 1 for the max's own, so an all-−∞ prefix's sum stays 0).
/// The exp helper takes vec4s in a `vec4` kernel.
fn combine_max_and_exp_sum(max: usize, vec4: bool, lanes: u32) -> String {
    let sum = max + 1;
    let exp = |x: &str| {
        if vec4 { format!("kiln_exp_no_overflow(vec4<f32>({x})).x") } else { format!("kiln_exp_no_overflow({x})") }
    };
    let mut s = format!("    part{max}[lane] = s{max};\n    part{sum}[lane] = s{sum};\n    workgroupBarrier();\n");
    s += &format!("    s{max} = part{max}[0];\n    s{sum} = part{sum}[0];\n");
    s += &format!("    for (var i = 1u; i < {lanes}u; i++) {{\n");
    s += &format!("        let other = part{max}[i];\n        let grown = max(s{max}, other);\n");
    s += &format!(
        "        s{sum} = s{sum} * select({}, 1.0, s{max} == grown) + part{sum}[i] * select({}, 1.0, other == grown);\n",
        exp(&format!("s{max} - grown")),
        exp("other - grown")
    );
    s + &format!("        s{max} = grown;\n    }}\n")
}
