//! Conformance and gradient cases of kiln-nn (layers, losses, metrics,
//! initializers) and of `kiln::random`. Parameters come from fixed-seed
//! inputs (not initializers) so every device sees the same values; the
//! initializers and draws have cases of their own.

use crate::cases::input;
use crate::grad_cases::{Check, GradCase};
use crate::{Case, Tol};
use kiln::prelude::*;
use kiln::random;
use kiln_nn::{
    AvgPool2d, Conv2d, Conv2dConfig, ConvAlgorithm, Dropout, Embedding, Layer, LayerNorm, Linear, MaxPool2d, Sequential,
};
use kiln_nn::{init, loss, metrics};

/// Layers of matmul size: a sum over k products in f32.
const LAYER: Tol = Tol { abs: 1e-5, rel: 1e-4 };

fn case(
    op: &'static str,
    detail: &str,
    tol: Tol,
    build: impl Fn(&Device) -> Result<Tensor> + Send + Sync + 'static,
) -> Case {
    Case { op, detail: detail.into(), tol, build: Box::new(build) }
}

fn conv(w: &Tensor, b: Option<&Tensor>, config: Conv2dConfig) -> Conv2d {
    Conv2d { weight: w.clone(), bias: b.cloned(), config }
}

/// (detail, input shape, weight shape, config) of the conv cases, each
/// with both algorithms.
fn conv_configs() -> Vec<(String, [usize; 4], [usize; 4], Conv2dConfig)> {
    let c = Conv2dConfig::default();
    let base = vec![
        ("[2, 3, 9, 9] * [4, 3, 3, 3]", [2, 3, 9, 9], [4, 3, 3, 3], c),
        ("stride 2, padding 1", [2, 3, 9, 8], [4, 3, 3, 3], Conv2dConfig { stride: 2, padding: 1, ..c }),
        ("dilation 2, no bias", [1, 2, 9, 9], [3, 2, 3, 3], Conv2dConfig { dilation: 2, bias: false, ..c }),
        ("groups 2", [2, 4, 6, 6], [6, 2, 3, 3], Conv2dConfig { groups: 2, ..c }),
        ("5×5, MNIST-like [4, 1, 28, 28] → 8", [4, 1, 28, 28], [8, 1, 5, 5], c),
    ];
    let direct = |config| Conv2dConfig { algorithm: ConvAlgorithm::Direct, ..config };
    base.into_iter()
        .flat_map(|(d, xs, ws, config)| {
            [(d.to_string(), xs, ws, config), (format!("{d}, direct"), xs, ws, direct(config))]
        })
        .collect()
}

fn conv_forward(x: &Tensor, w: &Tensor, b: &Tensor, config: Conv2dConfig) -> Result<Tensor> {
    conv(w, config.bias.then_some(b), config).forward(x)
}

/// A small CNN: conv 3×3 → relu → maxpool 2 → conv 3×3 → relu → flatten → linear.
pub fn small_cnn(p: &[Tensor]) -> Sequential {
    let c = Conv2dConfig::default();
    Sequential::new(vec![
        Layer::Conv2d(conv(&p[0], Some(&p[1]), c)),
        Layer::Relu,
        Layer::MaxPool2d(MaxPool2d::new(2)),
        Layer::Conv2d(conv(&p[2], Some(&p[3]), c)),
        Layer::Relu,
        Layer::Flatten,
        Layer::Linear(Linear { weight: p[4].clone(), bias: Some(p[5].clone()) }),
    ])
}

