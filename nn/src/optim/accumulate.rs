//! Gradient accumulation over micro-batches (optax's `MultiSteps`): the
//! inner transformation sees the mean of every `k` gradients, once per `k`
//! calls, and the updates in between are zeros. The micro-step counter is
//! state, so a jit-captured step accumulates on replay.

use super::{Transform, as_f32, device_of, leaves_like, select, zeros_f32};
use kiln_autodiff::Tree;
use kiln_core::{DType, KilnError, Result};
use kiln_ops::Tensor;

/// Gradient accumulation around `inner` (see `multi_steps`).
#[derive(Debug, Clone)]
pub struct MultiSteps<T> {
    inner: T,
    every: usize,
}

/// Apply `inner` to the mean gradient of every `every` micro-batches.
pub fn multi_steps<T>(inner: T, every: usize) -> MultiSteps<T> {
    MultiSteps { inner, every }
}

/// The state of `MultiSteps`.
#[derive(kiln_derive::Tree, Debug, Clone)]
#[tree(crate = "kiln_autodiff")]
pub struct MultiStepsState<P, S> {
    /// The inner transformation's state, advanced once per `every` calls.
    pub inner: S,
    /// The f32 sum of the gradients since the last inner update.
    pub sum: P,
    /// Micro-batches summed so far (i32, rank 0, `0..every`).
    pub micro: Tensor,
}

impl<P: Tree, T: Transform<P>> Transform<P> for MultiSteps<T> {
    type State = MultiStepsState<P, T::State>;

    fn init(&self, params: &P) -> Result<Self::State> {
        const OP: &str = "multi_steps";
        if self.every == 0 {
            return Err(KilnError::Invalid { op: OP, detail: "accumulates over 0 micro-batches".into() });
        }
        let micro = Tensor::scalar(&device_of(OP, params)?, 0.0, DType::I32)?;
        Ok(MultiStepsState { inner: self.inner.init(params)?, sum: zeros_f32(OP, params)?, micro })
    }

    fn update(&self, updates: &P, state: &Self::State, params: Option<&P>) -> Result<(P, Self::State)> {
        const OP: &str = "multi_steps";
        let mut sum = leaves_like(OP, "the accumulated sum", &state.sum, &updates.named_leaves())?.into_iter();
        let sum = updates.map_leaves(|path, g| sum.next().expect("one sum per leaf").add(&as_f32(OP, path, g)?))?;
        let micro = state.micro.add(&state.micro.scalar_like(1.0)?)?;
        let last = micro.eq(&micro.scalar_like(self.every as f64)?)?;
        let mean = sum.map_leaves(|_, s| s.div_scalar(self.every as f64))?;
        let mut dtypes = updates.leaves().into_iter().map(|u| u.dtype());
        let mean = mean.map_leaves(|_, m| m.cast(dtypes.next().expect("one dtype per leaf")))?;
        let (inner_updates, inner) = self.inner.update(&mean, &state.inner, params)?;
        let out = inner_updates.map_leaves(|_, u| Tensor::where_cond(&last, u, &u.zeros_like()?))?;
        let state = MultiStepsState {
            inner: select(&last, &inner, &state.inner)?,
            sum: sum.map_leaves(|_, s| Tensor::where_cond(&last, &s.zeros_like()?, s))?,
            micro: Tensor::where_cond(&last, &micro.zeros_like()?, &micro)?,
        };
        Ok((out, state))
    }

    fn loss_scale(&self, state: &Self::State) -> Option<Tensor> {
        self.inner.loss_scale(&state.inner)
    }
}
