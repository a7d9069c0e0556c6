//! Row kernels: reductions along the last axis and what consumes them, one
//! invocation per row or lanes of a workgroup per row ([`RowLanes`]).

use super::emit::{Emitter, Flat, VEC, live_ops, math_needs, reduce_monoid};
use crate::{META_DECL, WG, compute_type, storage_type, store_expr};
use kiln_ir::dtype::DType;
use kiln_ir::ir::{BinaryOp, ReduceOp, UnaryOp};
use kiln_sched::lower::{Body, Op, Sig};
use kiln_sched::pointwise::Pointwise;
pub use kiln_sched::walk::ROW_MAX_LEN;
const ROW_BLOCK: usize = 64;

/// The row kernel: one invocation per row of `[rows.., len]`. Bodies
/// `0..stages.len()` are the stages' inputs, each folded over the row in
/// order; the last body computes the outputs, for every element of the row
/// or (with `per_row`) once per row at `j = 0`. With `vec4` (rows a multiple
/// of 4 long, 4-aligned leaves, not `per_row`) every loop reads and writes
/// runs of four elements: vector loads on CPU adapters.
/// Meta: 0 rows, 1 len, 2 threads per grid row, shape at 3.
pub fn row_wgsl(sig: &Sig, stages: &[ReduceOp], outputs: &[DType], per_row: bool, vec4: bool) -> String {
    let e = Emitter::new(sig, 3, vec4).with_stages(stages);
    let step = if vec4 { VEC } else { 1 };
    let mut s = row_decls(&e, stages, outputs, vec4, vec4);
    s += &format!("@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n");
    s += "    let row = gid.y * m(2u) + gid.x;\n    if (row >= m(0u)) { return; }\n    let len = m(1u);\n";
    // Each stage folds blocks of ROW_BLOCK elements, then the blocks: a sum's
    // rounding error grows with len / ROW_BLOCK + ROW_BLOCK, not len.
    let reuse = reused_stage(sig, stages, outputs, per_row);
    let at = if vec4 { "f >> 2u" } else { "f" };
    let mut k = 0;
    while k < stages.len() {
        // The online pass rescales its sums and stores nothing, so it runs
        // only when neither of its stages keeps a value for the outputs.
        let keeps = reuse.is_some_and(|(r, _)| r == k || r == k + 1);
        if !keeps && sums_exp_of_shifted_max(sig, stages, k) {
            s += &online_max_and_exp_sum(&e, k, vec4, RowWalk::whole_row(step));
            k += 2;
            continue;
        }
        let keep = reuse.filter(|&(r, _)| r == k).map(|(_, o)| format!("out{o}[{at}]"));
        s += &fold_stage(&e, k, vec4, RowWalk::whole_row(step), keep.as_deref());
        k += 1;
    }
    let last = stages.len();
    if per_row {
        s += "    let f = row * len;\n";
        let roots = e.body(last, "f", "", &mut s);
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            s += &format!("    out{k}[row] = {};\n", store_expr(d, r));
        }
    } else {
        s += &format!("    for (var j = 0u; j < len; j += {step}u) {{\n    let f = row * len + j;\n");
        let roots = match reuse {
            Some((k, o)) => e.body_given(last, "f", (sig.bodies[k].roots[0], &format!("out{o}[{at}]")), &mut s),
            None => e.body(last, "f", "", &mut s),
        };
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            s += &format!("    out{k}[{at}] = {};\n", store_expr(d, r));
        }
        s += "    }\n";
    }
    s + "}\n"
}

