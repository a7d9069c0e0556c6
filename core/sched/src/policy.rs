//! The scheduler's rules: where a kernel begins and ends. The walk
//! ([`crate::walk`]) holds each node as a fused value and asks the
//! constants and yes/no questions here where a value must exist in memory;
//! it builds the values and kernels, and decides nothing else.
//!
//! A value is materialized (a kernel ends with it):
//! - a root (what the caller asked for); roots of one shape that are plain
//!   elementwise values ([`plain_elementwise`]) share a kernel while its
//!   bindings and meta block hold them all ([`roots_share_a_kernel`]);
//! - an operand of a matmul, a concat, a gather source, a tree reduction's
//!   result, or a view the leaves' layouts cannot express (those kernels
//!   read buffers);
//! - a value with several consumers ([`materializes_shared`]) that holds
//!   a pending matmul, or whose recomputation would cost more than
//!   [`RECOMPUTE_MAX`] ops (cheaper ones are recomputed by each consumer:
//!   a load saved is worth more than a few ALU ops) unless all its readers
//!   lie in one kernel of at most [`FUSED_OPS_MAX`] ops ([`crate::postdom`]),
//!   or a scalar reading [`SCALAR_BINDINGS_MAX`] buffers or more, which
//!   would crowd each consumer's bindings ([`binds_much_for_a_scalar`]);
//!   a shared view of a matmul's epilogue materializes the epilogue
//!   itself, and the views read its buffer;
//! - a value broadcast [`BROADCAST_RECOMPUTE_MIN`] times over or more and
//!   costing [`BROADCAST_COST_MIN`] ops or more ([`recomputed_by_broadcast`]);
//! - each operand of an elementwise op whose fused value would bind too
//!   many buffers, need too many meta words or pass [`FUSED_OPS_MAX`] ops
//!   ([`fits_one_kernel`], [`footprint`], [`bindings_bound`]).
//!
//! A value stays pending instead:
//! - a last-axis reduction (not an arg reduction), as a row stage
//!   ([`becomes_row_stage`]: rows of at most [`ROW_MAX_LEN`], and at least
//!   [`ROW_MIN_ROWS`] of them or at most [`ROW_SMALL`] elements in all, or
//!   rows the device streams), so that softmax, layer norm and
//!   cross-entropy become one row kernel; that kernel takes a value whose
//!   stages all run over its rows ([`one_row_kernel`], [`rows_aligned`]),
//!   and the other stages are computed first;
//! - a matmul, so that its consumer (bias, activation) becomes its
//!   epilogue where it can be one ([`takes_as_epilogue`]);
//! - `softmax(epilogue(q @ kt)) @ v`, read by no one else, as one attention
//!   item ([`crate::attention`]) when its operands are f32
//!   ([`attention_operands_fit`]) and the device runs the kernel
//!   ([`Target::runs_attention`]).

use crate::expr::{
    Fused, Kind, PendingMatmul, RowStage, as_buffer, cost, matmuls, postorder, row_aligned, row_stages, same_mapping,
};
use crate::lower::{Lowerer, meta_words};
use crate::schedule::Target;
use kiln_ir::dtype::DType;
use kiln_ir::ir::{Node, buffer_id};
use kiln_ir::shape::{Layout, numel};
use std::collections::HashSet;
use std::sync::Arc;

/// A value with several consumers is materialized once when inlining it
/// would recompute more ops than this in each consumer.
pub const RECOMPUTE_MAX: usize = 12;
/// A shared scalar reading at least this many buffers is materialized
/// once: each consumer then binds one buffer instead of all of them.
pub(crate) const SCALAR_BINDINGS_MAX: usize = 3;
/// A value of more than one element broadcast at least this many times
/// over, costing at least [`BROADCAST_COST_MIN`] ops, is computed once
/// rather than at every element it reaches (per-example clipping scales,
/// `min(1, c / (norm + ε))` over 64 examples, had been recomputed at each
/// of a weight gradient's 25M elements: 340 of 557 ms on lavapipe).
pub(crate) const BROADCAST_RECOMPUTE_MIN: usize = 64;
pub(crate) const BROADCAST_COST_MIN: usize = 4;
/// Largest fused expression; past it, operands are materialized.
pub(crate) const FUSED_OPS_MAX: usize = 256;
/// A last-axis reduction of at most `ROW_MAX_LEN` columns becomes a row
/// stage (one invocation per row) when it has at least this many rows, or
/// when it is small enough for one invocation (a loss's mean over a batch);
/// longer rows do where the device streams them ([`Target::streams_rows`]).
pub(crate) const ROW_MIN_ROWS: usize = 32;
pub(crate) const ROW_SMALL: usize = 4096;
/// Longest row the row kernel loops over (Mesa ends loops after 65,535
/// iterations; each stage is one loop over the row).
pub const ROW_MAX_LEN: usize = 16384;

