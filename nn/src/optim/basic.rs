//! Stateless and count-only transformations: scaling, the learning rate,
//! weight decay, clipping by the global norm.

use super::{Schedule, Transform, as_f32, leaves_like, next_count, zero_count};
use kiln_autodiff::Tree;
use kiln_core::{DType, KilnError, Result};
use kiln_ops::Tensor;
use std::sync::Arc;

/// Every update times the f32 rank-0 `factor`, in its own dtype.
fn scale_leaves<P: Tree>(op: &'static str, updates: &P, factor: &Tensor) -> Result<P> {
    updates.map_leaves(|path, u| as_f32(op, path, u)?.mul(factor)?.cast(u.dtype()))
}

/// Multiply every update by a constant.
#[derive(Debug, Clone, Copy)]
pub struct Scale(pub f64);

/// Multiply every update by `factor`.
pub fn scale(factor: f64) -> Scale {
    Scale(factor)
}

impl<P: Tree> Transform<P> for Scale {
    type State = ();
    fn init(&self, _: &P) -> Result<()> {
        Ok(())
    }
    fn update(&self, updates: &P, _: &(), _: Option<&P>) -> Result<(P, ())> {
        let out = updates.map_leaves(|path, u| as_f32("scale", path, u)?.mul_scalar(self.0)?.cast(u.dtype()))?;
        Ok((out, ()))
    }
}

/// The state of a transformation that only counts steps.
#[derive(kiln_derive::Tree, Debug, Clone)]
#[tree(crate = "kiln_autodiff")]
pub struct CountState {
    /// Updates applied so far (i32, rank 0).
    pub count: Tensor,
}

/// Multiply updates by `-schedule(count)`: the last link of most chains.
#[derive(Clone)]
pub struct ScaleByLearningRate {
    schedule: Arc<dyn Schedule>,
}

/// Scale by minus the learning rate, a number or a [`Schedule`].
pub fn scale_by_learning_rate(lr: impl Schedule + 'static) -> ScaleByLearningRate {
    ScaleByLearningRate { schedule: Arc::new(lr) }
}

impl<P: Tree> Transform<P> for ScaleByLearningRate {
    type State = CountState;
    fn init(&self, params: &P) -> Result<CountState> {
        Ok(CountState { count: zero_count("scale_by_learning_rate", params)? })
    }
    fn update(&self, updates: &P, state: &CountState, _: Option<&P>) -> Result<(P, CountState)> {
        let lr = self.schedule.at(&state.count)?.neg()?;
        let out = scale_leaves("scale_by_learning_rate", updates, &lr)?;
        Ok((out, CountState { count: next_count(&state.count)? }))
    }
}

/// Which leaves weight decay applies to, given each leaf's path and value.
pub type DecayMask = Arc<dyn Fn(&str, &Tensor) -> bool + Send + Sync>;

/// Add `weight_decay · params` to the updates (decoupled weight decay when
/// placed before the learning rate, as in AdamW), on every leaf or only on
/// those a mask selects.
#[derive(Clone)]
pub struct AddDecayedWeights {
    weight_decay: f64,
    mask: Option<DecayMask>,
}

/// Add `weight_decay · params` to every update (restrict it with
/// `AddDecayedWeights::masked`).
pub fn add_decayed_weights(weight_decay: f64) -> AddDecayedWeights {
    AddDecayedWeights { weight_decay, mask: None }
}

/// The usual decay mask: matrices (weights, embeddings) decay; vectors
/// (biases, norm scales) do not.
pub fn matrices_only(_path: &str, leaf: &Tensor) -> bool {
    leaf.rank() >= 2
}

impl AddDecayedWeights {
    /// Decay only the leaves for which `mask(path, leaf)` is true (optax's
    /// `mask`); the others' updates pass through unchanged.
    pub fn masked(self, mask: impl Fn(&str, &Tensor) -> bool + Send + Sync + 'static) -> AddDecayedWeights {
        AddDecayedWeights { mask: Some(Arc::new(mask)), ..self }
    }
}

impl From<f64> for AddDecayedWeights {
    fn from(weight_decay: f64) -> AddDecayedWeights {
        add_decayed_weights(weight_decay)
    }
}

impl std::fmt::Debug for AddDecayedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddDecayedWeights")
            .field("weight_decay", &self.weight_decay)
            .field("masked", &self.mask.is_some())
            .finish()
    }
}

impl<P: Tree> Transform<P> for AddDecayedWeights {
    type State = ();
    fn init(&self, _: &P) -> Result<()> {
        Ok(())
    }
    fn update(&self, updates: &P, _: &(), params: Option<&P>) -> Result<(P, ())> {
        const OP: &str = "add_decayed_weights";
        let params = params.ok_or_else(|| KilnError::Invalid { op: OP, detail: "needs the parameters".into() })?;
        let mut p = leaves_like(OP, "params", params, &updates.named_leaves())?.into_iter();
        let out = updates.map_leaves(|path, u| {
            let p = p.next().expect("one parameter per leaf");
            if self.mask.as_ref().is_some_and(|decays| !decays(path, &p)) {
                return Ok(u.clone());
            }
            as_f32(OP, path, u)?.add(&as_f32(OP, path, &p)?.mul_scalar(self.weight_decay)?)?.cast(u.dtype())
        })?;
        Ok((out, ()))
    }
}

/// `sqrt(Σ leaves Σ x²)` in f32, a rank-0 tensor.
pub fn global_norm<P: Tree>(tree: &P) -> Result<Tensor> {
    let mut total: Option<Tensor> = None;
    for (path, t) in tree.named_leaves() {
        let t = as_f32("global_norm", &path, &t)?;
        let sq = t.mul(&t)?.sum(&[], false)?;
        total = Some(match total {
            Some(acc) => acc.add(&sq)?,
            None => sq,
        });
    }
    match total {
        Some(t) => t.sqrt(),
        None => Err(KilnError::Invalid { op: "global_norm", detail: "the tree has no leaves".into() }),
    }
}

/// Scale all updates together so that their global norm is at most
/// `max_norm` (unchanged when it already is).
#[derive(Debug, Clone, Copy)]
pub struct ClipByGlobalNorm(pub f64);

/// Scale all updates together to a global norm of at most `max_norm`.
pub fn clip_by_global_norm(max_norm: f64) -> ClipByGlobalNorm {
    ClipByGlobalNorm(max_norm)
}

impl<P: Tree> Transform<P> for ClipByGlobalNorm {
    type State = ();
    fn init(&self, _: &P) -> Result<()> {
        Ok(())
    }
    fn update(&self, updates: &P, _: &(), _: Option<&P>) -> Result<(P, ())> {
        let norm = global_norm(updates)?;
        let max = Tensor::scalar(norm.device(), self.0, DType::F32)?;
        let factor = max.div(&norm.maximum(&max)?)?;
        let out =
            updates.map_leaves(|path, u| as_f32("clip_by_global_norm", path, u)?.mul(&factor)?.cast(u.dtype()))?;
        Ok((out, ()))
    }
}
