//! Causal self-attention against a direct f64 computation in this file
//! (loops over heads, queries and keys), on the CPU reference and every
//! GPU adapter, at a size that takes the adapters' tiled matmuls.

mod common;

use common::{assert_close, devices, read};
use kiln::prelude::*;
use kiln_nn::{CausalSelfAttention, KvCache, Linear};

const B: usize = 2;
const T: usize = 40;
const C: usize = 32;
const H: usize = 4;
const D: usize = C / H;

/// Deterministic values in [-scale, scale).
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

struct Weights {
    x: Vec<f64>,
    qkv: Vec<f64>,
    qkv_bias: Vec<f64>,
    out: Vec<f64>,
    out_bias: Vec<f64>,
}

fn weights() -> Weights {
    Weights {
        x: values(B * T * C, 1, 1.0),
        qkv: values(C * 3 * C, 2, 0.3),
        qkv_bias: values(3 * C, 3, 0.1),
        out: values(C * C, 4, 0.3),
        out_bias: values(C, 5, 0.1),
    }
}

/// `x [rows, n] @ w [n, m] + b`.
fn affine(x: &[f64], w: &[f64], b: &[f64], n: usize, m: usize) -> Vec<f64> {
    x.chunks(n).flat_map(|row| (0..m).map(move |j| b[j] + (0..n).map(|k| row[k] * w[k * m + j]).sum::<f64>())).collect()
}

/// The layer's output `[B, T, C]`; `real[b][t]`: whether key t of
/// sequence b is a token; `alibi`: with ALiBi's distance penalty.
fn reference(w: &Weights, real: &[[bool; T]; B], alibi: bool) -> Vec<f64> {
    let qkv = affine(&w.x, &w.qkv, &w.qkv_bias, C, 3 * C);
    let at = |b: usize, t: usize, part: usize, h: usize, d: usize| qkv[(b * T + t) * 3 * C + part * C + h * D + d];
    let mut mixed = vec![0.0; B * T * C];
    for b in 0..B {
        for h in 0..H {
            for i in 0..T {
                let seen: Vec<usize> = (0..=i).filter(|&j| real[b][j]).collect();
                let scores: Vec<f64> = seen
                    .iter()
                    .map(|&j| {
                        let slope = if alibi { 2f64.powf(-8.0 * (h + 1) as f64 / H as f64) } else { 0.0 };
                        let dot: f64 = (0..D).map(|d| at(b, i, 0, h, d) * at(b, j, 1, h, d)).sum();
                        dot / (D as f64).sqrt() - slope * (i - j) as f64
                    })
                    .collect();
                let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let total: f64 = scores.iter().map(|s| (s - top).exp()).sum();
                for (s, &j) in scores.iter().zip(&seen) {
                    for d in 0..D {
                        mixed[(b * T + i) * C + h * D + d] += (s - top).exp() / total * at(b, j, 2, h, d);
                    }
                }
            }
        }
    }
    affine(&mixed, &w.out, &w.out_bias, C, C)
}

fn layer(dev: &Device, w: &Weights, alibi: bool) -> CausalSelfAttention {
    let t = |v: &[f64], shape: &[usize]| Tensor::from_f64(dev, v, shape, DType::F32).unwrap();
    CausalSelfAttention {
        qkv: Linear { weight: t(&w.qkv, &[C, 3 * C]), bias: Some(t(&w.qkv_bias, &[3 * C])) }.into(),
        out: Linear { weight: t(&w.out, &[C, C]), bias: Some(t(&w.out_bias, &[C])) }.into(),
        heads: H,
        alibi,
    }
}

#[test]
fn causal_attention_matches_a_direct_computation() {
    let w = weights();
    for alibi in [false, true] {
        let want = reference(&w, &[[true; T]; B], alibi);
        for (label, dev, tol) in devices() {
            let x = Tensor::from_f64(&dev, &w.x, &[B, T, C], DType::F32).unwrap();
            let got = read(&layer(&dev, &w, alibi).forward(&x, None).unwrap());
            assert_close(&format!("attention (ALiBi {alibi}) on {label}"), &got, &want, tol);
        }
    }
}

#[test]
fn padded_keys_are_hidden() {
    let w = weights();
    // The second sequence's first 5 and last 7 positions are padding; a
    // query whose every key is padding is not checked (uniform by design).
    let mut real = [[true; T]; B];
    real[1][..5].fill(false);
    real[1][T - 7..].fill(false);
    let want = reference(&w, &real, false);
    let mask: Vec<i32> = real.iter().flat_map(|r| r.iter().map(|&k| k as i32)).collect();
    for (label, dev, tol) in devices() {
        let x = Tensor::from_f64(&dev, &w.x, &[B, T, C], DType::F32).unwrap();
        let pad = Tensor::from_slice(&dev, &mask, &[B, T]).unwrap();
        let got = read(&layer(&dev, &w, false).forward(&x, Some(&pad)).unwrap());
        let checked: Vec<usize> = (0..B * T).filter(|&r| !(r / T == 1 && r % T < 5)).collect();
        let pick = |v: &[f64]| checked.iter().flat_map(|&r| v[r * C..(r + 1) * C].to_vec()).collect::<Vec<_>>();
        assert_close(&format!("padded attention on {label}"), &pick(&got), &pick(&want), tol);
    }
}

#[test]
fn cached_steps_match_the_whole_sequence() {
    let w = weights();
    let want = reference(&w, &[[true; T]; B], true);
    for (label, dev, tol) in devices().into_iter().take(2) {
        let a = layer(&dev, &w, true);
        let mut cache = KvCache::new(&a, &dev, B, T).unwrap();
        for t in 0..T {
            let row: Vec<f64> = (0..B).flat_map(|b| w.x[(b * T + t) * C..(b * T + t + 1) * C].to_vec()).collect();
            let x = Tensor::from_f64(&dev, &row, &[B, 1, C], DType::F32).unwrap();
            let pos = Tensor::scalar(&dev, t as f64, DType::I32).unwrap();
            let (y, next) = a.forward_cached(&x, &cache, &pos).unwrap();
            cache = next;
            let want_t: Vec<f64> = (0..B).flat_map(|b| want[(b * T + t) * C..(b * T + t + 1) * C].to_vec()).collect();
            assert_close(&format!("cached step {t} on {label}"), &read(&y), &want_t, tol);
        }
    }
}

#[test]
fn a_cache_of_the_wrong_shape_is_an_error() {
    let dev = Device::cpu();
    let a = layer(&dev, &weights(), true);
    let x = Tensor::zeros(&dev, &[B, 1, C], DType::F32).unwrap();
    let pos = Tensor::scalar(&dev, 0.0, DType::I32).unwrap();
    let flat = Tensor::zeros(&dev, &[1, 64], DType::F32).unwrap();
    let cache = KvCache { keys: flat.clone(), values: flat };
    let e = a.forward_cached(&x, &cache, &pos).unwrap_err().to_string();
    assert!(e.starts_with("CausalSelfAttention: a cached step takes") && e.ends_with("and [1, 64]"), "{e}");
}
