//! Greedy decoding with a KV cache: the prompt in one pass (prefill), then
//! one captured step per token that takes the last token, its position and
//! the caches, and gives the next token (picked on the device), the next
//! position and the caches. Tokens stay on the device until the end, so
//! the steps run back to back, one submit each, with one readback for all.

use crate::Model;
use kiln::prelude::*;
use kiln_nn::KvCache;
use std::time::Instant;

/// A step's input: the model, its caches, the last token `[1, 1]` and its
/// position (an i32 scalar).
type StepInput = (Model, Vec<KvCache>, Tensor, Tensor);
/// A step's output: the next token `[1, 1]` (i32), the caches, the next position.
type StepOutput = (Tensor, Vec<KvCache>, Tensor);

/// The most likely next token of each sequence, `[B, 1]` i32.
fn most_likely(logits: &Tensor) -> Result<Tensor> {
    let t = logits.shape()[1];
    logits.narrow(1, t - 1, 1)?.argmax(Some(-1), false)?.cast(DType::I32)
}

fn step((model, caches, token, pos): &StepInput) -> Result<StepOutput> {
    let (logits, caches) = model.step(token, pos, caches)?;
    Ok((most_likely(&logits)?, caches, pos.add_scalar(1.0)?))
}

/// Tokens decoded, and where the time went.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// The new tokens, after the prompt.
    pub tokens: Vec<u32>,
    /// Seconds of the prompt's pass (to its first token on the device).
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

/// A model with its decoding step captured (once per cache capacity).
pub struct Decoder {
    model: Model,
    step: kiln::Jit<fn(&StepInput) -> Result<StepOutput>, StepOutput>,
}

impl Decoder {
    /// A decoder of `model`.
    pub fn new(model: Model) -> Decoder {
        Decoder { model, step: kiln::jit(step as fn(&StepInput) -> Result<StepOutput>) }
    }

    /// The `n` tokens greedy decoding appends to `prompt`, as
    /// [`Model::greedy`] gives them, through a cache of `prompt + n`
    /// positions.
    pub async fn greedy(&self, prompt: &[u32], n: usize) -> Result<Decoded> {
        let device = self.model.device();
        if prompt.is_empty() || n == 0 {
            let detail = format!("needs a prompt and tokens to make, got {} and {n}", prompt.len());
            return Err(KilnError::Invalid { op: "greedy", detail });
        }
        let start = Instant::now();
        let ids = Tensor::from_slice(&device, prompt, &[1, prompt.len()])?;
        let (logits, mut caches) = self.model.prefill(&ids, prompt.len() + n)?;
        let mut token = most_likely(&logits)?;
        token.realize().await?;
        let prefill_seconds = start.elapsed().as_secs_f64();
        let mut pos = Tensor::scalar(&device, prompt.len() as f64, DType::I32)?;
        let mut tokens = vec![token.clone()];
        let (mut start, mut first_step_seconds) = (Instant::now(), 0.0);
        for i in 1..n {
            (token, caches, pos) = self.step.call(&(self.model.clone(), caches, token, pos)).await?;
            tokens.push(token.clone());
            if i == 1 {
                token.realize().await?;
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

    /// Programs the step captured.
    pub fn captures(&self) -> usize {
        self.step.captures()
    }
}
