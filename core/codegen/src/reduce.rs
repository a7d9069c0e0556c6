//! The tree reduction: hand-written kernels from `shaders/reduce*.wgsl`,
//! completed with a few generated functions (loads for the input dtype and
//! layout, the reduction's monoid), and how a reduction is split into passes.

use super::fused::{Emitter, Flat, VEC, reduce_monoid};
use super::{META_DECL, compute_type, storage_type};
use kiln_ir::dtype::DType;
use kiln_ir::ir::{ArgOp, ReduceOp};
use kiln_sched::lower::{Access, Sig};

pub const REDUCE_TEMPLATE: &str = include_str!("../../../shaders/reduce.wgsl");
/// The entry point of a pass on CPU adapters: one partial per invocation.
pub const REDUCE_PASS: &str = include_str!("../../../shaders/reduce_pass.wgsl");
/// The entry point of a pass on GPUs: one partial per workgroup.
pub const REDUCE_WORKGROUP: &str = include_str!("../../../shaders/reduce_workgroup.wgsl");
/// The entry point of a first pass over columns (every adapter).
pub const REDUCE_COLUMNS: &str = include_str!("../../../shaders/reduce_columns.wgsl");
/// Invocations per workgroup of a reduce pass (both entry points): kiln's
/// usual workgroup, a power of two, as the workgroup tree needs.
pub const REDUCE_WG: usize = super::WG as usize;

/// Longest k range of one matmul dispatch.
pub const MATMUL_K_CHUNK: usize = 16384;

pub use kiln_sched::schedule::Monoid;

/// How a first pass reads its prologue's runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runs {
    /// One element at a time.
    Scalar,
    /// vec4s: a contiguous prologue, rows a multiple of 4 long, 4-aligned
    /// leaves.
    Vec4,
    /// vec4s over rows of other lengths (a vocabulary's 50257): each row's
    /// runs start at the 4-aligned element at or before the row's start,
    /// and the elements outside the row count as the monoid's identity.
    /// Meta's row length is the row's plus 3, so that the runs cover it.
    Straddling,
}

/// What meta's row length is for a pass of `runs` over rows of `len`.
pub fn runs_len(runs: Runs, len: usize) -> usize {
    if runs == Runs::Straddling { len + STRADDLE } else { len }
}

/// The elements a straddling row's runs may start before the row.
const STRADDLE: usize = VEC - 1;

/// Where a reduce pass reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceSource<'a> {
    /// A fused expression (body 0 of the signature) over the input seen as
    /// `[kept.., reduced..]`, evaluated at `f = row · len + r`; meta holds
    /// that shape at 4, then the expression's leaves and params.
    Prologue(&'a Sig),
    /// Partials of an earlier pass (values, and indices for arg reductions).
    Partials { dtype: DType },
}

/// A first pass over at least this many elements reads them in the
/// streaming layout ([`reduce_shape`]); smaller inputs keep the layout that
/// folds more per invocation, so that they take fewer passes (a 64×64
/// input, one).
pub const REDUCE_STREAM_MIN: usize = 1 << 20;

/// The runs one invocation of a reduce pass folds (PER_THREAD in
/// shaders/reduce.wgsl) and the invocations that share a span of a row
/// (LANES). Arg reductions take consecutive runs (ties keep the lower
/// index); other passes take 64 runs in spans of 8 lanes, so that a CPU
/// adapter's SIMD batch reads contiguous memory. A plain first pass over a
/// large input (`streams`) folds fewer runs per invocation: on a CPU
/// adapter 16 in spans of 8 lanes, so a SIMD batch walks 2 KB (at vec4s)
/// in order (a read-only probe over 16M f32 on lavapipe, in turn: 6.2–7.1
/// ms, against 8.0–8.9 with 8 runs 4 KB apart and 7.8–8.7 with 64 runs;
/// GL 7.1–7.3 against 9.1–9.2; SwiftShader 19.2–19.8 against 18.7–19.3;
/// docs/BENCHMARKS.md, 'What was tried' (reductions)); with workgroup trees (GPUs)
/// 8 with the whole workgroup as one span, so that a warp reads 512
/// contiguous bytes per run.
pub fn reduce_shape(monoid: Monoid, streams: bool, workgroup: bool) -> (usize, u32) {
    match monoid {
        Monoid::Arg(_) => (64, 1),
        Monoid::Reduce(_) if streams && workgroup => (8, REDUCE_WG as u32),
        Monoid::Reduce(_) if streams => (16, 8),
        Monoid::Reduce(_) => (64, 8),
    }
}

