//! Conformance and gradient cases of kiln-nn's transformer layers:
//! RmsNorm, causal self-attention (plain, padded, and one cached step) and
//! its core alone, the GELU MLP, the pre-norm block (and its cached step)
//! and the tied output projection. Parameters come from fixed-seed inputs, as in `nn_cases`.

use crate::cases::input;
use crate::grad_cases::{Check, GradCase};
use crate::{Case, Tol};
use kiln::prelude::*;
use kiln_nn::{
    Block, CausalSelfAttention, Dense, Embedding, GeluMlp, KvCache, LayerNorm, Linear, RmsNorm, causal_attention,
};

/// Two matmuls and a softmax deep in f32.
const LAYERS: Tol = Tol { abs: 2e-5, rel: 2e-4 };
const DIM: usize = 8;
const HEADS: usize = 2;

fn case(op: &'static str, detail: &str, build: impl Fn(&Device) -> Result<Tensor> + Send + Sync + 'static) -> Case {
    Case { op, detail: detail.into(), tol: LAYERS, build: Box::new(build) }
}

fn linear(w: &Tensor, b: &Tensor) -> Dense {
    Linear { weight: w.clone(), bias: Some(b.clone()) }.into()
}

/// Attention from 4 tensors: qkv weight and bias, out weight and bias.
fn attention(p: &[Tensor]) -> CausalSelfAttention {
    CausalSelfAttention { qkv: linear(&p[0], &p[1]), out: linear(&p[2], &p[3]), heads: HEADS, alibi: false }
}

fn alibi(p: &[Tensor]) -> CausalSelfAttention {
    CausalSelfAttention { alibi: true, ..attention(p) }
}

fn mlp(p: &[Tensor]) -> GeluMlp {
    GeluMlp { up: linear(&p[0], &p[1]), down: linear(&p[2], &p[3]) }
}

/// A block from 12 tensors: norm1 (2), attention (4), norm2 (2), mlp (4).
fn block(p: &[Tensor]) -> Block {
    let norm = |w: &Tensor, b: &Tensor| LayerNorm { weight: w.clone(), bias: b.clone(), eps: 1e-5 };
    Block { norm1: norm(&p[0], &p[1]), attention: attention(&p[2..6]), norm2: norm(&p[6], &p[7]), mlp: mlp(&p[8..12]) }
}

const ATTENTION_SHAPES: [&[usize]; 4] = [&[DIM, 3 * DIM], &[3 * DIM], &[DIM, DIM], &[DIM]];
const MLP_SHAPES: [&[usize]; 4] = [&[DIM, 4 * DIM], &[4 * DIM], &[4 * DIM, DIM], &[DIM]];

