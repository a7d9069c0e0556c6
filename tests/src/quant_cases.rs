//! Integer weights: the product with packed codes (int8 per channel, int4
//! in groups of 32 and 64) at one row, row blocks with a partial last
//! block, leading axes, a transposed x, a partial last group and a long k; quantize's codes for
//! weights that are exact multiples of their scale (so every adapter must
//! give the same words), its round trip, the gradients of x and the
//! scales, kiln-nn's quantized Linear and Conv2d (groups included), and
//! int8 weights with int8 activations (`quant_matmul_w8a8`).

use crate::cases::{input, transposed};
use crate::grad_cases::GradCase;
use crate::{Build, Case, Tol};
use kiln::prelude::*;
use kiln_nn::{Conv2d, Conv2dConfig, Linear};

/// Formats under test, with a short name for case details.
fn formats() -> [(QuantFormat, &'static str); 3] {
    [(QuantFormat::INT8, "int8"), (QuantFormat::int4(32), "int4/32"), (QuantFormat::int4(64), "int4/64")]
}

/// Random codes (every bit pattern, the most negative code included) and
/// f32 scales in [0.001, 0.01) for `n` rows of `k` weights.
fn weights(d: &Device, seed: u64, format: QuantFormat, n: usize, k: usize) -> Result<(Tensor, Tensor)> {
    weights_with(d, seed, format, n, k, DType::F32)
}

/// [`weights`] with scales of `dtype`.
fn weights_with(
    d: &Device,
    seed: u64,
    format: QuantFormat,
    n: usize,
    k: usize,
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let (codes, scales) = format.shapes("quant case", n, k)?;
    Ok((input(d, seed, &codes, DType::U32, 0.0, 4e9)?, input(d, seed + 1, &scales, dtype, 0.001, 0.01)?))
}

/// A weight `[n, k]` whose groups each hold ±max_code · 2⁻⁵ and other
/// multiples of 2⁻⁵: quantizing it divides exactly.
fn exact_weight(d: &Device, format: QuantFormat, n: usize, k: usize) -> Result<Tensor> {
    let (m, group) = (format.max_code() as i64, format.group_len(k));
    let values: Vec<f64> = (0..n * k)
        .map(|i| {
            let code = match i % group {
                0 => m,
                1 => -m,
                j => (j as i64 * 37 + (i / group) as i64 * 11) % (2 * m + 1) - m,
            };
            code as f64 / 32.0
        })
        .collect();
    Tensor::from_f64(d, &values, &[n, k], DType::F32)
}

pub fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let mut add = |op: &'static str, detail: String, tol: Tol, build: Build| {
        out.push(Case { op, detail, tol, build });
    };
    let products: [(&str, Vec<usize>, usize); 7] = [
        ("x [1, 64] (one row)", vec![1, 64], 33),
        ("x [7, 256] (a partial row block)", vec![7, 256], 20),
        ("x [2, 3, 128] (leading axes)", vec![2, 3, 128], 9),
        ("x [64]", vec![64], 5),
        ("x [3, 80] (a partial last group)", vec![3, 80], 6),
        ("x [40, 64] (past 16 rows: on a GPU, unpacked, then the matmul)", vec![40, 64], 9),
        ("x [2, 8192] (long k)", vec![2, 8192], 3),
    ];
    for (format, name) in formats() {
        for (detail, x_shape, n) in products.clone() {
            let k = *x_shape.last().unwrap();
            let tol = Tol { abs: 2e-6 * k as f64, rel: 1e-5 };
            add(
                "quant_matmul",
                format!("{name} {detail}, n {n}"),
                tol,
                Box::new(move |d| {
                    let (codes, scales) = weights(d, 200, format, n, k)?;
                    input(d, 202, &x_shape, DType::F32, -1.0, 1.0)?.quant_matmul(&codes, &scales, format)
                }),
            );
        }
        // Packed scales (f16, as quantize makes them, and bf16), an odd
        // number per row, so rows start mid-word.
        for (dtype, x_shape) in [(DType::F16, [7, 224]), (DType::F16, [1, 224]), (DType::BF16, [7, 224])] {
            add(
                "quant_matmul",
                format!("{name} x {x_shape:?}, n 9, {dtype} scales"),
                Tol { abs: 2e-6 * 224.0, rel: 1e-5 },
                Box::new(move |d| {
                    let (codes, scales) = weights_with(d, 214, format, 9, 224, dtype)?;
                    input(d, 216, &x_shape, DType::F32, -1.0, 1.0)?.quant_matmul(&codes, &scales, format)
                }),
            );
        }
        add(
            "quant_matmul",
            format!("{name} x [64, 33]ᵀ (transposed view), n 7"),
            Tol { abs: 2e-4, rel: 1e-5 },
            Box::new(move |d| {
                let (codes, scales) = weights(d, 203, format, 7, 64)?;
                transposed(d, 205, [33, 64], DType::F32, -1.0, 1.0)?.t()?.t()?.quant_matmul(&codes, &scales, format)
            }),
        );
        add(
            "quantize",
            format!("{name} [5, 128] exact multiples → codes"),
            Tol::EXACT,
            Box::new(move |d| Ok(exact_weight(d, format, 5, 128)?.quantize(format)?.0)),
        );
        add(
            "quantize",
            format!("{name} [5, 128] exact multiples → scales"),
            Tol::EXACT,
            Box::new(move |d| Ok(exact_weight(d, format, 5, 128)?.quantize(format)?.1)),
        );
        // Random weights: a code may round the other way at a near-tie, one
        // step (at most 1/7 of [-1, 1)'s largest magnitude) apart.
        let step = 1.0 / format.max_code() as f64;
        add(
            "dequantize",
            format!("{name} of quantize, [9, 256] in [-1, 1)"),
            Tol { abs: step, rel: 0.0 },
            Box::new(move |d| {
                let (codes, scales) = input(d, 206, &[9, 256], DType::F32, -1.0, 1.0)?.quantize(format)?;
                Tensor::dequantize(&codes, &scales, format)
            }),
        );
        layers(&mut add, format, name);
    }
    w8a8(&mut add);
    out
}

