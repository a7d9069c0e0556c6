//! The attention kernel (`softmax(scores) @ v` a few keys at a time),
//! forced on one device in each way of sharing keys it has (workgroup
//! tiles, what GPUs run; subgroup rows, what CPU adapters run) and checked
//! against the CPU reference: natively by
//! `tests/fused_attention.rs` on every adapter with workgroup memory, and by
//! the browser's conformance page.

use crate::rng::tensor;
use kiln::core::codegen::attention::KeySharing;
use kiln::core::codegen::launch::AttentionPlan;
use kiln::core::testing::TestHooks;
use kiln::prelude::*;
use kiln_nn::{CausalSelfAttention, Linear};

/// An attention layer of `dim` split into `heads`, its weights from `seed`.
fn layer(dev: &Device, dim: usize, heads: usize, alibi: bool, seed: u64) -> CausalSelfAttention {
    let linear = |outputs: usize, seed: u64| Linear {
        weight: tensor(dev, &[dim, outputs], seed, -0.5, 0.5),
        bias: Some(tensor(dev, &[outputs], seed + 1, -0.2, 0.2)),
    };
    CausalSelfAttention { qkv: linear(3 * dim, seed).into(), out: linear(dim, seed + 2).into(), heads, alibi }
}

/// Marks a kernel that stops at the keys its workgroup's queries see.
const CAUSAL_MARKER: &str = "let seen = min(tk";

/// `softmax(where(seen(q kᵀ, positions), …, -1e9)) v` over `[1, 128, 8]`,
/// with `seen` given the scores and the queries' and keys' positions
/// (`[128, 1]`, `[1, 128]`): masks that look causal but under which a
/// workgroup's queries see keys after its last one, or some query weighs
/// all keys alike, so the kernel must walk every key.
fn masked(dev: &Device, seen: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let x = |seed| tensor(dev, &[1, 128, 8], seed, -1.0, 1.0);
    let (q, k, v) = (x(88), x(89), x(90));
    let at = Tensor::arange(dev, 0.0, 128.0, 1.0, DType::I32)?;
    let scores = q.matmul(&k.transpose(-1, -2)?)?;
    seen(&scores, &at.unsqueeze(1)?, &at.unsqueeze(0)?)?.softmax(-1)?.matmul(&v)
}

/// `where(cond, s, -1e9)`.
fn hide(cond: &Tensor, s: &Tensor) -> Result<Tensor> {
    Tensor::where_cond(cond, s, &s.scalar_like(-1e9)?)
}