/// The row kernels' buffers, math helpers, and each stage's `merge{k}`
/// (`merge{k}v` too with `vec4`) and `identity{k}`; outputs are arrays of
/// vec4s with `vec4_outputs`.
pub(crate) fn row_decls(e: &Emitter, stages: &[ReduceOp], outputs: &[DType], vec4: bool, vec4_outputs: bool) -> String {
    let mut s = String::from(META_DECL);
    for (k, &d) in outputs.iter().enumerate() {
        let elem = if vec4_outputs { format!("vec4<{}>", storage_type(d)) } else { storage_type(d).to_string() };
        s += &format!("@group(0) @binding({}) var<storage, read_write> out{k}: array<{elem}>;\n", k + 1);
    }
    s += &e.input_decls(outputs.len());
    for (k, &op) in stages.iter().enumerate() {
        let (id, merge) = reduce_monoid(op, stage_dtype(e.sig, k));
        let ct = compute_type(stage_dtype(e.sig, k));
        s += &format!("fn merge{k}(a: {ct}, b: {ct}) -> {ct} {{ return {merge}; }}\n");
        s += &format!("fn identity{k}() -> {ct} {{ return {id}; }}\n");
        if vec4 {
            s += &format!("fn merge{k}v(a: vec4<{ct}>, b: vec4<{ct}>) -> vec4<{ct}> {{ return {merge}; }}\n");
        }
    }
    s
}

pub(crate) fn stage_dtype(sig: &Sig, k: usize) -> DType {
    sig.bodies[k].ops[sig.bodies[k].roots[0]].1
}

/// The lanes row layout: `lanes` invocations per row of `len` elements,
/// lane l holding vec4s (or with `vec4` false, elements) l, l + lanes, … of
/// the row in registers. Every element is read once and written once, and
/// the lanes' loads are contiguous (on CPU adapters, vector loads instead
/// of the row-per-invocation layout's gathers across rows; on GPUs,
/// coalesced). Where the row does not split evenly, the last slot is
/// ragged: lanes past the row's end read its last vec4 (or element) again,
/// fold the identity instead, and store the same bits its own lane stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowLanes {
    pub lanes: u32,
    pub len: u32,
    pub combine: Combine,
    pub vec4: bool,
}

/// How a row's lanes combine their partial results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combine {
    /// The lanes are one subgroup (of a fixed width): a butterfly of
    /// `subgroupShuffleXor`, no barrier. Workgroups of [`ROW_LANES_WG`].
    Subgroup,
    /// The lanes share a workgroup (with other rows' lanes, up to
    /// [`ROW_LANES_WG`] invocations): each writes its partial to workgroup
    /// memory, one barrier, and each folds its row's.
    Workgroup,
}

/// Invocations per workgroup of the lanes row kernel (rows with more
/// lanes than this take a workgroup each).
pub const ROW_LANES_WG: u32 = 64;
/// Lanes per row where they combine through workgroup memory, on CPU
/// adapters: one SIMD batch of llvmpipe (256 bits); on llvmpipe GL 8 lanes
/// with 8 rows per workgroup ran softmax [4096, 1024] 1.9× as fast as 16
/// lanes with one row per workgroup (docs/BENCHMARKS.md, 'What was tried'
/// (softmax/rows)).
const WORKGROUP_LANES_CPU: u32 = 8;
/// The same on GPUs (not measured on one yet): 16 lanes keep a lane's
/// share of a 1024-long row to 16 vec4 registers.
const WORKGROUP_LANES_GPU: u32 = 16;
/// Most vec4s one lane keeps in registers (the row is unrolled into them).
const LANE_SLOTS_MAX: usize = 64;
/// Most elements one lane keeps where they are not read as vec4s (rows of
/// 1023 on lavapipe and GL; the unrolled kernel's length bounds it).
const LANE_SCALAR_SLOTS_MAX: usize = 128;
/// A ragged row takes the lanes layout where at most this fraction of its
/// lanes' slots idle: rows of 100 (a quarter idle with 8 lanes) ran 15%
/// slower on llvmpipe GL than with a row per invocation, rows of 200 and
/// 1000 (an eighth and 2%) 1.1–1.5× faster on every adapter.
const RAGGED_IDLE_MAX: f64 = 0.125;

