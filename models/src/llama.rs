//! `LlamaForCausalLM` (SmolLM, TinyLlama, Llama 3.2): RMS norms, rotary
//! positions, SwiGLU, grouped-query attention, and a tied or untied head.
//! Projections are stored as PyTorch's `nn.Linear` keeps them, `[out, in]`.
//! The norms are kiln-nn's `RmsNorm`; the forward pass is in f32, as
//! transformers computes Llama's mean squares.

use crate::cache::{self, Past};
use crate::config::LlamaConfig;
use crate::weights::Weights;
use crate::{as_f32, check_ids, merge_heads, no_caches, rope, split_heads};
use kiln::prelude::*;
use kiln_nn::{Adapted, Embedding, KvCache, Lora, QuantizedLinear, RmsNorm};

/// A weight as PyTorch's `nn.Linear` stores it, `[out, in]`, and its bias.
#[derive(Tree, Clone, Debug)]
pub struct StoredProjection {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`, where the config asks for biases.
    pub bias: Option<Tensor>,
}

/// `x @ weightᵀ + bias`: float weights as stored, or integer codes made by
/// [`Projection::quantize`]. Its leaves are the inner one's.
#[derive(Clone, Debug)]
pub enum Projection {
    /// The stored weight.
    Float(StoredProjection),
    /// Integer weights (codes `[out, in / per_word]`).
    Quantized(QuantizedLinear),
    /// A projection with a low-rank update beside it ([`Projection::adapted`]).
    Adapted(Box<Adapted<Projection>>),
}

impl Projection {
    fn load(weights: &mut Weights, name: &str, shape: [usize; 2], bias: bool, device: &Device) -> Result<Projection> {
        let weight = weights.take(&format!("{name}.weight"), &shape, device)?;
        let bias = if bias { Some(weights.take(&format!("{name}.bias"), &shape[..1], device)?) } else { None };
        Ok(Projection::Float(StoredProjection { weight, bias }))
    }

    /// `[.., in]` → `[.., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let p = match self {
            Projection::Float(p) => p,
            Projection::Quantized(q) => return q.forward(x),
            Projection::Adapted(a) => return a.base.forward(x)?.add(&a.lora.forward(x)?),
        };
        let y = x.matmul(&p.weight.t()?)?;
        match &p.bias {
            Some(b) => y + b,
            None => Ok(y),
        }
    }

    /// The weight in `format` where its rows fill whole words (otherwise,
    /// or already quantized, unchanged); the bias stays float.
    pub fn quantize(&self, format: QuantFormat) -> Result<Projection> {
        Ok(match self {
            Projection::Float(p) if format.packs(p.weight.shape()[1]) => {
                let (codes, scales) = p.weight.quantize(format)?;
                Projection::Quantized(QuantizedLinear {
                    codes,
                    scales,
                    bias: p.bias.clone(),
                    format,
                    int8_activations: false,
                })
            }
            Projection::Adapted(a) => {
                Projection::Adapted(Box::new(Adapted { base: a.base.quantize(format)?, lora: a.lora.clone() }))
            }
            other => other.clone(),
        })
    }

    /// Inputs per row.
    pub fn inputs(&self) -> usize {
        match self {
            Projection::Float(p) => p.weight.shape()[1],
            Projection::Quantized(q) => q.inputs(),
            Projection::Adapted(a) => a.base.inputs(),
        }
    }

    /// Outputs per row.
    pub fn outputs(&self) -> usize {
        match self {
            Projection::Float(p) => p.weight.shape()[0],
            Projection::Quantized(q) => q.codes.shape()[0],
            Projection::Adapted(a) => a.base.outputs(),
        }
    }

