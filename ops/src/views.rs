//! Views (reshape, permute, slice, expand, squeeze, flatten) copy nothing:
//! they change how kernels index a buffer. Plus concat and stack.

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::shape::{SliceSpec, normalize_axis};
use kiln_core::{KilnError, Prim, Result};

impl Tensor {
    /// Reshape; one dimension may be -1 (inferred).
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        let err = |detail: String| Err(KilnError::Shape { op: "reshape", detail });
        let known = shape.iter().filter(|&&d| d >= 0).try_fold(1usize, |n, &d| n.checked_mul(d as usize));
        let holes = shape.iter().filter(|&&d| d == -1).count();
        let Some(known) = known.filter(|_| holes <= 1 && shape.iter().all(|&d| d >= -1)) else {
            return err(format!("invalid target shape {shape:?} for {:?}", self.shape()));
        };
        let resolved: Vec<usize> = shape
            .iter()
            .map(|&d| if d == -1 { self.numel().checked_div(known).unwrap_or(0) } else { d as usize })
            .collect();
        if resolved.iter().product::<usize>() != self.numel() {
            return err(format!("cannot reshape {:?} ({} elements) to {shape:?}", self.shape(), self.numel()));
        }
        if resolved == self.shape() {
            return Ok(self.clone());
        }
        self.op(Prim::Reshape { shape: resolved }, &[])
    }

    /// Reorder the axes: output axis `i` is input axis `perm[i]` (negative
    /// values count from the end).
    pub fn permute(&self, perm: &[isize]) -> Result<Tensor> {
        let perm = perm.iter().map(|&a| normalize_axis("permute", a, self.rank())).collect::<Result<Vec<_>>>()?;
        self.op(Prim::Permute { perm }, &[])
    }

    /// Swap two axes.
    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        let (a, b) = (normalize_axis("transpose", a, self.rank())?, normalize_axis("transpose", b, self.rank())?);
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.op(Prim::Permute { perm }, &[])
    }

    /// Transpose of the last two axes.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(KilnError::Shape { op: "t", detail: format!("needs rank ≥ 2, shape is {:?}", self.shape()) });
        }
        self.transpose(-2, -1)
    }

    /// Python slicing `start:stop:step` along `axis` (negative values count
    /// from the end; `None` is the open end).
    pub fn slice(&self, axis: isize, start: Option<isize>, stop: Option<isize>, step: isize) -> Result<Tensor> {
        let axis = normalize_axis("slice", axis, self.rank())?;
        let mut specs: Vec<SliceSpec> = self.shape().iter().map(|&d| SliceSpec { start: 0, len: d, step: 1 }).collect();
        specs[axis] = SliceSpec::resolve("slice", self.shape()[axis], start, stop, step)?;
        self.op(Prim::Slice { specs }, &[])
    }

    /// `len` elements from `start` along `axis`.
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        let a = normalize_axis("narrow", axis, self.rank())?;
        if start.checked_add(len).is_none_or(|end| end > self.shape()[a]) {
            return Err(KilnError::Shape {
                op: "narrow",
                detail: format!("{len} elements from {start} are outside axis {a} of shape {:?}", self.shape()),
            });
        }
        composite("narrow", || self.slice(axis, Some(start as isize), Some((start + len) as isize), 1))
    }

    /// Broadcast to `shape` (NumPy rules) without copying.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        composite("broadcast_to", || self.op(Prim::Expand { shape: shape.to_vec() }, &[]))
    }

    /// Alias of `broadcast_to`.
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        composite("expand", || self.broadcast_to(shape))
    }

    /// Insert a size-1 axis at `axis` (which may be `rank`, or negative).
    pub fn unsqueeze(&self, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("unsqueeze", axis, self.rank() + 1)?;
        let mut shape: Vec<isize> = self.shape().iter().map(|&d| d as isize).collect();
        shape.insert(a, 1);
        composite("unsqueeze", || self.reshape(&shape))
    }

    /// Remove a size-1 axis.
    pub fn squeeze(&self, axis: isize) -> Result<Tensor> {
        let a = normalize_axis("squeeze", axis, self.rank())?;
        if self.shape()[a] != 1 {
            return Err(KilnError::Shape {
                op: "squeeze",
                detail: format!("axis {a} of shape {:?} has size {}, not 1", self.shape(), self.shape()[a]),
            });
        }
        let shape: Vec<isize> =
            self.shape().iter().enumerate().filter(|&(d, _)| d != a).map(|(_, &s)| s as isize).collect();
        composite("squeeze", || self.reshape(&shape))
    }

    /// Merge axes `start..=end` into one.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            return composite("flatten", || self.reshape(&[1]));
        }
        let (s, e) = (normalize_axis("flatten", start, self.rank())?, normalize_axis("flatten", end, self.rank())?);
        if s > e {
            return Err(KilnError::Shape { op: "flatten", detail: format!("start axis {s} is after end axis {e}") });
        }
        let dims = self.shape();
        let mut shape: Vec<isize> = dims[..s].iter().map(|&d| d as isize).collect();
        shape.push(dims[s..=e].iter().product::<usize>() as isize);
        shape.extend(dims[e + 1..].iter().map(|&d| d as isize));
        composite("flatten", || self.reshape(&shape))
    }

    /// Join tensors along an existing axis.
    pub fn concat(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(KilnError::Invalid { op: "concat", detail: "needs at least one tensor".into() });
        };
        let axis = normalize_axis("concat", axis, first.rank())?;
        if tensors.len() == 1 {
            return Ok((*first).clone());
        }
        Tensor::build(&first.device, Prim::Concat { axis }, tensors)
    }

    /// Join tensors along a new axis.
    pub fn stack(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(KilnError::Invalid { op: "stack", detail: "needs at least one tensor".into() });
        };
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(KilnError::Shape {
                    op: "stack",
                    detail: format!("shapes {:?} and {:?} differ", first.shape(), t.shape()),
                });
            }
        }
        composite("stack", || {
            let expanded = tensors.iter().map(|t| t.unsqueeze(axis)).collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Tensor> = expanded.iter().collect();
            Tensor::concat(&refs, axis)
        })
    }
}
