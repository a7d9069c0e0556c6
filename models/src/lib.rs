//! Hugging Face checkpoints in kiln: a model folder as people download it
//! (`config.json`, and `model.safetensors` or its shards with
//! `model.safetensors.index.json`), read into a kiln parameter tree whose
//! weights keep the dtype they are stored in (f32, f16 or bf16), and run.
//!
//! - [`config`]: `config.json` for the architectures kiln runs.
//! - [`weights`]: the safetensors files, by tensor name, checked as taken.
//! - [`gpt2`]: `GPT2LMHeadModel`; [`llama`]: `LlamaForCausalLM` (SmolLM,
//!   TinyLlama, Llama 3.2).
//! - [`Tokenizer`]: Hugging Face's `tokenizers` over the folder's files.
//! - [`Adapters`]: LoRA on chosen projections, trained with kiln's
//!   optimizers, in PEFT's files; [`FineTune`] trains them on a corpus.
//! - [`Decoder`]: decoding through a KV cache, one captured step per
//!   token, greedy or drawn on the device ([`Sampling`]).
//!
//! ```no_run
//! # fn main() -> kiln::Result<()> {
//! let dev = kiln::block_on(kiln::Device::gpu())?;
//! let model = kiln_models::Model::load("models/tests/fixtures/gpt2", &dev)?;
//! let ids = kiln::Tensor::from_slice(&dev, &[5i32, 17, 42], &[1, 3])?;
//! let logits = model.forward(&ids)?; // [1, 3, vocab]
//! let next: Vec<u32> = kiln::block_on(model.greedy(&[5, 17, 42], 8))?;
//! # let _ = (logits, next); Ok(()) }
//! ```
#![deny(missing_docs)]

mod cache;
pub mod config;
mod decode;
mod finetune;
mod folder;
pub mod gpt2;
pub mod llama;
pub mod lora;
mod rope;
pub mod sample;
mod tokenizer;
pub mod weights;

pub use decode::{Decoded, Decoder};
pub use finetune::{FineTune, FineTuneConfig};
pub use folder::Folder;
pub use lora::{Adapters, LoraConfig};
pub use sample::Sampling;
pub use tokenizer::Tokenizer;

use config::Architecture;
use kiln::prelude::*;
use kiln_nn::KvCache;
use std::path::Path;

/// A causal language model read from a Hugging Face folder.
#[derive(Clone, Debug)]
pub enum Model {
    /// `GPT2LMHeadModel`.
    Gpt2(gpt2::Gpt2),
    /// `LlamaForCausalLM`.
    Llama(llama::Llama),
}

impl Model {
    /// The model in folder `dir` (its `config.json` and safetensors), on
    /// `device`. A missing or misshapen tensor, an unknown `model_type` or
    /// a truncated file is an error naming it.
    pub fn load(dir: impl AsRef<Path>, device: &Device) -> Result<Model> {
        Model::from_folder(&Folder::dir(dir), device)
    }

    /// [`Model::load`] of a folder on disk or in memory.
    pub fn from_folder(folder: &Folder, device: &Device) -> Result<Model> {
        let mut weights = weights::Weights::open(folder)?;
        let model = match config::read(folder)? {
            Architecture::Gpt2(c) => Model::Gpt2(gpt2::Gpt2::load(c, &mut weights, device)?),
            Architecture::Llama(c) => Model::Llama(llama::Llama::load(c, &mut weights, device)?),
        };
        weights.finish()?;
        Ok(model)
    }

