//! `GPT2LMHeadModel`: learned positions, pre-norm blocks whose projections
//! are `Conv1D` (weights stored `[in, out]`, as kiln's `Linear`), GELU in
//! its tanh form (`gelu_new`), and the token table as the output layer.

use crate::cache::{self, Past};
use crate::config::Gpt2Config;
use crate::weights::Weights;
use crate::{as_f32, check_ids, merge_heads, no_caches, split_heads};
use kiln::prelude::*;
use kiln_nn::{Dense, Embedding, KvCache, LayerNorm, Linear};

/// One pre-norm block: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
#[derive(Tree, Clone, Debug)]
pub struct Gpt2Block {
    /// The norm before attention.
    pub ln_1: LayerNorm,
    /// Queries, keys and values in one product: `[width, 3 · width]`.
    pub c_attn: Dense,
    /// Attention's output projection.
    pub attn_proj: Dense,
    /// The norm before the MLP.
    pub ln_2: LayerNorm,
    /// The MLP's first layer, `[width, inner]`.
    pub c_fc: Dense,
    /// The MLP's second layer, `[inner, width]`.
    pub mlp_proj: Dense,
    #[tree(skip)]
    heads: usize,
}

/// GPT-2 with its language-model head (tied to the token table).
#[derive(Tree, Clone, Debug)]
pub struct Gpt2 {
    /// Token embeddings `[vocab, width]`, also the output layer.
    pub wte: Embedding,
    /// Position embeddings `[positions, width]`.
    pub wpe: Embedding,
    /// The blocks, input first.
    pub h: Vec<Gpt2Block>,
    /// The final norm.
    pub ln_f: LayerNorm,
    #[tree(skip)]
    config: Gpt2Config,
}

impl Gpt2Block {
    fn quantize(&self, format: QuantFormat) -> Result<Gpt2Block> {
        Ok(Gpt2Block {
            c_attn: self.c_attn.quantize(format)?,
            attn_proj: self.attn_proj.quantize(format)?,
            c_fc: self.c_fc.quantize(format)?,
            mlp_proj: self.mlp_proj.quantize(format)?,
            ..self.clone()
        })
    }

    fn forward(&self, x: &Tensor, past: Past) -> Result<(Tensor, KvCache)> {
        let width = x.shape()[2];
        let qkv = self.c_attn.forward(&self.ln_1.forward(x)?)?;
        let [q, k, v] = [0, 1, 2].map(|i| qkv.narrow(2, i * width, width).and_then(|t| split_heads(&t, self.heads)));
        let (attended, cache) = cache::attend(&q?, &k?, &v?, past, |t| Ok(t.clone()))?;
        let x = (x + self.attn_proj.forward(&merge_heads(&attended)?)?)?;
        let hidden = self.c_fc.forward(&self.ln_2.forward(&x)?)?.gelu()?;
        Ok(((&x + self.mlp_proj.forward(&hidden)?)?, cache))
    }
}

impl Gpt2 {
    /// The model of `config` from `weights` (names with or without the
    /// `transformer.` prefix), on `device`.
    pub fn load(config: Gpt2Config, weights: &mut Weights, device: &Device) -> Result<Gpt2> {
        let prefix = if weights.contains("transformer.wte.weight") { "transformer." } else { "" };
        let Gpt2Config { vocab, positions, width, inner, eps, .. } = config;
        let mut take = |name: &str, shape: &[usize]| weights.take(&format!("{prefix}{name}"), shape, device);
        let wte = Embedding { weight: take("wte.weight", &[vocab, width])? };
        let wpe = Embedding { weight: take("wpe.weight", &[positions, width])? };
        let mut h = Vec::new();
        for i in 0..config.layers {
            let mut linear = |name: &str, inputs: usize, outputs: usize| -> Result<Dense> {
                let weight = take(&format!("h.{i}.{name}.weight"), &[inputs, outputs])?;
                Ok(Dense::Float(Linear { weight, bias: Some(take(&format!("h.{i}.{name}.bias"), &[outputs])?) }))
            };
            let (c_attn, attn_proj) = (linear("attn.c_attn", width, 3 * width)?, linear("attn.c_proj", width, width)?);
            let (c_fc, mlp_proj) = (linear("mlp.c_fc", width, inner)?, linear("mlp.c_proj", inner, width)?);
            let mut norm = |name: &str| -> Result<LayerNorm> {
                let weight = take(&format!("h.{i}.{name}.weight"), &[width])?;
                Ok(LayerNorm { weight, bias: take(&format!("h.{i}.{name}.bias"), &[width])?, eps })
            };
            let (ln_1, ln_2) = (norm("ln_1")?, norm("ln_2")?);
            h.push(Gpt2Block { ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj, heads: config.heads });
        }
        let ln_f = LayerNorm { weight: take("ln_f.weight", &[width])?, bias: take("ln_f.bias", &[width])?, eps };
        if weights.contains("lm_head.weight") {
            // Saved beside the tied table by some exports: the same values.
            weights.take("lm_head.weight", &[vocab, width], device)?;
        }
        Ok(Gpt2 { wte, wpe, h, ln_f, config })
    }

