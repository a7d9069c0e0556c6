//! A whole training step as one pure function of tensors, the shape
//! `kiln::jit` captures: data and state go in as leaves and come out as
//! leaves, so a replayed step keeps training.

use super::{Transform, apply_updates};
use kiln_autodiff::{Tree, value_and_grad};
use kiln_core::Result;
use kiln_ops::Tensor;

/// A step's function over flat inputs.
pub type StepFn = Box<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>>;

/// `(data.., params.., state..) → (loss, params.., state..)`: the loss and
/// gradient of `loss(params, data)` (`data` the first `data_inputs`
/// tensors), then `opt`'s update applied. `params` and `state` give the
/// trees' shapes. Where `opt` scales the loss ([`Transform::loss_scale`]),
/// the gradients are of the scaled loss and the loss returned is unscaled.
pub fn training_step<P, T>(
    params: &P,
    state: &T::State,
    opt: T,
    data_inputs: usize,
    loss: impl Fn(&P, &[Tensor]) -> Result<Tensor> + 'static,
) -> StepFn
where
    P: Tree + Clone + 'static,
    T: Transform<P> + 'static,
    T::State: Clone + 'static,
{
    let (template, state_template) = (params.clone(), state.clone());
    let n = template.leaves().len();
    let state_leaves = state_template.leaves().len();
    Box::new(move |inputs: &[Tensor]| {
        let want = data_inputs + n + state_leaves;
        if inputs.len() != want {
            return Err(kiln_core::KilnError::Invalid {
                op: "training_step",
                detail: format!(
                    "takes {data_inputs} data tensors, {n} parameter leaves and {state_leaves} optimizer state \
                     leaves ({want} in all), got {} tensors",
                    inputs.len()
                ),
            });
        }
        let (data, rest) = inputs.split_at(data_inputs);
        let p = template.unflatten(rest[..n].to_vec())?;
        let s = state_template.unflatten(rest[n..].to_vec())?;
        // Scaled (and the value unscaled) where `opt` scales the loss:
        // powers of two, so both are exact unless they overflow.
        let scale = opt.loss_scale(&s);
        let scaled = |p: &P| -> Result<Tensor> {
            let l = loss(p, data)?;
            match &scale {
                Some(k) => l.mul(&k.cast(l.dtype())?),
                None => Ok(l),
            }
        };
        let (value, grads) = value_and_grad(scaled)(&p)?;
        let value = match &scale {
            Some(k) => value.div(&k.cast(value.dtype())?)?,
            None => value,
        };
        let (updates, s) = opt.update(&grads, &s, Some(&p))?;
        Ok([vec![value], apply_updates(&p, &updates)?.leaves(), s.leaves()].concat())
    })
}
