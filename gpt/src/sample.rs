//! Sampling text from a model with an explicit key: temperature, top-k,
//! and the next character drawn on the host from the key and its index,
//! so the same key gives the same text wherever the logits agree.
//!
//! The model sees at most `context` characters. When the text outgrows
//! that, the window jumps forward by half a context and is read again, the
//! same way with a KV cache (one position per call, the window re-read
//! into a fresh cache after a jump) and without one (the whole window per
//! character, padded to the context so one captured program serves all
//! lengths); both paths see the same windows, so they give the same text.

use crate::corpus::Vocab;
use crate::model::Gpt;
use kiln::prelude::*;
use kiln::{FlatJit, Key, KilnError};

type Program = Box<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>>;

/// How to draw each character.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Logits are divided by it; 0 picks the most likely character.
    pub temperature: f64,
    /// Draw among the `k` most likely characters only.
    pub top_k: Option<usize>,
    /// Draws the `i`-th new character from `key.fold_in(i)`.
    pub key: Key,
    /// Use the KV cache (one position per step) or re-read the window.
    pub cached: bool,
}

impl Sampling {
    fn check(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 || self.top_k == Some(0) {
            return Err(KilnError::Invalid {
                op: "generate",
                detail: format!(
                    "temperature {} and top-k {:?}: need temperature ≥ 0 and k ≥ 1",
                    self.temperature, self.top_k
                ),
            });
        }
        Ok(())
    }

    /// The index drawn from `logits` with uniform `u` in [0, 1).
    fn pick(&self, logits: &[f32], u: f64) -> usize {
        let argmax = || (0..logits.len()).fold(0, |best, i| if logits[i] > logits[best] { i } else { best });
        if self.temperature == 0.0 {
            return argmax();
        }
        let floor = match self.top_k {
            Some(k) if k < logits.len() => {
                let mut sorted: Vec<f32> = logits.to_vec();
                sorted.sort_unstable_by(|a, b| b.total_cmp(a));
                sorted[k - 1]
            }
            _ => f32::NEG_INFINITY,
        };
        let top = f64::from(logits[argmax()]);
        let weights: Vec<f64> = logits
            .iter()
            .map(|&l| if l >= floor { ((f64::from(l) - top) / self.temperature).exp() } else { 0.0 })
            .collect();
        let mut left = u * weights.iter().sum::<f64>();
        for (i, w) in weights.iter().enumerate() {
            if left < *w {
                return i;
            }
            left -= w;
        }
        argmax()
    }
}

/// `tokens` characters after `prompt` (an empty prompt starts a line).
pub async fn generate(model: &Gpt, vocab: &Vocab, prompt: &str, tokens: usize, sampling: Sampling) -> Result<String> {
    sampling.check()?;
    let prompt = if prompt.is_empty() { "\n" } else { prompt };
    let mut text = vocab.encode(prompt)?;
    let mut reader = Reader::new(model, sampling.cached)?;
    let context = model.config().context;
    let mut start = text.len().saturating_sub(context);
    for i in 0..tokens {
        if text.len() - start > context {
            start += (context / 2).max(1);
            reader.forget();
        }
        let logits = reader.next_logits(&text[start..]).await?;
        let bits = sampling.key.fold_in(i as u32).random_bits_host(1)[0];
        text.push(sampling.pick(&logits, f64::from(bits) / 2f64.powi(32)) as u32);
    }
    vocab.decode(&text[text.len() - tokens..])
}

/// What the model says after a window: through the cache or re-reading it.
struct Reader {
    params: Vec<Tensor>,
    context: usize,
    vocab: usize,
    program: FlatJit<Program>,
    /// With a cache: the caches' leaves and the window positions they hold.
    cache: Option<(Vec<Tensor>, usize)>,
}

impl Reader {
    fn new(model: &Gpt, cached: bool) -> Result<Reader> {
        let config = model.config();
        let template = model.clone();
        let n = template.leaves().len();
        let program: Program = if cached {
            let caches = model.caches(1)?;
            // (id [1, 1], pos, params.., caches..) → (logits [1, vocab], caches..)
            Box::new(move |inputs: &[Tensor]| {
                let p = template.unflatten(inputs[2..2 + n].to_vec())?;
                let c = caches.unflatten(inputs[2 + n..].to_vec())?;
                let (logits, c) = p.step(&inputs[0], &c, &inputs[1])?;
                Ok([vec![logits], c.leaves()].concat())
            })
        } else {
            // (ids [1, context], params..) → (logits [1, context, vocab],)
            Box::new(move |inputs: &[Tensor]| Ok(vec![template.unflatten(inputs[1..].to_vec())?.forward(&inputs[0])?]))
        };
        let cache = cached.then(|| Ok::<_, KilnError>((model.caches(1)?.leaves(), 0))).transpose()?;
        Ok(Reader {
            params: model.leaves(),
            context: config.context,
            vocab: config.vocab,
            program: kiln::jit_flat(program),
            cache,
        })
    }

    /// Start over: the next window is read from its first position.
    fn forget(&mut self) {
        if let Some((_, held)) = &mut self.cache {
            *held = 0;
        }
    }

    /// The logits of the character after `window` (at most `context` long).
    async fn next_logits(&mut self, window: &[u32]) -> Result<Vec<f32>> {
        let dev = self.params[0].device().clone();
        match &mut self.cache {
            Some((caches, held)) => {
                let mut logits = None;
                // Stale positions past `held` are never read: each is
                // written before the mask lets a query see it.
                for (pos, &id) in window.iter().enumerate().skip(*held) {
                    let id = Tensor::from_slice(&dev, &[id as i32], &[1, 1])?;
                    let pos = Tensor::scalar(&dev, pos as f64, DType::I32)?;
                    let inputs = [vec![id, pos], self.params.clone(), caches.clone()].concat();
                    let mut out = self.program.call(&inputs).await?;
                    *caches = out.split_off(1);
                    logits = out.pop();
                }
                *held = window.len();
                let logits = logits.ok_or_else(|| KilnError::Invalid {
                    op: "generate",
                    detail: "the window was already read: nothing to predict from".into(),
                })?;
                logits.to_vec::<f32>().await
            }
            None => {
                let mut ids: Vec<i32> = window.iter().map(|&c| c as i32).collect();
                ids.resize(self.context, 0);
                let ids = Tensor::from_slice(&dev, &ids, &[1, self.context])?;
                let out = self.program.call(&[vec![ids], self.params.clone()].concat()).await?;
                let row = out[0].narrow(1, window.len() - 1, 1)?;
                row.to_vec::<f32>().await.map(|v| v[..self.vocab].to_vec())
            }
        }
    }
}
