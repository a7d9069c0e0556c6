//! Decoding with a KV cache: the prompt in one pass (prefill), then one
//! captured step per token that takes the last token, its position and the
//! caches (and a sampled step its cut-offs and key), and gives the next
//! token (picked on the device, [`crate::sample`]), the next position and
//! the caches. Tokens stay on the device until the end, so the steps run
//! back to back, one submit each, with one readback for all.

use crate::Model;
use crate::sample::{Sampling, draw, most_likely};
use kiln::prelude::*;
use kiln_nn::KvCache;
use web_time::Instant;

/// A greedy step's input: the model, its caches, the last token `[1, 1]`
/// and its position (an i32 scalar).
type GreedyInput = (Model, Vec<KvCache>, Tensor, Tensor);
/// A sampled step's input: a greedy step's, then the cut-offs
/// (temperature, k, p) and the step's key (u32 `[2]`).
type SampledInput = (Model, Vec<KvCache>, Tensor, Tensor, [Tensor; 3], Tensor);
/// A step's output: the next token `[1, 1]` (i32), the caches, the next position.
type StepOutput = (Tensor, Vec<KvCache>, Tensor);

/// The last position's logits of each sequence, `[B, V]`.
fn last(logits: &Tensor) -> Result<Tensor> {
    let t = logits.shape()[1];
    logits.narrow(1, t - 1, 1)?.squeeze(1)
}

fn greedy_step((model, caches, token, pos): &GreedyInput) -> Result<StepOutput> {
    let (logits, caches) = model.step(token, pos, caches)?;
    Ok((most_likely(&last(&logits)?)?, caches, pos.add_scalar(1.0)?))
}

fn sampled_step((model, caches, token, pos, cutoffs, key): &SampledInput) -> Result<StepOutput> {
    let (logits, caches) = model.step(token, pos, caches)?;
    Ok((draw(&last(&logits)?, cutoffs, key)?, caches, pos.add_scalar(1.0)?))
}

/// Tokens decoded, and where the time went.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// The new tokens, after the prompt.
    pub tokens: Vec<u32>,
    /// Seconds of the prompt's pass, until the device has its first token.
    pub prefill_seconds: f64,
    /// Seconds of the first step, which captures the step's program where
    /// this cache capacity is new (compiling its kernels).
    pub first_step_seconds: f64,
    /// Seconds of the later steps, to every token on the host.
    pub decode_seconds: f64,
}

impl Decoded {
    /// Tokens per second of the steps after the first (0 where there are
    /// none).
    pub fn decode_rate(&self) -> f64 {
        let steps = self.tokens.len().saturating_sub(2);
        if steps == 0 { 0.0 } else { steps as f64 / self.decode_seconds }
    }
}

/// A model with its decoding steps captured (once per cache capacity).
pub struct Decoder {
    model: Model,
    greedy: kiln::Jit<fn(&GreedyInput) -> Result<StepOutput>, StepOutput>,
    sampled: kiln::Jit<fn(&SampledInput) -> Result<StepOutput>, StepOutput>,
}

impl Decoder {
    /// A decoder of `model`.
    pub fn new(model: Model) -> Decoder {
        Decoder {
            model,
            greedy: kiln::jit(greedy_step as fn(&GreedyInput) -> Result<StepOutput>),
            sampled: kiln::jit(sampled_step as fn(&SampledInput) -> Result<StepOutput>),
        }
    }

    /// The `n` tokens greedy decoding appends to `prompt`, as
    /// [`Model::greedy`] gives them, through a cache of `prompt + n`
    /// positions.
    pub async fn greedy(&self, prompt: &[u32], n: usize) -> Result<Decoded> {
        self.sample(prompt, n, &Sampling::greedy()).await
    }

    /// `n` tokens after `prompt`, each picked on the device as `sampling`
    /// says, through a cache of `prompt + n` positions.
    pub async fn sample(&self, prompt: &[u32], n: usize, sampling: &Sampling) -> Result<Decoded> {
        sampling.check()?;
        let device = self.model.device();
        if prompt.is_empty() || n == 0 {
            let detail = format!("needs a prompt and tokens to make, got {} and {n}", prompt.len());
            return Err(KilnError::Invalid { op: "sample", detail });
        }
        let greedy = sampling.temperature == 0.0;
        let start = Instant::now();
        let ids = Tensor::from_slice(&device, prompt, &[1, prompt.len()])?;
        let (logits, mut caches) = self.model.prefill(&ids, prompt.len() + n)?;
        let logits = last(&logits)?;
        let cutoffs = sampling.tensors(&device, logits.shape()[1])?;
        let key = |i: usize| sampling.key.fold_in(i as u32).to_tensor(&device);
        let mut token = if greedy { most_likely(&logits)? } else { draw(&logits, &cutoffs, &key(0)?)? };
        // Realizing only submits: the clock stops once the device is done.
        token.realize().await?;
        device.synchronize().await?;
        let prefill_seconds = start.elapsed().as_secs_f64();
        let mut pos = Tensor::scalar(&device, prompt.len() as f64, DType::I32)?;
        let mut tokens = vec![token.clone()];
        let (mut start, mut first_step_seconds) = (Instant::now(), 0.0);
        for i in 1..n {
            let model = self.model.clone();
            (token, caches, pos) = if greedy {
                self.greedy.call(&(model, caches, token, pos)).await?
            } else {
                self.sampled.call(&(model, caches, token, pos, cutoffs.clone(), key(i)?)).await?
            };
            tokens.push(token.clone());
            if i == 1 {
                token.realize().await?;
                device.synchronize().await?;
                first_step_seconds = start.elapsed().as_secs_f64();
                start = Instant::now();
            }
        }
        let all = Tensor::concat(&tokens.iter().collect::<Vec<_>>(), 1)?.to_vec::<i32>().await?;
        Ok(Decoded {
            tokens: all.into_iter().map(|t| t as u32).collect(),
            prefill_seconds,
            first_step_seconds,
            decode_seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Programs the steps captured (greedy and sampled ones).
    pub fn captures(&self) -> usize {
        self.greedy.captures() + self.sampled.captures()
    }
}