impl RowLanes {
    /// The layout for `stages` over rows of `len` (vec4-readable, written
    /// per element) on an adapter whose subgroups are `subgroup_width` wide
    /// (`None`: no subgroups, or of no fixed width): a subgroup per row where
    /// the width is known, else lanes combined through workgroup memory where
    /// the device has it (`Caps::workgroup_memory`), as many as suit a
    /// `cpu_adapter` or a GPU; if the row fits, read as `vec4`s or not.
    #[allow(clippy::too_many_arguments)]
    pub fn for_device(
        workgroup_memory: bool,
        cpu_adapter: bool,
        subgroup_width: Option<u32>,
        sig: &Sig,
        stages: &[ReduceOp],
        len: usize,
        vec4: bool,
    ) -> Option<RowLanes> {
        match subgroup_width {
            Some(width) => RowLanes::fitting(width, Combine::Subgroup, sig, stages, len, vec4),
            None if workgroup_memory => {
                let lanes = if cpu_adapter { WORKGROUP_LANES_CPU } else { WORKGROUP_LANES_GPU };
                RowLanes::fitting(lanes, Combine::Workgroup, sig, stages, len, vec4)
            }
            None => None,
        }
    }

    /// The layout with `lanes` per row combined by `combine`, reading
    /// `vec4`s (`len` a multiple of 4) or elements, if each lane's share
    /// fits in `LANE_SLOTS_MAX` vec4s (or `LANE_SCALAR_SLOTS_MAX` elements),
    /// a ragged row leaves at most `RAGGED_IDLE_MAX` of its slots idle, and
    /// every stage is a 32-bit value.
    pub fn fitting(
        lanes: u32,
        combine: Combine,
        sig: &Sig,
        stages: &[ReduceOp],
        len: usize,
        vec4: bool,
    ) -> Option<RowLanes> {
        let word = (0..stages.len()).all(|k| matches!(stage_dtype(sig, k), DType::F32 | DType::I32 | DType::U32));
        let row = RowLanes { lanes, len: len as u32, combine, vec4 };
        let (step, max) = if vec4 { (VEC, LANE_SLOTS_MAX) } else { (1, LANE_SCALAR_SLOTS_MAX) };
        let fits = lanes > 0
            && len > 0
            && (combine == Combine::Workgroup || ROW_LANES_WG.is_multiple_of(lanes))
            && len.is_multiple_of(step)
            && row.slots() <= max
            && row.idle() <= RAGGED_IDLE_MAX;
        (word && fits).then_some(row)
    }

    /// Invocations per workgroup: a whole number of rows' lanes.
    pub fn workgroup_size(self) -> u32 {
        match self.combine {
            Combine::Subgroup => ROW_LANES_WG,
            Combine::Workgroup => self.lanes * (ROW_LANES_WG / self.lanes).max(1),
        }
    }

    /// Elements one slot of one lane holds.
    fn step(self) -> usize {
        if self.vec4 { VEC } else { 1 }
    }

    /// The row's vec4s (or elements).
    fn units(self) -> usize {
        self.len as usize / self.step()
    }

    fn slots(self) -> usize {
        self.units().div_ceil(self.lanes as usize)
    }

    /// Whether the last slot reaches past the row's end for some lanes.
    fn ragged(self) -> bool {
        !self.units().is_multiple_of(self.lanes as usize)
    }

    /// The fraction of the lanes' slots past the row's end.
    fn idle(self) -> f64 {
        let slots = self.slots() * self.lanes as usize;
        (slots - self.units()) as f64 / slots as f64
    }
}