pub fn cases() -> Vec<Case> {
    let mut s = Vec::new();
    random_cases(&mut s);
    s.push(case("Linear", "[7, 33] → 10", LAYER, |d| {
        let l = Linear {
            weight: input(d, 3001, &[33, 10], DType::F32, -1.0, 1.0)?,
            bias: Some(input(d, 3002, &[10], DType::F32, -1.0, 1.0)?),
        };
        l.forward(&input(d, 3003, &[7, 33], DType::F32, -1.0, 1.0)?)
    }));
    s.push(case("Linear", "[2, 5, 784] → 256, no bias", LAYER, |d| {
        let l = Linear { weight: input(d, 3004, &[784, 256], DType::F32, -0.1, 0.1)?, bias: None };
        l.forward(&input(d, 3005, &[2, 5, 784], DType::F32, 0.0, 1.0)?)
    }));
    for (detail, xs, ws, config) in conv_configs() {
        s.push(case("Conv2d", &detail, LAYER, move |d| {
            let x = input(d, 3010, &xs, DType::F32, -1.0, 1.0)?;
            conv_forward(
                &x,
                &input(d, 3011, &ws, DType::F32, -0.5, 0.5)?,
                &input(d, 3012, &[ws[0]], DType::F32, -0.5, 0.5)?,
                config,
            )
        }));
    }
    s.push(case("MaxPool2d", "[2, 3, 9, 8] kernel 2", Tol::EXACT, |d| {
        MaxPool2d::new(2).forward(&input(d, 3020, &[2, 3, 9, 8], DType::F32, -1.0, 1.0)?)
    }));
    s.push(case("MaxPool2d", "[1, 2, 9, 9] kernel 3 stride 2", Tol::EXACT, |d| {
        MaxPool2d { kernel: 3, stride: 2 }.forward(&input(d, 3021, &[1, 2, 9, 9], DType::F32, -1.0, 1.0)?)
    }));
    s.push(case("AvgPool2d", "[2, 3, 8, 8] kernel 2", Tol::F32, |d| {
        AvgPool2d::new(2).forward(&input(d, 3022, &[2, 3, 8, 8], DType::F32, -1.0, 1.0)?)
    }));
    s.push(case("AvgPool2d", "[1, 2, 9, 9] kernel 3 stride 2", Tol::F32, |d| {
        AvgPool2d { kernel: 3, stride: 2 }.forward(&input(d, 3023, &[1, 2, 9, 9], DType::F32, -1.0, 1.0)?)
    }));
    // Rows of 1024 take the row kernel's lanes layout where it runs.
    for (len, seed) in [(65, 3030), (1024, 3033)] {
        s.push(case("LayerNorm", &format!("[33, {len}]"), LAYER, move |d| {
            let ln = LayerNorm {
                weight: input(d, seed, &[len], DType::F32, 0.5, 1.5)?,
                bias: input(d, seed + 1, &[len], DType::F32, -1.0, 1.0)?,
                eps: 1e-5,
            };
            ln.forward(&input(d, seed + 2, &[33, len], DType::F32, -3.0, 3.0)?)
        }));
    }
    s.push(case("Embedding", "[50, 16] table, ids [4, 7]", Tol::EXACT, |d| {
        let e = Embedding { weight: input(d, 3040, &[50, 16], DType::F32, -1.0, 1.0)? };
        e.forward(&input(d, 3041, &[4, 7], DType::I32, 0.0, 49.0)?)
    }));
    s.push(case("Dropout", "rate 0.25 [33, 65]", Tol::F32, |d| {
        Dropout::new(0.25)?.forward(&input(d, 3050, &[33, 65], DType::F32, -1.0, 1.0)?, Some(Key::new(9)))
    }));
    s.push(case("Sequential", "small CNN [2, 1, 12, 12] → 10", LAYER, |d| {
        let p = cnn_params(d)?;
        small_cnn(&p).forward(&input(d, 3060, &[2, 1, 12, 12], DType::F32, 0.0, 1.0)?)
    }));
    s.push(case("mlp", "784-64-10 (He init from a key), batch 8", LAYER, |d| {
        kiln_nn::mlp(d, Key::new(3), &[784, 64, 10], Layer::Relu)?.forward(&input(
            d,
            3061,
            &[8, 784],
            DType::F32,
            0.0,
            1.0,
        )?)
    }));
    loss_cases(&mut s);
    init_cases(&mut s);
    s
}