/// Whether every span of a pass over rows of `len` is whole: a span covers
/// LANES · PER_THREAD runs of `step` elements ([`reduce_shape`]).
pub fn whole_spans(monoid: Monoid, streams: bool, workgroup: bool, len: usize, step: usize) -> bool {
    let (per_thread, lanes) = reduce_shape(monoid, streams, workgroup);
    len.is_multiple_of(per_thread * lanes as usize * step)
}

/// The shape of one reduce pass: how it reads its runs and what its
/// kernel may leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReducePass {
    /// How the pass reads its runs (a later pass: `Vec4` or `Scalar`).
    pub runs: Runs,
    /// One partial per workgroup, combined in workgroup memory
    /// (shaders/reduce_workgroup.wgsl; GPUs).
    pub workgroup: bool,
    /// The streaming layout of a first pass over a large input
    /// ([`reduce_shape`]).
    pub streams: bool,
    /// Every `Div` leaf of the prologue repeats by a multiple of the row
    /// (`x − max(x)` over long rows): an unrolled span loads it once.
    pub row_leaves: bool,
    /// Every span of every row is whole ([`whole_spans`]): the kernel has
    /// no code for the others.
    pub whole: bool,
    /// A single row (a full reduction): an invocation's slot is its index
    /// in the row, with no division by the row's invocations.
    pub one_row: bool,
    /// A first pass over rows that lie across memory while neighbouring
    /// rows lie together (the reduced axes outside a kept one: a bias's
    /// gradient, a sum over a batch): an invocation folds a chunk of one
    /// row, neighbouring invocations neighbouring rows
    /// (shaders/reduce_columns.wgsl). The other fields are then unused.
    pub columns: bool,
}

impl ReducePass {
    /// A first pass over columns reading `runs` (a row, or `Vec4`: four
    /// neighbouring rows, at a time).
    pub fn over_columns(runs: Runs) -> ReducePass {
        ReducePass {
            runs,
            workgroup: false,
            streams: false,
            row_leaves: false,
            whole: false,
            one_row: false,
            columns: true,
        }
    }
}

