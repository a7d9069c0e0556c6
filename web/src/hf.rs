//! The Hugging Face page's API: `HfModel`, a GPT-2 or Llama folder whose
//! files the page was given (picked or dropped), read by the same
//! `kiln-models` code as natively. It generates (with prefill and decode
//! rates), gives logits and token ids (for the end-to-end test against
//! transformers' fixtures), loads PEFT adapters, and fine-tunes LoRA
//! adapters on a text. Calls must not overlap; an overlapping one rejects.

use crate::bindings::{Exclusive, Gpu};
use js_sys::{Array, Float32Array, Promise, Uint8Array};
use kiln::prelude::*;
use kiln_models::{Adapters, Decoder, FineTune, FineTuneConfig, Folder, Model, Sampling, Tokenizer};
use wasm_bindgen::prelude::*;

/// The model as read, the one that runs (quantized or adapted) with its
/// decoder (kept, so that its captured steps are replayed by the next
/// generation), and a fine-tuning run once started.
struct State {
    base: Model,
    current: Model,
    decoder: Option<Decoder>,
    finetune: Option<FineTune>,
}

impl State {
    /// Runs `model` from now on.
    fn run(&mut self, model: Model) {
        self.current = model;
        self.decoder = None;
    }

    /// The running model's decoder.
    fn decoder(&mut self) -> &Decoder {
        self.decoder.get_or_insert_with(|| Decoder::new(self.current.clone()))
    }
}

#[wasm_bindgen]
pub struct HfModel {
    inner: Exclusive<State>,
    tokenizer: Tokenizer,
    description: String,
}

