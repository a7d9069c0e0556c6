//! Fused values: what the scheduler holds for a node that is not (yet) in
//! a buffer. An [`Fused`] is a DAG of elementwise ops over leaves; every
//! leaf carries a layout over the expression's shape, so views (reshape,
//! permute, slice, expand) are applied to the leaves and never copy.

use crate::pointwise::Pointwise;
use kiln_ir::dtype::DType;
use kiln_ir::ir::DeviceArray;
use kiln_ir::ir::ReduceOp;
use kiln_ir::shape::{Layout, SliceSpec};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub type Fused = Arc<FNode>;

#[derive(Debug)]
pub struct FNode {
    pub dtype: DType,
    pub kind: Kind,
    /// The id of the IR node this op computes ([`NO_ORIGIN`] for ops the
    /// scheduler adds), so a launch can name the nodes it covers.
    pub origin: u64,
}

/// The origin of an op that no IR node asked for (a cast to a stored dtype).
pub const NO_ORIGIN: u64 = u64::MAX;

#[derive(Debug)]
pub enum Kind {
    /// A value in a buffer, seen through a layout over the expression's shape.
    Buf(DeviceArray),
    /// `start + step · index`, with `index` the layout's element index.
    Iota {
        layout: Layout,
        start: f64,
        step: f64,
    },
    /// A last-axis reduction not yet computed; the layout maps a coordinate
    /// to the flat row index of the reduction's result.
    Row {
        stage: Arc<RowStage>,
        layout: Layout,
    },
    /// A matmul not yet computed (so that a consumer can become its epilogue).
    Mm {
        mm: Arc<PendingMatmul>,
        layout: Layout,
    },
    Fill(f64),
    Pointwise(Pointwise<Fused>),
    /// `src[coords with coords[axis] = index]`; `src` keeps its own layout,
    /// so a view of a gather materializes it first.
    Gather {
        src: DeviceArray,
        axis: usize,
        index: Fused,
    },
}

/// A reduction over the last axis of `input` (shape `[rows.., len]`),
/// computed by the row kernel of whoever consumes it.
#[derive(Debug)]
pub struct RowStage {
    pub id: u64,
    /// The reduction's IR node.
    pub origin: u64,
    pub op: ReduceOp,
    pub input: Fused,
    /// The shape `input` is seen through: `[rows.., len]`.
    pub shape: Vec<usize>,
}