    /// An adapted float projection with its update added into the stored
    /// weight (`w + scale · b a`, in `w`'s dtype), as PEFT's
    /// `merge_and_unload`; others as they are.
    pub fn merged(&self) -> Result<Projection> {
        let Projection::Adapted(a) = self else { return Ok(self.clone()) };
        let Projection::Float(p) = &a.base else { return Ok(self.clone()) };
        let delta = a.lora.b.matmul(&a.lora.a)?.mul_scalar(a.lora.scale)?;
        let weight = p.weight.cast(DType::F32)?.add(&delta)?.cast(p.weight.dtype())?;
        Ok(Projection::Float(StoredProjection { weight, bias: p.bias.clone() }))
    }

    /// This projection with `lora`'s update added to its output. Errors
    /// unless the adapter's sides are this projection's.
    pub fn adapted(&self, lora: Lora) -> Result<Projection> {
        lora.check_fits("Projection::adapted", self.inputs(), self.outputs())?;
        Ok(Projection::Adapted(Box::new(Adapted { base: self.clone(), lora })))
    }
}

impl Tree for Projection {
    fn visit<'a>(&'a self, path: &mut kiln::tree::Path, f: &mut dyn FnMut(&kiln::tree::Path, &'a Tensor)) {
        match self {
            Projection::Float(p) => p.visit(path, f),
            Projection::Quantized(q) => q.visit(path, f),
            Projection::Adapted(a) => a.visit(path, f),
        }
    }

    fn rebuild(&self, path: &mut kiln::tree::Path, leaves: &mut kiln::tree::Leaves) -> Result<Self> {
        Ok(match self {
            Projection::Float(p) => Projection::Float(p.rebuild(path, leaves)?),
            Projection::Quantized(q) => Projection::Quantized(q.rebuild(path, leaves)?),
            Projection::Adapted(a) => Projection::Adapted(a.rebuild(path, leaves)?),
        })
    }
}

/// One decoder layer: `x + attention(norm(x))`, then `x + mlp(norm(x))`.
#[derive(Tree, Clone, Debug)]
pub struct LlamaLayer {
    /// The norm before attention.
    pub input_layernorm: RmsNorm,
    /// Queries, `[heads · head_dim, hidden]`.
    pub q_proj: Projection,
    /// Keys, `[kv_heads · head_dim, hidden]`.
    pub k_proj: Projection,
    /// Values, `[kv_heads · head_dim, hidden]`.
    pub v_proj: Projection,
    /// Attention's output, `[hidden, heads · head_dim]`.
    pub o_proj: Projection,
    /// The norm before the MLP.
    pub post_attention_layernorm: RmsNorm,
    /// SwiGLU's gate, `[intermediate, hidden]`.
    pub gate_proj: Projection,
    /// SwiGLU's value, `[intermediate, hidden]`.
    pub up_proj: Projection,
    /// The MLP's output, `[hidden, intermediate]`.
    pub down_proj: Projection,
}

/// Llama with its language-model head.
#[derive(Tree, Clone, Debug)]
pub struct Llama {
    /// Token embeddings `[vocab, hidden]`.
    pub embed_tokens: Embedding,
    /// The decoder layers, input first.
    pub layers: Vec<LlamaLayer>,
    /// The final norm.
    pub norm: RmsNorm,
    /// The output layer `[vocab, hidden]`; `None` where it is the token table.
    pub lm_head: Option<Projection>,
    #[tree(skip)]
    config: LlamaConfig,
}

