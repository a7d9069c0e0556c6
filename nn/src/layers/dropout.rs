//! Dropout: zero each element with probability `rate` and scale the rest
//! by 1 / (1 − rate) (inverted dropout), with an explicit key.

use kiln::prelude::*;
use kiln::random;

/// Inverted dropout (no parameters).
#[derive(Tree, Clone, Debug)]
pub struct Dropout {
    /// Probability of zeroing an element, in [0, 1).
    #[tree(skip)]
    pub rate: f64,
}

impl Dropout {
    /// Dropout at `rate`; errors unless it is in [0, 1).
    pub fn new(rate: f64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&rate) {
            return Err(KilnError::Invalid { op: "Dropout", detail: format!("rate {rate} is not in [0, 1)") });
        }
        Ok(Dropout { rate })
    }

    /// Training mode (with a key) drops; evaluation (`None`) is the identity.
    pub fn forward(&self, x: &Tensor, key: Option<Key>) -> Result<Tensor> {
        let Some(key) = key.filter(|_| self.rate > 0.0) else {
            return Ok(x.clone());
        };
        if !x.dtype().is_float() {
            return Err(KilnError::DType {
                op: "Dropout",
                detail: format!(
                    "input must be a float dtype (f32, f16, bf16), got {} of shape {:?}",
                    x.dtype(),
                    x.shape()
                ),
            });
        }
        let keep = random::bernoulli(x.device(), key, 1.0 - self.rate, x.shape())?;
        Tensor::where_cond(&keep, &x.mul_scalar(1.0 / (1.0 - self.rate))?, &x.zeros_like()?)
    }
}
