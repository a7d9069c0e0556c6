//! Matrix products with NumPy's `matmul` semantics.

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::error::{dtype_mismatch, matmul_misaligned};
use kiln_core::shape::broadcast_shapes;
use kiln_core::{KilnError, Prim, Result};

impl Tensor {
    /// `self @ other`: 2-D, batched with broadcast batch dims, and 1-D
    /// operands promoted to a matrix and squeezed back, as NumPy.
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        if self.rank() == 0 || other.rank() == 0 {
            return Err(KilnError::Shape {
                op: "matmul",
                detail: format!("needs rank ≥ 1 operands, got {:?} and {:?}", self.shape(), other.shape()),
            });
        }
        composite("matmul", || self.matmul_of_ranks(other))
    }

    /// `matmul` once both operands have rank ≥ 1.
    fn matmul_of_ranks(&self, other: &Tensor) -> Result<Tensor> {
        let a = if self.rank() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if other.rank() == 1 { other.unsqueeze(1)? } else { other.clone() };
        let (ra, rb) = (a.rank(), b.rank());
        let (k_a, k_b) = (a.shape()[ra - 1], b.shape()[rb - 2]);
        if k_a != k_b {
            return Err(matmul_misaligned("matmul", self.shape(), other.shape(), k_a, k_b));
        }
        if self.dtype() != other.dtype() {
            return Err(dtype_mismatch("matmul", (self.dtype(), self.shape()), (other.dtype(), other.shape())));
        }
        let batch = broadcast_shapes("matmul", &a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
        let with = |t: &Tensor, r: usize| -> Result<Tensor> {
            let mut shape = batch.clone();
            shape.extend_from_slice(&t.shape()[r - 2..]);
            t.broadcast_to(&shape)
        };
        let out = with(&a, ra)?.op(Prim::Matmul, &[&with(&b, rb)?])?;
        let out = if self.rank() == 1 { out.squeeze(-2)? } else { out };
        if other.rank() == 1 { out.squeeze(-1) } else { Ok(out) }
    }
}