/// The row kernel in the [`RowLanes`] layout (same bodies, stages and
/// meta as [`row_wgsl`], outputs per element, vec4 leaves with
/// `lanes.vec4`). Each stage folds the lane's slots in order, then the
/// vec4's lanes, then combines the row's lanes in a fixed order with kiln's
/// own merge, every lane getting the same bits.
pub fn row_lanes_wgsl(sig: &Sig, stages: &[ReduceOp], outputs: &[DType], lanes: RowLanes) -> String {
    let vec4 = lanes.vec4;
    let e = Emitter::new(sig, 3, vec4).with_meta_lets().with_stages(stages);
    let (l, len, step) = (lanes.lanes, lanes.len, lanes.step());
    let mut s = row_decls(&e, stages, outputs, vec4, vec4);
    if lanes.combine == Combine::Workgroup {
        for k in 0..stages.len() {
            let (ct, wg) = (compute_type(stage_dtype(sig, k)), lanes.workgroup_size());
            s += &format!("var<workgroup> part{k}: array<{ct}, {wg}>;\n");
        }
    }
    let ids = match lanes.combine {
        Combine::Subgroup => ", @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_lane: u32",
        Combine::Workgroup => ", @builtin(local_invocation_index) local: u32",
    };
    s += &format!(
        "@compute @workgroup_size({})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>{}) {{\n",
        lanes.workgroup_size(),
        ids
    );
    // No early return: every lane of a row must reach the shuffles or
    // barriers. Lanes past the last row redo it and store the same values
    // as its own lanes (a stored branch costs SwiftShader masked stores).
    s += &format!(
        "    let at = gid.y * m(2u) + gid.x;\n    let row = min(at / {l}u, m(0u) - 1u);\n    let lane = at % {l}u;\n"
    );
    s += &e.meta_lets();
    match lanes.combine {
        // Whether the row's lanes are one subgroup, lane for lane (so far
        // always, where an adapter reports one subgroup width).
        Combine::Subgroup => {
            s += &format!("    let lanes_are_subgroup = subgroupAll(sg_size == {l}u && sg_lane == lane);\n")
        }
        // Where the row's partials sit in workgroup memory.
        Combine::Workgroup => s += "    let first_lane = local - lane;\n",
    }
    let names: Vec<String> = (0..lanes.slots()).map(|t| format!("slot{t}")).collect();
    let ragged = lanes.ragged().then_some(names.len() - 1);
    for (t, f) in names.iter().enumerate() {
        let unit = format!("lane + {}u", t as u32 * l);
        if ragged == Some(t) {
            let last = lanes.units() - 1;
            s += &format!("    let {f} = row * {len}u + min({unit}, {last}u) * {step}u;\n");
            s += &format!("    let in_row = {unit} <= {last}u;\n");
        } else {
            s += &format!("    let {f} = row * {len}u + ({unit}) * {step}u;\n");
        }
    }
    // Whole vec4 slots are runs from the first (its vec4 indices bound once).
    let slots: Vec<Flat> = (names.iter().enumerate())
        .map(|(t, f)| match ragged != Some(t) && vec4 {
            true => Flat { at: f, run: Some(("slot0", t * l as usize * step)) },
            false => Flat::at(f),
        })
        .collect();
    if vec4 {
        s += &e.origin_lets("slot0");
        s += "    let slot0_q = slot0 >> 2u;\n";
    }
    // For each body, the latest earlier stage whose value it can be given.
    let given: Vec<Option<(usize, usize)>> =
        (0..=stages.len()).map(|b| (0..b).rev().find_map(|k| stage_value_in(sig, k, b).map(|op| (k, op)))).collect();
    for (k, &stage_given) in given[..stages.len()].iter().enumerate() {
        // Each value folded as soon as it is made (SwiftShader's compiler
        // runs about 10% slower when all are made first).
        let (identity, merge) = slot_monoid(k, vec4);
        for (t, &f) in slots.iter().enumerate() {
            let v = lane_roots(&e, k, stage_given, t, f, &mut s).remove(0);
            let v = if ragged == Some(t) { format!("select({identity}, {v}, in_row)") } else { v };
            s += &if t == 0 { format!("    var b{k} = {v};\n") } else { format!("    b{k} = {merge}(b{k}, {v});\n") };
        }
        s += &format!("    var s{k} = {};\n", slot_total(k, &format!("b{k}"), vec4));
        s += &combine_lanes(&e, k, lanes);
    }
    for (t, &f) in slots.iter().enumerate() {
        let roots = lane_roots(&e, stages.len(), given[stages.len()], t, f, &mut s);
        let at = match f.run {
            Some((_, plus)) => format!("slot0_q + {}u", plus / VEC),
            None if vec4 => format!("{} >> 2u", f.at),
            None => f.at.to_string(),
        };
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            s += &format!("    out{k}[{at}] = {};\n", store_expr(d, r));
        }
    }
    s + "}\n"
}

