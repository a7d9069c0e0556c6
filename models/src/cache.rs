//! The KV cache of a decoding model: each layer's keys and values of the
//! positions seen so far in a fixed capacity, so one captured decoding step
//! serves every position (the position is an i32 scalar tensor input).

use kiln::prelude::*;
use kiln_nn::KvCache;

/// What a layer's attention runs against: its own positions (a whole
/// window, from position 0), or one new position `pos` after a cache.
#[derive(Clone, Copy)]
pub(crate) enum Past<'a> {
    /// A window from position 0, its keys and values kept in a cache of
    /// `capacity` positions.
    Window { capacity: usize },
    /// One position `pos` (i32 scalar) after the positions in `cache`.
    Step { cache: &'a KvCache, pos: &'a Tensor },
}

impl<'a> Past<'a> {
    /// This pass's past for layer `i`: a step reads that layer's cache.
    pub(crate) fn of_layer(self, caches: &'a [KvCache], i: usize) -> Result<Past<'a>> {
        match self {
            Past::Step { pos, .. } => caches.get(i).map(|cache| Past::Step { cache, pos }).ok_or_else(|| {
                KilnError::Invalid { op: "step", detail: format!("{} caches for a model of more layers", caches.len()) }
            }),
            window => Ok(window),
        }
    }
}

/// Keys and values `[B, kv_heads, T, d]` of a window from position 0, in a
/// cache of `capacity` positions (zeros after `T`).
pub(crate) fn filled(k: &Tensor, v: &Tensor, capacity: usize) -> Result<KvCache> {
    let [b, heads, t, d] = k.shape()[..] else { unreachable!("[B, heads, T, d]") };
    if t > capacity {
        return Err(KilnError::Invalid {
            op: "prefill",
            detail: format!("a window of {t} positions does not fit a cache of {capacity}"),
        });
    }
    if t == capacity {
        return Ok(KvCache { keys: k.clone(), values: v.clone() });
    }
    let rest = Tensor::zeros(k.device(), &[b, heads, capacity - t, d], k.dtype())?;
    Ok(KvCache { keys: Tensor::concat(&[k, &rest], 2)?, values: Tensor::concat(&[v, &rest], 2)? })
}

/// `cache` with one position's keys and values (`[B, kv_heads, 1, d]`)
/// written at `pos`.
pub(crate) fn written(cache: &KvCache, k: &Tensor, v: &Tensor, pos: &Tensor) -> Result<KvCache> {
    let capacity = cache.capacity();
    let here = Tensor::arange(k.device(), 0.0, capacity as f64, 1.0, DType::I32)?.reshape(&[1, 1, -1, 1])?.eq(pos)?;
    Ok(KvCache {
        keys: Tensor::where_cond(&here, k, &cache.keys)?,
        values: Tensor::where_cond(&here, v, &cache.values)?,
    })
}

/// Attention of `q` (`[B, heads, T, d]`) over this pass's keys and values
/// (`[B, kv_heads, T, d]`), causal over a window or over the cache's
/// positions for a step, and the layer's cache after the pass. `share`
/// repeats key and value heads for the queries (grouped-query attention).
pub(crate) fn attend(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    past: Past,
    share: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<(Tensor, KvCache)> {
    match past {
        Past::Window { capacity } => {
            Ok((kiln_nn::causal_attention(q, &share(k)?, &share(v)?, false)?, filled(k, v, capacity)?))
        }
        Past::Step { cache, pos } => {
            let cache = written(cache, k, v, pos)?;
            let keys = Tensor::arange(q.device(), 0.0, cache.capacity() as f64, 1.0, DType::I32)?.unsqueeze(0)?;
            let y =
                kiln_nn::attention_at(q, &share(&cache.keys)?, &share(&cache.values)?, &pos.reshape(&[1, 1])?, &keys)?;
            Ok((y, cache))
        }
    }
}

/// The positions a pass covers, `[T]` i32: `0..T` for a window, `[pos]`
/// for a step.
pub(crate) fn positions(device: &Device, past: Past, len: usize) -> Result<Tensor> {
    match past {
        Past::Window { .. } => Tensor::arange(device, 0.0, len as f64, 1.0, DType::I32),
        Past::Step { pos, .. } => pos.reshape(&[1]),
    }
}
