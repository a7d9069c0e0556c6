//! Initializers from explicit keys (f32). `fan_in`/`fan_out` are the
//! number of inputs/outputs each unit sees (for a conv: channels · kernel area).

use kiln::prelude::*;
use kiln::random;

/// f32 zeros of `shape`.
pub fn zeros(dev: &Device, shape: &[usize]) -> Result<Tensor> {
    Tensor::zeros(dev, shape, DType::F32)
}

/// f32 samples of N(0, `std`²) of `shape`.
pub fn normal(dev: &Device, key: Key, shape: &[usize], std: f64) -> Result<Tensor> {
    random::normal(dev, key, shape, DType::F32, 0.0, std)
}

/// f32 samples of U(−`bound`, `bound`) of `shape`.
pub fn uniform(dev: &Device, key: Key, shape: &[usize], bound: f64) -> Result<Tensor> {
    random::uniform(dev, key, shape, DType::F32, -bound, bound)
}

/// He et al. 2015 for ReLU: U(±√(6 / fan_in)).
pub fn kaiming_uniform(dev: &Device, key: Key, shape: &[usize], fan_in: usize) -> Result<Tensor> {
    uniform(dev, key, shape, (6.0 / fan_in.max(1) as f64).sqrt())
}

/// He et al. 2015 for ReLU: N(0, 2 / fan_in).
pub fn kaiming_normal(dev: &Device, key: Key, shape: &[usize], fan_in: usize) -> Result<Tensor> {
    normal(dev, key, shape, (2.0 / fan_in.max(1) as f64).sqrt())
}

/// Glorot & Bengio 2010: U(±√(6 / (fan_in + fan_out))).
pub fn xavier_uniform(dev: &Device, key: Key, shape: &[usize], fan_in: usize, fan_out: usize) -> Result<Tensor> {
    uniform(dev, key, shape, (6.0 / (fan_in + fan_out).max(1) as f64).sqrt())
}

/// Glorot & Bengio 2010: N(0, 2 / (fan_in + fan_out)).
pub fn xavier_normal(dev: &Device, key: Key, shape: &[usize], fan_in: usize, fan_out: usize) -> Result<Tensor> {
    normal(dev, key, shape, (2.0 / (fan_in + fan_out).max(1) as f64).sqrt())
}
