//! Optimizers as chains of gradient transformations, optax-style.
//!
//! A [`Transform`] is pure: `init(params)` makes its state, `update(updates,
//! state, params)` returns transformed updates and the next state. State is
//! itself a parameter tree (so it can be checkpointed and passed through
//! `kiln::jit` as tensors), and every step count lives in it as an i32
//! scalar tensor: schedules and bias corrections read the count from the
//! state inside the graph, never from a host-side counter, so a captured
//! step keeps counting on replay.
//!
//! All arithmetic is f32; moments are stored in f32 whatever the parameter
//! dtype, and updates come back in each gradient's dtype.
//!
//! ```
//! # use kiln_nn::optim::*;
//! # use kiln_ops::{Tensor, DType, Device};
//! # use kiln_autodiff::Tree;
//! # fn main() -> kiln_core::Result<()> {
//! let dev = Device::cpu();
//! let params = vec![Tensor::ones(&dev, &[3], DType::F32)?];
//! let opt = chain((clip_by_global_norm(1.0), adamw(1e-3, 0.9, 0.999, 1e-8, 1e-4)));
//! let state = opt.init(&params)?;
//! let grads = vec![Tensor::full(&dev, &[3], 0.5, DType::F32)?];
//! let (updates, state) = opt.update(&grads, &state, Some(&params))?;
//! let params = apply_updates(&params, &updates)?;
//! # let _ = (params, state); Ok(()) }
//! ```

mod accumulate;
mod aliases;
mod basic;
mod chain;
mod ema;
mod loss_scale;
mod moments;
mod schedule;
mod step;

pub use accumulate::{MultiSteps, MultiStepsState, multi_steps};
pub use aliases::{adam, adamw, nesterov, rmsprop, sgd, sgd_momentum};
pub use basic::{
    AddDecayedWeights, ClipByGlobalNorm, CountState, DecayMask, Scale, ScaleByLearningRate, add_decayed_weights,
    clip_by_global_norm, global_norm, matrices_only, scale, scale_by_learning_rate,
};
pub use chain::{Chain, chain};
pub use ema::ParamEma;
pub use kiln_autodiff::Transform;
pub use loss_scale::{DynamicLossScale, LossScaleConfig, LossScaleState, all_finite, dynamic_loss_scale};
pub use moments::{
    AdamState, RmsState, ScaleByAdam, ScaleByRms, Trace, TraceState, scale_by_adam, scale_by_rms, trace,
};
pub use schedule::{
    Constant, CosineDecay, Join, Linear, Schedule, constant, cosine_decay, join, linear, warmup_cosine_decay,
};
pub use step::{StepInput, StepOutput, training_step};

use kiln_autodiff::Tree;
use kiln_core::{DType, KilnError, Result};
use kiln_ops::Tensor;

/// `cond ? a : b` leaf by leaf over two trees of the same shape.
pub(crate) fn select<P: Tree>(cond: &Tensor, a: &P, b: &P) -> Result<P> {
    let mut a = a.leaves().into_iter();
    b.map_leaves(|_, b| Tensor::where_cond(cond, &a.next().expect("trees of one shape"), b))
}

/// `params + updates`, leaf by leaf (each update cast to its parameter's
/// dtype).
pub fn apply_updates<P: Tree>(params: &P, updates: &P) -> Result<P> {
    let u = leaves_like("apply_updates", "updates", updates, &params.named_leaves())?;
    let mut u = u.into_iter();
    params.map_leaves(|_, p| p.add(&u.next().expect("one update per leaf").cast(p.dtype())?))
}

/// The leaves of `tree`, checked to have the paths and shapes of `like`
/// (the named leaves of the tree being updated).
pub(crate) fn leaves_like<P: Tree>(
    op: &'static str,
    what: &str,
    tree: &P,
    like: &[(String, Tensor)],
) -> Result<Vec<Tensor>> {
    let leaves = tree.named_leaves();
    if leaves.len() != like.len() {
        return Err(KilnError::Invalid {
            op,
            detail: format!("{what} has {} leaves, the updates have {}", leaves.len(), like.len()),
        });
    }
    leaves
        .into_iter()
        .zip(like)
        .map(|((path, t), (want_path, want))| {
            if path != *want_path || t.shape() != want.shape() {
                return Err(KilnError::Shape {
                    op,
                    detail: format!(
                        "{what} leaf `{path}` {:?} does not match `{want_path}` {:?}",
                        t.shape(),
                        want.shape()
                    ),
                });
            }
            Ok(t)
        })
        .collect()
}

fn check_float(op: &'static str, path: &str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        return Ok(());
    }
    Err(KilnError::DType {
        op,
        detail: format!("leaf `{path}` is {}: optimizers need float (f32, f16, bf16) leaves", t.dtype()),
    })
}

/// A float leaf as f32 (the dtype every transformation computes in).
pub(crate) fn as_f32(op: &'static str, path: &str, t: &Tensor) -> Result<Tensor> {
    check_float(op, path, t)?;
    t.cast(DType::F32)
}

/// A zero f32 tree shaped like `params` (moments, traces).
pub(crate) fn zeros_f32<P: Tree>(op: &'static str, params: &P) -> Result<P> {
    params.map_leaves(|path, p| {
        check_float(op, path, p)?;
        Tensor::zeros(p.device(), p.shape(), DType::F32)
    })
}

/// The first leaf's device: where a count lives. An empty tree has none.
pub(crate) fn device_of<P: Tree>(op: &'static str, params: &P) -> Result<kiln_core::Device> {
    params
        .leaves()
        .first()
        .map(|t| t.device().clone())
        .ok_or_else(|| KilnError::Invalid { op, detail: "the parameter tree has no leaves".into() })
}

/// A fresh step count: i32 zero on the parameters' device.
pub(crate) fn zero_count<P: Tree>(op: &'static str, params: &P) -> Result<Tensor> {
    Tensor::scalar(&device_of(op, params)?, 0.0, DType::I32)
}

/// `count + 1` (wraps after 2^31 − 1 steps, as i32 does).
pub(crate) fn next_count(count: &Tensor) -> Result<Tensor> {
    count.add(&count.scalar_like(1.0)?)
}