fn js(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

#[wasm_bindgen]
impl HfModel {
    /// The model in `files` (Uint8Arrays) named by `names` (the folder's
    /// `config.json`, tokenizer files and safetensors).
    #[wasm_bindgen(constructor)]
    pub fn new(gpu: &Gpu, names: Vec<String>, files: Array) -> Result<HfModel, JsError> {
        if names.len() != files.length() as usize {
            return Err(js(format!("HfModel: {} names for {} files", names.len(), files.length())));
        }
        let bytes = files.iter().map(|f| Uint8Array::new(&f).to_vec());
        let folder = Folder::files(names.into_iter().zip(bytes));
        let model = Model::from_folder(&folder, &gpu.device).map_err(js)?;
        let tokenizer = Tokenizer::load(&folder).map_err(js)?;
        let leaves = model.leaves();
        let parameters: usize = leaves.iter().map(|t| t.numel()).sum();
        let dtype = leaves.first().map_or(DType::F32, |t| t.dtype());
        let kind = match &model {
            Model::Gpt2(m) => format!("GPT-2, {} layers", m.h.len()),
            Model::Llama(m) => format!("Llama, {} layers", m.layers.len()),
        };
        let description = format!(
            "{kind}, {:.2}M parameters stored in {dtype} ({:.1} MiB), vocabulary of {}",
            parameters as f64 / 1e6,
            model.weight_bytes() as f64 / (1 << 20) as f64,
            tokenizer.vocab_size()
        );
        let state = State { base: model.clone(), current: model, decoder: None, finetune: None };
        Ok(HfModel { inner: Exclusive::new(state), tokenizer, description })
    }

    /// What was loaded, in words.
    #[wasm_bindgen(getter)]
    pub fn description(&self) -> String {
        self.description.clone()
    }

    /// The tokenizer's ids of `text`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, JsError> {
        self.tokenizer.encode(text).map_err(js)
    }

    /// Resolves to the logits (Float32Array `[rows, T, vocab]`) of `ids`
    /// laid out as `rows` rows.
    pub fn logits(&self, ids: Vec<i32>, rows: usize) -> Promise {
        self.inner.call(
            async move |s| {
                let x = Tensor::from_slice(&s.current.device(), &ids, &[rows, ids.len() / rows.max(1)])?;
                Ok(Float32Array::from(s.current.forward(&x)?.to_vec::<f32>().await?.as_slice()))
            },
            |_| {},
        )
    }

    /// Resolves to the `n` tokens (Uint32Array) that greedy decoding
    /// through the KV cache appends to `ids`.
    pub fn greedy(&self, ids: Vec<u32>, n: usize) -> Promise {
        self.inner.call(
            async move |s| Ok(js_sys::Uint32Array::from(s.decoder().greedy(&ids, n).await?.tokens.as_slice())),
            |_| {},
        )
    }

    /// Resolves to JSON `{text, tokens, prompt_tokens, prefill_seconds,
    /// first_step_seconds, decode_rate}`: `tokens` new tokens after
    /// `prompt` through the KV cache, drawn on the device (temperature 0:
    /// greedy; `top_k` 0 and `top_p` 1: no cut).
    pub fn generate(
        &self,
        prompt: String,
        tokens: usize,
        temperature: f64,
        top_k: usize,
        top_p: f64,
        seed: u32,
    ) -> Promise {
        let encoded = self.tokenizer.encode(&prompt);
        let tokenizer = self.tokenizer.clone();
        self.inner.call(
            async move |s| {
                let prompt_ids = encoded?;
                let key = Key::new(u64::from(seed));
                let sampling = Sampling {
                    temperature,
                    top_k: (top_k > 0).then_some(top_k),
                    top_p: (top_p < 1.0).then_some(top_p),
                    key,
                };
                let decoded = s.decoder().sample(&prompt_ids, tokens, &sampling).await?;
                let json = serde_json::json!({
                    "text": format!("{prompt}{}", tokenizer.decode(&decoded.tokens)?),
                    "tokens": decoded.tokens,
                    "prompt_tokens": prompt_ids.len(),
                    "prefill_seconds": decoded.prefill_seconds,
                    "first_step_seconds": decoded.first_step_seconds,
                    "decode_rate": decoded.decode_rate(),
                });
                Ok(JsValue::from(json.to_string()))
            },
            |_| {},
        )
    }

    /// Runs the model with its block projections as `format` (`int8` or
    /// `int4`), or as read (`none`), dropping any adapters.
    pub fn quantize(&self, format: String) -> Promise {
        self.inner.call(
            async move |s| {
                let model = match format.as_str() {
                    "none" => s.base.clone(),
                    "int8" => s.base.quantize(QuantFormat::INT8)?,
                    "int4" => s.base.quantize(QuantFormat::int4(32))?,
                    other => {
                        return Err(KilnError::Invalid {
                            op: "HfModel::quantize",
                            detail: format!("`{other}` is not none, int8 or int4"),
                        });
                    }
                };
                s.run(model);
                Ok(JsValue::UNDEFINED)
            },
            |_| {},
        )
    }

    /// Runs the model with the PEFT adapters of `config`
    /// (`adapter_config.json`'s text) and `weights`
    /// (`adapter_model.safetensors`).
    pub fn load_adapters(&self, config: String, weights: Vec<u8>) -> Promise {
        self.inner.call(
            async move |s| {
                let adapters = Adapters::from_bytes(&config, weights, &s.current)?;
                s.run(s.current.with_lora(&adapters)?);
                Ok(JsValue::from(adapters.loras.len() as u32))
            },
            |_| {},
        )
    }

    /// Starts LoRA fine-tuning of the running model on `text` (the last
    /// 10% held out); `options` a JSON object with any of `rank`, `lr`,
    /// `context`, `batch` and `seed`. Resolves to the adapters' parameter
    /// count.
    pub fn start_finetune(&self, text: String, options: String) -> Promise {
        let tokens = self.tokenizer.encode(&text);
        self.inner.call(
            async move |s| {
                let json: serde_json::Value =
                    serde_json::from_str(if options.is_empty() { "{}" } else { &options }).map_err(|e| {
                        KilnError::Invalid { op: "HfModel::start_finetune", detail: format!("options: {e}") }
                    })?;
                let get = |key: &str| json.get(key).and_then(serde_json::Value::as_f64);
                let mut config = FineTuneConfig::new(get("rank").map_or(8, |r| r as usize));
                config.lr = get("lr").unwrap_or(config.lr);
                config.context = get("context").map_or(config.context, |c| c as usize);
                config.batch = get("batch").map_or(config.batch, |b| b as usize);
                config.seed = get("seed").map_or(config.seed, |v| v as u64);
                let run = FineTune::new(&s.current, &tokens?, config)?;
                let parameters = run.adapters().parameters();
                s.finetune = Some(run);
                Ok(JsValue::from(parameters as u32))
            },
            |_| {},
        )
    }

    /// `n` fine-tuning steps; resolves to a Float32Array of their losses
    /// (nats per token).
    pub fn finetune_steps(&self, n: usize) -> Promise {
        self.inner.call(
            async move |s| {
                let run = s.finetune.as_mut().ok_or_else(not_started)?;
                let mut losses = Vec::with_capacity(n);
                for _ in 0..n {
                    losses.push(run.step().await?);
                }
                let all = Tensor::stack(&losses.iter().collect::<Vec<_>>(), 0)?.to_vec::<f32>().await?;
                Ok(Float32Array::from(all.as_slice()))
            },
            |_| {},
        )
    }

    /// Resolves to the fine-tuning run's validation loss (nats per token).
    pub fn validation_loss(&self) -> Promise {
        self.inner.call(async |s| s.finetune.as_ref().ok_or_else(not_started)?.validation_loss().await, |_| {})
    }

    /// Resolves to `[adapter_config.json's text, adapter_model.safetensors'
    /// bytes]` of the adapters trained so far, and runs the model with them.
    pub fn finish_finetune(&self) -> Promise {
        self.inner.call(
            async |s| {
                let run = s.finetune.take().ok_or_else(not_started)?;
                let (config, weights) = run.adapters().to_bytes().await?;
                s.run(s.current.with_lora(run.adapters())?);
                let files = Array::of2(&JsValue::from(config), &Uint8Array::from(weights.as_slice()));
                Ok(JsValue::from(files))
            },
            |_| {},
        )
    }
}

fn not_started() -> KilnError {
    KilnError::Invalid { op: "HfModel", detail: "no fine-tuning run: call start_finetune first".into() }
}
