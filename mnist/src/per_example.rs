//! Per-example gradients of a model's loss by `vmap(grad)`, and their
//! clipping, the core of DP-SGD: a batch's gradient to which no example
//! contributes more than a given norm. One batched graph, so one submit.

use kiln::prelude::*;
use kiln_nn::loss::cross_entropy;
use kiln_nn::{Layer, Sequential};

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

/// What [`clipped_mean`] of [`per_example_grads`] gives, without the
/// per-example gradients ("ghost clipping"): for a dense layer, example
/// i's weight gradient is the outer product `a_i ⊗ δ_i` of its input and
/// its output's gradient, so its norm is `‖a_i‖·‖δ_i‖` and the clipped sum
/// is one matmul `aᵀ · (s ⊙ δ)`. Memory and work are those of one batched
/// gradient, not of `batch` gradients. `model`: `Linear` layers and
/// parameter-free activations (others are an error naming the layer).
pub fn ghost_clipped_mean(model: &Sequential, x: &Tensor, labels: &Tensor, clip: f64) -> Result<(Sequential, Tensor)> {
    let batch = x.shape().first().copied().unwrap_or(0);
    let mut outputs = Vec::new();
    for (k, layer) in model.layers.iter().enumerate() {
        match layer {
            Layer::Linear(l) => outputs.push(l.weight.shape()[1]),
            Layer::Relu | Layer::Gelu | Layer::Tanh | Layer::Sigmoid | Layer::Flatten => {}
            other => {
                // The variant's name, without its parameters.
                let debug = format!("{other:?}");
                let name = debug.split(['(', ' ', '{']).next().unwrap_or_default();
                return Err(KilnError::Invalid {
                    op: "ghost_clipped_mean",
                    detail: format!("layer {k} is {name}; only Linear layers and activations have ghost norms"),
                });
            }
        }
    }
    // δ: the gradient of the summed loss at each dense layer's output,
    // through a zero added there (each example's loss reads only its row).
    let taps: Vec<Tensor> =
        outputs.iter().map(|&n| Tensor::zeros(x.device(), &[batch, n], x.dtype())).collect::<Result<_>>()?;
    let (_, inputs) = dense_forward(model, x, None)?;
    let summed =
        |taps: &Vec<Tensor>| cross_entropy(&dense_forward(model, x, Some(taps))?.0, labels)?.mul_scalar(batch as f64);
    let deltas = kiln::grad(summed)(&taps)?;
    let dense = model.layers.iter().filter_map(|l| if let Layer::Linear(l) = l { Some(l) } else { None });
    let mut squares: Option<Tensor> = None;
    for ((l, a), d) in dense.clone().zip(&inputs).zip(&deltas) {
        let row_square = |t: &Tensor| t.mul(t)?.sum(&[1], false);
        let (a2, d2) = (row_square(a)?, row_square(d)?);
        let s = if l.bias.is_some() { a2.add_scalar(1.0)?.mul(&d2)? } else { a2.mul(&d2)? };
        squares = Some(match squares {
            Some(total) => total.add(&s)?,
            None => s,
        });
    }
    let norms = squares
        .ok_or_else(|| KilnError::Invalid { op: "ghost_clipped_mean", detail: "a model without Linear layers".into() })?
        .sqrt()?;
    let scale = norms.scalar_like(clip)?.div(&norms.add_scalar(1e-12)?)?.minimum(&norms.scalar_like(1.0)?)?;
    let mut means = Vec::new();
    for ((l, a), d) in dense.zip(&inputs).zip(&deltas) {
        let scaled = d.mul(&scale.unsqueeze(1)?)?.div_scalar(batch as f64)?;
        means.push(a.transpose(0, 1)?.matmul(&scaled)?);
        if l.bias.is_some() {
            means.push(scaled.sum(&[0], false)?);
        }
    }
    Ok((model.unflatten(means)?, norms))
}

/// The model's output, with `taps[k]` added to the k-th dense layer's
/// output; and each dense layer's input, in order.
fn dense_forward(model: &Sequential, x: &Tensor, taps: Option<&Vec<Tensor>>) -> Result<(Tensor, Vec<Tensor>)> {
    let mut h = x.clone();
    let mut inputs = Vec::new();
    for layer in &model.layers {
        let is_dense = matches!(layer, Layer::Linear(_));
        if is_dense && h.rank() != 2 {
            let detail =
                format!("dense layer {} takes {:?}; ghost norms need [batch, features]", inputs.len(), h.shape());
            return Err(KilnError::Shape { op: "ghost_clipped_mean", detail });
        }
        let input = h.clone();
        h = layer.forward(&h, None)?;
        if is_dense {
            if let Some(taps) = taps {
                h = h.add(&taps[inputs.len()])?;
            }
            inputs.push(input);
        }
    }
    Ok((h, inputs))
}