/// Whether `v`, the value of `n`, read by `readers` nodes, is materialized
/// once rather than recomputed by each reader: it holds a pending matmul,
/// costs more than [`RECOMPUTE_MAX`] ops, or is a scalar that binds much
/// ([`binds_much_for_a_scalar`]). `one_kernel` is, when every reader lies
/// in one kernel ([`crate::postdom`]), the ops from `n` to that kernel's
/// sink: a costly value is then computed once there while the whole stays
/// within [`FUSED_OPS_MAX`] and holds no row stage.
pub(crate) fn materializes_shared(v: &Fused, n: &Node, readers: usize, one_kernel: Option<usize>) -> bool {
    let shared = readers > 1;
    let ops = cost(v);
    let computed_once = || one_kernel.is_some_and(|region| ops + region <= FUSED_OPS_MAX && row_stages(v).is_empty());
    let costly = ops > RECOMPUTE_MAX && !computed_once();
    let materialize = !matmuls(v).is_empty() || costly || binds_much_for_a_scalar(v, n);
    shared && materialize
}

/// Whether `v`, the value of scalar node `n`, reads so many buffers that
/// inlining it would crowd its consumers' bindings (a flag over several
/// reductions, such as "every gradient is finite", read by every update).
pub(crate) fn binds_much_for_a_scalar(v: &Fused, n: &Node) -> bool {
    numel(n.shape()) == 1 && bindings_bound(v) >= SCALAR_BINDINGS_MAX
}

/// Whether `v` (of `shape`) broadcast to `to` would be recomputed so often
/// that computing it once is cheaper ([`BROADCAST_RECOMPUTE_MIN`]). Not a
/// scalar (its kernels load it once per invocation), a matmul's epilogue,
/// or a function of row statistics over `to`'s rows (layer norm's
/// `rsqrt(var + ε)`, which the row kernel computes once per row).
pub(crate) fn recomputed_by_broadcast(v: &Fused, shape: &[usize], to: &[usize]) -> bool {
    numel(shape) > 1
        && numel(to) >= BROADCAST_RECOMPUTE_MIN * numel(shape)
        && cost(v) >= BROADCAST_COST_MIN
        && (row_stages(v).is_empty() || !rows_aligned(v, to))
        && matmuls(v).is_empty()
}

/// Whether an elementwise op's fused value `v` (of rank `rank`) fits one
/// kernel: fewer bindings than the device's (one is the output's), its
/// meta words within the device's room, and at most [`FUSED_OPS_MAX`] ops.
/// When not, the op's inputs are materialized first.
pub(crate) fn fits_one_kernel(v: &Fused, rank: usize, target: &dyn Target) -> bool {
    let (buffers, words) = footprint(v, rank);
    buffers < target.max_bindings() && words <= target.meta_room(rank) && cost(v) <= FUSED_OPS_MAX
}

/// Whether a reduction over `axes` of an input of rank `rank`, `rows` rows
/// of `len`, stays pending as a row stage: along the last axis, with rows
/// the row kernel loops over ([`ROW_MAX_LEN`]) and enough of them
/// ([`ROW_MIN_ROWS`]) or few elements in all ([`ROW_SMALL`]), or rows the
/// device streams. Otherwise it is a tree reduction, computed at once.
pub(crate) fn becomes_row_stage(axes: &[usize], rank: usize, rows: usize, len: usize, target: &dyn Target) -> bool {
    let row_fits = len <= ROW_MAX_LEN && (rows >= ROW_MIN_ROWS || rows * len <= ROW_SMALL);
    axes == [rank - 1] && (row_fits || target.streams_rows(rows, len))
}

/// Whether the row kernel over `shape` (`[rows.., len]`) computes `body`,
/// which reads `stages`: every stage runs over those rows and is read at
/// the kernel's own row. When not, the stages are computed first.
pub(crate) fn one_row_kernel(body: &Fused, stages: &[Arc<RowStage>], shape: &[usize]) -> bool {
    stages.iter().all(|st| st.shape == shape) && rows_aligned(body, shape)
}

/// Whether every row stage `v` reads (directly) runs over `shape`'s rows
/// and is read at the kernel's own row.
pub(crate) fn rows_aligned(v: &Fused, shape: &[usize]) -> bool {
    postorder(v).iter().all(|n| match &n.kind {
        Kind::Row { stage, layout } => stage.shape == shape && row_aligned(layout, shape),
        Kind::Buf(_)
        | Kind::Iota { .. }
        | Kind::Mm { .. }
        | Kind::Fill(_)
        | Kind::Pointwise(_)
        | Kind::Gather { .. } => true,
    })
}