fn cnn_params(d: &Device) -> Result<Vec<Tensor>> {
    let shapes: [&[usize]; 6] = [&[4, 1, 3, 3], &[4], &[6, 4, 3, 3], &[6], &[6 * 3 * 3, 10], &[10]];
    shapes.iter().enumerate().map(|(i, s)| input(d, 3070 + i as u64, s, DType::F32, -0.5, 0.5)).collect()
}

fn random_cases(s: &mut Vec<Case>) {
    s.push(case("threefry", "Random123 KAT counters, key 13198a2e 03707344, both words", Tol::EXACT, |d| {
        let hi = Tensor::from_slice(d, &[0u32, u32::MAX, 0x243f_6a88], &[3])?;
        let lo = Tensor::from_slice(d, &[0u32, u32::MAX, 0x85a3_08d3], &[3])?;
        let [y0, y1] = random::threefry2x32_tensors(Key::from_words([0x1319_8a2e, 0x0370_7344]), &hi, &lo)?;
        Tensor::concat(&[&y0, &y1], 0)
    }));
    s.push(case("random_bits", "u32 [4096, 4096] (2^24: Mesa's loop cap would show)", Tol::EXACT, |d| {
        random::random_bits(d, Key::new(1234), &[4096, 4096])
    }));
    s.push(case("uniform", "f32 [7, 1023] in [-2, 3)", Tol::F32, |d| {
        random::uniform(d, Key::new(1), &[7, 1023], DType::F32, -2.0, 3.0)
    }));
    for dtype in [DType::F16, DType::BF16] {
        s.push(case("uniform", &format!("{dtype} [1023] in [0, 1)"), Tol::storage(dtype), move |d| {
            random::uniform(d, Key::new(2), &[1023], dtype, 0.0, 1.0)
        }));
    }
    // Box–Muller: log and cos (SwiftShader's cos errs by up to 2^-11, times √(−2 ln u) ≤ 5.8).
    s.push(case("normal", "f32 [4097] mean 1, std 2", Tol { abs: 2e-2, rel: 1e-4 }, |d| {
        random::normal(d, Key::new(3), &[4097], DType::F32, 1.0, 2.0)
    }));
    s.push(case("bernoulli", "p = 0.25 [4097]", Tol::EXACT, |d| random::bernoulli(d, Key::new(4), 0.25, &[4097])));
    s.push(case("randint", "i32 [4097] in [-5, 10)", Tol::EXACT, |d| random::randint(d, Key::new(5), &[4097], -5, 10)));
    s.push(case("randint", "i32 [1023] over the whole i32 range", Tol::EXACT, |d| {
        random::randint(d, Key::new(6), &[1023], i32::MIN, i32::MAX)
    }));
    s.push(case("permutation", "n = 1000", Tol::EXACT, |d| random::permutation(d, Key::new(7), 1000)));
    // Draws from a key held in a tensor: the batching check batches the
    // key, so each example draws from its own (JAX's `vmap(random.normal)`).
    s.push(case("random_bits", "u32 [3, 65] from a key tensor", Tol::EXACT, |d| {
        random::random_bits(d, &Key::new(8).to_tensor(d)?, &[3, 65])
    }));
    s.push(case("uniform", "f32 [5, 33] in [-1, 1) from a key tensor", Tol::F32, |d| {
        random::uniform(d, &Key::new(9).to_tensor(d)?, &[5, 33], DType::F32, -1.0, 1.0)
    }));
    s.push(case("normal", "f32 [257] from a key tensor", Tol { abs: 2e-2, rel: 1e-4 }, |d| {
        random::normal(d, &Key::new(10).to_tensor(d)?, &[257], DType::F32, 0.0, 1.0)
    }));
    s.push(case("bernoulli", "p = 0.5 [257] from a key tensor", Tol::EXACT, |d| {
        random::bernoulli(d, &Key::new(11).to_tensor(d)?, 0.5, &[257])
    }));
    s.push(case("randint", "i32 [257] in [-3, 9) from a key tensor", Tol::EXACT, |d| {
        random::randint(d, &Key::new(12).to_tensor(d)?, &[257], -3, 9)
    }));
}