/// int8 weights with int8 activations: each row of x holds ±127 · 2⁻⁵ and
/// other multiples of 2⁻⁵, so its codes are exact on every adapter and the
/// integer sums match the reference's.
fn w8a8(add: &mut impl FnMut(&'static str, String, Tol, Build)) {
    let products: [(&str, Vec<usize>, usize); 5] = [
        ("x [1, 64] (one row)", vec![1, 64], 33),
        ("x [7, 256] (a partial row block)", vec![7, 256], 20),
        ("x [2, 3, 128] (leading axes)", vec![2, 3, 128], 9),
        ("x [40, 64]", vec![40, 64], 9),
        ("x [2, 8192] (long k)", vec![2, 8192], 3),
    ];
    for (detail, x_shape, n) in products {
        let k = *x_shape.last().unwrap();
        add(
            "quant_matmul_w8a8",
            format!("{detail}, n {n}"),
            Tol { abs: 2e-6 * k as f64, rel: 1e-5 },
            Box::new(move |d| {
                let (codes, scales) = weights(d, 212, QuantFormat::INT8, n, k)?;
                let rows = x_shape.iter().product::<usize>() / k;
                let shape: Vec<isize> = x_shape.iter().map(|&l| l as isize).collect();
                let x = exact_weight(d, QuantFormat::INT8, rows, k)?.reshape(&shape)?;
                x.quant_matmul_w8a8(&codes, &scales)
            }),
        );
    }
}

/// kiln-nn's quantized layers, their float weights exact multiples of
/// their scales (so the codes match the reference's exactly).
fn layers(add: &mut impl FnMut(&'static str, String, Tol, Build), format: QuantFormat, name: &str) {
    let tol = Tol { abs: 1e-5, rel: 1e-4 };
    add(
        "QuantizedLinear",
        format!("{name} [5, 96] → 7"),
        tol,
        Box::new(move |d| {
            let linear = Linear {
                weight: exact_weight(d, format, 7, 96)?.t()?,
                bias: Some(input(d, 208, &[7], DType::F32, -1.0, 1.0)?),
            };
            linear.quantize(format)?.forward(&input(d, 209, &[5, 96], DType::F32, -1.0, 1.0)?)
        }),
    );
    let convs = [
        ("[2, 8, 7, 7] * [6, 8, 3, 3], padding 1", [2, 8, 7, 7], 1),
        ("[2, 16, 6, 6] * [6, 8, 3, 3], groups 2", [2, 16, 6, 6], 2),
    ];
    for (detail, x_shape, groups) in convs {
        add(
            "QuantizedConv2d",
            format!("{name} {detail}"),
            tol,
            Box::new(move |d| {
                let config =
                    Conv2dConfig { padding: if groups == 1 { 1 } else { 0 }, groups, ..Conv2dConfig::default() };
                let weight = exact_weight(d, format, 6, 72)?.reshape(&[6, 8, 3, 3])?;
                let conv = Conv2d { weight, bias: Some(input(d, 210, &[6], DType::F32, -1.0, 1.0)?), config };
                conv.quantize(format)?.forward(&input(d, 211, &x_shape, DType::F32, -1.0, 1.0)?)
            }),
        );
    }
}

/// A gradient case checked elementwise within `tol` (absolute and relative).
fn grad(
    op: &'static str,
    detail: impl Into<String>,
    tol: f64,
    fd: bool,
    inputs: Vec<(Vec<usize>, f64, f64)>,
    seed: u64,
    f: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) -> GradCase {
    let check = crate::grad_cases::Check::Elementwise(Tol { abs: tol, rel: tol });
    GradCase { op, detail: detail.into(), check, fd, inputs, seed, f: Box::new(f) }
}

pub fn grads() -> Vec<GradCase> {
    let mut out = Vec::new();
    for (i, (format, name)) in formats().into_iter().enumerate() {
        // k = 80: the last group of int4 is partial.
        let (n, k) = (5, 80);
        let scales = format.shapes("quant grad case", n, k).expect("valid shapes").1.to_vec();
        out.push(grad(
            "quant_matmul",
            format!("{name} x [3, {k}] and scales {scales:?}"),
            1e-4,
            true,
            vec![(vec![3, k], -1.0, 1.0), (scales, 0.01, 0.02)],
            3000 + 10 * i as u64,
            move |p| {
                let codes =
                    input(p[0].device(), 207, &format.shapes("quant grad case", n, k)?.0, DType::U32, 0.0, 4e9)?;
                p[0].quant_matmul(&codes, &p[1], format)
            },
        ));
    }
    // f16 scales, as quantize makes them: their gradient rounds to f16, a
    // step function, so against the reference's, not finite differences.
    let (n, k, format) = (5, 96, QuantFormat::int4(32));
    out.push(grad(
        "quant_matmul",
        format!("int4/32 x [3, {k}] and f16 scales [{n}, 3]"),
        1e-3,
        false,
        vec![(vec![3, k], -1.0, 1.0), (vec![n, 3], 0.01, 0.02)],
        3050,
        move |p| {
            let codes = input(p[0].device(), 215, &format.shapes("quant grad case", n, k)?.0, DType::U32, 0.0, 4e9)?;
            p[0].quant_matmul(&codes, &p[1].cast(DType::F16)?, format)
        },
    ));
    // The weight itself, through its scales (k = 80: a partial last group).
    let (n, k, format) = (5, 80, QuantFormat::int4(32));
    out.push(grad(
        "dequantize",
        format!("int4/32 codes for [{n}, {k}], scales [{n}, 3]"),
        1e-4,
        true,
        vec![(vec![n, 3], 0.01, 0.02)],
        3150,
        move |p| {
            let codes = input(p[0].device(), 217, &format.shapes("quant grad case", n, k)?.0, DType::U32, 0.0, 4e9)?;
            Tensor::dequantize(&codes, &p[0], format)
        },
    ));
    // The quantized layers, through their input and bias (their codes are
    // constants, their scales covered above).
    out.push(grad(
        "QuantizedLinear",
        "int4/32 [3, 64] → 5",
        1e-4,
        true,
        vec![(vec![3, 64], -1.0, 1.0), (vec![5], -1.0, 1.0)],
        3200,
        |p| {
            let weight = exact_weight(p[0].device(), QuantFormat::int4(32), 5, 64)?.t()?;
            let linear = Linear { weight, bias: Some(p[1].clone()) }.quantize(QuantFormat::int4(32))?;
            linear.forward(&p[0])
        },
    ));
    out.push(grad(
        "QuantizedConv2d",
        "int8 [1, 8, 4, 4] * [4, 8, 3, 3], padding 1",
        1e-4,
        true,
        vec![(vec![1, 8, 4, 4], -1.0, 1.0), (vec![4], -1.0, 1.0)],
        3210,
        |p| {
            let weight = exact_weight(p[0].device(), QuantFormat::INT8, 4, 72)?.reshape(&[4, 8, 3, 3])?;
            let config = Conv2dConfig { padding: 1, ..Conv2dConfig::default() };
            let conv = Conv2d { weight, bias: Some(p[1].clone()), config }.quantize(QuantFormat::INT8)?;
            conv.forward(&p[0])
        },
    ));
    // Int8 activations: x's codes are integers, so only the weight's
    // scales have a gradient (through x's dequantized codes).
    let (n, k) = (5, 64);
    out.push(grad(
        "quant_matmul_w8a8",
        format!("exact x [3, {k}], scales [{n}, 1]"),
        1e-4,
        true,
        vec![(vec![n, 1], 0.01, 0.02)],
        3100,
        move |p| {
            let d = p[0].device();
            let codes = input(d, 213, &QuantFormat::INT8.shapes("quant grad case", n, k)?.0, DType::U32, 0.0, 4e9)?;
            exact_weight(d, QuantFormat::INT8, 3, k)?.quant_matmul_w8a8(&codes, &p[0])
        },
    ));
    out
}
