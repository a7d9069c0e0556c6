//! Transformations with per-leaf state: momentum (trace), Adam's moments,
//! RMSprop's running mean square. Each leaf's new update and state are one
//! elementwise expression, so they fuse into one kernel per leaf.

use super::{Transform, as_f32, leaves_like, next_count, zero_count, zeros_f32};
use kiln_autodiff::Tree;
use kiln_core::{DType, Result};
use kiln_ops::Tensor;

/// Momentum: `trace = g + decay · trace`; the update is `trace`, or
/// `g + decay · trace` with Nesterov (as optax's `trace`).
#[derive(Debug, Clone, Copy)]
pub struct Trace {
    /// Momentum coefficient (e.g. 0.9).
    pub decay: f64,
    /// Update with Nesterov momentum.
    pub nesterov: bool,
}

/// Momentum of `decay`, Nesterov's when `nesterov`.
pub fn trace(decay: f64, nesterov: bool) -> Trace {
    Trace { decay, nesterov }
}

/// The state of `Trace`.
#[derive(kiln_derive::Tree, Debug, Clone)]
#[tree(crate = "kiln_autodiff")]
pub struct TraceState<P> {
    /// Momentum per leaf, f32.
    pub trace: P,
}

impl<P: Tree> Transform<P> for Trace {
    type State = TraceState<P>;
    fn init(&self, params: &P) -> Result<TraceState<P>> {
        Ok(TraceState { trace: zeros_f32("trace", params)? })
    }
    fn update(&self, updates: &P, state: &TraceState<P>, _: Option<&P>) -> Result<(P, TraceState<P>)> {
        let like = updates.named_leaves();
        let old = leaves_like("trace", "trace", &state.trace, &like)?;
        let (mut out, mut traces) = (Vec::new(), Vec::new());
        for ((path, u), t) in like.iter().zip(old) {
            let g = as_f32("trace", path, u)?;
            let t = g.add(&t.mul_scalar(self.decay)?)?;
            let step = if self.nesterov { g.add(&t.mul_scalar(self.decay)?)? } else { t.clone() };
            out.push(step.cast(u.dtype())?);
            traces.push(t);
        }
        Ok((updates.unflatten(out)?, TraceState { trace: state.trace.unflatten(traces)? }))
    }
}

/// Adam's scaling: bias-corrected first and second moments,
/// `m̂ / (sqrt(v̂) + eps)` (as optax's `scale_by_adam`).
#[derive(Debug, Clone, Copy)]
pub struct ScaleByAdam {
    /// Decay of the first moment (e.g. 0.9).
    pub b1: f64,
    /// Decay of the second moment (e.g. 0.999).
    pub b2: f64,
    /// Added to `sqrt(v̂)` (e.g. 1e-8).
    pub eps: f64,
}

/// Adam's scaling with moment decays `b1`, `b2` and `eps`.
pub fn scale_by_adam(b1: f64, b2: f64, eps: f64) -> ScaleByAdam {
    ScaleByAdam { b1, b2, eps }
}

/// The state of `ScaleByAdam`.
#[derive(kiln_derive::Tree, Debug, Clone)]
#[tree(crate = "kiln_autodiff")]
pub struct AdamState<P> {
    /// Steps taken (i32, rank 0): the bias corrections read it.
    pub count: Tensor,
    /// First moments per leaf, f32.
    pub mu: P,
    /// Second moments per leaf, f32.
    pub nu: P,
}

/// `1 − b^t` for the f32 step `t`: `b^t` as `exp(t · ln b)` with `ln b`
/// taken in f64 on the host.
fn bias_correction(b: f64, t: &Tensor) -> Result<Tensor> {
    t.mul_scalar(b.ln())?.exp()?.neg()?.add_scalar(1.0)
}

impl<P: Tree> Transform<P> for ScaleByAdam {
    type State = AdamState<P>;
    fn init(&self, params: &P) -> Result<AdamState<P>> {
        let op = "scale_by_adam";
        Ok(AdamState { count: zero_count(op, params)?, mu: zeros_f32(op, params)?, nu: zeros_f32(op, params)? })
    }
    fn update(&self, updates: &P, state: &AdamState<P>, _: Option<&P>) -> Result<(P, AdamState<P>)> {
        let op = "scale_by_adam";
        let like = updates.named_leaves();
        let mu = leaves_like(op, "mu", &state.mu, &like)?;
        let nu = leaves_like(op, "nu", &state.nu, &like)?;
        let count = next_count(&state.count)?;
        let t = count.cast(DType::F32)?;
        let (bc1, bc2) = (bias_correction(self.b1, &t)?, bias_correction(self.b2, &t)?);
        let (mut out, mut mus, mut nus) = (Vec::new(), Vec::new(), Vec::new());
        for (((path, u), m), v) in like.iter().zip(mu).zip(nu) {
            let g = as_f32(op, path, u)?;
            let m = m.mul_scalar(self.b1)?.add(&g.mul_scalar(1.0 - self.b1)?)?;
            let v = v.mul_scalar(self.b2)?.add(&g.mul(&g)?.mul_scalar(1.0 - self.b2)?)?;
            let denom = v.div(&bc2)?.sqrt()?.add_scalar(self.eps)?;
            out.push(m.div(&bc1)?.div(&denom)?.cast(u.dtype())?);
            mus.push(m);
            nus.push(v);
        }
        let next = AdamState { count, mu: state.mu.unflatten(mus)?, nu: state.nu.unflatten(nus)? };
        Ok((updates.unflatten(out)?, next))
    }
}

/// RMSprop's scaling: `v = decay · v + (1 − decay) · g²`, update
/// `g / (sqrt(v) + eps)` (PyTorch's placement of eps).
#[derive(Debug, Clone, Copy)]
pub struct ScaleByRms {
    /// Decay of the running mean square (e.g. 0.9).
    pub decay: f64,
    /// Added to `sqrt(v)`.
    pub eps: f64,
}

/// RMSprop's scaling with `decay` and `eps`.
pub fn scale_by_rms(decay: f64, eps: f64) -> ScaleByRms {
    ScaleByRms { decay, eps }
}

/// The state of `ScaleByRms`.
#[derive(kiln_derive::Tree, Debug, Clone)]
#[tree(crate = "kiln_autodiff")]
pub struct RmsState<P> {
    /// Running mean squares per leaf, f32.
    pub nu: P,
}

impl<P: Tree> Transform<P> for ScaleByRms {
    type State = RmsState<P>;
    fn init(&self, params: &P) -> Result<RmsState<P>> {
        Ok(RmsState { nu: zeros_f32("scale_by_rms", params)? })
    }
    fn update(&self, updates: &P, state: &RmsState<P>, _: Option<&P>) -> Result<(P, RmsState<P>)> {
        let op = "scale_by_rms";
        let like = updates.named_leaves();
        let nu = leaves_like(op, "nu", &state.nu, &like)?;
        let (mut out, mut nus) = (Vec::new(), Vec::new());
        for ((path, u), v) in like.iter().zip(nu) {
            let g = as_f32(op, path, u)?;
            let v = v.mul_scalar(self.decay)?.add(&g.mul(&g)?.mul_scalar(1.0 - self.decay)?)?;
            out.push(g.div(&v.sqrt()?.add_scalar(self.eps)?)?.cast(u.dtype())?);
            nus.push(v);
        }
        Ok((updates.unflatten(out)?, RmsState { nu: state.nu.unflatten(nus)? }))
    }
}