impl LlamaLayer {
    fn load(c: &LlamaConfig, weights: &mut Weights, i: usize, device: &Device) -> Result<LlamaLayer> {
        let (h, q, kv, m) = (c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim, c.intermediate);
        let mut proj = |name: &str, shape: [usize; 2], bias: bool| {
            Projection::load(weights, &format!("model.layers.{i}.{name}"), shape, bias, device)
        };
        let (q_proj, k_proj) =
            (proj("self_attn.q_proj", [q, h], c.attention_bias)?, proj("self_attn.k_proj", [kv, h], c.attention_bias)?);
        let (v_proj, o_proj) =
            (proj("self_attn.v_proj", [kv, h], c.attention_bias)?, proj("self_attn.o_proj", [h, q], c.attention_bias)?);
        let (gate_proj, up_proj) =
            (proj("mlp.gate_proj", [m, h], c.mlp_bias)?, proj("mlp.up_proj", [m, h], c.mlp_bias)?);
        let down_proj = proj("mlp.down_proj", [h, m], c.mlp_bias)?;
        let mut norm = |name: &str| -> Result<RmsNorm> {
            Ok(RmsNorm { weight: weights.take(&format!("model.layers.{i}.{name}.weight"), &[h], device)?, eps: c.eps })
        };
        let (input_layernorm, post_attention_layernorm) = (norm("input_layernorm")?, norm("post_attention_layernorm")?);
        Ok(LlamaLayer {
            input_layernorm,
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            post_attention_layernorm,
            gate_proj,
            up_proj,
            down_proj,
        })
    }

    fn quantize(&self, format: QuantFormat) -> Result<LlamaLayer> {
        Ok(LlamaLayer {
            q_proj: self.q_proj.quantize(format)?,
            k_proj: self.k_proj.quantize(format)?,
            v_proj: self.v_proj.quantize(format)?,
            o_proj: self.o_proj.quantize(format)?,
            gate_proj: self.gate_proj.quantize(format)?,
            up_proj: self.up_proj.quantize(format)?,
            down_proj: self.down_proj.quantize(format)?,
            ..self.clone()
        })
    }

    fn forward(&self, x: &Tensor, c: &LlamaConfig, rope: (&Tensor, &Tensor), past: Past) -> Result<(Tensor, KvCache)> {
        let a = self.input_layernorm.forward(x)?;
        let q = rope::apply(&split_heads(&self.q_proj.forward(&a)?, c.heads)?, rope.0, rope.1)?;
        let k = rope::apply(&split_heads(&self.k_proj.forward(&a)?, c.kv_heads)?, rope.0, rope.1)?;
        let v = split_heads(&self.v_proj.forward(&a)?, c.kv_heads)?;
        let (attended, cache) = cache::attend(&q, &k, &v, past, |t| shared_by_groups(t, c.heads))?;
        let x = (x + self.o_proj.forward(&merge_heads(&attended)?)?)?;
        let m = self.post_attention_layernorm.forward(&x)?;
        let gate = self.gate_proj.forward(&m)?;
        let swiglu = ((&gate * gate.sigmoid()?)? * self.up_proj.forward(&m)?)?;
        Ok(((&x + self.down_proj.forward(&swiglu)?)?, cache))
    }
}

/// Key or value heads `[B, kv_heads, T, d]` repeated for the `heads`
/// queries that share each (grouped-query attention): `[B, heads, T, d]`.
fn shared_by_groups(x: &Tensor, heads: usize) -> Result<Tensor> {
    let [b, kv, t, d] = x.shape()[..] else { unreachable!("[B, kv_heads, T, head_dim]") };
    if kv == heads {
        return Ok(x.clone());
    }
    let wide = x.unsqueeze(2)?.expand(&[b, kv, heads / kv, t, d])?;
    wide.reshape(&[b as isize, heads as isize, t as isize, d as isize])
}

impl Llama {
    /// The model of `config` from `weights`, on `device`.
    pub fn load(config: LlamaConfig, weights: &mut Weights, device: &Device) -> Result<Llama> {
        let (vocab, hidden) = (config.vocab, config.hidden);
        let embed_tokens = Embedding { weight: weights.take("model.embed_tokens.weight", &[vocab, hidden], device)? };
        let layers =
            (0..config.layers).map(|i| LlamaLayer::load(&config, weights, i, device)).collect::<Result<_>>()?;
        let norm = RmsNorm { weight: weights.take("model.norm.weight", &[hidden], device)?, eps: config.eps };
        // Tied checkpoints may still store the head (the same values).
        let lm_head = match (config.tied, weights.contains("lm_head.weight")) {
            (true, true) => {
                weights.take("lm_head.weight", &[vocab, hidden], device)?;
                None
            }
            (true, false) => None,
            (false, _) => Some(Projection::load(weights, "lm_head", [vocab, hidden], false, device)?),
        };
        Ok(Llama { embed_tokens, layers, norm, lm_head, config })
    }

