//! Softmax and log-softmax, composed from primitives, stable for large
//! inputs (the row maximum is subtracted first).

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::{KilnError, Result};

impl Tensor {
    fn float_only(&self, op: &'static str) -> Result<()> {
        if self.dtype().is_float() {
            return Ok(());
        }
        Err(KilnError::DType { op, detail: format!("needs a float tensor, got {} {:?}", self.dtype(), self.shape()) })
    }

    /// `exp(x) / sum(exp(x))` along `axis` (negative counts from the end),
    /// computed stably; floats only.
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        self.float_only("softmax")?;
        composite("softmax", || {
            let e = self.sub(&self.max(&[axis], true)?)?.exp()?;
            e.div(&e.sum(&[axis], true)?)
        })
    }

    /// `x − log(sum(exp(x)))` along `axis` (negative counts from the end),
    /// computed stably; floats only.
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        self.float_only("log_softmax")?;
        composite("log_softmax", || {
            let shifted = self.sub(&self.max(&[axis], true)?)?;
            shifted.sub(&shifted.exp()?.sum(&[axis], true)?.log()?)
        })
    }
}
