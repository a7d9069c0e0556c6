//! An exponential moving average of the parameters (for evaluation with
//! smoothed weights): `ema = decay · ema + (1 − decay) · params`.

use super::{as_f32, leaves_like};
use kiln_autodiff::Tree;
use kiln_core::Result;

/// Parameter EMA. The average starts at the parameters and keeps their
/// dtypes (computed in f32), so it can be used wherever they are.
#[derive(Debug, Clone, Copy)]
pub struct ParamEma {
    /// Share of the old average kept per update, in [0, 1] (e.g. 0.999).
    pub decay: f64,
}

impl ParamEma {
    /// An average that keeps `decay` of itself per update.
    pub fn new(decay: f64) -> ParamEma {
        ParamEma { decay }
    }

    /// The average before any update: the parameters themselves.
    pub fn init<P: Tree>(&self, params: &P) -> Result<P> {
        params.map_leaves(|_, p| Ok(p.clone()))
    }

    /// The average after moving towards `params`.
    pub fn update<P: Tree>(&self, ema: &P, params: &P) -> Result<P> {
        let mut p = leaves_like("ema", "params", params, &ema.named_leaves())?.into_iter();
        ema.map_leaves(|path, e| {
            let p = as_f32("ema", path, &p.next().expect("one parameter per leaf"))?;
            as_f32("ema", path, e)?.mul_scalar(self.decay)?.add(&p.mul_scalar(1.0 - self.decay)?)?.cast(e.dtype())
        })
    }
}