    /// The model with every layer's projections in `format` (the token
    /// table and the head stay float).
    pub fn quantize(&self, format: QuantFormat) -> Result<Llama> {
        let layers = self.layers.iter().map(|l| l.quantize(format)).collect::<Result<_>>()?;
        Ok(Llama { layers, ..self.clone() })
    }

    /// Each layer's projections by their module path in transformers.
    pub(crate) fn sites(&mut self) -> Vec<(String, &mut Projection)> {
        let mut sites = Vec::new();
        for (i, l) in self.layers.iter_mut().enumerate() {
            let named = [
                ("self_attn.q_proj", &mut l.q_proj),
                ("self_attn.k_proj", &mut l.k_proj),
                ("self_attn.v_proj", &mut l.v_proj),
                ("self_attn.o_proj", &mut l.o_proj),
                ("mlp.gate_proj", &mut l.gate_proj),
                ("mlp.up_proj", &mut l.up_proj),
                ("mlp.down_proj", &mut l.down_proj),
            ];
            sites.extend(named.map(|(name, p)| (format!("model.layers.{i}.{name}"), p)));
        }
        sites
    }

    /// The config the model was read with.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// Logits `[B, T, vocab]` (f32) of `ids` (`[B, T]`).
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        check_ids("Llama", ids, None)?;
        Ok(self.run(ids, &[], Past::Window { capacity: ids.shape()[1] })?.0)
    }

    /// [`Llama::forward`] over a prompt, with each layer's keys and values
    /// in a cache of `capacity` positions for [`Llama::step`].
    pub fn prefill(&self, ids: &Tensor, capacity: usize) -> Result<(Tensor, Vec<KvCache>)> {
        check_ids("Llama", ids, Some(capacity))?;
        self.run(ids, &[], Past::Window { capacity })
    }

    /// Logits `[B, 1, vocab]` of one token per sequence (`[B, 1]`) at
    /// position `pos` (an i32 scalar) after `caches`, and the caches with
    /// it written in.
    pub fn step(&self, token: &Tensor, pos: &Tensor, caches: &[KvCache]) -> Result<(Tensor, Vec<KvCache>)> {
        check_ids("Llama", token, Some(1))?;
        let Some(first) = caches.first() else { return Err(no_caches("Llama")) };
        self.run(token, caches, Past::Step { cache: first, pos })
    }

    /// A pass over `ids`; a step reads layer `i`'s cache from `caches`.
    fn run(&self, ids: &Tensor, caches: &[KvCache], past: Past) -> Result<(Tensor, Vec<KvCache>)> {
        let m = as_f32(self)?;
        let c = &self.config;
        let (cos, sin) = match past {
            Past::Window { .. } => rope::tables(ids.device(), &c.rope, c.head_dim, ids.shape()[1])?,
            Past::Step { cache, pos } => {
                let (cos, sin) = rope::tables(ids.device(), &c.rope, c.head_dim, cache.capacity())?;
                let at = pos.reshape(&[1])?;
                (cos.index_select(0, &at)?, sin.index_select(0, &at)?)
            }
        };
        let mut x = m.embed_tokens.forward(ids)?;
        let mut after = Vec::new();
        for (i, layer) in m.layers.iter().enumerate() {
            let past = past.of_layer(caches, i)?;
            let (y, cache) =
                layer.forward(&x, c, (&cos, &sin), past).map_err(|e| e.within(&format!("model.layers.{i}")))?;
            x = y;
            after.push(cache);
        }
        let x = m.norm.forward(&x)?;
        let logits = match &m.lm_head {
            Some(head) => head.forward(&x)?,
            None => m.embed_tokens.attend(&x)?,
        };
        Ok((logits, after))
    }
}
