//! A whole training step as one pure function of trees, the shape
//! `kiln::jit` captures: the model, the optimizer's state and a batch go in,
//! the loss, the next model and the next state come out, so a replayed
//! step keeps training.

use super::{Transform, apply_updates};
use kiln_autodiff::{Tree, value_and_grad};
use kiln_core::Result;
use kiln_ops::Tensor;

/// What a training step takes: the parameters, the optimizer's state and a
/// batch.
pub type StepInput<P, S, D> = (P, S, D);

/// What a training step returns: the loss, the updated parameters and the
/// optimizer's next state.
pub type StepOutput<P, S> = (Tensor, P, S);

/// A training step's outcome.
pub type StepResult<P, S> = Result<StepOutput<P, S>>;

/// `(params, state, batch) → (loss, params, state)`: the loss and gradient
/// of `loss(params, batch)`, then `opt`'s update applied. Where `opt`
/// scales the loss ([`Transform::loss_scale`]), the gradients are of the
/// scaled loss and the loss returned is unscaled. Wrap it in `kiln::jit`
/// to capture it once and replay it each step:
///
/// ```
/// use kiln::prelude::*;
/// use kiln_nn::optim::{adam, training_step};
/// # fn main() -> kiln::Result<()> {
/// let dev = Device::cpu();
/// let mut w = Tensor::zeros(&dev, &[2], DType::F32)?;
/// let target = Tensor::from_slice(&dev, &[1.0f32, -1.0], &[2])?;
/// let opt = adam(0.1, 0.9, 0.999, 1e-8);
/// let mut state = opt.init(&w)?;
/// let step = kiln::jit(training_step(opt, |w: &Tensor, t: &Tensor| (w - t)?.square()?.sum(&[], false)));
/// for _ in 0..100 {
///     let loss;
///     (loss, w, state) = kiln::block_on(step.call(&(w, state, target.clone())))?;
///     # let _ = loss;
/// }
/// let w = kiln::block_on(w.to_vec::<f32>())?;
/// assert!((w[0] - 1.0).abs() < 0.1 && (w[1] + 1.0).abs() < 0.1, "{w:?}");
/// # Ok(()) }
/// ```
pub fn training_step<P, D, T>(
    opt: T,
    loss: impl Fn(&P, &D) -> Result<Tensor>,
) -> impl Fn(&StepInput<P, T::State, D>) -> StepResult<P, T::State>
where
    P: Tree,
    D: Tree,
    T: Transform<P>,
{
    move |(params, state, batch): &StepInput<P, T::State, D>| {
        // Scaled (and the value unscaled) where `opt` scales the loss:
        // powers of two, so both are exact unless they overflow.
        let scale = opt.loss_scale(state);
        let scaled = |p: &P| -> Result<Tensor> {
            let l = loss(p, batch)?;
            match &scale {
                Some(k) => l.mul(&k.cast(l.dtype())?),
                None => Ok(l),
            }
        };
        let (value, grads) = value_and_grad(scaled)(params)?;
        let value = match &scale {
            Some(k) => value.div(&k.cast(value.dtype())?)?,
            None => value,
        };
        let (updates, state) = opt.update(&grads, state, Some(params))?;
        Ok((value, apply_updates(params, &updates)?, state))
    }
}