/// The parameter shapes of `block`, with the ranges their inputs draw from.
fn block_inputs() -> Vec<(&'static [usize], f64, f64)> {
    let norm: [(&[usize], f64, f64); 2] = [(&[DIM], 0.5, 1.5), (&[DIM], -0.5, 0.5)];
    let weights = |shapes: [&'static [usize]; 4]| shapes.map(|s| (s, -0.5, 0.5));
    [&norm[..], &weights(ATTENTION_SHAPES), &norm, &weights(MLP_SHAPES)].concat()
}

fn params(d: &Device, seed: u64, shapes: &[(&[usize], f64, f64)]) -> Result<Vec<Tensor>> {
    shapes.iter().enumerate().map(|(i, (s, lo, hi))| input(d, seed + i as u64, s, DType::F32, *lo, *hi)).collect()
}

fn attention_params(d: &Device, seed: u64) -> Result<Vec<Tensor>> {
    params(d, seed, &ATTENTION_SHAPES.map(|s| (s, -0.5, 0.5)))
}

/// `[2, 5]` padding: the second sequence's last two positions are padding.
fn padding(d: &Device) -> Result<Tensor> {
    Tensor::from_slice(d, &[1i32, 1, 1, 1, 1, 1, 1, 1, 0, 0], &[2, 5])
}

pub fn cases() -> Vec<Case> {
    vec![
        case("RmsNorm", "[33, 65]", |d| {
            let n = RmsNorm { weight: input(d, 5000, &[65], DType::F32, 0.5, 1.5)?, eps: 1e-6 };
            n.forward(&input(d, 5001, &[33, 65], DType::F32, -3.0, 3.0)?)
        }),
        case("CausalSelfAttention", "[2, 5, 8], 2 heads", |d| {
            attention(&attention_params(d, 5010)?).forward(&input(d, 5019, &[2, 5, DIM], DType::F32, -1.0, 1.0)?, None)
        }),
        case("CausalSelfAttention", "[2, 5, 8], 2 heads, padding mask", |d| {
            let x = input(d, 5029, &[2, 5, DIM], DType::F32, -1.0, 1.0)?;
            attention(&attention_params(d, 5020)?).forward(&x, Some(&padding(d)?))
        }),
        case("CausalSelfAttention", "[2, 5, 8], 2 heads, ALiBi", |d| {
            alibi(&attention_params(d, 5080)?).forward(&input(d, 5089, &[2, 5, DIM], DType::F32, -1.0, 1.0)?, None)
        }),
        // 20 queries: enough for the attention kernel where the adapter has one.
        case("CausalSelfAttention", "[2, 20, 8], 2 heads, ALiBi, padding mask (one kernel)", |d| {
            let x = input(d, 5099, &[2, 20, DIM], DType::F32, -1.0, 1.0)?;
            let real: Vec<f32> = (0..40).map(|i| if i >= 35 { 0.0 } else { 1.0 }).collect();
            alibi(&attention_params(d, 5090)?).forward(&x, Some(&Tensor::from_slice(d, &real, &[2, 20])?))
        }),
        case("CausalSelfAttention", "cached step [2, 1, 8] at position 3 of 6, ALiBi", |d| {
            let a = alibi(&attention_params(d, 5030)?);
            let cache = KvCache {
                keys: input(d, 5035, &[2, HEADS, 6, DIM / HEADS], DType::F32, -1.0, 1.0)?,
                values: input(d, 5036, &[2, HEADS, 6, DIM / HEADS], DType::F32, -1.0, 1.0)?,
            };
            let x = input(d, 5037, &[2, 1, DIM], DType::F32, -1.0, 1.0)?;
            let (y, cache) = a.forward_cached(&x, &cache, &Tensor::scalar(d, 3.0, DType::I32)?)?;
            Tensor::concat(&[&y.reshape(&[-1])?, &cache.keys.reshape(&[-1])?, &cache.values.reshape(&[-1])?], 0)
        }),
        case("causal_attention", "q, k, v [2, 2, 20, 4], ALiBi (one kernel)", |d| {
            let qkv = |seed| input(d, seed, &[2, HEADS, 20, DIM / HEADS], DType::F32, -1.0, 1.0);
            causal_attention(&qkv(5200)?, &qkv(5201)?, &qkv(5202)?, true)
        }),
        case("GeluMlp", "[3, 8] → 32 → 8", |d| {
            mlp(&params(d, 5040, &MLP_SHAPES.map(|s| (s, -0.5, 0.5)))?).forward(&input(
                d,
                5049,
                &[3, DIM],
                DType::F32,
                -1.0,
                1.0,
            )?)
        }),
        case("Block", "[2, 5, 8], 2 heads, pre-norm", |d| {
            block(&params(d, 5050, &block_inputs())?)
                .forward(&input(d, 5069, &[2, 5, DIM], DType::F32, -1.0, 1.0)?, None)
        }),
        case("Block", "[2, 5, 8], 2 heads, int4/8 projections (quantized on the device)", |d| {
            block(&params(d, 5050, &block_inputs())?)
                .quantize(QuantFormat::int4(8))?
                .forward(&input(d, 5069, &[2, 5, DIM], DType::F32, -1.0, 1.0)?, None)
        }),
        case("Block", "cached step [2, 1, 8] at position 2 of 6", |d| {
            let cache = KvCache {
                keys: input(d, 5072, &[2, HEADS, 6, DIM / HEADS], DType::F32, -1.0, 1.0)?,
                values: input(d, 5073, &[2, HEADS, 6, DIM / HEADS], DType::F32, -1.0, 1.0)?,
            };
            let x = input(d, 5074, &[2, 1, DIM], DType::F32, -1.0, 1.0)?;
            let (y, cache) = block(&params(d, 5050, &block_inputs())?).forward_cached(
                &x,
                &cache,
                &Tensor::scalar(d, 2.0, DType::I32)?,
            )?;
            Tensor::concat(&[&y.reshape(&[-1])?, &cache.keys.reshape(&[-1])?, &cache.values.reshape(&[-1])?], 0)
        }),
        case("Embedding", "attend: [3, 16] through a [50, 16] table (tied output)", |d| {
            let e = Embedding { weight: input(d, 5070, &[50, 16], DType::F32, -1.0, 1.0)? };
            e.attend(&input(d, 5071, &[3, 16], DType::F32, -1.0, 1.0)?)
        }),
    ]
}

const CHECK: Check = Check::Elementwise(Tol { abs: 1e-4, rel: 1e-3 });

fn grad_case(
    op: &'static str,
    detail: &str,
    seed: u64,
    inputs: Vec<(&[usize], f64, f64)>,
    f: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) -> GradCase {
    let inputs = inputs.iter().map(|(s, lo, hi)| (s.to_vec(), *lo, *hi)).collect();
    GradCase { op, detail: detail.into(), check: CHECK, fd: true, inputs, seed, f: Box::new(f) }
}

pub fn grads() -> Vec<GradCase> {
    let x: (&[usize], f64, f64) = (&[2, 4, DIM], -1.0, 1.0);
    let attention_inputs = [&[x][..], &ATTENTION_SHAPES.map(|s| (s, -0.5, 0.5))].concat();
    vec![
        grad_case("RmsNorm", "[5, 8]", 5100, vec![(&[5, 8], -2.0, 2.0), (&[8], 0.5, 1.5)], |x| {
            RmsNorm { weight: x[1].clone(), eps: 1e-6 }.forward(&x[0])
        }),
        grad_case("CausalSelfAttention", "[2, 4, 8], 2 heads", 5110, attention_inputs.clone(), |p| {
            attention(&p[1..]).forward(&p[0], None)
        }),
        grad_case("CausalSelfAttention", "[2, 4, 8], 2 heads, ALiBi", 5160, attention_inputs.clone(), |p| {
            alibi(&p[1..]).forward(&p[0], None)
        }),
        grad_case("CausalSelfAttention", "[2, 4, 8], 2 heads, padding mask", 5120, attention_inputs, |p| {
            let pad = Tensor::from_slice(p[0].device(), &[1i32, 1, 1, 1, 1, 1, 0, 0], &[2, 4])?;
            attention(&p[1..]).forward(&p[0], Some(&pad))
        }),
        grad_case("causal_attention", "q, k, v [1, 2, 4, 4]", 5170, vec![(&[1, HEADS, 4, 4], -1.0, 1.0); 3], |p| {
            causal_attention(&p[0], &p[1], &p[2], false)
        }),
        grad_case(
            "GeluMlp",
            "[3, 8] → 32 → 8",
            5130,
            [&[(&[3, DIM][..], -1.0, 1.0)][..], &MLP_SHAPES.map(|s| (s, -0.5, 0.5))].concat(),
            |p| mlp(&p[1..]).forward(&p[0]),
        ),
        grad_case("Block", "[2, 4, 8], 2 heads", 5140, [&[x][..], &block_inputs()].concat(), |p| {
            block(&p[1..]).forward(&p[0], None)
        }),
        grad_case(
            "Embedding",
            "tied: lookup then attend through one [10, 4] table",
            5150,
            vec![(&[10, 4], -1.0, 1.0)],
            |x| {
                let ids = Tensor::from_slice(x[0].device(), &[1i32, 7, 1, 0, 9, 7], &[2, 3])?;
                let e = Embedding { weight: x[0].clone() };
                e.attend(&e.forward(&ids)?)
            },
        ),
    ]
}
