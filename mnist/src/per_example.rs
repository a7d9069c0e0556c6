//! Per-example gradients of a model's loss by `vmap(grad)`, and their
//! clipping, the core of DP-SGD: a batch's gradient to which no example
//! contributes more than a given norm. One batched graph, so one submit.

use kiln::prelude::*;
use kiln_nn::Sequential;
use kiln_nn::loss::cross_entropy;

/// Each example's gradient of the cross-entropy of `model` on it: the
/// model's tree, each leaf with a leading batch axis. `x`: `[batch, ..]`
/// images as the model takes them, `labels`: `[batch]` i32.
pub fn per_example_grads(model: &Sequential, x: &Tensor, labels: &Tensor) -> Result<Sequential> {
    let grad_of_one = |(m, x, y): &(Sequential, Tensor, Tensor)| {
        let (x, y) = (x.unsqueeze(0)?, y.unsqueeze(0)?);
        kiln::grad(|m: &Sequential| cross_entropy(&m.forward(&x)?, &y))(m)
    };
    // The model is shared by every example; images and labels are batched.
    let mut in_axes = vec![None; model.leaves().len()];
    in_axes.extend([Some(0), Some(0)]);
    kiln::vmap(grad_of_one, in_axes, vec![0])(&(model.clone(), x.clone(), labels.clone()))
}

/// Each example's gradient norm over all of the model's leaves: `[batch]`.
pub fn norms(grads: &Sequential) -> Result<Tensor> {
    let mut squares: Option<Tensor> = None;
    for g in grads.leaves() {
        let axes: Vec<isize> = (1..g.rank() as isize).collect();
        let s = g.mul(&g)?.sum(&axes, false)?;
        squares = Some(match squares {
            Some(total) => total.add(&s)?,
            None => s,
        });
    }
    squares.ok_or_else(|| KilnError::Invalid { op: "norms", detail: "a model without parameters".into() })?.sqrt()
}

/// The mean over the batch of the per-example gradients, each first scaled
/// down to norm at most `clip`; and the norms before clipping.
pub fn clipped_mean(grads: &Sequential, clip: f64) -> Result<(Sequential, Tensor)> {
    let norms = norms(grads)?;
    // min(1, clip / norm), and 1 for a zero gradient.
    let scale = norms.scalar_like(clip)?.div(&norms.add_scalar(1e-12)?)?.minimum(&norms.scalar_like(1.0)?)?;
    let mut means = Vec::new();
    for g in grads.leaves() {
        let mut kept = vec![g.shape()[0] as isize];
        kept.extend(vec![1; g.rank() - 1]);
        means.push(g.mul(&scale.reshape(&kept)?)?.mean(&[0], false)?);
    }
    Ok((grads.unflatten(means)?, norms))
}