    /// Logits `[B, T, vocab]` (f32) of the next token after each position of
    /// `ids` (`[B, T]`, i32 or u32).
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        match self {
            Model::Gpt2(m) => m.forward(ids),
            Model::Llama(m) => m.forward(ids),
        }
    }

    /// The `n` tokens that greedy decoding (the most likely token, each
    /// step) appends to `prompt` (a [`Tokenizer`]'s ids): what
    /// `transformers`' `generate` gives with `do_sample=False`. Each step
    /// runs the whole window again; [`Decoder`] gives the same tokens
    /// through a KV cache.
    pub async fn greedy(&self, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
        let device = self.device();
        let mut ids = prompt.to_vec();
        for _ in 0..n {
            let x = Tensor::from_slice(&device, &ids, &[1, ids.len()])?;
            let last = self.forward(&x)?.narrow(1, ids.len() - 1, 1)?;
            ids.push(last.argmax(Some(-1), false)?.reshape(&[])?.item::<i32>().await? as u32);
        }
        Ok(ids.split_off(prompt.len()))
    }

    /// The mean cross-entropy (nats) of next tokens `targets` (`[B, T]`)
    /// under the logits of `ids` (`[B, T]`): the language-modelling loss.
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        if targets.shape() != ids.shape() {
            return Err(KilnError::Shape {
                op: "Model::loss",
                detail: format!("ids {:?} and targets {:?} differ", ids.shape(), targets.shape()),
            });
        }
        let logits = self.forward(ids)?;
        let vocab = logits.shape()[2] as isize;
        kiln_nn::loss::cross_entropy(&logits.reshape(&[-1, vocab])?, &targets.reshape(&[-1])?)
    }

    /// [`Model::forward`] over a prompt `[B, T]`, with each layer's keys
    /// and values in caches of `capacity` positions for [`Model::step`].
    pub fn prefill(&self, ids: &Tensor, capacity: usize) -> Result<(Tensor, Vec<KvCache>)> {
        match self {
            Model::Gpt2(m) => m.prefill(ids, capacity),
            Model::Llama(m) => m.prefill(ids, capacity),
        }
    }

    /// Logits `[B, 1, vocab]` of one token per sequence (`[B, 1]`) at
    /// position `pos` (an i32 scalar) after `caches`, and the caches with
    /// it written in.
    pub fn step(&self, token: &Tensor, pos: &Tensor, caches: &[KvCache]) -> Result<(Tensor, Vec<KvCache>)> {
        match self {
            Model::Gpt2(m) => m.step(token, pos, caches),
            Model::Llama(m) => m.step(token, pos, caches),
        }
    }

    /// The model with every projection of its blocks in `format`
    /// (weight-only: int8 per output channel or int4 in groups; activations
    /// stay f32). The token table and the output layer stay float.
    pub fn quantize(&self, format: QuantFormat) -> Result<Model> {
        Ok(match self {
            Model::Gpt2(m) => Model::Gpt2(m.quantize(format)?),
            Model::Llama(m) => Model::Llama(m.quantize(format)?),
        })
    }

    /// Bytes the weights take on the device.
    pub fn weight_bytes(&self) -> u64 {
        self.leaves().iter().map(|t| t.dtype().storage_bytes(t.numel())).sum()
    }

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        match self {
            Model::Gpt2(m) => m.wte.weight.device().clone(),
            Model::Llama(m) => m.embed_tokens.weight.device().clone(),
        }
    }
}

/// The model's weights as a tree (under `Gpt2` or `Llama`'s own paths),
/// so that `kiln::jit` takes it.
impl Tree for Model {
    fn visit<'a>(&'a self, path: &mut kiln::tree::Path, f: &mut dyn FnMut(&kiln::tree::Path, &'a Tensor)) {
        match self {
            Model::Gpt2(m) => m.visit(path, f),
            Model::Llama(m) => m.visit(path, f),
        }
    }

    fn rebuild(&self, path: &mut kiln::tree::Path, leaves: &mut kiln::tree::Leaves) -> Result<Self> {
        Ok(match self {
            Model::Gpt2(m) => Model::Gpt2(m.rebuild(path, leaves)?),
            Model::Llama(m) => Model::Llama(m.rebuild(path, leaves)?),
        })
    }
}

/// `tree` with every floating leaf as f32: the models compute in f32 over
/// weights stored in any float dtype (the casts are lazy, and fuse).
pub(crate) fn as_f32<T: Tree>(tree: &T) -> Result<T> {
    tree.map_leaves(|_, w| if w.dtype().is_float() { w.cast(DType::F32) } else { Ok(w.clone()) })
}

/// `[B, T, heads · head_dim]` → `[B, heads, T, head_dim]`.
pub(crate) fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    let [b, t, width] = x.shape()[..] else { unreachable!("a [B, T, width] activation") };
    x.reshape(&[b as isize, t as isize, heads as isize, (width / heads) as isize])?.permute(&[0, 2, 1, 3])
}

/// `[B, heads, T, head_dim]` → `[B, T, heads · head_dim]`.
pub(crate) fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let [b, heads, t, d] = x.shape()[..] else { unreachable!("[B, heads, T, head_dim]") };
    x.permute(&[0, 2, 1, 3])?.reshape(&[b as isize, t as isize, (heads * d) as isize])
}

/// The error of a step given no caches.
pub(crate) fn no_caches(model: &'static str) -> KilnError {
    KilnError::Invalid { op: model, detail: "a step needs the caches prefill made".into() }
}

/// The error of a forward pass given ids it cannot take.
pub(crate) fn check_ids(model: &'static str, ids: &Tensor, context: Option<usize>) -> Result<()> {
    let fits = context.is_none_or(|c| ids.shape().get(1).is_some_and(|&t| t <= c));
    if ids.rank() != 2 || !ids.dtype().is_int() || !fits {
        let limit = context.map_or(String::new(), |c| format!(" with T ≤ {c}"));
        return Err(KilnError::Shape {
            op: model,
            detail: format!("takes integer ids [B, T]{limit}, got {} {:?}", ids.dtype(), ids.shape()),
        });
    }
    Ok(())
}