/// The look-alikes of a causal mask [`masked`] takes.
fn not_causal(dev: &Device) -> Result<[(&'static str, Tensor); 3]> {
    // Query 0 sees no key and weighs all 128 alike.
    let strict = masked(dev, |s, q, k| hide(&k.lt(q)?, s))?;
    // Keys at positions j mod 64: the first workgroup sees keys past 64.
    let wrapped = masked(dev, |s, q, _| {
        let k = Tensor::arange(s.device(), 0.0, 64.0, 1.0, DType::I32)?.broadcast_to(&[2, 64])?.reshape(&[1, 128])?;
        hide(&k.le(q)?, s)
    })?;
    // A padding mask nested inside: queries 0..9 see only hidden keys.
    let nested = masked(dev, |s, q, k| hide(&k.le(q)?, &hide(&k.ge(&k.scalar_like(10.0)?)?, s)?))?;
    Ok([
        ("strict causal mask [1, 128, 8] (query 0 sees no key)", strict),
        ("causal mask over keys at j mod 64 [1, 128, 8]", wrapped),
        ("causal mask with padding nested inside [1, 128, 8]", nested),
    ])
}

/// The outputs, each with what it covers and whether its mask is causal
/// (the kernel then skips the keys after a workgroup's last query).
async fn outputs(dev: &Device) -> Result<Vec<(&'static str, bool, Vec<f32>)>> {
    let x = |shape: &[usize], seed| tensor(dev, shape, seed, -1.0, 1.0);
    // Padding: the second sequence's last 30 positions.
    let real: Vec<f32> = (0..2 * 150).map(|i| if i >= 150 + 120 { 0.0 } else { 1.0 }).collect();
    let padding = Tensor::from_slice(dev, &real, &[2, 150])?;
    let (a, b, c) = (x(&[3, 33, 20], 94), x(&[3, 20, 90], 95), x(&[3, 90, 5], 96));
    let (p, r, w) = (x(&[70, 16], 97), x(&[16, 100], 98), x(&[100, 12], 99));
    let mut ys = vec![
        (
            "ALiBi attention [2, 150, 24], 3 heads (3 key tiles, 3 query blocks)",
            true,
            layer(dev, 24, 3, true, 80).forward(&x(&[2, 150, 24], 81), None)?,
        ),
        (
            "attention [2, 150, 24], 3 heads, padding mask",
            false,
            layer(dev, 24, 3, false, 82).forward(&x(&[2, 150, 24], 83), Some(&padding))?,
        ),
        (
            "attention [1, 70, 12], 2 heads of 6 (rows padded to vec4s)",
            true,
            layer(dev, 12, 2, true, 84).forward(&x(&[1, 70, 12], 85), None)?,
        ),
        (
            "softmax(0.3 a b) c, [3, 33, 20] [3, 20, 90] [3, 90, 5]",
            false,
            a.matmul(&b)?.mul_scalar(0.3)?.softmax(-1)?.matmul(&c)?,
        ),
        ("softmax(p r) w, [70, 16] [16, 100] [100, 12]", false, p.matmul(&r)?.softmax(-1)?.matmul(&w)?),
    ];
    ys.extend(not_causal(dev)?.map(|(what, y)| (what, false, y)));
    let mut out = Vec::new();
    for (what, causal, y) in ys {
        out.push((what, causal, y.to_vec::<f32>().await?));
    }
    Ok(out)
}

/// An attention layer's kernels: the qkv projection, the attention (which
/// writes its output with the heads merged) and the output projection.
const LAYER_KERNELS: u64 = 3;

/// The kernels one attention layer's forward launches on `dev`.
async fn layer_kernels(dev: &Device) -> Result<u64> {
    let y = layer(dev, 32, 4, true, 86).forward(&tensor(dev, &[2, 40, 32], 87, -1.0, 1.0), None)?;
    let before = dev.stats().kernels_launched;
    y.realize().await?;
    Ok(dev.stats().kernels_launched - before)
}

/// Run the outputs on `dev` with the attention kernel forced on, in each
/// way of sharing keys the device has; the failures (off the reference by
/// more than 1e-4 of its largest value, another kernel count, fewer
/// attention kernels compiled than outputs, causal or not), empty when all
/// hold.
pub async fn check(dev: &Device) -> Result<Vec<String>> {
    let want = outputs(&Device::cpu()).await?;
    let info = dev.info();
    let mut ways = Vec::new();
    if info.workgroup_memory {
        ways.push(("workgroup tiles", KeySharing::Workgroup, "var<workgroup> keys"));
    }
    if let (true, Some(width)) = (info.subgroups, info.subgroup_size) {
        ways.push(("subgroup rows", KeySharing::Subgroup(width), "subgroupBroadcast(k0"));
    }
    let mut failures = Vec::new();
    if ways.is_empty() {
        failures.push("neither workgroup memory nor subgroups of a fixed width".into());
    }
    for (way, keys, marker) in ways {
        dev.set_attention(Some(AttentionPlan::OneKernel(keys)));
        let got = outputs(dev).await;
        let kernels = layer_kernels(dev).await;
        dev.set_attention(None);
        let (got, kernels) = (got?, kernels?);
        for ((what, _, g), (.., w)) in got.iter().zip(&want) {
            let scale = w.iter().fold(1f32, |m, v| m.max(v.abs()));
            // NaN counts as infinitely far (no reference value is NaN).
            let off = |(a, b): (&f32, &f32)| if (a - b).is_nan() { f32::INFINITY } else { (a - b).abs() };
            let worst = g.iter().zip(w).map(off).fold(0f32, f32::max);
            if g.len() != w.len() || worst > 1e-4 * scale {
                failures.push(format!("{way}: {what}: off by {worst:e}"));
            }
        }
        if kernels != LAYER_KERNELS {
            failures.push(format!("{way}: an attention layer took {kernels} kernels, not {LAYER_KERNELS}"));
        }
        // Each output's scores differ, so each compiles a kernel of its own.
        let sources = dev.compiled_sources();
        for causal in [false, true] {
            let outputs = want.iter().filter(|(_, c, _)| *c == causal).count();
            let compiled = sources.iter().filter(|s| s.contains(marker) && s.contains(CAUSAL_MARKER) == causal).count();
            if compiled < outputs {
                failures.push(format!(
                    "{way}: {compiled} attention kernels compiled for {outputs} outputs (causal: {causal})"
                ));
            }
        }
    }
    Ok(failures)
}
