//! Lowering: fused values → a kernel's structure ([`Sig`], the cache key)
//! plus what one launch binds (buffers, layouts, scalars). Common
//! subexpressions are merged here, so each is computed once per element.

use super::expr::{Fused, Kind, PendingMatmul, RowStage, origin_of, postorder};
use crate::pointwise::Pointwise;
use kiln_ir::dtype::DType;
use kiln_ir::ir::{DeviceBuffer, buffer_id};
use kiln_ir::shape::{Layout, numel};
use std::collections::HashMap;
use std::sync::Arc;

/// One SSA operation; operands are earlier indices in the same body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    Load(usize),
    /// `param(start) + param(step) · index(leaf)`.
    Iota {
        leaf: usize,
        start: usize,
        step: usize,
    },
    /// The result of row stage `k` for the current row.
    Row(usize),
    /// The matmul accumulator (epilogues only).
    Acc,
    Param(usize),
    Pointwise(Pointwise<usize>),
    /// Read leaf `src` at the current coordinates with `axis` replaced by
    /// the value of op `index`; param `len` is the source's axis length.
    Gather {
        src: usize,
        axis: usize,
        index: usize,
        len: usize,
    },
}

impl Op {
    /// The ops this one reads (earlier in the same body).
    pub fn operands(&self) -> Vec<usize> {
        match self {
            Op::Pointwise(p) => p.operands().into_iter().copied().collect(),
            Op::Gather { index, .. } => vec![*index],
            Op::Load(_) | Op::Iota { .. } | Op::Row(_) | Op::Acc | Op::Param(_) => vec![],
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Body {
    pub ops: Vec<(Op, DType)>,
    pub roots: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeafDesc {
    pub dtype: DType,
    /// Input buffer index; `None` for a computed index (iota).
    pub buffer: Option<usize>,
    pub access: Access,
}

/// How a leaf's element index follows from the kernel's flat index `f`.
/// The first three avoid unravelling `f` into coordinates, which costs a
/// division per dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// `offset + f`.
    Contiguous,
    /// `offset + f % period`: broadcast over leading dims (a bias).
    Mod,
    /// `offset + f / repeat`: broadcast over trailing dims (a row statistic;
    /// a scalar is one whose row is the whole tensor).
    Div,
    /// `offset + Σ coord[d] · stride[d]`.
    Strided,
}

impl Access {
    /// The access a layout over the kernel's shape allows, with its
    /// parameter (period or repeat).
    pub fn of(layout: &Layout) -> (Access, usize) {
        if layout.is_contiguous() {
            return (Access::Contiguous, 0);
        }
        let (shape, strides) = (&layout.shape, &layout.strides);
        let broadcast = |d: usize| shape[d] == 1 || strides[d] == 0;
        if (0..shape.len()).all(broadcast) {
            // One element read everywhere (a scalar such as an optimizer's
            // step count): a row statistic whose row is the whole tensor,
            // so it vectorizes and loads once (as coordinates it cost
            // Adam's update a division per dimension at every element).
            return (Access::Div, numel(shape).max(1));
        }
        for k in 1..shape.len() {
            let inner = Layout { shape: shape[k..].to_vec(), strides: strides[k..].to_vec(), offset: 0 };
            if (0..k).all(broadcast) && inner.is_contiguous() {
                return (Access::Mod, shape[k..].iter().product());
            }
            let outer = Layout { shape: shape[..k].to_vec(), strides: strides[..k].to_vec(), offset: 0 };
            if (k..shape.len()).all(broadcast) && outer.is_contiguous() {
                return (Access::Div, shape[k..].iter().product());
            }
        }
        (Access::Strided, 0)
    }

    /// Meta words the access needs for a kernel of `rank`.
    pub fn words(self, rank: usize) -> usize {
        match self {
            Access::Contiguous => 1,
            Access::Mod | Access::Div => 2,
            Access::Strided => 1 + rank,
        }
    }
}

/// The structure of a fused kernel: everything its WGSL depends on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Sig {
    pub rank: usize,
    pub leaves: Vec<LeafDesc>,
    pub params: Vec<DType>,
    /// Dtype of each input buffer, bound after the outputs.
    pub buffers: Vec<DType>,
    pub bodies: Vec<Body>,
}

impl Sig {
    /// Whether a leaf, param or op of the kernel has dtype `d`.
    pub fn has_dtype(&self, d: DType) -> bool {
        self.leaves.iter().any(|l| l.dtype == d)
            || self.params.contains(&d)
            || self.bodies.iter().any(|b| b.ops.iter().any(|(_, t)| *t == d))
    }
}

/// What one launch of a fused kernel binds.
#[derive(Debug, Clone, Default)]
pub struct Args {
    pub layouts: Vec<Layout>,
    pub params: Vec<f64>,
    pub buffers: Vec<Arc<dyn DeviceBuffer>>,
}

#[derive(Default)]
pub struct Lowerer {
    pub sig: Sig,
    pub args: Args,
    /// IR nodes the lowered bodies compute, for graph pictures.
    pub covers: Vec<u64>,
    stages: Vec<u64>,
    acc: Option<u64>,
    leaf_ids: HashMap<(usize, Option<*const ()>, Layout, DType), usize>,
}

impl Lowerer {
    /// A lowerer for a kernel over `rank` dims whose row stages (if any) are
    /// `stages` and whose matmul accumulator (if any) is `acc`.
    pub fn new(rank: usize, stages: &[Arc<RowStage>], acc: Option<&PendingMatmul>) -> Lowerer {
        Lowerer {
            sig: Sig { rank, ..Sig::default() },
            stages: stages.iter().map(|s| s.id).collect(),
            acc: acc.map(|m| m.id),
            ..Lowerer::default()
        }
    }

    /// Bind `buffer` as an input (once per buffer).
    pub fn buffer(&mut self, buffer: &Arc<dyn DeviceBuffer>, dtype: DType) -> usize {
        if let Some(i) = self.args.buffers.iter().position(|b| Arc::ptr_eq(b, buffer)) {
            return i;
        }
        self.args.buffers.push(buffer.clone());
        self.sig.buffers.push(dtype);
        self.args.buffers.len() - 1
    }

    fn leaf(
        &mut self,
        buffer: Option<(&Arc<dyn DeviceBuffer>, DType)>,
        layout: &Layout,
        dtype: DType,
        force_strided: bool,
    ) -> usize {
        let access = if force_strided { Access::Strided } else { Access::of(layout).0 };
        let key = (force_strided as usize, buffer.map(|(b, _)| buffer_id(b)), layout.clone(), dtype);
        if let Some(&k) = self.leaf_ids.get(&key) {
            return k;
        }
        let buffer = buffer.map(|(b, d)| self.buffer(b, d));
        self.sig.leaves.push(LeafDesc { dtype, buffer, access });
        self.args.layouts.push(layout.clone());
        self.leaf_ids.insert(key, self.sig.leaves.len() - 1);
        self.sig.leaves.len() - 1
    }

    fn param(&mut self, dtype: DType, value: f64) -> usize {
        self.sig.params.push(dtype);
        self.args.params.push(value);
        self.sig.params.len() - 1
    }

    /// Lower `roots` (all over this kernel's shape) into a new body.
    pub fn body(&mut self, roots: &[&Fused]) -> usize {
        let mut body = Body::default();
        let mut memo: HashMap<*const super::expr::FNode, usize> = HashMap::new();
        let mut cse: HashMap<(Op, DType), usize> = HashMap::new();
        for root in roots {
            for n in postorder(root) {
                if memo.contains_key(&Arc::as_ptr(&n)) {
                    continue;
                }
                let at = |x: &Fused| memo[&Arc::as_ptr(x)];
                let op = match &n.kind {
                    Kind::Buf(a) => Op::Load(self.leaf(Some((&a.buffer, a.dtype)), &a.layout, a.dtype, false)),
                    Kind::Iota { layout, start, step } => {
                        let leaf = self.leaf(None, layout, n.dtype, false);
                        Op::Iota { leaf, start: self.param(n.dtype, *start), step: self.param(n.dtype, *step) }
                    }
                    Kind::Row { stage, .. } => {
                        Op::Row(self.stages.iter().position(|&s| s == stage.id).expect("row stage of another kernel"))
                    }
                    Kind::Mm { mm, .. } => {
                        assert_eq!(self.acc, Some(mm.id), "matmul leaf outside its epilogue");
                        Op::Acc
                    }
                    Kind::Fill(v) => Op::Param(self.param(n.dtype, *v)),
                    Kind::Pointwise(p) => Op::Pointwise(p.map(at)),
                    Kind::Gather { src, axis, index } => {
                        let len = self.param(DType::U32, src.layout.shape[*axis] as f64);
                        let src = self.leaf(Some((&src.buffer, src.dtype)), &src.layout, src.dtype, true);
                        Op::Gather { src, axis: *axis, index: at(index), len }
                    }
                };
                // Params differ per use but share a slot only when equal ops
                // are merged; fills are cheap, so they are never merged.
                let key = (op.clone(), n.dtype);
                let id = match (&op, cse.get(&key)) {
                    (Op::Param(_) | Op::Iota { .. }, _) | (_, None) => {
                        body.ops.push((op, n.dtype));
                        cse.insert(key, body.ops.len() - 1);
                        body.ops.len() - 1
                    }
                    (_, Some(&i)) => i,
                };
                memo.insert(Arc::as_ptr(&n), id);
                if let Some(o) = origin_of(&n)
                    && !self.covers.contains(&o)
                {
                    self.covers.push(o);
                }
            }
            body.roots.push(memo[&Arc::as_ptr(root)]);
        }
        self.sig.bodies.push(body);
        self.sig.bodies.len() - 1
    }
}

/// Meta words a kernel over `sig` needs past its header and shape.
pub fn meta_words(sig: &Sig) -> usize {
    sig.leaves.iter().map(|l| l.access.words(sig.rank)).sum::<usize>() + sig.params.len()
}

/// Meta word of each leaf's layout and of the first param, for a kernel
/// whose shape sits at `shape_base`.
pub fn meta_bases(sig: &Sig, shape_base: usize) -> (Vec<usize>, usize) {
    let mut at = shape_base + sig.rank;
    let mut leaves = Vec::with_capacity(sig.leaves.len());
    for l in &sig.leaves {
        leaves.push(at);
        at += l.access.words(sig.rank);
    }
    (leaves, at)
}