/// Statements leaving in `s{k}` stage k's value over the whole row, from
/// each lane's `s{k}`. In the butterfly both lanes of a pair merge the
/// same operands in the same places (the lower lane's value first), so they
/// get the same bits even from a merge whose result depends on the order
/// (`max` of −0 and +0). Ordering by a select of two merges is not enough:
/// Mesa's compiler treats `max` as commutative and makes them one.
/// Where the subgroup turns out not to be the row's lanes, each lane folds
/// the whole row itself instead (correct, L times the work).
fn combine_lanes(e: &Emitter, k: usize, lanes: RowLanes) -> String {
    let l = lanes.lanes;
    match lanes.combine {
        Combine::Subgroup => {
            let mut s = String::new();
            for w in (0..l.ilog2()).map(|i| 1u32 << i) {
                s += &format!(
                    "    let o{k}_{w} = subgroupShuffleXor(s{k}, {w}u);\n    let low{k}_{w} = (lane & {w}u) == 0u;\n"
                );
                s += &format!(
                    "    s{k} = merge{k}(select(o{k}_{w}, s{k}, low{k}_{w}), select(s{k}, o{k}_{w}, low{k}_{w}));\n"
                );
            }
            let (len, step) = (lanes.len, lanes.step());
            let (init, merge) = slot_monoid(k, lanes.vec4);
            s += &format!("    if (!lanes_are_subgroup) {{\n        var c{k} = {init};\n");
            s += &format!("        for (var j = 0u; j < {len}u; j += {step}u) {{\n        let f = row * {len}u + j;\n");
            let v = e.body(k, "f", &format!("fb{k}_"), &mut s).remove(0);
            s += &format!("        c{k} = {merge}(c{k}, {v});\n        }}\n");
            s + &format!("        s{k} = {};\n    }}\n", slot_total(k, &format!("c{k}"), lanes.vec4))
        }
        Combine::Workgroup => {
            let mut s =
                format!("    part{k}[local] = s{k};\n    workgroupBarrier();\n    s{k} = part{k}[first_lane];\n");
            (1..l).for_each(|i| s += &format!("    s{k} = merge{k}(s{k}, part{k}[first_lane + {i}u]);\n"));
            s
        }
    }
}

/// Stage `k`'s identity and merge over vec4s or elements.
fn slot_monoid(k: usize, vec4: bool) -> (String, String) {
    if vec4 {
        (format!("vec4(identity{k}())"), format!("merge{k}v"))
    } else {
        (format!("identity{k}()"), format!("merge{k}"))
    }
}

/// Stage `k`'s value from the accumulator `acc`: with `vec4`, its four
/// lanes merged in a fixed order.
fn slot_total(k: usize, acc: &str, vec4: bool) -> String {
    if vec4 { format!("merge{k}(merge{k}({acc}.x, {acc}.y), merge{k}({acc}.z, {acc}.w))") } else { acc.to_string() }
}

/// Body `b`'s roots at slot `t` (flat index `f`), named `k{b}t{t}_v…`.
/// With `given` = (stage k, op), that op is stage k's value at this slot,
/// already in registers, instead of being read and computed again.
fn lane_roots(e: &Emitter, b: usize, given: Option<(usize, usize)>, t: usize, f: Flat, s: &mut String) -> Vec<String> {
    let value = given.map(|(k, op)| (op, format!("k{k}t{t}_v{op}")));
    e.body_hoisting(b, f, &format!("k{b}t{t}_"), None, value.as_ref().map(|(op, v)| (*op, v.as_str())), s)
}