fn loss_cases(s: &mut Vec<Case>) {
    s.push(case("cross_entropy", "logits [64, 10], i32 labels", Tol::MATH, |d| {
        loss::cross_entropy(
            &input(d, 3100, &[64, 10], DType::F32, -5.0, 5.0)?,
            &input(d, 3101, &[64], DType::I32, 0.0, 9.0)?,
        )
    }));
    s.push(case("cross_entropy", "logits near 1000 (stability)", Tol::MATH, |d| {
        loss::cross_entropy(
            &input(d, 3102, &[8, 5], DType::F32, 995.0, 1005.0)?,
            &input(d, 3103, &[8], DType::I32, 0.0, 4.0)?,
        )
    }));
    s.push(case("cross_entropy_one_hot", "logits [33, 7], soft targets", Tol::MATH, |d| {
        let t = input(d, 3104, &[33, 7], DType::F32, 0.0, 1.0)?.softmax(-1)?;
        loss::cross_entropy_one_hot(&input(d, 3105, &[33, 7], DType::F32, -5.0, 5.0)?, &t)
    }));
    s.push(case("mse", "[33, 65]", Tol::F32, |d| {
        loss::mse(
            &input(d, 3106, &[33, 65], DType::F32, -2.0, 2.0)?,
            &input(d, 3107, &[33, 65], DType::F32, -2.0, 2.0)?,
        )
    }));
    s.push(case("binary_cross_entropy_with_logits", "[1023], logits in ±30", Tol::MATH, |d| {
        loss::binary_cross_entropy_with_logits(
            &input(d, 3108, &[1023], DType::F32, -30.0, 30.0)?,
            &input(d, 3109, &[1023], DType::F32, 0.0, 1.0)?,
        )
    }));
    s.push(case("accuracy", "logits [64, 10], i32 labels", Tol::F32, |d| {
        metrics::accuracy(
            &input(d, 3110, &[64, 10], DType::F32, -5.0, 5.0)?,
            &input(d, 3111, &[64], DType::I32, 0.0, 9.0)?,
        )
    }));
}

fn init_cases(s: &mut Vec<Case>) {
    let k = Key::new(11);
    s.push(case("init", "zeros [7, 5]", Tol::EXACT, |d| init::zeros(d, &[7, 5])));
    s.push(case("init", "kaiming_uniform [784, 64]", Tol::F32, move |d| init::kaiming_uniform(d, k, &[784, 64], 784)));
    s.push(case("init", "xavier_uniform [64, 10]", Tol::F32, move |d| init::xavier_uniform(d, k, &[64, 10], 64, 10)));
    s.push(case("init", "kaiming_normal [8, 1, 5, 5]", Tol { abs: 2e-3, rel: 1e-4 }, move |d| {
        init::kaiming_normal(d, k, &[8, 1, 5, 5], 25)
    }));
    s.push(case("init", "xavier_normal [64, 10]", Tol { abs: 2e-3, rel: 1e-4 }, move |d| {
        init::xavier_normal(d, k, &[64, 10], 64, 10)
    }));
    s.push(case("init", "normal std 0.02 [33, 7]", Tol { abs: 1e-3, rel: 1e-4 }, move |d| {
        init::normal(d, k, &[33, 7], 0.02)
    }));
}

const DEFAULT: Check = Check::Elementwise(Tol { abs: 1e-5, rel: 1e-4 });

fn grad_case(
    op: &'static str,
    detail: &str,
    seed: u64,
    inputs: &[(&[usize], f64, f64)],
    f: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) -> GradCase {
    let inputs = inputs.iter().map(|(s, lo, hi)| (s.to_vec(), *lo, *hi)).collect();
    GradCase { op, detail: detail.into(), check: DEFAULT, fd: true, inputs, seed, f: Box::new(f) }
}

