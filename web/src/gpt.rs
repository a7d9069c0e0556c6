//! The GPT page's API: `GptTrainer` (the desktop demo's `kiln-gpt`
//! trainer on a text the page fetched) and `GptModel` (for sampling: a
//! checkpoint dropped on the page, or an untrained model for the benchmark
//! page), and for the benchmark page `AttentionLayer`. Methods that touch the GPU return Promises; calls on
//! one object must not overlap.

use crate::bindings::{Exclusive, Gpu, js_err};
use js_sys::{Float32Array, Promise, Uint8Array};
use kiln::{DType, Key, Tensor};
use kiln_gpt::{Corpus, Gpt, GptConfig, Sampling, TrainConfig, Vocab, generate, load_model};
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::{CausalSelfAttention, causal_attention, causal_attention_flops};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

/// The run's config: the desktop demo's, with any of `context`, `width`,
/// `heads`, `layers`, `batch`, `steps`, `lr` and `seed` from a JSON object.
fn config(vocab: usize, options: &str) -> Result<TrainConfig, JsError> {
    let json: serde_json::Value = serde_json::from_str(if options.is_empty() { "{}" } else { options })
        .map_err(|e| JsError::new(&format!("GptTrainer options: {e}")))?;
    let get = |key: &str| json.get(key).and_then(serde_json::Value::as_f64);
    let d = TrainConfig::demo(vocab);
    let n = |key: &str, default: usize| get(key).map_or(default, |v| v as usize);
    let model = GptConfig {
        context: n("context", d.model.context),
        width: n("width", d.model.width),
        heads: n("heads", d.model.heads),
        layers: n("layers", d.model.layers),
        ..d.model
    };
    Ok(TrainConfig {
        model,
        batch: n("batch", d.batch),
        steps: get("steps").map_or(d.steps, |v| v as u64),
        lr: get("lr").unwrap_or(d.lr),
        seed: get("seed").map_or(d.seed, |v| v as u64),
        ..d
    })
}

/// Sampling options as the page passes them (`top_k` 0: all characters).
fn sampling(temperature: f64, top_k: usize, seed: u32, cached: bool) -> Sampling {
    Sampling { temperature, top_k: (top_k > 0).then_some(top_k), key: Key::new(u64::from(seed)), cached }
}

#[wasm_bindgen]
pub struct GptTrainer {
    inner: Exclusive<kiln_gpt::GptTrainer>,
    config: TrainConfig,
    parameters: usize,
    steps: Rc<Cell<usize>>,
}

impl GptTrainer {
    fn call<T, F>(&self, f: F) -> Promise
    where
        F: AsyncFnOnce(&mut kiln_gpt::GptTrainer) -> kiln::Result<T> + 'static,
        T: Into<JsValue>,
    {
        let steps = self.steps.clone();
        self.inner.call(f, move |t| steps.set(t.steps() as usize))
    }
}

#[wasm_bindgen]
impl GptTrainer {
    /// A fresh run on `text` (the last 10% held out), `options` a JSON
    /// object overriding the demo's config (see `config`).
    #[wasm_bindgen(constructor)]
    pub fn new(gpu: &Gpu, text: &str, options: &str) -> Result<GptTrainer, JsError> {
        let corpus = Corpus::from_text(text, 0.1).map_err(|e| JsError::new(&e.to_string()))?;
        let config = config(corpus.vocab.len(), options)?;
        let t = kiln_gpt::GptTrainer::new(&gpu.device, Arc::new(corpus), config)
            .map_err(|e| JsError::new(&e.to_string()))?;
        let parameters = t.model().map_err(|e| JsError::new(&e.to_string()))?.parameters();
        Ok(GptTrainer { inner: Exclusive::new(t), config, parameters, steps: Rc::default() })
    }

    /// `n` steps; resolves to a Float32Array of their losses in bits/char.
    pub fn step(&self, n: usize) -> Promise {
        self.call(async move |t| {
            let nats = t.run(n).await?;
            let bits: Vec<f32> = nats.iter().map(|l| l / std::f32::consts::LN_2).collect();
            Ok(Float32Array::from(bits.as_slice()))
        })
    }

    /// Resolves to the validation loss in bits/char.
    pub fn evaluate(&self) -> Promise {
        self.call(async |t| t.evaluate().await)
    }

    /// Resolves to `tokens` characters after `prompt`, from the current
    /// weights, through the KV cache.
    pub fn generate(&self, prompt: String, tokens: usize, temperature: f64, top_k: usize, seed: u32) -> Promise {
        self.call(async move |t| {
            let s = sampling(temperature, top_k, seed, true);
            generate(&t.model()?, t.vocab(), &prompt, tokens, s).await
        })
    }

    /// Resolves to the checkpoint's safetensors bytes (what the desktop
    /// demo saves and `--generate` reads).
    pub fn checkpoint(&self) -> Promise {
        self.call(async |t| Ok(Uint8Array::from(t.checkpoint().await?.to_bytes()?.as_slice())))
    }

    /// Steps taken, as of the last call that finished.
    #[wasm_bindgen(getter)]
    pub fn steps(&self) -> usize {
        self.steps.get()
    }

    #[wasm_bindgen(getter)]
    pub fn total_steps(&self) -> usize {
        self.config.steps as usize
    }

    #[wasm_bindgen(getter)]
    pub fn characters_per_step(&self) -> usize {
        self.config.tokens_per_step()
    }

