//! Dynamic loss scaling for training in f16 (or bf16): the loss is
//! multiplied by a scale before differentiating, so that small gradients
//! stay above f16's smallest values, and this transformation divides it
//! back out before the optimizer it wraps. A step whose gradients overflowed
//! (an inf or NaN anywhere) is skipped: its updates are zeros, the wrapped
//! optimizer's state stays as it was, the scale halves and the skip is
//! counted. After `growth_interval` finite steps in a row the scale doubles.
//! Scales are powers of two, so scaling and unscaling are exact.
//!
//! Everything is in the state (scale, counts) and decided inside the graph,
//! so a jit-captured step keeps scaling on replay with no host round trip.
//! Wrap the whole optimizer (or make this the first link of a chain):
//! [`super::training_step`] scales the loss by it. Disabled
//! ([`LossScaleConfig::disabled`], as PyTorch's `enabled=False`), it passes
//! gradients straight through with the same state tree, so one training
//! loop serves f32 and f16 runs and their checkpoints alike.

use super::{Transform, as_f32, device_of, select};
use kiln_autodiff::Tree;
use kiln_core::{DType, KilnError, Result};
use kiln_ops::Tensor;

/// The scale's schedule (the defaults are PyTorch's `GradScaler`'s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossScaleConfig {
    /// Off: no scaling, no overflow check; the state keeps its values.
    pub enabled: bool,
    /// The first scale, a power of two.
    pub initial: f64,
    /// Finite steps in a row after which the scale doubles.
    pub growth_interval: u32,
    /// The scale never halves below this power of two.
    pub min_scale: f64,
}

impl Default for LossScaleConfig {
    fn default() -> LossScaleConfig {
        LossScaleConfig { enabled: true, initial: 65536.0, growth_interval: 2000, min_scale: 1.0 }
    }
}

impl LossScaleConfig {
    /// The same state, no scaling: for runs that need none (f32, bf16).
    pub fn disabled() -> LossScaleConfig {
        LossScaleConfig { enabled: false, ..LossScaleConfig::default() }
    }

    fn check(&self) -> Result<()> {
        let power_of_two = |v: f64| v.is_finite() && v > 0.0 && v.log2().fract() == 0.0 && v <= f32::MAX as f64;
        let detail = if !power_of_two(self.initial) || !power_of_two(self.min_scale) {
            format!("initial {} and min_scale {} must be powers of two", self.initial, self.min_scale)
        } else if self.min_scale > self.initial {
            format!("min_scale {} exceeds initial {}", self.min_scale, self.initial)
        } else if self.growth_interval == 0 || self.growth_interval > i32::MAX as u32 {
            format!("growth_interval {} is not in 1..=2^31 - 1", self.growth_interval)
        } else {
            return Ok(());
        };
        Err(KilnError::Invalid { op: "dynamic_loss_scale", detail })
    }
}

/// Dynamic loss scaling around `inner` (see `dynamic_loss_scale`).
#[derive(Debug, Clone)]
pub struct DynamicLossScale<T> {
    inner: T,
    config: LossScaleConfig,
}

/// `inner` fed with gradients of the loss times a scale that adapts to
/// overflow (module docs).
pub fn dynamic_loss_scale<T>(inner: T, config: LossScaleConfig) -> DynamicLossScale<T> {
    DynamicLossScale { inner, config }
}

/// The state of `DynamicLossScale`.
#[derive(kiln_derive::Tree, Debug, Clone)]
#[tree(crate = "kiln_autodiff")]
pub struct LossScaleState<S> {
    /// The wrapped transformation's state, advanced on finite steps only.
    pub inner: S,
    /// What the loss is multiplied by (f32, rank 0).
    pub scale: Tensor,
    /// Finite steps since the scale last changed (i32, rank 0).
    pub good_steps: Tensor,
    /// Steps skipped because a gradient overflowed (i32, rank 0).
    pub skipped: Tensor,
}

/// A bool scalar: whether every element of every leaf is finite. In f32,
/// whatever the leaves' dtype, so it costs one small reduction per leaf.
pub fn all_finite<P: Tree>(tree: &P) -> Result<Tensor> {
    let leaves = tree.leaves();
    let dev = device_of("all_finite", tree)?;
    let largest = Tensor::scalar(&dev, f32::MAX as f64, DType::F32)?;
    let mut finite = Tensor::scalar(&dev, 1.0, DType::Bool)?;
    for leaf in &leaves {
        // NaN compares false, so it fails `|x| ≤ MAX` as ±inf does.
        let within = leaf.cast(DType::F32)?.abs()?.le(&largest)?.cast(DType::I32)?.min(&[], false)?;
        finite = finite.logical_and(&within.cast(DType::Bool)?)?;
    }
    Ok(finite)
}

impl<P: Tree, T: Transform<P>> Transform<P> for DynamicLossScale<T> {
    type State = LossScaleState<T::State>;

    fn init(&self, params: &P) -> Result<Self::State> {
        self.config.check()?;
        let dev = device_of("dynamic_loss_scale", params)?;
        Ok(LossScaleState {
            inner: self.inner.init(params)?,
            scale: Tensor::scalar(&dev, self.config.initial, DType::F32)?,
            good_steps: Tensor::scalar(&dev, 0.0, DType::I32)?,
            skipped: Tensor::scalar(&dev, 0.0, DType::I32)?,
        })
    }

    fn update(&self, updates: &P, state: &Self::State, params: Option<&P>) -> Result<(P, Self::State)> {
        const OP: &str = "dynamic_loss_scale";
        if !self.config.enabled {
            let (updates, inner) = self.inner.update(updates, &state.inner, params)?;
            let (scale, good_steps, skipped) = (state.scale.clone(), state.good_steps.clone(), state.skipped.clone());
            return Ok((updates, LossScaleState { inner, scale, good_steps, skipped }));
        }
        let finite = all_finite(updates)?;
        let unscaled = updates.map_leaves(|path, g| as_f32(OP, path, g)?.div(&state.scale)?.cast(g.dtype()))?;
        let (inner_updates, inner) = self.inner.update(&unscaled, &state.inner, params)?;
        let out = inner_updates.map_leaves(|_, u| Tensor::where_cond(&finite, u, &u.zeros_like()?))?;

        let one = state.good_steps.scalar_like(1.0)?;
        let good = Tensor::where_cond(&finite, &state.good_steps.add(&one)?, &one.zeros_like()?)?;
        let grow = good.eq(&good.scalar_like(self.config.growth_interval as f64)?)?;
        let floor = state.scale.scalar_like(self.config.min_scale)?;
        let halved = state.scale.div_scalar(2.0)?.maximum(&floor)?;
        let kept = Tensor::where_cond(&finite, &state.scale, &halved)?;
        // Growth stops at 2^64: a run of all-zero gradients would otherwise
        // double it to infinity, which no halving brings back.
        let ceiling = state.scale.scalar_like(2f64.powi(64))?.maximum(&state.scale)?;
        let state = LossScaleState {
            inner: select(&finite, &inner, &state.inner)?,
            scale: Tensor::where_cond(&grow, &state.scale.mul_scalar(2.0)?.minimum(&ceiling)?, &kept)?,
            good_steps: Tensor::where_cond(&grow, &good.zeros_like()?, &good)?,
            skipped: Tensor::where_cond(&finite, &state.skipped, &state.skipped.add(&one)?)?,
        };
        Ok((out, state))
    }

    fn loss_scale(&self, state: &Self::State) -> Option<Tensor> {
        self.config.enabled.then(|| state.scale.clone())
    }
}