    /// The model with every block's projections in `format` (the token
    /// table, also the head, stays float).
    pub fn quantize(&self, format: QuantFormat) -> Result<Gpt2> {
        let h = self.h.iter().map(|b| b.quantize(format)).collect::<Result<_>>()?;
        Ok(Gpt2 { h, ..self.clone() })
    }

    /// Each block's projections by their module path in transformers.
    pub(crate) fn sites(&mut self) -> Vec<(String, &mut Dense)> {
        let mut sites = Vec::new();
        for (i, b) in self.h.iter_mut().enumerate() {
            let named = [
                ("attn.c_attn", &mut b.c_attn),
                ("attn.c_proj", &mut b.attn_proj),
                ("mlp.c_fc", &mut b.c_fc),
                ("mlp.c_proj", &mut b.mlp_proj),
            ];
            sites.extend(named.map(|(name, d)| (format!("transformer.h.{i}.{name}"), d)));
        }
        sites
    }

    /// The config the model was read with.
    pub fn config(&self) -> &Gpt2Config {
        &self.config
    }

    /// Logits `[B, T, vocab]` (f32) of `ids` (`[B, T]`, `T ≤ positions`).
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        check_ids("Gpt2", ids, Some(self.config.positions))?;
        Ok(self.run(ids, &[], Past::Window { capacity: ids.shape()[1] })?.0)
    }

    /// [`Gpt2::forward`] over a prompt, with each block's keys and values
    /// in a cache of `capacity` positions (at most `positions`) for
    /// [`Gpt2::step`].
    pub fn prefill(&self, ids: &Tensor, capacity: usize) -> Result<(Tensor, Vec<KvCache>)> {
        check_ids("Gpt2", ids, Some(capacity.min(self.config.positions)))?;
        self.run(ids, &[], Past::Window { capacity })
    }

    /// Logits `[B, 1, vocab]` of one token per sequence (`[B, 1]`) at
    /// position `pos` (an i32 scalar) after `caches`, and the caches with
    /// it written in.
    pub fn step(&self, token: &Tensor, pos: &Tensor, caches: &[KvCache]) -> Result<(Tensor, Vec<KvCache>)> {
        check_ids("Gpt2", token, Some(1))?;
        let Some(first) = caches.first() else { return Err(no_caches("Gpt2")) };
        self.run(token, caches, Past::Step { cache: first, pos })
    }

    /// A pass over `ids`; a step reads block `i`'s cache from `caches`.
    fn run(&self, ids: &Tensor, caches: &[KvCache], past: Past) -> Result<(Tensor, Vec<KvCache>)> {
        let m = as_f32(self)?;
        let positions = cache::positions(ids.device(), past, ids.shape()[1])?;
        let mut x = (m.wte.forward(ids)? + m.wpe.forward(&positions)?)?;
        let mut after = Vec::new();
        for (i, block) in m.h.iter().enumerate() {
            let past = past.of_layer(caches, i)?;
            let (y, cache) = block.forward(&x, past).map_err(|e| e.within(&format!("h.{i}")))?;
            x = y;
            after.push(cache);
        }
        Ok((m.wte.attend(&m.ln_f.forward(&x)?)?, after))
    }
}
