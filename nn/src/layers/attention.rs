//! Causal multi-head self-attention, with an optional padding mask, and a
//! fixed-size key/value cache for generating one token at a time.

use super::quantized::codes_under;
use super::{Dense, Linear, QuantizedTree, bad_input};
use crate::init;
use kiln::prelude::*;
use kiln::{Key, KilnError};

/// What a masked score becomes before the softmax: finite, so a row whose
/// every key is masked (a padded query) gives a uniform row, not NaN.
const MASKED: f64 = -1e9;

/// `heads` heads of width `dim / heads` over `[batch, time, dim]`.
#[derive(Tree, Clone, Debug)]
pub struct CausalSelfAttention {
    /// `[dim, 3·dim]`: the queries', keys' and values' projections side by side.
    pub qkv: Dense,
    /// `[dim, dim]`: the merged heads back to the width.
    pub out: Dense,
    /// Number of heads; must divide `dim`.
    #[tree(skip)]
    pub heads: usize,
    /// Add ALiBi's linear distance penalty to the scores (Press et al.
    /// 2022): head `h` of `H` scores key `j` for query `i` lower by
    /// `2^(-8(h+1)/H) · (i − j)`, so position comes from the layer itself
    /// and depends only on distance.
    #[tree(skip)]
    pub alibi: bool,
}

impl QuantizedTree for CausalSelfAttention {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        [codes_under("qkv", &self.qkv), codes_under("out", &self.out)].concat()
    }
}

/// The keys and values of the positions seen so far, `[batch, heads,
/// capacity, head_dim]` each; positions not yet written are masked out.
#[derive(Tree, Clone, Debug)]
pub struct KvCache {
    /// Keys `[batch, heads, capacity, head_dim]`, f32.
    pub keys: Tensor,
    /// Values `[batch, heads, capacity, head_dim]`, f32.
    pub values: Tensor,
}

impl KvCache {
    /// An empty cache for `attention` over `batch` sequences of at most
    /// `capacity` positions.
    pub fn new(attention: &CausalSelfAttention, dev: &Device, batch: usize, capacity: usize) -> Result<KvCache> {
        check_heads(attention.dim(), attention.heads)?;
        let shape = [batch, attention.heads, capacity, attention.head_dim()];
        Ok(KvCache { keys: Tensor::zeros(dev, &shape, DType::F32)?, values: Tensor::zeros(dev, &shape, DType::F32)? })
    }

    /// Positions the cache holds (0 for a cache not of rank 4, which
    /// `forward_cached` refuses).
    pub fn capacity(&self) -> usize {
        self.keys.shape().get(2).copied().unwrap_or(0)
    }
}

/// Whether a width splits evenly into heads (the public fields allow any).
fn check_heads(dim: usize, heads: usize) -> Result<()> {
    if heads == 0 || !dim.is_multiple_of(heads) {
        return Err(KilnError::Invalid {
            op: "CausalSelfAttention",
            detail: format!("width {dim} does not split into {heads} heads"),
        });
    }
    Ok(())
}

/// Causal attention over queries, keys and values `[B, heads, T,
/// head_dim]`: each query's softmax-weighted values of the keys at or
/// before its position, scores `q·k / √head_dim` (minus ALiBi's distance
/// penalty with `alibi`). The layer's core without its projections, for
/// heads computed elsewhere; where the device runs it, one kernel
/// (docs/ARCHITECTURE.md, 'Transformers').
pub fn causal_attention(q: &Tensor, k: &Tensor, v: &Tensor, alibi: bool) -> Result<Tensor> {
    let shape = q.shape();
    if q.rank() != 4 || k.shape() != shape || v.shape() != shape {
        return Err(KilnError::Shape {
            op: "causal_attention",
            detail: format!(
                "takes q, k and v of one shape [B, heads, T, head_dim], got {shape:?}, {:?} and {:?}",
                k.shape(),
                v.shape()
            ),
        });
    }
    let at = Tensor::arange(q.device(), 0.0, shape[2] as f64, 1.0, DType::I32)?;
    mix([q, k, v], alibi, &at.unsqueeze(1)?, &at.unsqueeze(0)?, None)
}