/// Whether `v` (of `shape`) can be the epilogue of the one pending matmul
/// it holds: f32, the matmul's shape, reading its result element for
/// element, and no row stage.
pub(crate) fn takes_as_epilogue(v: &Fused, shape: &[usize]) -> bool {
    let [mm] = &matmuls(v)[..] else { return false };
    let aligned = postorder(v).iter().all(|n| match &n.kind {
        Kind::Mm { layout, .. } => same_mapping(layout, &Layout::contiguous(shape)),
        Kind::Buf(_)
        | Kind::Iota { .. }
        | Kind::Row { .. }
        | Kind::Fill(_)
        | Kind::Pointwise(_)
        | Kind::Gather { .. } => true,
    });
    v.dtype == DType::F32 && mm.shape == shape && aligned && row_stages(v).is_empty()
}

/// Whether an attention item takes the scores' matmul `mm` and values of
/// dtype `v`: the kernel computes in f32 only.
pub(crate) fn attention_operands_fit(mm: &PendingMatmul, v: DType) -> bool {
    [mm.a.dtype, mm.b.dtype, v] == [DType::F32; 3]
}

/// Whether a root's value `v` is a plain elementwise value (no row stage,
/// no pending matmul, not already a buffer), which may share a kernel with
/// the other roots of its shape.
pub(crate) fn plain_elementwise(v: &Fused) -> bool {
    row_stages(v).is_empty() && matmuls(v).is_empty() && as_buffer(v).is_none()
}

/// Whether roots' values `vals` (of one shape, of rank `rank`) fit one
/// elementwise kernel, as the walk lowers them: its bindings (their
/// buffers, and one output each) and its meta block must hold them all.
pub(crate) fn roots_share_a_kernel(vals: &[Fused], rank: usize, target: &dyn Target) -> bool {
    let buffers: HashSet<_> = vals.iter().flat_map(buffers_of).collect();
    if buffers.len() + vals.len() > target.max_bindings() {
        return false;
    }
    let mut low = Lowerer::new(rank, &[], None);
    low.body(&vals.iter().collect::<Vec<_>>());
    meta_words(&low.sig) <= target.meta_room(rank)
}

/// (bindings at most, meta words) a kernel over `v` would need.
pub(crate) fn footprint(v: &Fused, rank: usize) -> (usize, usize) {
    let mut low = Lowerer::new(rank, &[], None);
    let stages = row_stages(v);
    let words = if stages.is_empty() && matmuls(v).is_empty() {
        low.body(&[v]);
        meta_words(&low.sig)
    } else {
        // Pending values lower with their own kernel; count leaves only.
        postorder(v).iter().filter(|n| matches!(n.kind, Kind::Buf(_) | Kind::Iota { .. })).count() * (rank + 1)
    };
    (bindings_bound(v), words)
}

/// The most storage buffers a kernel over `v` can bind, however its
/// pending parts land: its own buffers and gather sources, the buffers of
/// every row stage's input (direct or read by another stage, computed
/// inside the kernel) and one more per stage (when it is computed first
/// instead), and both operands of every pending matmul (when `v` becomes
/// its epilogue; computed first, it binds one buffer). Counting only the
/// first kind let a cross-entropy gradient fuse into a kernel of 11.
pub(crate) fn bindings_bound(v: &Fused) -> usize {
    let mut buffers = buffers_of(v);
    let stages = row_stages(v);
    let operands = matmuls(v).into_iter().flat_map(|mm| [buffer_id(&mm.a.buffer), buffer_id(&mm.b.buffer)]);
    for b in stages.iter().flat_map(|st| buffers_of(&st.input)).chain(operands) {
        if !buffers.contains(&b) {
            buffers.push(b);
        }
    }
    buffers.len() + stages.len()
}

/// Distinct buffers `v` reads.
fn buffers_of(v: &Fused) -> Vec<*const ()> {
    let mut out = Vec::new();
    for n in postorder(v) {
        let b = match &n.kind {
            Kind::Buf(a) | Kind::Gather { src: a, .. } => buffer_id(&a.buffer),
            Kind::Iota { .. } | Kind::Row { .. } | Kind::Mm { .. } | Kind::Fill(_) | Kind::Pointwise(_) => continue,
        };
        if !out.contains(&b) {
            out.push(b);
        }
    }
    out
}