/// A reduce pass of `monoid` over `src`, shaped by `pass`.
pub fn reduce_wgsl(monoid: Monoid, src: ReduceSource, pass: ReducePass) -> String {
    let ReducePass { runs, workgroup, streams, row_leaves, whole, one_row, columns } = pass;
    let vec4 = runs != Runs::Scalar;
    let straddling = runs == Runs::Straddling;
    let value_dtype = match src {
        ReduceSource::Prologue(sig) => sig.bodies[0].ops[sig.bodies[0].roots[0]].1,
        ReduceSource::Partials { dtype } => dtype,
    };
    let acc = compute_type(value_dtype);
    let is_arg = matches!(monoid, Monoid::Arg(_));
    let (per_thread, lanes) = reduce_shape(monoid, streams, workgroup);
    let mut s = String::from(META_DECL);
    let value_out = if is_arg { 2 } else { 1 };
    if is_arg {
        s += "@group(0) @binding(1) var<storage, read_write> out_i: array<i32>;\n";
    }
    s += &format!(
        "@group(0) @binding({value_out}) var<storage, read_write> out_v: array<{}>;\n",
        storage_type(value_dtype.wide())
    );
    let (id, merge, take) = monoid_code(monoid, value_dtype);
    s += &format!("alias Acc = {acc};\n");
    // The accumulator's unit: lane-wise partials of vec4 runs, or one value.
    let unit = if vec4 { format!("vec4<{acc}>") } else { acc.to_string() };
    s += &format!("fn identity() -> {acc} {{ return {id}; }}\n");
    s += &format!("fn identity_unit() -> {unit} {{ return {unit}(identity()); }}\n");
    s += &format!("fn take(a: {unit}, b: {unit}) -> bool {{ return {take}; }}\n");
    s += &format!("fn take_value(a: {acc}, b: {acc}) -> bool {{ return {take}; }}\n");
    s += &format!("fn merge(a: {acc}, b: {acc}) -> {acc} {{ return {merge}; }}\n");
    s += &format!("fn merge_unit(a: {unit}, b: {unit}) -> {unit} {{ return {merge}; }}\n");
    let value = if vec4 { "merge(merge(u.x, u.y), merge(u.z, u.w))" } else { "u" };
    s += &format!("fn value(u: {unit}) -> {acc} {{ return {value}; }}\n");
    s += &store_fn(acc, is_arg);
    s += &format!("const REDUCE_WG: u32 = {REDUCE_WG}u;\n");
    s += &format!("const STEP: u32 = {}u;\n", if vec4 { 4 } else { 1 });
    if let (true, ReduceSource::Prologue(sig)) = (columns, src) {
        let e = Emitter::new(sig, 4, vec4).with_periodic();
        s += &e.input_decls(value_out);
        return s + &fold_column(&e, is_arg, &unit) + &store_column(vec4, &unit) + REDUCE_COLUMNS;
    }
    match src {
        ReduceSource::Prologue(sig) => {
            let e = Emitter::new(sig, 4, vec4).with_straddling(straddling);
            s += &e.input_decls(value_out);
            if straddling {
                s += IN_ROW_FN;
            }
            s += &format!("fn load(row: u32, r: u32) -> {unit} {{\n{}", run_base(straddling, "r", "f"));
            let v = e.body(0, "f", "", &mut s);
            s += &format!("    return {};\n}}\n", masked(straddling, &v[0], "f"));
            s += "fn load_index(row: u32, r: u32) -> u32 { return r; }\n";
        }
        ReduceSource::Partials { dtype } => {
            let st = storage_type(dtype.wide());
            let (elem, at) = if vec4 {
                (format!("vec4<{st}>"), "(row * m(1u) + r) >> 2u")
            } else {
                (st.to_string(), "row * m(1u) + r")
            };
            s += &format!("@group(0) @binding({}) var<storage, read> in_v: array<{elem}>;\n", value_out + 1);
            s += &format!("fn load(row: u32, r: u32) -> {unit} {{ return in_v[{at}]; }}\n");
            if is_arg {
                s += &format!("@group(0) @binding({}) var<storage, read> in_i: array<i32>;\n", value_out + 2);
                s += "fn load_index(row: u32, r: u32) -> u32 { return u32(in_i[row * m(1u) + r]); }\n";
            } else {
                s += "fn load_index(row: u32, r: u32) -> u32 { return 0u; }\n";
            }
        }
    }
    let stride = lanes as usize * if vec4 { VEC } else { 1 };
    s += &fold_span(src, is_arg, runs, row_leaves, &unit, per_thread, stride);
    s += &format!("const LANES: u32 = {lanes}u;\nconst PER_THREAD: u32 = {per_thread}u;\n");
    s += &format!("const WHOLE_SPANS: bool = {whole};\nconst ONE_ROW: bool = {one_row};\n");
    s + REDUCE_TEMPLATE + if workgroup { REDUCE_WORKGROUP } else { REDUCE_PASS }
}

/// `store(slot, v, i)`: a partial (and its index) at `slot`.
fn store_fn(acc: &str, is_arg: bool) -> String {
    let index = if is_arg { "    out_i[slot] = i32(i);\n" } else { "" };
    format!("fn store(slot: u32, v: {acc}, i: u32) {{\n    out_v[slot] = v;\n{index}}}\n")
}

