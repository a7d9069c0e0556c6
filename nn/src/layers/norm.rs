//! Layer normalization over the last axis.

use super::{bad_input, weight_dims};
use kiln::prelude::*;

/// Layer normalization over the last axis (Ba et al. 2016):
/// `(x − mean) / sqrt(var + eps) · weight + bias`.
#[derive(Tree, Clone, Debug)]
pub struct LayerNorm {
    /// Scale `[dim]`.
    pub weight: Tensor,
    /// Shift `[dim]`.
    pub bias: Tensor,
    /// Added to the variance.
    #[tree(skip)]
    pub eps: f64,
}

impl LayerNorm {
    /// Weight 1, bias 0, eps 1e-5 (PyTorch's defaults).
    pub fn new(dev: &Device, dim: usize) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: Tensor::ones(dev, &[dim], DType::F32)?,
            bias: Tensor::zeros(dev, &[dim], DType::F32)?,
            eps: 1e-5,
        })
    }

    /// `x` `[.., dim]` normalized over its last axis, same shape.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [d] = weight_dims("LayerNorm", &self.weight)?;
        if x.rank() == 0 || x.shape()[x.rank() - 1] != d {
            return bad_input("LayerNorm", format!("[.., {d}]"), x.shape());
        }
        let centered = x.sub(&x.mean(&[-1], true)?)?;
        let var = centered.mul(&centered)?.mean(&[-1], true)?;
        centered.mul(&var.add_scalar(self.eps)?.rsqrt()?)?.mul(&self.weight)?.add(&self.bias)
    }
}

/// Root-mean-square normalization over the last axis (Zhang & Sennrich
/// 2019): `x / sqrt(mean(x²) + eps) · weight`, no centering, no bias.
#[derive(Tree, Clone, Debug)]
pub struct RmsNorm {
    /// Scale `[dim]`.
    pub weight: Tensor,
    /// Added to the mean square.
    #[tree(skip)]
    pub eps: f64,
}

impl RmsNorm {
    /// Weight 1, eps 1e-6.
    pub fn new(dev: &Device, dim: usize) -> Result<RmsNorm> {
        Ok(RmsNorm { weight: Tensor::ones(dev, &[dim], DType::F32)?, eps: 1e-6 })
    }

    /// `x` `[.., dim]` normalized over its last axis, same shape.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [d] = weight_dims("RmsNorm", &self.weight)?;
        if x.rank() == 0 || x.shape()[x.rank() - 1] != d {
            return bad_input("RmsNorm", format!("[.., {d}]"), x.shape());
        }
        let mean_square = x.mul(x)?.mean(&[-1], true)?;
        x.mul(&mean_square.add_scalar(self.eps)?.rsqrt()?)?.mul(&self.weight)
    }
}