/// Attention of queries at positions `query_pos` (`[Tq, 1]`, i32) over
/// keys and values at `key_pos` (`[1, Tk]`): each query sees the keys not
/// after it, so a fixed-capacity cache's unwritten tail is never seen. `q`
/// is `[B, heads, Tq, head_dim]`, `k` and `v` `[B, heads, Tk, head_dim]`;
/// the scores are scaled by `1/√head_dim`. What a KV-cached decoding step
/// runs for a model whose layers are its own (`kiln-models`).
pub fn attention_at(q: &Tensor, k: &Tensor, v: &Tensor, query_pos: &Tensor, key_pos: &Tensor) -> Result<Tensor> {
    let (qs, ks) = (q.shape(), k.shape());
    if q.rank() != 4 || k.rank() != 4 || v.shape() != ks || qs[..2] != ks[..2] || qs[3] != ks[3] {
        return Err(KilnError::Shape {
            op: "attention_at",
            detail: format!(
                "takes q [B, heads, Tq, d] and k, v [B, heads, Tk, d], got {qs:?}, {ks:?} and {:?}",
                v.shape()
            ),
        });
    }
    mix([q, k, v], false, query_pos, key_pos, None)
}

/// The floating-point operations of [`causal_attention`] over heads of
/// `shape` `[B, heads, T, head_dim]`: its two `T × T` products, the masked
/// half counted (as benchmarks count it, so that rates compare across
/// versions of the kernel).
pub fn causal_attention_flops(shape: &[usize]) -> f64 {
    let [b, heads, t, head_dim] = shape[..] else { return 0.0 };
    4.0 * (b * heads * t * t * head_dim) as f64
}

/// Softmax-weighted values of the keys at `key_pos` (`[1, Tk]`, i32) that
/// a query at `query_pos` (`[Tq, 1]`) may see (the key is not after it, and
/// `visible`, broadcast to `[B, heads, Tq, Tk]`, allows it): `[B, heads,
/// Tq, head_dim]`.
fn mix(
    [q, k, v]: [&Tensor; 3],
    alibi: bool,
    query_pos: &Tensor,
    key_pos: &Tensor,
    visible: Option<&Tensor>,
) -> Result<Tensor> {
    let (heads, head_dim) = (q.shape()[1], q.shape()[3]);
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut scores = q.matmul(&k.transpose(-1, -2)?)?.mul_scalar(scale)?;
    if alibi {
        let slopes: Vec<f32> = (0..heads).map(|h| (-8.0 * (h + 1) as f32 / heads as f32).exp2()).collect();
        let slopes = Tensor::from_slice(q.device(), &slopes, &[1, heads, 1, 1])?;
        scores = scores.add(&key_pos.sub(query_pos)?.cast(DType::F32)?.mul(&slopes)?)?;
    }
    let mut allowed = key_pos.le(query_pos)?;
    if let Some(visible) = visible {
        allowed = allowed.logical_and(visible)?;
    }
    let scores = Tensor::where_cond(&allowed, &scores, &scores.scalar_like(MASKED)?)?;
    scores.softmax(-1)?.matmul(v)
}

impl CausalSelfAttention {
    /// Projections N(0, 0.02) with zero biases (GPT-2's initialization);
    /// the output projection's std is further divided by `sqrt(2 · layers)`
    /// by the caller that knows the depth.
    pub fn new(dev: &Device, key: Key, dim: usize, heads: usize) -> Result<CausalSelfAttention> {
        check_heads(dim, heads)?;
        let [kq, ko] = [key.fold_in(0), key.fold_in(1)];
        let linear = |key, outputs| -> Result<Dense> {
            Ok(Dense::Float(Linear {
                weight: init::normal(dev, key, &[dim, outputs], 0.02)?,
                bias: Some(init::zeros(dev, &[outputs])?),
            }))
        };
        Ok(CausalSelfAttention { qkv: linear(kq, 3 * dim)?, out: linear(ko, dim)?, heads, alibi: false })
    }

    /// Model width `dim` (the output projection's outputs).
    pub fn dim(&self) -> usize {
        self.out.outputs()
    }

    /// The floating-point operations of one forward pass over `time`
    /// positions of one sequence: the four projections and the two
    /// `time × time` products, the masked half counted (as benchmarks
    /// count it, so that rates compare across versions of the kernel).
    pub fn forward_flops(&self, time: usize) -> f64 {
        let (t, c) = (time as f64, self.dim() as f64);
        2.0 * t * c * 4.0 * c + causal_attention_flops(&[1, self.heads, time, self.head_dim()])
    }