pub fn grads() -> Vec<GradCase> {
    let mut s = vec![
        grad_case(
            "Linear",
            "[4, 6] → 3",
            4000,
            &[(&[4, 6], -1.0, 1.0), (&[6, 3], -1.0, 1.0), (&[3], -1.0, 1.0)],
            |x| Linear { weight: x[1].clone(), bias: Some(x[2].clone()) }.forward(&x[0]),
        ),
        grad_case("MaxPool2d", "[2, 2, 6, 5] kernel 2", 4010, &[(&[2, 2, 6, 5], -1.0, 1.0)], |x| {
            MaxPool2d::new(2).forward(&x[0])
        }),
        grad_case("AvgPool2d", "[1, 2, 7, 7] kernel 3 stride 2", 4020, &[(&[1, 2, 7, 7], -1.0, 1.0)], |x| {
            AvgPool2d { kernel: 3, stride: 2 }.forward(&x[0])
        }),
        grad_case("LayerNorm", "[5, 8]", 4030, &[(&[5, 8], -2.0, 2.0), (&[8], 0.5, 1.5), (&[8], -1.0, 1.0)], |x| {
            LayerNorm { weight: x[1].clone(), bias: x[2].clone(), eps: 1e-5 }.forward(&x[0])
        }),
        grad_case("Embedding", "[10, 4] table, ids [2, 3] with repeats", 4040, &[(&[10, 4], -1.0, 1.0)], |x| {
            let ids = Tensor::from_slice(x[0].device(), &[1i32, 7, 1, 0, 9, 7], &[2, 3])?;
            Embedding { weight: x[0].clone() }.forward(&ids)
        }),
        grad_case("Dropout", "rate 0.5 [6, 7], fixed key", 4050, &[(&[6, 7], -1.0, 1.0)], |x| {
            Dropout::new(0.5)?.forward(&x[0], Some(Key::new(5)))
        }),
        grad_case(
            "Sequential",
            "small CNN [2, 1, 12, 12] → 10, cross-entropy",
            4060,
            &[
                (&[4, 1, 3, 3], -0.5, 0.5),
                (&[4], -0.5, 0.5),
                (&[6, 4, 3, 3], -0.5, 0.5),
                (&[6], -0.5, 0.5),
                (&[54, 10], -0.5, 0.5),
                (&[10], -0.5, 0.5),
            ],
            |p| {
                let x = input(p[0].device(), 4069, &[2, 1, 12, 12], DType::F32, 0.0, 1.0)?;
                let labels = Tensor::from_slice(p[0].device(), &[3i32, 8], &[2])?;
                loss::cross_entropy(&small_cnn(p).forward(&x)?, &labels)
            },
        ),
        grad_case("cross_entropy", "logits [5, 4], i32 labels", 4070, &[(&[5, 4], -3.0, 3.0)], |x| {
            loss::cross_entropy(&x[0], &Tensor::from_slice(x[0].device(), &[0i32, 3, 1, 1, 2], &[5])?)
        }),
        grad_case(
            "cross_entropy_one_hot",
            "logits [4, 3], soft targets",
            4080,
            &[(&[4, 3], -3.0, 3.0), (&[4, 3], 0.0, 1.0)],
            |x| loss::cross_entropy_one_hot(&x[0], &x[1]),
        ),
        grad_case("mse", "[3, 5]", 4090, &[(&[3, 5], -2.0, 2.0), (&[3, 5], -2.0, 2.0)], |x| loss::mse(&x[0], &x[1])),
        grad_case("binary_cross_entropy_with_logits", "[12]", 4100, &[(&[12], -4.0, 4.0), (&[12], 0.0, 1.0)], |x| {
            loss::binary_cross_entropy_with_logits(&x[0], &x[1])
        }),
    ];
    let small = conv_configs().into_iter().filter(|(d, ..)| !d.starts_with("5×5"));
    for (i, (detail, xs, ws, config)) in small.enumerate() {
        // Smaller spatial sizes keep finite differences quick.
        let xs = [xs[0].min(2), xs[1], xs[2].min(7), xs[3].min(7)];
        s.push(grad_case(
            "Conv2d",
            &detail,
            4200 + 10 * i as u64,
            &[(&xs, -1.0, 1.0), (&ws, -0.5, 0.5), (&[ws[0]], -0.5, 0.5)],
            move |x| conv_forward(&x[0], &x[1], &x[2], config),
        ));
    }
    s
}
