//! Rotary position embeddings in Hugging Face's layout: a head's first and
//! second halves are the two coordinates of each rotated pair
//! (`rotate_half`), with frequencies `θ^(-2i/d)`, rescaled as Llama 3 does
//! where the config asks.

use crate::config::RopeConfig;
use kiln::prelude::*;
use std::f64::consts::PI;

/// The inverse frequencies of a head of width `head_dim` (`head_dim / 2`).
fn inverse_frequencies(rope: &RopeConfig, head_dim: usize) -> Vec<f64> {
    let base: Vec<f64> = (0..head_dim / 2).map(|i| 1.0 / rope.theta.powf((2 * i) as f64 / head_dim as f64)).collect();
    let Some(s) = rope.llama3 else { return base };
    let (low_wavelen, high_wavelen) = (s.original / s.low_freq_factor, s.original / s.high_freq_factor);
    base.into_iter()
        .map(|f| {
            let wavelen = 2.0 * PI / f;
            if wavelen < high_wavelen {
                f
            } else if wavelen > low_wavelen {
                f / s.factor
            } else {
                let smooth = (s.original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                (1.0 - smooth) * f / s.factor + smooth * f
            }
        })
        .collect()
}

/// `cos` and `sin` of every position below `len` and frequency, `[len,
/// head_dim]` f32, each frequency twice (once per half).
pub(crate) fn tables(device: &Device, rope: &RopeConfig, head_dim: usize, len: usize) -> Result<(Tensor, Tensor)> {
    let freqs = inverse_frequencies(rope, head_dim);
    let angles: Vec<f64> = (0..len)
        .flat_map(|pos| {
            // As transformers computes them: the product in f32.
            let at = |f: &f64| f64::from(pos as f32 * *f as f32);
            freqs.iter().map(at).chain(freqs.iter().map(at)).collect::<Vec<_>>()
        })
        .collect();
    let cos: Vec<f32> = angles.iter().map(|a| a.cos() as f32).collect();
    let sin: Vec<f32> = angles.iter().map(|a| a.sin() as f32).collect();
    Ok((Tensor::from_slice(device, &cos, &[len, head_dim])?, Tensor::from_slice(device, &sin, &[len, head_dim])?))
}

/// `x` (`[B, heads, T, head_dim]`) rotated: `x · cos + rotate_half(x) ·
/// sin`, where `rotate_half` of halves `(a, b)` is `(-b, a)`.
pub(crate) fn apply(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.shape()[3] / 2;
    let rotated = Tensor::concat(&[&x.narrow(3, half, half)?.neg()?, &x.narrow(3, 0, half)?], 3)?;
    (x * cos)? + (rotated * sin)?
}