    /// The projections' weights in `format` ([`Dense::quantize`]).
    pub fn quantize(&self, format: QuantFormat) -> Result<CausalSelfAttention> {
        Ok(CausalSelfAttention { qkv: self.qkv.quantize(format)?, out: self.out.quantize(format)?, ..self.clone() })
    }

    /// The width of one head (0 for a layer of no heads, which every
    /// forward pass refuses).
    pub fn head_dim(&self) -> usize {
        self.dim().checked_div(self.heads).unwrap_or(0)
    }

    fn check(&self, x: &Tensor) -> Result<()> {
        let c = self.dim();
        check_heads(c, self.heads)?;
        if x.rank() != 3 || x.shape()[2] != c {
            return bad_input("CausalSelfAttention", format!("[batch, time, {c}]"), x.shape());
        }
        Ok(())
    }

    /// `x` `[B, T, dim]` → queries, keys and values `[B, heads, T, head_dim]`.
    fn project(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        let qkv = self.qkv.forward(x)?.reshape(&[b, t, 3, self.heads as isize, self.head_dim() as isize])?;
        let qkv = qkv.permute(&[2, 0, 3, 1, 4])?;
        let part = |i: usize| qkv.narrow(0, i, 1)?.squeeze(0);
        Ok([part(0)?, part(1)?, part(2)?])
    }

    /// [`mix`] of the heads, then merged and projected.
    fn attend(
        &self,
        heads: [&Tensor; 3],
        query_pos: &Tensor,
        key_pos: &Tensor,
        visible: Option<&Tensor>,
    ) -> Result<Tensor> {
        let mixed = mix(heads, self.alibi, query_pos, key_pos, visible)?;
        let (b, t) = (mixed.shape()[0] as isize, mixed.shape()[2] as isize);
        self.out.forward(&mixed.permute(&[0, 2, 1, 3])?.reshape(&[b, t, self.dim() as isize])?)
    }

    /// Attention over `x` `[B, T, dim]` where each position sees itself and
    /// the positions before it. `padding`, `[B, T]` (nonzero or true: a
    /// real token), also hides the padded keys.
    pub fn forward(&self, x: &Tensor, padding: Option<&Tensor>) -> Result<Tensor> {
        self.check(x)?;
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let real = match padding {
            Some(pad) if pad.shape() != [b, t] => {
                return Err(KilnError::Shape {
                    op: "CausalSelfAttention",
                    detail: format!("padding mask must be [{b}, {t}] for input {:?}, got {:?}", x.shape(), pad.shape()),
                });
            }
            Some(pad) => Some(pad.ne(&pad.scalar_like(0.0)?)?.reshape(&[b as isize, 1, 1, t as isize])?),
            None => None,
        };
        let at = Tensor::arange(x.device(), 0.0, t as f64, 1.0, DType::I32)?;
        let [q, k, v] = self.project(x)?;
        self.attend([&q, &k, &v], &at.unsqueeze(1)?, &at.unsqueeze(0)?, real.as_ref())
    }

    /// One new position per sequence: `x` `[B, 1, dim]` at position `pos`
    /// (an i32 scalar tensor, so a jit'd step replays for every position).
    /// Writes its key and value into the cache and attends to positions
    /// `0..=pos`; returns the output and the updated cache.
    pub fn forward_cached(&self, x: &Tensor, cache: &KvCache, pos: &Tensor) -> Result<(Tensor, KvCache)> {
        self.check(x)?;
        let want = [x.shape()[0], self.heads, cache.capacity(), self.head_dim()];
        if x.shape()[1] != 1 || cache.keys.shape() != want || cache.values.shape() != want {
            return Err(KilnError::Shape {
                op: "CausalSelfAttention",
                detail: format!(
                    "a cached step takes [batch, 1, {}] and a cache of {want:?}, got {:?} and {:?}",
                    self.dim(),
                    x.shape(),
                    cache.keys.shape()
                ),
            });
        }
        let positions = Tensor::arange(x.device(), 0.0, cache.capacity() as f64, 1.0, DType::I32)?;
        let here = positions.reshape(&[1, 1, -1, 1])?.eq(pos)?;
        let [q, k, v] = self.project(x)?;
        let cache = KvCache {
            keys: Tensor::where_cond(&here, &k, &cache.keys)?,
            values: Tensor::where_cond(&here, &v, &cache.values)?,
        };
        let y =
            self.attend([&q, &cache.keys, &cache.values], &pos.reshape(&[1, 1])?, &positions.unsqueeze(0)?, None)?;
        Ok((y, cache))
    }
}