/// `fold_column(row, start, end, &acc_i)`: elements `start..end` of
/// `row` (of the STEP rows from `row`) of body 0, in order. `e` reads the
/// input seen as `[reduced.., kept..]`, where a row's next element is
/// `rows` further on, and is periodic: each leaf's index is stepped from
/// the last rather than divided out of the flat index.
fn fold_column(e: &Emitter, is_arg: bool, unit: &str) -> String {
    let mut s = format!("fn fold_column(row: u32, start: u32, end: u32, acc_i: ptr<function, u32>) -> {unit} {{\n");
    s += "    var acc = identity_unit();\n    var i = 0u;\n    let rows = m(0u);\n    var f = start * rows + row;\n";
    s += &e.periodic_start("f", "rows");
    s += "    for (var r = start; r < end; r++) {\n";
    let v = e.body(0, "f", "", &mut s).remove(0);
    if is_arg {
        s += &format!("    i = select(i, r, take_value(acc, {v}));\n");
    }
    s += &format!("    acc = merge_unit(acc, {v});\n    f += rows;\n");
    s += &e.periodic_advance();
    s + "    }\n    *acc_i = i;\n    return acc;\n}\n"
}

/// `store_column(row, chunk, chunks, acc, i)`: the partials of chunk
/// `chunk` of the STEP rows from `row`, where later passes read them (each
/// row's `chunks` partials together).
fn store_column(vec4: bool, unit: &str) -> String {
    let mut s = format!("fn store_column(row: u32, chunk: u32, chunks: u32, acc: {unit}, i: u32) {{\n");
    if vec4 {
        (0..VEC).for_each(|j| s += &format!("    store((row + {j}u) * chunks + chunk, acc[{j}], i);\n"));
    } else {
        s += "    store(row * chunks + chunk, acc, i);\n";
    }
    s + "}\n"
}

/// `fold_span(row, start, &acc_i)`: the loop of shaders/reduce.wgsl over
/// a whole span (runs `stride` elements apart) without bounds checks.
/// Contiguous vec4 prologues and partials are unrolled, with the meta words
/// read once (SwiftShader's compiler does not share repeated uniform reads)
/// and each run folded as soon as it is loaded; other prologues (strided
/// gathers, whose index arithmetic would be copied 64 times) keep a loop.
/// With `row_leaves` the ops of an unrolled prologue that depend only on
/// `Div` leaves (a row's statistic) are computed once, at the first run:
/// a per-lane load and division at every run nearly doubled a
/// row-broadcast sum's time on lavapipe (3.8 against 2.0 ms over 4M).
fn fold_span(
    src: ReduceSource,
    is_arg: bool,
    layout: Runs,
    row_leaves: bool,
    unit: &str,
    runs: usize,
    stride: usize,
) -> String {
    let mut s = format!("fn fold_span(row: u32, start: u32, acc_i: ptr<function, u32>) -> {unit} {{\n");
    s += "    var acc = identity_unit();\n    var i = 0u;\n";
    let fold = |s: &mut String, r: &str, v: &str| {
        if is_arg {
            *s += &format!("    i = select(i, load_index(row, {r}), take(acc, {v}));\n");
        }
        *s += &format!("    acc = merge_unit(acc, {v});\n");
    };
    let straddling = layout == Runs::Straddling;
    let e = match src {
        ReduceSource::Prologue(_) if layout == Runs::Scalar => {
            s += &format!("    for (var k = 0u; k < {runs}u; k++) {{\n    let r = start + k * {stride}u;\n");
            s += "    let v = load(row, r);\n";
            fold(&mut s, "r", "v");
            return s + "    }\n    *acc_i = i;\n    return acc;\n}\n";
        }
        ReduceSource::Prologue(sig) => Some(Emitter::new(sig, 4, true).with_straddling(straddling).with_meta_lets()),
        ReduceSource::Partials { .. } => None,
    };
    s += &run_base(straddling, "start", "base");
    s += &match &e {
        Some(e) => e.meta_lets() + &e.origin_lets("base"),
        None if layout == Runs::Vec4 => "    let base_q = base >> 2u;\n".to_string(),
        None => String::new(),
    };
    // The hoisted ops index their leaves at the first run; a `Div` leaf
    // repeating by a multiple of the row reads the same element at every run.
    let mut hoisted = String::new();
    let mut unrolled = String::new();
    for k in 0..runs {
        let at = format!("(base + {}u)", k * stride);
        let v = match &e {
            Some(e) => {
                let mut pre = String::new();
                let hoist = row_leaves.then_some((&mut pre, Access::Div));
                let flat = Flat { at: &at, run: Some(("base", k * stride)) };
                let v = e.body_hoisting(0, flat, &format!("k{k}_"), hoist, None, &mut unrolled).remove(0);
                if k == 0 {
                    hoisted = pre;
                }
                v
            }
            None if layout == Runs::Vec4 => format!("in_v[base_q + {}u]", k * stride / VEC),
            None => format!("in_v[{at}]"),
        };
        unrolled += &format!("    let run{k} = {};\n", masked(straddling, &v, &at));
        fold(&mut unrolled, &format!("start + {}u", k * stride), &format!("run{k}"));
    }
    s + &hoisted + &unrolled + "    *acc_i = i;\n    return acc;\n}\n"
}

