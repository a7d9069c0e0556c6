//! The usual optimizers as chains (optax's aliases). Learning rates are
//! numbers or [`Schedule`]s.

use super::{
    AddDecayedWeights, Chain, ScaleByAdam, ScaleByLearningRate, ScaleByRms, Schedule, Trace, chain, scale_by_adam,
    scale_by_learning_rate, scale_by_rms, trace,
};

/// Plain SGD: `-lr · g`.
pub fn sgd(lr: impl Schedule + 'static) -> Chain<(ScaleByLearningRate,)> {
    chain((scale_by_learning_rate(lr),))
}

/// SGD with momentum (heavy ball, `nesterov = false`) or Nesterov momentum.
pub fn sgd_momentum(lr: impl Schedule + 'static, momentum: f64, nesterov: bool) -> Chain<(Trace, ScaleByLearningRate)> {
    chain((trace(momentum, nesterov), scale_by_learning_rate(lr)))
}

/// SGD with Nesterov momentum.
pub fn nesterov(lr: impl Schedule + 'static, momentum: f64) -> Chain<(Trace, ScaleByLearningRate)> {
    sgd_momentum(lr, momentum, true)
}

/// Adam (Kingma & Ba), eps outside the square root.
pub fn adam(lr: impl Schedule + 'static, b1: f64, b2: f64, eps: f64) -> Chain<(ScaleByAdam, ScaleByLearningRate)> {
    chain((scale_by_adam(b1, b2, eps), scale_by_learning_rate(lr)))
}

/// AdamW (Loshchilov & Hutter): Adam plus `weight_decay · params`, both
/// scaled by the learning rate. `weight_decay` is a number (every leaf
/// decays) or `add_decayed_weights(wd).masked(matrices_only)` (no decay on
/// biases and norms).
pub fn adamw(
    lr: impl Schedule + 'static,
    b1: f64,
    b2: f64,
    eps: f64,
    weight_decay: impl Into<AddDecayedWeights>,
) -> Chain<(ScaleByAdam, AddDecayedWeights, ScaleByLearningRate)> {
    chain((scale_by_adam(b1, b2, eps), weight_decay.into(), scale_by_learning_rate(lr)))
}

/// RMSprop: `-lr · g / (sqrt(v) + eps)`.
pub fn rmsprop(lr: impl Schedule + 'static, decay: f64, eps: f64) -> Chain<(ScaleByRms, ScaleByLearningRate)> {
    chain((scale_by_rms(decay, eps), scale_by_learning_rate(lr)))
}
