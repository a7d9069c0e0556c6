//! Composite ops the backward rules need (autodiff): undoing a broadcast, a
//! slice or a gather. Each is built from differentiable primitives, so a
//! backward graph can itself be differentiated (grad of grad).

use crate::Tensor;
use kiln_core::shape::SliceSpec;
use kiln_core::{DType, Device, KilnError, Node, Prim, Result};

/// The largest one-hot matrix (entries) a scatter-add builds to run as a
/// matmul; past it (large vocabularies) it stays a fused reduction.
const MATMUL_SCATTER_MAX: usize = 1 << 24;

impl Tensor {
    /// Wrap a graph node (for transforms that rewrite graphs, like grad).
    pub fn from_node(node: Node, device: Device) -> Tensor {
        Tensor { node, device }
    }

    /// Sum a broadcast result back to `shape`: the reverse of `broadcast_to`.
    pub fn sum_to_shape(&self, shape: &[usize]) -> Result<Tensor> {
        let lead = self.rank().checked_sub(shape.len()).ok_or_else(|| KilnError::Shape {
            op: "sum_to_shape",
            detail: format!("cannot sum {:?} to the larger rank of {shape:?}", self.shape()),
        })?;
        let mut axes: Vec<isize> = (0..lead as isize).collect();
        axes.extend(
            (0..shape.len()).filter(|&d| shape[d] == 1 && self.shape()[d + lead] != 1).map(|d| (d + lead) as isize),
        );
        let summed = if axes.is_empty() { self.clone() } else { self.sum(&axes, true)? };
        let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
        summed.reshape(&dims)
    }

    /// An error naming `op` unless `shape` has this tensor's rank.
    fn expect_rank_of(&self, op: &'static str, shape: &[usize]) -> Result<()> {
        if shape.len() != self.rank() {
            return Err(KilnError::Shape {
                op,
                detail: format!("a tensor of {:?} into the shape {shape:?} of another rank", self.shape()),
            });
        }
        Ok(())
    }

    /// Broadcast the result of a reduction over `axes` back to `shape`.
    pub fn unreduce(&self, axes: &[usize], keepdim: bool, shape: &[usize]) -> Result<Tensor> {
        let kept: Vec<isize> =
            shape.iter().enumerate().map(|(d, &s)| if axes.contains(&d) { 1 } else { s as isize }).collect();
        let x = if keepdim { self.clone() } else { self.reshape(&kept)? };
        x.broadcast_to(shape)
    }

    /// Place this tensor (a slice's cotangent) into zeros of `shape` where
    /// `specs` took it from: one gather per sliced axis, whose out-of-range
    /// indices read 0 off the slice.
    pub fn unslice(&self, specs: &[SliceSpec], shape: &[usize]) -> Result<Tensor> {
        self.expect_rank_of("unslice", shape)?;
        if specs.len() != shape.len() || specs.iter().any(|s| s.step == 0) {
            return Err(KilnError::Shape {
                op: "unslice",
                detail: format!("needs one slice of nonzero step per axis of {shape:?}, got {specs:?}"),
            });
        }
        let mut out = self.clone();
        for (d, (spec, &n)) in specs.iter().zip(shape).enumerate() {
            if spec.start == 0 && spec.len == n && spec.step == 1 {
                continue;
            }
            let mut view = vec![1isize; out.rank()];
            view[d] = n as isize;
            let mut along = out.shape().to_vec();
            along[d] = n;
            let index = self.unslice_index(spec, n)?.reshape(&view)?.broadcast_to(&along)?;
            out = out.gather(d as isize, &index)?;
        }
        Ok(out)
    }

    /// For each of the `n` positions along a sliced axis, the element of
    /// the slice `spec` took from it (i32), or an index out of the slice's
    /// range where it took none. A unit step's is an iota shifted by the
    /// start, which the gather's kernel computes instead of loading: CPU
    /// adapters pay more for a load than for the arithmetic (the conv
    /// backward's col2im sums three such gathers per element). Other steps
    /// read a table.
    fn unslice_index(&self, spec: &SliceSpec, n: usize) -> Result<Tensor> {
        let start = spec.start as f64;
        if spec.step == 1 {
            return Tensor::arange(&self.device, -start, n as f64 - start, 1.0, DType::I32);
        }
        let index: Vec<f64> = (0..n as isize)
            .map(|i| {
                let rel = i - spec.start as isize;
                let j = rel / spec.step;
                let hit = rel % spec.step == 0 && j >= 0 && (j as usize) < spec.len;
                if hit { j as f64 } else { spec.len as f64 }
            })
            .collect();
        Tensor::from_f64(&self.device, &index, &[n], DType::I32)
    }