#[derive(Debug)]
pub struct PendingMatmul {
    pub id: u64,
    /// The matmul's IR node.
    pub origin: u64,
    pub a: DeviceArray,
    pub b: DeviceArray,
    pub shape: Vec<usize>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

pub fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

pub fn node(dtype: DType, kind: Kind) -> Fused {
    tagged(NO_ORIGIN, dtype, kind)
}

/// An op computing IR node `origin`.
pub fn tagged(origin: u64, dtype: DType, kind: Kind) -> Fused {
    Arc::new(FNode { dtype, kind, origin })
}

/// The IR node an op computes, if any (a row or matmul leaf computes its
/// reduction or matmul).
pub fn origin_of(e: &FNode) -> Option<u64> {
    let id = match &e.kind {
        Kind::Buf(_) => return None,
        Kind::Row { stage, .. } => stage.origin,
        Kind::Mm { mm, .. } => mm.origin,
        Kind::Iota { .. } | Kind::Fill(_) | Kind::Pointwise(_) | Kind::Gather { .. } => e.origin,
    };
    (id != NO_ORIGIN).then_some(id)
}

/// A view of a fused value, applied to each leaf's layout.
#[derive(Debug, Clone)]
pub enum View<'a> {
    Reshape(&'a [usize]),
    Permute(&'a [usize]),
    Slice(&'a [SliceSpec]),
    Expand(&'a [usize]),
}

impl View<'_> {
    pub fn apply(&self, l: &Layout) -> Option<Layout> {
        match self {
            View::Reshape(s) => l.reshape(s),
            View::Permute(p) => Some(l.permute(p)),
            View::Slice(s) => Some(l.slice(s)),
            View::Expand(s) => Some(l.expand(s)),
        }
    }
}

/// `e` seen through `view`; `None` when a leaf cannot take it without a
/// copy (the caller then materializes `e` first).
pub fn apply_view(e: &Fused, view: &View) -> Option<Fused> {
    map_leaves(e, &mut |leaf| {
        let with = |kind: Kind| Some(Some(tagged(leaf.origin, leaf.dtype, kind)));
        match &leaf.kind {
            Kind::Buf(a) => with(Kind::Buf(DeviceArray { layout: view.apply(&a.layout)?, ..a.clone() })),
            Kind::Iota { layout, start, step } => {
                with(Kind::Iota { layout: view.apply(layout)?, start: *start, step: *step })
            }
            Kind::Row { stage, layout } => with(Kind::Row { stage: stage.clone(), layout: view.apply(layout)? }),
            Kind::Mm { mm, layout } => with(Kind::Mm { mm: mm.clone(), layout: view.apply(layout)? }),
            Kind::Gather { .. } => None,
            Kind::Fill(_) | Kind::Pointwise(_) => Some(None),
        }
    })
}

/// Rebuild `e` with its leaves replaced: `f` returns `Some(Some(new))` to
/// replace a node, `Some(None)` to keep it (and descend), `None` to fail.
/// Shared subexpressions stay shared.
pub fn map_leaves(e: &Fused, f: &mut dyn FnMut(&Fused) -> Option<Option<Fused>>) -> Option<Fused> {
    let mut memo: HashMap<*const FNode, Fused> = HashMap::new();
    map_rec(e, f, &mut memo)
}

fn map_rec(
    e: &Fused,
    f: &mut dyn FnMut(&Fused) -> Option<Option<Fused>>,
    memo: &mut HashMap<*const FNode, Fused>,
) -> Option<Fused> {
    if let Some(done) = memo.get(&Arc::as_ptr(e)) {
        return Some(done.clone());
    }
    let out = match f(e)? {
        Some(replaced) => replaced,
        None => {
            let mut m = |x: &Fused| map_rec(x, f, memo);
            let kind = match &e.kind {
                Kind::Pointwise(p) => Kind::Pointwise(p.try_map(m)?),
                Kind::Gather { src, axis, index } => Kind::Gather { src: src.clone(), axis: *axis, index: m(index)? },
                Kind::Buf(_) | Kind::Iota { .. } | Kind::Row { .. } | Kind::Mm { .. } | Kind::Fill(_) => {
                    return Some(e.clone());
                }
            };
            tagged(e.origin, e.dtype, kind)
        }
    };
    memo.insert(Arc::as_ptr(e), out.clone());
    Some(out)
}

/// Every distinct node of `e`, inputs before users.
pub fn postorder(e: &Fused) -> Vec<Fused> {
    let mut seen = std::collections::HashSet::new();
    let mut order = Vec::new();
    let mut stack = vec![(e.clone(), false)];
    while let Some((n, expanded)) = stack.pop() {
        if expanded {
            order.push(n);
            continue;
        }
        if !seen.insert(Arc::as_ptr(&n)) {
            continue;
        }
        stack.push((n.clone(), true));
        for c in children(&n).into_iter().rev() {
            stack.push((c.clone(), false));
        }
    }
    order
}

pub fn children(e: &FNode) -> Vec<&Fused> {
    match &e.kind {
        Kind::Pointwise(p) => p.operands(),
        Kind::Gather { index, .. } => vec![index],
        Kind::Buf(_) | Kind::Iota { .. } | Kind::Row { .. } | Kind::Mm { .. } | Kind::Fill(_) => vec![],
    }
}

/// Ops a consumer would recompute if it inlined `e`.
pub fn cost(e: &Fused) -> usize {
    postorder(e).iter().filter(|n| !children(n).is_empty()).count()
}

/// The buffer and layout when `e` is nothing but a view of a buffer.
pub fn as_buffer(e: &Fused) -> Option<&DeviceArray> {
    match &e.kind {
        Kind::Buf(a) => Some(a),
        Kind::Iota { .. }
        | Kind::Row { .. }
        | Kind::Mm { .. }
        | Kind::Fill(_)
        | Kind::Pointwise(_)
        | Kind::Gather { .. } => None,
    }
}

/// Row stages `e` reads, each once, inner stages before the ones using them.
pub fn row_stages(e: &Fused) -> Vec<Arc<RowStage>> {
    let mut out: Vec<Arc<RowStage>> = Vec::new();
    fn visit(e: &Fused, out: &mut Vec<Arc<RowStage>>) {
        for n in postorder(e) {
            if let Kind::Row { stage, .. } = &n.kind
                && !out.iter().any(|s| s.id == stage.id)
            {
                visit(&stage.input, out);
                out.push(stage.clone());
            }
        }
    }
    visit(e, &mut out);
    out
}

/// Pending matmuls `e` reads directly (not through a row stage).
pub fn matmuls(e: &Fused) -> Vec<Arc<PendingMatmul>> {
    let mut out: Vec<Arc<PendingMatmul>> = Vec::new();
    for n in postorder(e) {
        if let Kind::Mm { mm, .. } = &n.kind
            && !out.iter().any(|m| m.id == mm.id)
        {
            out.push(mm.clone());
        }
    }
    out
}

/// Whether two layouts over the same shape address the same elements
/// (strides of size-1 dims do not matter).
pub fn same_mapping(a: &Layout, b: &Layout) -> bool {
    a.shape == b.shape
        && a.offset == b.offset
        && a.shape.iter().zip(a.strides.iter().zip(&b.strides)).all(|(&d, (x, y))| d == 1 || x == y)
}

/// Whether a row-stage reference with `layout` (over `kernel_shape`,
/// `[rows.., len]`) reads the result of the kernel's own row.
pub fn row_aligned(layout: &Layout, kernel_shape: &[usize]) -> bool {
    let Some((_, rows)) = kernel_shape.split_last() else { return false };
    let mut keep = rows.to_vec();
    keep.push(1);
    same_mapping(layout, &Layout::contiguous(&keep).expand(kernel_shape))
}