/// A stage whose value the outputs compute again, costly enough to keep
/// (softmax's exp(x − max)): its pass stores each value in output `o` (an
/// f32 one), and the output pass reads it back from there. As (stage, o).
/// The last body must begin with the stage's body, whose root is its last op;
/// the latest such stage is kept (it contains the earlier ones' values).
fn reused_stage(sig: &Sig, stages: &[ReduceOp], outputs: &[DType], per_row: bool) -> Option<(usize, usize)> {
    let o = outputs.iter().position(|&d| d == DType::F32).filter(|_| !per_row)?;
    let last = &sig.bodies[stages.len()];
    let k = (0..stages.len()).rfind(|&k| {
        let (ops, n) = (&sig.bodies[k].ops, sig.bodies[k].ops.len());
        math_needs(ops.iter()).any()
            && ops[n - 1].1 == DType::F32
            && last.ops.len() > n
            && stage_value_in(sig, k, stages.len()).is_some()
    })?;
    Some((k, o))
}

/// The op of body `b` that is stage `k`'s value, when body `b` begins
/// with stage `k`'s body (whose one root is its last op) and needs that
/// value: `b` can then be given it instead of computing it again.
fn stage_value_in(sig: &Sig, k: usize, b: usize) -> Option<usize> {
    let (stage, body) = (&sig.bodies[k], &sig.bodies[b]);
    let n = stage.ops.len();
    let prefix = stage.roots == [n - 1] && body.ops.starts_with(&stage.ops);
    (prefix && live_ops(body, None)[n - 1]).then_some(n - 1)
}

/// Where a row stage's loops walk its row: from element `first` (a u32
/// expression) of the walk, which starts at flat index `origin` and ends
/// `end` elements later, `stride` elements at a time, folding blocks of
/// `span` elements (a sum's rounding error grows with the blocks and a
/// block's length, not with the row's). With `mask` (a `vec4<bool>`
/// expression of the flat index it is given), the vec4 at `f` may reach
/// outside the row: its elements where the mask is false count as the
/// stage's identity. A trip of the loop takes `unroll` strides while that
/// many remain in the block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowWalk<'a> {
    pub first: &'a str,
    pub stride: usize,
    pub span: usize,
    pub origin: &'a str,
    pub end: &'a str,
    pub mask: Option<fn(&str) -> String>,
    pub unroll: usize,
}

impl RowWalk<'_> {
    /// A row per invocation: every element of the row, `step` at a time.
    fn whole_row(step: usize) -> RowWalk<'static> {
        RowWalk { first: "0u", stride: step, span: ROW_BLOCK, origin: "row * len", end: "len", mask: None, unroll: 1 }
    }
}

/// Opens the loop over blocks of a row stage's walk (declaring the block's
/// accumulators `block_vars`) and writes the loops over the block, each
/// trip's code written by `trip` for its flat indices. The caller closes
/// the block loop.
fn row_blocks(block_vars: &str, walk: RowWalk, s: &mut String, trip: impl FnMut(&[String], &mut String)) {
    let RowWalk { first, span, end, .. } = walk;
    *s += &format!(
        "    for (var j0 = {first}; j0 < {end}; j0 += {span}u) {{\n{block_vars}    let j1 = min(j0 + {span}u, {end});\n"
    );
    strided_trips("j0", "j1", walk, s, trip);
}