    /// Sequences per step.
    #[wasm_bindgen(getter)]
    pub fn batch(&self) -> usize {
        self.config.batch
    }

    /// Characters per sequence.
    #[wasm_bindgen(getter)]
    pub fn context(&self) -> usize {
        self.config.model.context
    }

    #[wasm_bindgen(getter)]
    pub fn parameters(&self) -> usize {
        self.parameters
    }
}

/// A model read from a GPT checkpoint (the desktop demo's or this page's),
/// for sampling.
#[wasm_bindgen]
pub struct GptModel {
    model: Rc<Gpt>,
    vocab: Rc<Vocab>,
}

#[wasm_bindgen]
impl GptModel {
    /// The model and vocabulary saved in a checkpoint's bytes.
    pub fn load(gpu: &Gpu, bytes: &[u8]) -> Result<GptModel, JsError> {
        let ck = Checkpoint::from_bytes(bytes, "the dropped file").map_err(|e| JsError::new(&e.to_string()))?;
        let (model, vocab) = load_model(&gpu.device, &ck).map_err(|e| JsError::new(&e.to_string()))?;
        Ok(GptModel { model: Rc::new(model), vocab: Rc::new(vocab) })
    }

    /// An untrained model of the desktop demo's config over `text`'s
    /// characters: what kiln-bench's generation rows time.
    pub fn untrained(gpu: &Gpu, text: &str) -> Result<GptModel, JsError> {
        let corpus = Corpus::from_text(text, 0.1).map_err(|e| JsError::new(&e.to_string()))?;
        let config = TrainConfig::demo(corpus.vocab.len()).model;
        let model = Gpt::new(&gpu.device, Key::new(0), config).map_err(|e| JsError::new(&e.to_string()))?;
        Ok(GptModel { model: Rc::new(model), vocab: Rc::new(corpus.vocab) })
    }

    /// Resolves to `tokens` characters after `prompt`, through the KV
    /// cache when `cached` (else re-reading the window for each).
    pub fn generate(
        &self,
        prompt: String,
        tokens: usize,
        temperature: f64,
        top_k: usize,
        seed: u32,
        cached: bool,
    ) -> Promise {
        let (model, vocab) = (self.model.clone(), self.vocab.clone());
        future_to_promise(async move {
            let s = sampling(temperature, top_k, seed, cached);
            generate(&model, &vocab, &prompt, tokens, s).await.map(Into::into).map_err(js_err)
        })
    }

    #[wasm_bindgen(getter)]
    pub fn parameters(&self) -> usize {
        self.model.parameters()
    }
}

/// One causal self-attention layer of width 128 in 4 heads, with ALiBi,
/// over a random `[1, context, 128]`, and its core alone over random heads
/// `[1, 4, context, 32]`: what kiln-bench's `causal attention` and `causal
/// attention kernel` rows time.
#[wasm_bindgen]
pub struct AttentionLayer {
    layer: CausalSelfAttention,
    x: Tensor,
    heads: [Tensor; 3],
    context: usize,
}

#[wasm_bindgen]
impl AttentionLayer {
    #[wasm_bindgen(constructor)]
    pub fn new(gpu: &Gpu, context: usize) -> Result<AttentionLayer, JsError> {
        let (dev, width) = (&gpu.device, 128);
        let build = || -> kiln::Result<AttentionLayer> {
            let layer = CausalSelfAttention { alibi: true, ..CausalSelfAttention::new(dev, Key::new(3), width, 4)? };
            let x = kiln::random::normal(dev, Key::new(4), &[1, context, width], DType::F32, 0.0, 1.0)?;
            let head = |seed| kiln::random::normal(dev, Key::new(seed), &[1, 4, context, 32], DType::F32, 0.0, 1.0);
            Ok(AttentionLayer { layer, x, heads: [head(5)?, head(6)?, head(7)?], context })
        };
        build().map_err(|e| JsError::new(&e.to_string()))
    }

    /// Resolves once a forward pass has run on the device (its output
    /// realized and its first value read back).
    pub fn forward(&self) -> Promise {
        let y = self.layer.forward(&self.x, None);
        future_to_promise(async move { first_value(y.map_err(js_err)?).await })
    }

    /// Resolves once the attention alone ([`causal_attention`] with ALiBi)
    /// has run on the heads, as [`AttentionLayer::forward`].
    pub fn attention(&self) -> Promise {
        let [q, k, v] = &self.heads;
        let y = causal_attention(q, k, v, true);
        future_to_promise(async move { first_value(y.map_err(js_err)?).await })
    }

    /// Floating-point operations of one forward pass
    /// ([`CausalSelfAttention::forward_flops`]).
    #[wasm_bindgen(getter)]
    pub fn flops(&self) -> f64 {
        self.layer.forward_flops(self.context)
    }

    /// Floating-point operations of the attention alone: its two
    /// `context²` products, the masked half counted.
    #[wasm_bindgen(getter)]
    pub fn attention_flops(&self) -> f64 {
        causal_attention_flops(self.heads[0].shape())
    }
}

/// `y` realized and its first value read back.
async fn first_value(y: Tensor) -> Result<JsValue, JsValue> {
    y.realize().await.map_err(js_err)?;
    let first = y.reshape(&[-1]).and_then(|y| y.narrow(0, 0, 1)).map_err(js_err)?;
    Ok(first.to_vec::<f32>().await.map_err(js_err)?[0].into())
}
