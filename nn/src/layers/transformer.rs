//! The pre-norm transformer block: `x + attn(norm(x))`, then
//! `x + mlp(norm(x))`, as GPT-2.

use super::quantized::codes_under;
use super::{CausalSelfAttention, Dense, KvCache, LayerNorm, Linear, QuantizedTree};
use crate::init;
use kiln::Key;
use kiln::prelude::*;

/// `gelu(x @ up) @ down`, 4× wider in between (GPT-2).
#[derive(Tree, Clone, Debug)]
pub struct GeluMlp {
    /// `[dim, 4·dim]`, before the GELU.
    pub up: Dense,
    /// `[4·dim, dim]`, back to the width.
    pub down: Dense,
}

impl QuantizedTree for GeluMlp {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        [codes_under("up", &self.up), codes_under("down", &self.down)].concat()
    }
}

impl QuantizedTree for Block {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        [codes_under("attention", &self.attention), codes_under("mlp", &self.mlp)].concat()
    }
}

impl GeluMlp {
    /// N(0, 0.02) weights, `down`'s divided by `residual_scale`; zero biases.
    pub fn new(dev: &Device, key: Key, dim: usize, residual_scale: f64) -> Result<GeluMlp> {
        let linear = |key, inputs, outputs, std| -> Result<Dense> {
            Ok(Dense::Float(Linear {
                weight: init::normal(dev, key, &[inputs, outputs], std)?,
                bias: Some(init::zeros(dev, &[outputs])?),
            }))
        };
        Ok(GeluMlp {
            up: linear(key.fold_in(0), dim, 4 * dim, 0.02)?,
            down: linear(key.fold_in(1), 4 * dim, dim, 0.02 / residual_scale)?,
        })
    }

    /// `x` `[.., dim]` → `[.., dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.down.forward(&self.up.forward(x)?.gelu()?)
    }

    /// Both projections' weights in `format` ([`Dense::quantize`]).
    pub fn quantize(&self, format: QuantFormat) -> Result<GeluMlp> {
        Ok(GeluMlp { up: self.up.quantize(format)?, down: self.down.quantize(format)? })
    }
}

/// A pre-norm transformer block: `x + attention(norm1(x))`, then
/// `x + mlp(norm2(x))`.
#[derive(Tree, Clone, Debug)]
pub struct Block {
    /// Before the attention.
    pub norm1: LayerNorm,
    /// Causal self-attention.
    pub attention: CausalSelfAttention,
    /// Before the MLP.
    pub norm2: LayerNorm,
    /// The feed-forward half.
    pub mlp: GeluMlp,
}

impl Block {
    /// A block for a stack of `layers`: the projections into the residual
    /// stream start `sqrt(2 · layers)` times smaller, so the stream's
    /// variance does not grow with depth (GPT-2).
    pub fn new(dev: &Device, key: Key, dim: usize, heads: usize, layers: usize) -> Result<Block> {
        let residual_scale = (2.0 * layers.max(1) as f64).sqrt();
        let mut attention = CausalSelfAttention::new(dev, key.fold_in(0), dim, heads)?;
        if let Dense::Float(out) = &mut attention.out {
            out.weight = out.weight.div_scalar(residual_scale)?;
        }
        Ok(Block {
            norm1: LayerNorm::new(dev, dim)?,
            attention,
            norm2: LayerNorm::new(dev, dim)?,
            mlp: GeluMlp::new(dev, key.fold_in(1), dim, residual_scale)?,
        })
    }

    /// The block with its four projections' weights in `format`; the norms
    /// stay f32.
    pub fn quantize(&self, format: QuantFormat) -> Result<Block> {
        Ok(Block { attention: self.attention.quantize(format)?, mlp: self.mlp.quantize(format)?, ..self.clone() })
    }

    /// `x` `[B, T, dim]`; `padding` as [`CausalSelfAttention::forward`].
    pub fn forward(&self, x: &Tensor, padding: Option<&Tensor>) -> Result<Tensor> {
        self.feed_forward(&x.add(&self.attention.forward(&self.norm1.forward(x)?, padding)?)?)
    }

    /// The second half: `x + mlp(norm2(x))`.
    fn feed_forward(&self, x: &Tensor) -> Result<Tensor> {
        x.add(&self.mlp.forward(&self.norm2.forward(x)?)?)
    }

    /// One position through the block with the attention's cache, as
    /// [`CausalSelfAttention::forward_cached`].
    pub fn forward_cached(&self, x: &Tensor, cache: &KvCache, pos: &Tensor) -> Result<(Tensor, KvCache)> {
        let (a, cache) = self.attention.forward_cached(&self.norm1.forward(x)?, cache, pos)?;
        Ok((self.feed_forward(&x.add(&a)?)?, cache))
    }
}
