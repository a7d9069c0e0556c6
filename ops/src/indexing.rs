//! Gather, index_select and one-hot. Indices out of range read 0 (GPUs
//! cannot raise an error mid-kernel; see docs/SHARP_EDGES.md).

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::shape::normalize_axis;
use kiln_core::{DType, KilnError, Prim, Result};

impl Tensor {
    /// `out[p] = self[p with p[axis] = index[p]]`, as `torch.gather`.
    pub fn gather(&self, axis: isize, index: &Tensor) -> Result<Tensor> {
        let axis = normalize_axis("gather", axis, self.rank())?;
        self.op(Prim::Gather { axis }, &[index])
    }

    /// Pick the entries `index` (1-D) along `axis`, as `torch.index_select`.
    pub fn index_select(&self, axis: isize, index: &Tensor) -> Result<Tensor> {
        let a = normalize_axis("index_select", axis, self.rank())?;
        if index.rank() != 1 {
            return Err(KilnError::Shape {
                op: "index_select",
                detail: format!("index must be 1-D, got shape {:?}", index.shape()),
            });
        }
        let mut view: Vec<isize> = vec![1; self.rank()];
        view[a] = index.numel() as isize;
        let mut shape = self.shape().to_vec();
        shape[a] = index.numel();
        composite("index_select", || self.gather(axis, &index.reshape(&view)?.broadcast_to(&shape)?))
    }

    /// One-hot encoding of integer classes: a new last axis of `classes`.
    pub fn one_hot(&self, classes: usize, dtype: DType) -> Result<Tensor> {
        if !self.dtype().is_int() {
            return Err(KilnError::DType {
                op: "one_hot",
                detail: format!("classes must be i32 or u32, got {} {:?}", self.dtype(), self.shape()),
            });
        }
        composite("one_hot", || {
            let range = Tensor::arange(&self.device, 0.0, classes as f64, 1.0, self.dtype())?;
            self.unsqueeze(-1)?.eq(&range)?.cast(dtype)
        })
    }
}