    /// The reverse of `src.gather(axis, index)` for a `src` of `shape`: each
    /// value of this tensor is added to the entry of `shape` it was read
    /// from. Deterministic (a compare and a fixed-order sum, no atomics);
    /// it costs `index.numel() · shape[axis]` elements of work.
    pub fn scatter_add(&self, axis: usize, index: &Tensor, shape: &[usize]) -> Result<Tensor> {
        self.expect_rank_of("scatter_add", shape)?;
        if axis >= shape.len() || index.shape() != self.shape() {
            return Err(KilnError::Shape {
                op: "scatter_add",
                detail: format!(
                    "needs an axis of {shape:?} and an index shaped as the values {:?}, got axis {axis} and index {:?}",
                    self.shape(),
                    index.shape()
                ),
            });
        }
        let n = shape[axis];
        if let Some(rows) = Self::selected_rows(axis, index).filter(|r| r.numel() * n <= MATMUL_SCATTER_MAX) {
            return self.scatter_rows(axis, &rows, n)?.pad_to(shape);
        }
        let mut view = vec![1isize; self.rank() + 1];
        view[axis + 1] = n as isize;
        let classes = Tensor::arange(&self.device, 0.0, n as f64, 1.0, index.dtype())?.reshape(&view)?;
        let hit = index.unsqueeze(axis as isize + 1)?.eq(&classes)?;
        let zero = self.scalar_like(0.0)?;
        let spread = Tensor::where_cond(&hit, &self.unsqueeze(axis as isize + 1)?, &zero)?;
        spread.sum(&[axis as isize], false)?.pad_to(shape)
    }

    /// The 1-D index of an `index_select` along `axis`: `index` when it is
    /// that vector broadcast over the other axes.
    fn selected_rows(axis: usize, index: &Tensor) -> Option<Tensor> {
        let node = index.node();
        let Prim::Expand { .. } = node.prim() else { return None };
        let source = node.inputs().pop()?;
        let along_axis_only = source.shape().iter().enumerate().all(|(d, &len)| d == axis || len == 1);
        along_axis_only.then(|| Tensor::from_node(source, index.device().clone()).reshape(&[-1])).transpose().ok()?
    }

    /// `scatter_add` of an `index_select`'s gradient: `one_hot(rows)ᵀ @ g`
    /// with `axis` moved first, one matmul where the general form is a
    /// strided reduction per output element (the same sums of products).
    fn scatter_rows(&self, axis: usize, rows: &Tensor, n: usize) -> Result<Tensor> {
        let mut front: Vec<isize> = vec![axis as isize];
        front.extend((0..self.rank() as isize).filter(|&d| d != axis as isize));
        let moved = self.permute(&front)?;
        let rest: Vec<isize> = moved.shape()[1..].iter().map(|&d| d as isize).collect();
        let flat = moved.reshape(&[rows.numel() as isize, -1])?;
        let summed = rows.one_hot(n, self.dtype())?.t()?.matmul(&flat)?;
        let mut back: Vec<isize> = (1..self.rank() as isize).collect();
        back.insert(axis, 0);
        summed.reshape(&[&[n as isize][..], &rest].concat())?.permute(&back)
    }

    /// Pad with zeros at the end of each axis up to `shape`.
    pub fn pad_to(&self, shape: &[usize]) -> Result<Tensor> {
        self.expect_rank_of("pad_to", shape)?;
        let mut out = self.clone();
        for (d, &n) in shape.iter().enumerate() {
            let have = out.shape()[d];
            if have < n {
                let mut zshape = out.shape().to_vec();
                zshape[d] = n - have;
                let zeros = Tensor::zeros(&self.device, &zshape, self.dtype())?;
                out = Tensor::concat(&[&out, &zeros], d as isize)?;
            }
        }
        Ok(out)
    }
}
