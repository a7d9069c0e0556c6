//! The interface of optimizers, optax-style: `kiln-nn`'s `optim` builds
//! them (Adam, SGD, schedules, clipping, chains); it sits here so that
//! `kiln::prelude` carries it.

use crate::tree::Tree;
use kiln_core::Result;
use kiln_ops::Tensor;

/// A gradient transformation over parameter trees of type `P`.
pub trait Transform<P: Tree> {
    /// The state between steps: a tree of tensors.
    type State: Tree;

    /// The state before the first step.
    fn init(&self, params: &P) -> Result<Self::State>;

    /// Transform `updates` (gradients, or the previous link's output);
    /// `params` is needed by transformations that read the parameters
    /// (`add_decayed_weights`).
    fn update(&self, updates: &P, state: &Self::State, params: Option<&P>) -> Result<(P, Self::State)>;

    /// What the loss is multiplied by before differentiating, so that the
    /// gradients reaching `update` are scaled by it (`kiln_nn::optim::dynamic_loss_scale`);
    /// `None` for transformations that take plain gradients.
    /// `kiln_nn::optim::training_step` applies it.
    fn loss_scale(&self, _state: &Self::State) -> Option<Tensor> {
        None
    }
}