/// Loops `j` from `from` to `to` (u32 expressions) by `walk.stride`, at
/// flat index `walk.origin + j`: `walk.unroll` strides per trip (flat
/// indices `f`, `fu1`, …) while that many remain, then one per trip, so
/// that CPU adapters pay a loop's masks and branches once per several
/// loads. `trip` writes a trip's code for its flat indices.
pub(crate) fn strided_trips(
    from: &str,
    to: &str,
    walk: RowWalk,
    s: &mut String,
    mut trip: impl FnMut(&[String], &mut String),
) {
    let RowWalk { stride, origin, unroll, .. } = walk;
    // The loop of single strides declares `j` unless the unrolled loop did.
    let mut init = format!("var j = {from}");
    if unroll > 1 {
        *s +=
            &format!("    {init};\n    for (; j + {}u < {to}; j += {}u) {{\n", (unroll - 1) * stride, unroll * stride);
        *s += &format!("    let f = {origin} + j;\n");
        let fs: Vec<String> = (0..unroll).map(|u| if u == 0 { "f".to_string() } else { format!("fu{u}") }).collect();
        (1..unroll).for_each(|u| *s += &format!("    let fu{u} = f + {}u;\n", u * stride));
        trip(&fs, s);
        *s += "    }\n";
        init.clear();
    }
    *s += &format!("    for ({init}; j < {to}; j += {stride}u) {{\n    let f = {origin} + j;\n");
    trip(&["f".to_string()], s);
    *s += "    }\n";
}

/// The prefix naming the values of the `u`-th stride of an unrolled trip.
pub(crate) fn trip_prefix(u: usize) -> String {
    if u == 0 { String::new() } else { format!("u{u}_") }
}

/// The value `v` of a walk's element (or vec4) at `f`, its elements outside
/// the row replaced by `identity` where the walk has a mask.
fn masked(walk: RowWalk, identity: &str, f: &str, v: String) -> String {
    match walk.mask {
        Some(mask) => format!("select({identity}, {v}, {})", mask(f)),
        None => v,
    }
}

/// Stage `k` folded along `walk` into `s{k}`: each block into `b{k}`,
/// then the block into `s{k}`. With `keep`, each value is also stored
/// there (an output the outputs' pass reads back).
pub(crate) fn fold_stage(e: &Emitter, k: usize, vec4: bool, walk: RowWalk, keep: Option<&str>) -> String {
    assert!(keep.is_none() || walk.unroll == 1, "a kept value is stored at `f`");
    let (init, merge) = slot_monoid(k, vec4);
    let mut s = format!("    var s{k} = identity{k}();\n");
    row_blocks(&format!("    var b{k} = {init};\n"), walk, &mut s, |fs, s| {
        for (u, f) in fs.iter().enumerate() {
            let v = masked(walk, &init, f, e.body(k, f, &trip_prefix(u), s).remove(0));
            if let Some(at) = keep {
                *s += &format!("    {at} = {v};\n");
            }
            *s += &format!("    b{k} = {merge}(b{k}, {v});\n");
        }
    });
    let block = slot_total(k, &format!("b{k}"), vec4);
    s + &format!("    s{k} = merge{k}(s{k}, {block});\n    }}\n")
}

/// Whether stage `k + 1` sums `exp(x − m)` where stage `k` is the max `m`
/// of the same f32 `x` (softmax, log-softmax, cross-entropy): body `k + 1`
/// is body `k`'s ops, then `Row(k)`, the subtraction and the exp.
pub(crate) fn sums_exp_of_shifted_max(sig: &Sig, stages: &[ReduceOp], k: usize) -> bool {
    let (Some(ReduceOp::Max), Some(ReduceOp::Sum)) = (stages.get(k), stages.get(k + 1)) else {
        return false;
    };
    let (x, e) = (&sig.bodies[k], &sig.bodies[k + 1]);
    let n = x.ops.len();
    let f32_op = |op: Op| (op, DType::F32);
    x.roots.len() == 1
        && x.ops[x.roots[0]].1 == DType::F32
        && e.roots == [n + 2]
        && e.ops.len() == n + 3
        && e.ops[n] == f32_op(Op::Row(k))
        && e.ops[n + 1] == f32_op(Op::Pointwise(Pointwise::Binary(BinaryOp::Sub, x.roots[0], n)))
        && e.ops[n + 2] == f32_op(Op::Pointwise(Pointwise::Unary(UnaryOp::Exp, n + 1)))
        && shifted_by_row_max(sig, stages, e, n + 1)
}

