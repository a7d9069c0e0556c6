//! Learning-rate schedules, evaluated inside the graph from a step count
//! tensor (i32, rank 0), so a jit-captured step reads the current count on
//! every replay. The count is the number of updates already applied.

use kiln_core::{DType, Result};
use kiln_ops::Tensor;
use std::f64::consts::PI;
use std::sync::Arc;

/// A value that depends on the step count.
pub trait Schedule: Send + Sync {
    /// The value at step `count` (an i32 scalar tensor) as an f32 scalar.
    fn at(&self, count: &Tensor) -> Result<Tensor>;
}

/// The count as f32 (exact up to 2^24 steps).
fn steps(count: &Tensor) -> Result<Tensor> {
    count.cast(DType::F32)
}

fn f32_scalar(count: &Tensor, v: f64) -> Result<Tensor> {
    Tensor::scalar(count.device(), v, DType::F32)
}

/// The same value at every step.
#[derive(Debug, Clone, Copy)]
pub struct Constant(pub f64);

/// `value` at every step.
pub fn constant(value: f64) -> Constant {
    Constant(value)
}

impl Schedule for Constant {
    fn at(&self, count: &Tensor) -> Result<Tensor> {
        f32_scalar(count, self.0)
    }
}

/// A plain number is a constant schedule.
impl Schedule for f64 {
    fn at(&self, count: &Tensor) -> Result<Tensor> {
        Constant(*self).at(count)
    }
}

/// From `init` to `end` linearly over `steps` steps, then `end` (a linear
/// warmup is `linear(0.0, peak, warmup_steps)`). With `steps == 0` it is
/// `end` from the start.
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    /// The value at step 0.
    pub init: f64,
    /// The value from step `steps` on.
    pub end: f64,
    /// Length of the ramp, in steps.
    pub steps: u64,
}

/// From `init` to `end` over `steps` steps, then `end`.
pub fn linear(init: f64, end: f64, steps: u64) -> Linear {
    Linear { init, end, steps }
}

impl Schedule for Linear {
    fn at(&self, count: &Tensor) -> Result<Tensor> {
        if self.steps == 0 {
            return f32_scalar(count, self.end);
        }
        let frac = steps(count)?.div_scalar(self.steps as f64)?.minimum(&f32_scalar(count, 1.0)?)?;
        frac.mul_scalar(self.end - self.init)?.add_scalar(self.init)
    }
}

/// `init · ((1 − alpha) · ½(1 + cos(π · min(t, steps) / steps)) + alpha)`:
/// from `init` down to `alpha · init` over `steps` steps (as optax's
/// `cosine_decay_schedule`). `steps == 0` acts as 1.
#[derive(Debug, Clone, Copy)]
pub struct CosineDecay {
    /// The value at step 0.
    pub init: f64,
    /// Length of the decay, in steps.
    pub steps: u64,
    /// The final value as a fraction of `init`.
    pub alpha: f64,
}

/// Cosine decay from `init` to `alpha · init` over `steps` steps.
pub fn cosine_decay(init: f64, steps: u64, alpha: f64) -> CosineDecay {
    CosineDecay { init, steps, alpha }
}

impl Schedule for CosineDecay {
    fn at(&self, count: &Tensor) -> Result<Tensor> {
        let n = self.steps.max(1) as f64;
        let t = steps(count)?.minimum(&f32_scalar(count, n)?)?;
        let cosine = t.mul_scalar(PI / n)?.cos()?.add_scalar(1.0)?.mul_scalar(0.5)?;
        cosine.mul_scalar(self.init * (1.0 - self.alpha))?.add_scalar(self.init * self.alpha)
    }
}

/// `schedules[i]` from `boundaries[i - 1]` to `boundaries[i]`, each started
/// at its own step 0 (as optax's `join_schedules`).
#[derive(Clone)]
pub struct Join {
    schedules: Vec<Arc<dyn Schedule>>,
    boundaries: Vec<u64>,
}

/// Join `schedules` at increasing `boundaries` (one fewer than schedules;
/// extra schedules or boundaries are ignored).
pub fn join(schedules: Vec<Arc<dyn Schedule>>, boundaries: Vec<u64>) -> Join {
    Join { schedules, boundaries }
}

impl Schedule for Join {
    fn at(&self, count: &Tensor) -> Result<Tensor> {
        let n = self.schedules.len().min(self.boundaries.len() + 1);
        if n == 0 {
            return f32_scalar(count, 0.0);
        }
        let start = |i: usize| if i == 0 { 0 } else { self.boundaries[i - 1] };
        let shifted = |i: usize| count.sub(&Tensor::scalar(count.device(), start(i) as f64, DType::I32)?);
        // From the last piece backwards: where(count < boundary_i, piece_i, later pieces).
        let mut value = self.schedules[n - 1].at(&shifted(n - 1)?)?;
        for i in (0..n - 1).rev() {
            let before = count.lt(&Tensor::scalar(count.device(), self.boundaries[i] as f64, DType::I32)?)?;
            value = Tensor::where_cond(&before, &self.schedules[i].at(&shifted(i)?)?, &value)?;
        }
        Ok(value)
    }
}

/// Linear warmup from `init` to `peak` over `warmup_steps`, then cosine
/// decay to `end` by step `decay_steps` (counted from 0, warmup included),
/// as optax's `warmup_cosine_decay_schedule`.
pub fn warmup_cosine_decay(init: f64, peak: f64, warmup_steps: u64, decay_steps: u64, end: f64) -> Join {
    let alpha = if peak == 0.0 { 0.0 } else { end / peak };
    join(
        vec![
            Arc::new(linear(init, peak, warmup_steps)),
            Arc::new(cosine_decay(peak, decay_steps.saturating_sub(warmup_steps), alpha)),
        ],
        vec![warmup_steps],
    )
}
