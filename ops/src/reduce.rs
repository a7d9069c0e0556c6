//! Reductions over any set of axes, with keepdim.

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::ir::{ArgOp, ReduceOp};
use kiln_core::shape::normalize_axis;
use kiln_core::{DType, KilnError, Prim, Result};

impl Tensor {
    /// Sorted, unique, normalized axes; an empty list means all axes.
    fn reduce_axes(&self, op: &'static str, axes: &[isize]) -> Result<Vec<usize>> {
        if axes.is_empty() {
            return Ok((0..self.rank()).collect());
        }
        let mut out = axes.iter().map(|&a| normalize_axis(op, a, self.rank())).collect::<Result<Vec<_>>>()?;
        out.sort_unstable();
        if out.windows(2).any(|w| w[0] == w[1]) {
            return Err(KilnError::Shape { op, detail: format!("axes {axes:?} repeat an axis") });
        }
        Ok(out)
    }

    /// `op` over `axes` (all axes when empty). Bool sums count as i32.
    pub fn reduce(&self, op: ReduceOp, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        let axes = self.reduce_axes(op.name(), axes)?;
        let x = if self.dtype() == DType::Bool && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
            self.cast(DType::I32)?
        } else {
            self.clone()
        };
        x.op(Prim::Reduce { op, axes, keepdim }, &[])
    }

    /// The sum over `axes` (all axes when empty; negative ones count from the
    /// end); `keepdim` keeps them as size 1. Bools sum as i32.
    pub fn sum(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axes, keepdim)
    }
    /// The product over `axes` (all axes when empty); `keepdim` keeps them as
    /// size 1. Bools multiply as i32.
    pub fn prod(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Prod, axes, keepdim)
    }
    /// The maximum over `axes` (all axes when empty); `keepdim` keeps them as size 1.
    pub fn max(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axes, keepdim)
    }
    /// The minimum over `axes` (all axes when empty); `keepdim` keeps them as size 1.
    pub fn min(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, axes, keepdim)
    }

    /// Mean over `axes`; integer inputs average as f32, as NumPy.
    pub fn mean(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        let count: usize = self.reduce_axes("mean", axes)?.iter().map(|&a| self.shape()[a]).product();
        composite("mean", || {
            let x = if self.dtype().is_float() { self.clone() } else { self.cast(DType::F32)? };
            x.sum(axes, keepdim)?.div_scalar(count as f64)
        })
    }

    /// Index (i32) of the first maximum along `axis`, or of the flattened
    /// tensor when `axis` is `None`.
    pub fn argmax(&self, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(ArgOp::ArgMax, axis, keepdim)
    }

    /// Index (i32) of the first minimum along `axis`, or of the flattened
    /// tensor when `axis` is `None`.
    pub fn argmin(&self, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
        self.arg_reduce(ArgOp::ArgMin, axis, keepdim)
    }

    fn arg_reduce(&self, op: ArgOp, axis: Option<isize>, keepdim: bool) -> Result<Tensor> {
        match axis {
            None => composite(op.name(), || self.reshape(&[-1])?.op(Prim::ArgReduce { op, axis: 0, keepdim }, &[])),
            Some(a) => {
                let axis = normalize_axis(op.name(), a, self.rank())?;
                self.op(Prim::ArgReduce { op, axis, keepdim }, &[])
            }
        }
    }
}