/// Whether op `x` of `body` is `a − max(a)` along the row: it subtracts
/// row stage k, a max, from the value stage k's body folds, which `body`
/// computes with the same ops first. Such a value is at most 0 (or NaN), so
/// its exp cannot overflow. (If a row holds a NaN, WGSL leaves `max`'s
/// result open, and such a row's exp values are unspecified either way.)
pub(super) fn shifted_by_row_max(sig: &Sig, stages: &[ReduceOp], body: &Body, x: usize) -> bool {
    let Op::Pointwise(Pointwise::Binary(BinaryOp::Sub, a, m)) = body.ops[x].0 else {
        return false;
    };
    let Op::Row(k) = body.ops[m].0 else {
        return false;
    };
    let max = &sig.bodies[k];
    stages.get(k) == Some(&ReduceOp::Max) && max.roots == [a] && body.ops.starts_with(&max.ops)
}

/// Stages `k` (max of x) and `k + 1` (sum of exp(x − max)) in one pass over
/// the row, the online softmax normalizer: the running sum is rescaled by
/// exp(old max − new max) whenever the max grows (rarely, past the first
/// elements), so the row is read once instead of twice. Lanes keep their
/// own (max, sum) per block; blocks fold into the row's in order, so the
/// result is deterministic. Guards keep all-−∞ prefixes at a sum of 0.
/// Every exp here is of a value minus a max at least as large.
pub(crate) fn online_max_and_exp_sum(e: &Emitter, max: usize, vec4: bool, walk: RowWalk) -> String {
    let sum = max + 1;
    let splat = |x: &str| if vec4 { format!("vec4<f32>({x})") } else { x.to_string() };
    let (zero, one, ninf) = (splat("0.0"), splat("1.0"), splat("f32_bits(0xff800000u)"));
    let mut s = format!("    var s{max} = f32_bits(0xff800000u);\n    var s{sum} = 0.0;\n");
    let block_vars = format!("    var b{max} = {ninf};\n    var b{sum} = {zero};\n");
    row_blocks(&block_vars, walk, &mut s, |fs, s| {
        // The trip's values, then their max: one rescale per trip at most.
        let xs: Vec<String> = fs
            .iter()
            .enumerate()
            .map(|(u, f)| {
                let x = e.body(max, f, &trip_prefix(u), s).remove(0);
                if walk.mask.is_none() {
                    return x;
                }
                *s += &format!("    let x{max}_{u} = {};\n", masked(walk, &ninf, f, x));
                format!("x{max}_{u}")
            })
            .collect();
        let top = xs[1..].iter().fold(xs[0].clone(), |m, x| format!("max({m}, {x})"));
        *s += &format!(
            "    let top{max} = {top};\n    if (any(top{max} > b{max})) {{\n        let grown = max(b{max}, top{max});\n"
        );
        *s += &format!(
            "        b{sum} = b{sum} * select(kiln_exp_no_overflow(b{max} - grown), {one}, b{max} == grown);\n        b{max} = grown;\n    }}\n"
        );
        for x in &xs {
            *s += &format!(
                "    b{sum} = b{sum} + select(kiln_exp_no_overflow({x} - b{max}), {zero}, b{max} == {ninf});\n"
            );
        }
    });
    let block_max =
        if vec4 { format!("max(max(b{max}.x, b{max}.y), max(b{max}.z, b{max}.w))") } else { format!("b{max}") };
    s += &format!("    let row_max = max(s{max}, {block_max});\n");
    let rm = splat("row_max");
    s += &format!("    let lanes = b{sum} * select(kiln_exp_no_overflow(b{max} - {rm}), {one}, b{max} == {rm});\n");
    let lanes = if vec4 { "(lanes.x + lanes.y) + (lanes.z + lanes.w)" } else { "lanes" };
    let old = splat(&format!("s{max} - row_max"));
    let rescale = if vec4 { format!("kiln_exp_no_overflow({old}).x") } else { format!("kiln_exp_no_overflow({old})") };
    s += &format!(
        "    s{sum} = s{sum} * select({rescale}, 1.0, s{max} == row_max) + {lanes};\n    s{max} = row_max;\n    }}\n"
    );
    s
}
