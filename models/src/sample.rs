//! Picking the next token on the device, from a key: temperature, then the
//! `k` most likely tokens, then the fewest most likely whose probabilities
//! reach `p`, then a Gumbel-max draw (the argmax of the logits plus Gumbel
//! noise is a draw from their softmax). No sort: each cut's threshold is
//! found by bisection, as a fixed number of halvings in the graph.

use kiln::prelude::*;

/// Halvings of each threshold's interval: 2^-32 of the logits' range.
const HALVINGS: usize = 32;

/// How to pick each new token.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Logits are divided by it; 0 picks the most likely token (greedy).
    pub temperature: f64,
    /// Draw among the `k` most likely tokens only.
    pub top_k: Option<usize>,
    /// Draw among the fewest most likely tokens whose probabilities sum to
    /// at least `p` (after `top_k`).
    pub top_p: Option<f64>,
    /// The `i`-th new token is drawn with `key.fold_in(i)`.
    pub key: Key,
}

impl Sampling {
    /// Greedy decoding: the most likely token each step.
    pub fn greedy() -> Sampling {
        Sampling { temperature: 0.0, top_k: None, top_p: None, key: Key::new(0) }
    }

    pub(crate) fn check(&self) -> Result<()> {
        let p_valid = self.top_p.is_none_or(|p| p > 0.0 && p <= 1.0);
        if !self.temperature.is_finite() || self.temperature < 0.0 || self.top_k == Some(0) || !p_valid {
            return Err(KilnError::Invalid {
                op: "sample",
                detail: format!(
                    "temperature {}, top-k {:?} and top-p {:?}: need temperature ≥ 0, k ≥ 1 and 0 < p ≤ 1",
                    self.temperature, self.top_k, self.top_p
                ),
            });
        }
        Ok(())
    }

    /// The cut-offs as the step's input tensors: temperature, k (as f32;
    /// the vocabulary where unset) and p (1 where unset).
    pub(crate) fn tensors(&self, device: &Device, vocab: usize) -> Result<[Tensor; 3]> {
        let scalar = |v: f64| Tensor::scalar(device, v, DType::F32);
        let k = self.top_k.map_or(vocab, |k| k.min(vocab));
        Ok([scalar(self.temperature)?, scalar(k as f64)?, scalar(self.top_p.unwrap_or(1.0))?])
    }
}

/// The most likely token of each row of `logits` (`[B, V]`), `[B, 1]` i32.
pub(crate) fn most_likely(logits: &Tensor) -> Result<Tensor> {
    logits.argmax(Some(-1), true)?.cast(DType::I32)
}

/// The largest `t` in `[low, high]` (each `[B, 1]`) where `enough(t)` holds,
/// to within `(high - low) / 2^HALVINGS`; `low` where it never does.
fn bisect(low: Tensor, high: Tensor, enough: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let (mut low, mut high) = (low, high);
    for _ in 0..HALVINGS {
        let mid = ((&low + &high)? * 0.5)?;
        let ok = enough(&mid)?;
        (low, high) = (Tensor::where_cond(&ok, &mid, &low)?, Tensor::where_cond(&ok, &high, &mid)?);
    }
    Ok(low)
}

/// A token drawn from each row of `logits` (`[B, V]`, f32) with cut-offs
/// `[temperature, k, p]` (scalars; temperature > 0) and `key` (u32 `[2]`):
/// `[B, 1]` i32.
pub(crate) fn draw(logits: &Tensor, [temperature, k, p]: &[Tensor; 3], key: &Tensor) -> Result<Tensor> {
    let scaled = logits.div(temperature)?;
    let floor = scaled.scalar_like(-1e30)?;
    // The k-th largest logit: the largest t with at least k logits ≥ t.
    let count_at_least = |t: &Tensor| scaled.ge(t)?.cast(DType::F32)?.sum(&[-1], true)?.ge(k);
    let kth = bisect(scaled.min(&[-1], true)?, scaled.max(&[-1], true)?, count_at_least)?;
    let top_k = Tensor::where_cond(&scaled.ge(&kth)?, &scaled, &floor)?;
    // The smallest probability kept: the largest t whose tokens at or above it reach p.
    let probs = top_k.softmax(-1)?;
    let zero = probs.scalar_like(0.0)?;
    let mass_at_least = |t: &Tensor| Tensor::where_cond(&probs.ge(t)?, &probs, &zero)?.sum(&[-1], true)?.ge(p);
    let smallest = bisect(zero.broadcast_to(kth.shape())?, probs.max(&[-1], true)?, mass_at_least)?;
    let kept = Tensor::where_cond(&probs.ge(&smallest)?, &top_k, &floor)?;
    let u = kiln::random::uniform(logits.device(), key, logits.shape(), DType::F32, 1e-20, 1.0)?;
    let gumbel = u.log()?.neg()?.log()?.neg()?;
    most_likely(&(kept + gumbel)?)
}