/// Statements binding `name`, the flat index of the run at `r` of `row`
/// (and, when `straddling`, the row's bounds `lo` and `hi`, read from meta
/// once rather than at each of an unrolled span's runs).
fn run_base(straddling: bool, r: &str, name: &str) -> String {
    if straddling {
        let s = format!("    let row_len = m(1u) - {STRADDLE}u;\n    let lo = row * row_len;\n");
        s + &format!("    let hi = lo + row_len;\n    let {name} = (lo & ~3u) + {r};\n")
    } else {
        format!("    let {name} = row * m(1u) + {r};\n")
    }
}

/// `in_row(f, lo, hi)`: which elements of the vec4 at `f` lie in the row
/// `[lo, hi)`.
pub(super) const IN_ROW_FN: &str = "fn in_row(f: u32, lo: u32, hi: u32) -> vec4<bool> {
    let j = vec4<u32>(f) + vec4<u32>(0u, 1u, 2u, 3u);
    return (j >= vec4<u32>(lo)) & (j < vec4<u32>(hi));
}
";

/// The run `v` at flat index `f`, its elements outside the row replaced by
/// the identity when `straddling`.
fn masked(straddling: bool, v: &str, f: &str) -> String {
    if straddling { format!("select(identity_unit(), {v}, in_row({f}, lo, hi))") } else { v.to_string() }
}

/// (identity, merge(a, b), take(a, b)) of a reduction's monoid.
fn monoid_code(monoid: Monoid, d: DType) -> (String, String, String) {
    match monoid {
        Monoid::Reduce(op) => {
            let (id, merge) = reduce_monoid(op, d);
            (id, merge, "false".to_string())
        }
        Monoid::Arg(a) => {
            let (op, cmp) = match a {
                ArgOp::ArgMax => (ReduceOp::Max, ">"),
                ArgOp::ArgMin => (ReduceOp::Min, "<"),
            };
            (reduce_monoid(op, d).0, format!("select(a, b, b {cmp} a)"), format!("b {cmp} a"))
        }
    }
}

/// Meta word where the matmul's batch shape starts.
pub(crate) const MATMUL_SHAPE_BASE: usize = 15;

/// Meta word where an epilogue's shape starts, past the batch layout.
pub fn matmul_epilogue_base(batch_rank: usize) -> usize {
    MATMUL_SHAPE_BASE + 3 * batch_rank
}
