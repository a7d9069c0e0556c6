//! The scheduler's promises, counted with the runtime's launch counter on
//! every adapter: how many kernels a computation takes, and that the fused
//! result equals the CPU reference. Each computation's kernels, rendered
//! for two kinds of device with none at hand, are golden
//! (`tests/golden/fusion/`).

use kiln::core::codegen::Caps;
use kiln::core::codegen::launch::AttentionPlan;
use kiln::core::{Node, Prim, cuda_kernels_for, kernels_for};
use kiln::prelude::*;
use kiln_conformance::{cuda_kernels, golden};

use kiln_conformance::adapters::shared as devices;

fn random(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    kiln_conformance::rng::tensor(dev, shape, seed, -2.0, 2.0)
}

/// Run `f` on every adapter: assert it takes `expect(kernels)` kernels and
/// one submit, and agrees with the CPU reference within `tol` (relative to
/// the largest reference magnitude).
fn check(what: &str, f: impl Fn(&Device) -> Result<Tensor>, expect: impl Fn(u64) -> bool, tol: f64) -> u64 {
    check_on(what, f, |_, kernels| expect(kernels), tol)
}

/// [`check`], with what is expected hanging on the device.
fn check_on(what: &str, f: impl Fn(&Device) -> Result<Tensor>, expect: impl Fn(&Device, u64) -> bool, tol: f64) -> u64 {
    let reference = f(&Device::cpu()).unwrap();
    check_golden(what, reference.node());
    let want = kiln::block_on(reference.to_vec::<f32>()).unwrap();
    let scale = want.iter().fold(1e-30f32, |m, v| m.max(v.abs())) as f64;
    let mut counts = Vec::new();
    for (label, dev) in devices().iter() {
        let out = f(dev).unwrap();
        let before = dev.stats();
        kiln::block_on(out.realize()).unwrap();
        let after = dev.stats();
        let kernels = after.kernels_launched - before.kernels_launched;
        assert!(expect(dev, kernels), "{what} on {label}: {kernels} kernels");
        assert_eq!(after.submits - before.submits, 1, "{what} on {label}: one submit");
        let got = kiln::block_on(out.to_vec::<f32>()).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let err = (g - w).abs() as f64;
            assert!(err <= tol * scale, "{what} on {label}: element {i} is {g}, reference {w}");
        }
        counts.push(kernels);
    }
    counts[0]
}

/// The kernels of `root` (a graph on the CPU reference) rendered for a
/// GPU with WebGPU's guaranteed limits and for a CPU adapter with
/// subgroups 8 wide (as lavapipe's), against `tests/golden/fusion/`.
fn check_golden(what: &str, root: &Node) {
    let cpu_adapter = Caps { cpu: true, subgroups: true, subgroup_size: Some(8), ..Caps::webgpu() };
    let sources: Vec<String> = [Caps::webgpu(), cpu_adapter]
        .iter()
        .flat_map(|caps| kernels_for(caps, std::slice::from_ref(root)).unwrap())
        .map(|k| k.wgsl())
        .collect();
    match golden::verdict("fusion", what, &sources) {
        Ok(line) => eprintln!("{line}"),
        Err(failure) => panic!("{failure}"),
    }
    check_cuda(what, root);
}

/// The graph's kernels for a CUDA device render as CUDA C++, which NVRTC
/// and ptxas accept without a warning (where they are installed).
fn check_cuda(what: &str, root: &Node) {
    let keys = cuda_kernels_for(std::slice::from_ref(root)).unwrap();
    let kernels: Vec<_> = keys.iter().map(|k| k.cuda().unwrap_or_else(|e| panic!("{what}: {e}"))).collect();
    if cuda_kernels::cuda_tools()
        && let Some(complaint) = cuda_kernels::compile(&kernels)
    {
        panic!("{what}: {complaint}");
    }
}

#[test]
fn an_eight_op_elementwise_chain_with_a_broadcast_is_one_kernel() {
    let n = check(
        "8-op chain",
        |d| {
            let x = random(d, &[64, 300], 1);
            let b = random(d, &[300], 2);
            x.add(&b)?.mul_scalar(0.5)?.tanh()?.exp()?.sub_scalar(1.0)?.abs()?.sqrt()?.neg()
        },
        |k| k == 1,
        1e-5,
    );
    assert_eq!(n, 1);
}

#[test]
fn softmax_over_the_last_axis_is_at_most_two_kernels() {
    check("softmax", |d| random(d, &[256, 100], 3).softmax(-1), |k| k <= 2, 1e-5);
    check("log_softmax", |d| random(d, &[64, 1000], 4).log_softmax(-1), |k| k <= 2, 1e-5);
}

#[test]
fn relu_of_matmul_plus_bias_is_one_matmul_kernel() {
    check(
        "relu(x @ w + b)",
        |d| random(d, &[64, 96], 5).matmul(&random(d, &[96, 48], 6))?.add(&random(d, &[48], 7))?.relu(),
        |k| k == 1,
        1e-5,
    );
}

#[test]
fn layer_norm_is_one_row_kernel() {
    check(
        "layer norm",
        |d| {
            let x = random(d, &[128, 200], 8);
            let mu = x.mean(&[-1], true)?;
            let centered = x.sub(&mu)?;
            let var = centered.mul(&centered)?.mean(&[-1], true)?;
            centered.div(&var.add_scalar(1e-5)?.sqrt()?)?.mul(&random(d, &[200], 9))?.add(&random(d, &[200], 10))
        },
        |k| k == 1,
        1e-4,
    );
}

#[test]
fn cross_entropy_is_two_kernels() {
    check(
        "cross-entropy",
        |d| {
            let logits = random(d, &[128, 10], 11);
            let labels = Tensor::from_slice(d, &(0..128i32).map(|i| i * 7 % 10).collect::<Vec<_>>(), &[128])?;
            let picked = logits.log_softmax(-1)?.mul(&labels.one_hot(10, DType::F32)?)?;
            picked.sum(&[-1], false)?.mean(&[], false)?.neg()
        },
        |k| k == 2,
        1e-5,
    );
}

/// A layer of the GPT's shape, small: width 32, 4 heads, ALiBi, its
/// weights drawn like the other inputs here.
fn attention_layer(d: &Device) -> kiln_nn::CausalSelfAttention {
    let linear = |inputs: usize, outputs: usize, seed: u64| kiln_nn::Linear {
        weight: kiln_conformance::rng::tensor(d, &[inputs, outputs], seed, -0.4, 0.4),
        bias: Some(random(d, &[outputs], seed + 1)),
    };
    kiln_nn::CausalSelfAttention {
        qkv: linear(32, 96, 20).into(),
        out: linear(32, 32, 22).into(),
        heads: 4,
        alibi: true,
    }
}

/// The qkv projection (a matmul with its bias as epilogue, whose buffer
/// the heads' three views read), then the attention kernel (scores, scaled,
/// with ALiBi's bias and the mask, softmax and weighted sum, a few keys at
/// a time, written with the heads merged) or, on an adapter without
/// subgroups or workgroup memory to share keys (llvmpipe's GL), the scores
/// (a matmul whose epilogue scales, adds ALiBi's bias and masks), the
/// softmax (a row kernel), the weighted sum (a matmul) and the heads merged
/// (a copy); then the output projection with its bias: 3 or 6, whatever
/// the sequence length (150 positions span three key tiles and three query
/// blocks).
/// `tests/fused_attention.rs` runs every way of sharing keys everywhere.
#[test]
fn one_attention_layer_is_a_fixed_number_of_kernels() {
    for t in [16, 40, 150] {
        check_on(
            &format!("causal attention [2, {t}, 32], 4 heads"),
            |d| attention_layer(d).forward(&random(d, &[2, t, 32], 24), None),
            |d, k| k == attention_kernels(d),
            1e-4,
        );
    }
}

/// An attention layer's kernels on `dev`: 3 where the attention is one
/// kernel, 6 where its scores, softmax, product and the heads' merge are
/// apart.
fn attention_kernels(dev: &Device) -> u64 {
    if AttentionPlan::of(&dev.info().caps) == AttentionPlan::Apart { 6 } else { 3 }
}

/// A pre-norm block: the attention's, a row kernel per layer norm, the
/// MLP's two matmuls (bias and GELU in the first's epilogue) and two
/// elementwise passes.
#[test]
fn one_transformer_block_is_a_fixed_number_of_kernels() {
    check_on(
        "pre-norm block [2, 16, 32], 4 heads",
        |d| {
            let norm = || kiln_nn::LayerNorm::new(d, 32).unwrap();
            let mlp = kiln_nn::GeluMlp {
                up: kiln_nn::Linear {
                    weight: random(d, &[32, 128], 30).mul_scalar(0.2)?,
                    bias: Some(random(d, &[128], 31)),
                }
                .into(),
                down: kiln_nn::Linear {
                    weight: random(d, &[128, 32], 32).mul_scalar(0.1)?,
                    bias: Some(random(d, &[32], 33)),
                }
                .into(),
            };
            let block = kiln_nn::Block { norm1: norm(), attention: attention_layer(d), norm2: norm(), mlp };
            block.forward(&random(d, &[2, 16, 32], 34), None)
        },
        |d, k| k == attention_kernels(d) + 6,
        1e-4,
    );
}

#[test]
fn views_fuse_into_index_arithmetic() {
    // A transposed, sliced and broadcast operand, then a reshape that
    // splits an axis, still make one kernel.
    check(
        "views",
        |d| {
            let a = random(d, &[40, 30], 12).t()?.narrow(0, 5, 20)?;
            let b = random(d, &[40], 13).unsqueeze(0)?;
            a.mul(&b)?.exp()?.reshape(&[20, 4, 10])?.add_scalar(1.0)
        },
        |k| k == 1,
        1e-5,
    );
}

#[test]
fn an_expensive_shared_value_is_computed_once() {
    // `h` feeds two reductions along different axes: a tree reduction and a
    // row stage. Inlining h (many transcendental ops) twice would cost more
    // than one write and read, so it is materialized: 3 kernels.
    check(
        "shared",
        |d| {
            let x = random(d, &[64, 64], 14);
            let mut h = x.clone();
            for _ in 0..7 {
                h = h.sin()?.mul(&x)?;
            }
            h.sum(&[0], true)?.add(&h.sum(&[1], true)?)
        },
        |k| k == 3,
        1e-3,
    );
}

#[test]
fn several_outputs_of_one_shape_share_a_kernel() {
    for (label, dev) in devices().iter() {
        let x = random(dev, &[1000], 15);
        let (a, b, c) = (x.exp().unwrap(), x.mul_scalar(2.0).unwrap(), x.exp().unwrap().neg().unwrap());
        let before = dev.stats().kernels_launched;
        kiln::block_on(Tensor::realize_all(&[&a, &b, &c])).unwrap();
        assert_eq!(dev.stats().kernels_launched - before, 1, "{label}");
    }
}

#[test]
fn the_backward_pass_of_an_elementwise_chain_fuses() {
    for (label, dev) in devices().iter() {
        let x = random(dev, &[4096], 16);
        let loss = |x: &Tensor| x.tanh()?.mul_scalar(3.0)?.exp()?.add(x)?.sin()?.mul(x)?.sum(&[], false);
        let g = kiln::grad(loss)(&x).unwrap();
        // One kernel per non-view primitive is what op-by-op execution launches.
        let unfused = Node::topo_unrealized(&[g.node().clone()])
            .iter()
            .filter(|n| {
                !matches!(
                    n.prim(),
                    Prim::Reshape { .. } | Prim::Permute { .. } | Prim::Slice { .. } | Prim::Expand { .. }
                )
            })
            .count() as u64;
        let before = dev.stats().kernels_launched;
        kiln::block_on(g.realize()).unwrap();
        let fused = dev.stats().kernels_launched - before;
        eprintln!("{label}: backward of a 7-op chain: {fused} kernels fused, {unfused} op by op");
        assert!(fused < unfused && fused <= 2, "{label}: {fused} kernels, {unfused} unfused");
    }
}

#[test]
fn vectorized_walks_cover_ragged_sizes() {
    // Rows of a bias's period: a row count that is not a multiple of the
    // rows per invocation, and two biases of different periods (flat walk).
    check("bias rows", |d| random(d, &[37, 128], 20).add(&random(d, &[128], 21))?.relu(), |k| k == 1, 1e-6);
    let two = |d: &Device| {
        let x = random(d, &[6, 8, 64], 22);
        x.add(&random(d, &[64], 23))?.mul(&random(d, &[8, 64], 24))
    };
    check("two periods", two, |k| k == 1, 1e-6);
    // Grid-strided vec4s: lengths that leave the last invocations short.
    for n in [4, 1000, 4 * 257 * 9] {
        check("vec4 stride", move |d| random(d, &[n], 25).exp(), |k| k == 1, 1e-6);
    }
}

#[test]
fn broadcast_indices_step_across_grid_strides() {
    // Each vec4 invocation walks up to 8 vec4s a grid apart, stepping its
    // broadcast leaves' row and column instead of dividing: periods that do
    // not divide the grid's stride (1020), that exceed it (51000), shorter
    // than a vec4 step's span (12), several at once. (One bias of a period
    // of at least 64 takes the rows walk instead.)
    let rows = |d: &Device| {
        let x = random(d, &[300, 1020], 30);
        x.mul(&random(d, &[300, 1], 31))?.sub(&random(d, &[300, 1], 32))
    };
    check("row broadcasts", rows, |k| k == 1, 1e-6);
    let planes = |d: &Device| {
        let x = random(d, &[6, 50, 1020], 33).add(&random(d, &[50, 1020], 34))?;
        x.add(&random(d, &[1020], 35))?.mul(&random(d, &[6, 1, 1], 36))?.exp()
    };
    check("plane and column broadcasts", planes, |k| k == 1, 1e-6);
    let short = |d: &Device| random(d, &[25500, 12], 37).add(&random(d, &[12], 38));
    check("a short period", short, |k| k == 1, 1e-6);
    // A tree reduction's prologue over the same kind of leaves: a period
    // shorter than a span of the reduction (12) and one longer (40008).
    let prologue = |d: &Device| {
        let x = random(d, &[8, 3334, 12], 39).add(&random(d, &[12], 40))?.mul(&random(d, &[8, 1, 1], 41))?;
        x.reshape(&[8, 40008])?.sum(&[1], false)
    };
    check("reduce prologue broadcasts", prologue, |_| true, 1e-5);
}

#[test]
fn rows_that_do_not_split_into_vec4s_are_read_four_at_a_time() {
    // Rows of a length that is not a multiple of 4 (GPT-2's vocabulary of
    // 50257 among them, 64 rows streamed, 4 rows in tree passes): a vec4 may straddle two rows, so each of its
    // elements reads its own row's statistic (or row index), or its own
    // column's entry of a per-column vector. Repeats shorter than a vec4
    // stay one element at a time.
    for (rows, len) in [(4, 7), (12, 5), (3, 3), (64, 50257), (4, 50257), (300, 1023)] {
        let normalize = move |d: &Device| {
            let x = random(d, &[rows, len], 60);
            x.sub(&random(d, &[rows, 1], 61))?.exp()?.div(&random(d, &[rows, 1], 62))
        };
        check(&format!("row statistics over [{rows}, {len}]"), normalize, |k| k == 1, 1e-6);
        let by_row = move |d: &Device| {
            let index = Tensor::arange(d, 0.0, rows as f64, 1.0, DType::F32)?.reshape(&[rows as isize, 1])?;
            random(d, &[rows, len], 63).mul(&index)
        };
        check(&format!("a row index over [{rows}, {len}]"), by_row, |k| k == 1, 1e-6);
        let by_column = move |d: &Device| random(d, &[rows, len], 69).mul(&random(d, &[len], 70))?.exp();
        check(&format!("a column vector over [{rows}, {len}]"), by_column, |k| k == 1, 1e-6);
        // Reductions along such rows read them as vec4s masked to the row:
        // a plain one, and one of a row statistic's expression (softmax's).
        let sum = move |d: &Device| random(d, &[rows, len], 64).sum(&[1], false);
        check(&format!("a sum over [{rows}, {len}]"), sum, |_| true, 1e-5);
        let weighted = move |d: &Device| random(d, &[rows, len], 71).mul(&random(d, &[len], 72))?.sum(&[1], false);
        check(&format!("a column-weighted sum over [{rows}, {len}]"), weighted, |_| true, 1e-5);
        let sum_exp = move |d: &Device| {
            let x = random(d, &[rows, len], 65);
            x.sub(&random(d, &[rows, 1], 66))?.exp()?.sum(&[1], true)
        };
        check(&format!("a sum of exp(x - m) over [{rows}, {len}]"), sum_exp, |_| true, 1e-5);
        check(
            &format!("a max over [{rows}, {len}]"),
            move |d| random(d, &[rows, len], 67).max(&[1], false),
            |_| true,
            0.0,
        );
        for (label, dev) in devices().iter() {
            let plan = |y: Tensor| -> Vec<String> {
                dev.plan_kernels(&[y.node().clone()]).unwrap().into_iter().map(|k| k.name).collect()
            };
            let names = plan(normalize(dev).unwrap());
            let vectorized = (rows * len) % 4 == 0 && len >= 4;
            assert_eq!(names.len(), 1, "{label}: {names:?}");
            assert_eq!(names[0].ends_with("_straddling"), vectorized, "[{rows}, {len}] on {label}: {names:?}");
            let names = plan(by_column(dev).unwrap());
            assert_eq!(names[0].ends_with("_straddling"), vectorized, "[{rows}, {len}] on {label}: {names:?}");
            // Long rows take tree passes, the first reading vec4s, except
            // where enough of them stream (CPU adapters): one row kernel.
            if len > 16384 {
                let names = plan(sum_exp(dev).unwrap());
                let info = dev.info();
                if rows >= 16 && info.is_cpu_adapter() && info.workgroup_memory {
                    assert!(names.len() == 1 && names[0].contains("_stream"), "[{rows}, {len}] on {label}: {names:?}");
                } else {
                    assert!(names[0].ends_with("straddling"), "[{rows}, {len}] on {label}: {names:?}");
                }
            }
        }
    }
    // One row of an odd length, large enough for the streaming first pass.
    check("a sum over [1048579]", |d| random(d, &[1048579], 68).sum(&[], false), |_| true, 1e-5);
}

#[test]
fn row_statistics_are_loaded_once_per_invocation() {
    // Elementwise kernels whose only broadcasts are row statistics walk
    // eighths of rows (the last rows' invocations past a workgroup's end);
    // a tree reduction loads a statistic constant along its row once per
    // span (one repeat of a row, of two rows, and one of a part of a row).
    let normalize = |d: &Device| {
        let x = random(d, &[20, 4096], 44);
        x.sub(&random(d, &[20, 1], 45))?.exp()?.div(&random(d, &[20, 1], 46))
    };
    check("long rows", normalize, |k| k == 1, 1e-6);
    check("a few short rows", |d| random(d, &[7, 256], 47).mul(&random(d, &[7, 1], 48)), |k| k == 1, 1e-6);
    let row = |d: &Device| random(d, &[8, 40960], 49).sub(&random(d, &[8, 1], 50))?.exp()?.sum(&[1], false);
    check("a row's statistic in a reduction", row, |_| true, 1e-5);
    let pairs = |d: &Device| random(d, &[6, 2, 1024], 51).mul(&random(d, &[6, 1, 1], 52))?.sum(&[2], false);
    check("a statistic of two rows", pairs, |_| true, 1e-5);
    let part = |d: &Device| random(d, &[8, 40, 1024], 53).sub(&random(d, &[8, 40, 1], 54))?.sum(&[1, 2], false);
    check("a statistic of part of a row", part, |_| true, 1e-5);
    // A scalar read everywhere (Adam's bias correction from its step
    // count), in elementwise kernels of every walk and a reduction.
    let corrected = |d: &Device, shape: &[usize]| {
        // Realized, as an optimizer's state is (not a constant to fold).
        let step = Tensor::scalar(d, 3.0, DType::F32)?.cast(DType::I32)?;
        kiln::block_on(step.realize())?;
        let scale = step.cast(DType::F32)?.mul_scalar(-0.1)?.exp()?;
        random(d, shape, 55).mul(&scale)?.add(&step.cast(DType::F32)?)
    };
    for shape in [[784, 512], [2, 10], [3, 12], [3, 7]] {
        check(&format!("a scalar over {shape:?}"), |d| corrected(d, &shape), |k| k == 1, 1e-6);
    }
    check("a scalar in a reduction", |d| corrected(d, &[64, 1000])?.sum(&[1], false), |_| true, 1e-5);
}

#[test]
fn large_reductions_stream_and_small_ones_take_one_pass() {
    // A first pass over at least 2^20 elements interleaves whole
    // workgroups (rows of an odd length: the scalar loop and short spans);
    // a 64×64 reduction still takes one kernel.
    check("odd rows", |d| random(d, &[5, 250001], 42).sum(&[1], false), |k| k >= 3, 1e-5);
    check("a small column sum", |d| random(d, &[64, 64], 43).sum(&[0], false), |k| k == 1, 1e-5);
}

#[test]
fn views_that_keep_rows_whole_are_read_four_at_a_time() {
    // Permutes and slices whose innermost axis stays contiguous, a multiple
    // of 4 long and 4-aligned read vec4s (elementwise, reductions, row
    // kernels); the others read element by element. Both agree with the
    // reference.
    let permuted = |d: &Device, last: usize| random(d, &[6, 10, last], 80).permute(&[1, 0, 2]);
    type Build<'a> = &'a dyn Fn(&Device) -> Result<Tensor>;
    let cases: [(&str, Build, bool); 8] = [
        ("a head split [6, 10, 12] → [10, 6, 12]", &|d| permuted(d, 12)?.exp(), true),
        ("columns 4..16 of [30, 20]", &|d| random(d, &[30, 20], 81).narrow(1, 4, 12)?.mul_scalar(2.0), true),
        ("a permute with rows of 6", &|d| permuted(d, 6)?.exp(), false),
        ("columns 1..13 of [30, 20]", &|d| random(d, &[30, 20], 82).narrow(1, 1, 12)?.mul_scalar(2.0), false),
        ("a transpose", &|d| random(d, &[24, 16], 83).t()?.mul_scalar(2.0), false),
        ("a permuted operand plus a contiguous one", &|d| permuted(d, 12)?.add(&random(d, &[10, 6, 12], 84)), true),
        // Large enough that each invocation steps its coordinates across
        // several vec4s a grid apart, with carries through every axis.
        (
            "a large head split [64, 300, 12] → [300, 64, 12]",
            &|d| random(d, &[64, 300, 12], 87).permute(&[1, 0, 2])?.exp(),
            true,
        ),
        (
            "a rank-4 permute [16, 30, 20, 8] → [20, 16, 30, 8]",
            &|d| random(d, &[16, 30, 20, 8], 88).permute(&[2, 0, 1, 3])?.mul_scalar(3.0),
            true,
        ),
    ];
    for (what, f, vectorized) in cases {
        check(what, f, |k| k == 1, 1e-6);
        for (label, dev) in devices().iter() {
            let names: Vec<String> =
                dev.plan_kernels(&[f(dev).unwrap().node().clone()]).unwrap().into_iter().map(|k| k.name).collect();
            let walks_vec4s = ["_vec4", "_rows", "_segments", "_straddling"].iter().any(|s| names[0].ends_with(s));
            assert_eq!(walks_vec4s, vectorized, "{what} on {label}: {names:?}");
        }
    }
    let sum = |d: &Device| permuted(d, 12)?.sum(&[2], false);
    check("a sum along a permuted tensor's rows", sum, |_| true, 1e-5);
    let total = |d: &Device| permuted(d, 12)?.mul_scalar(0.5)?.sum(&[], false);
    check("a sum over a permuted tensor", total, |_| true, 1e-5);
    let softmax = |d: &Device| random(d, &[6, 64, 256], 85).permute(&[1, 0, 2])?.softmax(-1);
    check("softmax over a permuted tensor", softmax, |k| k <= 2, 1e-5);
    let long = |d: &Device| random(d, &[16, 2, 4096], 86).permute(&[1, 0, 2])?.softmax(-1);
    check("softmax over long permuted rows", long, |k| k <= 2, 1e-5);
}

#[test]
fn later_tree_passes_read_partials_four_at_a_time() {
    // A full sum of 2^24 elements: the first pass leaves 2^18 partials (one
    // per invocation on CPU adapters), which the later passes read as
    // vec4s, 256 to an invocation: 4 kernels in all, where scalar reads
    // took 5 or 6. On GPUs each workgroup leaves one partial: 2 kernels.
    let full = |d: &Device| random(d, &[1 << 24], 80).sum(&[], false);
    check("a sum of 2^24", full, |k| k <= 4, 1e-5);
    for (label, dev) in devices().iter() {
        let kernels = dev.plan_kernels(&[full(dev).unwrap().node().clone()]).unwrap().len();
        let want = if dev.info().is_cpu_adapter() { 4 } else { 2 };
        assert_eq!(kernels, want, "a sum of 2^24 on {label}");
    }
    // Rows of partials that split into vec4s and rows that do not (after a
    // first pass over rows that do not split into vec4s), one row and
    // many, for each monoid; arg reductions keep scalar reads.
    for (rows, len) in [(3, 1 << 20), (5, 300001), (1, 1 << 21), (2, 65536 * 3)] {
        let x = move |d: &Device, seed| random(d, &[rows, len], seed);
        check(&format!("a sum over [{rows}, {len}]"), move |d| x(d, 81).sum(&[1], false), |_| true, 1e-5);
        check(&format!("a max over [{rows}, {len}]"), move |d| x(d, 82).max(&[1], false), |_| true, 0.0);
        check(&format!("a min over [{rows}, {len}]"), move |d| x(d, 83).min(&[1], false), |_| true, 0.0);
        // Signs: the product is exact, and one element missed or taken
        // twice flips it half the time.
        let signs = move |d: &Device| {
            let x = x(d, 84);
            x.div(&x.abs()?)?.prod(&[1], false)
        };
        check(&format!("a product of signs over [{rows}, {len}]"), signs, |_| true, 0.0);
        let arg = move |d: &Device| x(d, 85).argmax(Some(1), false)?.cast(DType::F32);
        check(&format!("an argmax over [{rows}, {len}]"), arg, |_| true, 0.0);
    }
}

#[test]
fn grid_strided_walks_cover_every_element_with_and_without_bounds_checks() {
    // The grid-strided vec4 walk has no bounds checks where its grid covers
    // the elements exactly (a multiple of 8 vec4s for each of 256
    // invocations per workgroup) and checks each step otherwise; both with
    // contiguous leaves and with a transposed one stepped through its
    // coordinates.
    for n in [8192, 8196, 3 * 8192, (1 << 20) + 4] {
        check(
            &format!("x * 2 + 1 over [{n}]"),
            move |d| random(d, &[n], 90).mul_scalar(2.0)?.add_scalar(1.0),
            |k| k == 1,
            1e-6,
        );
    }
    for (a, b, c) in [(8, 16, 64), (8, 16, 68), (32, 64, 128)] {
        let permuted = move |d: &Device| random(d, &[b, a, c], 91).permute(&[1, 0, 2])?.add(&random(d, &[a, b, c], 92));
        check(&format!("a permuted sum over [{a}, {b}, {c}]"), permuted, |k| k == 1, 1e-6);
    }
}

/// The gradient of a cross-entropy over a `prod` reduction once fused into
/// one elementwise kernel binding 10 inputs and its output, past the cap
/// of 8 (SwiftShader, whose limit is 10, refused the pipeline): the
/// scheduler counted buffers but not the pending row stages and matmuls
/// that become buffers. Every kernel now binds within the cap.
#[test]
fn a_cross_entropy_gradient_over_prod_binds_within_the_cap() {
    let loss_and_grad = |dev: &Device| -> Result<(f32, Vec<f32>)> {
        let x = kiln_conformance::rng::tensor(dev, &[5, 2, 6], 31, -1.0, 1.0);
        let labels = Tensor::from_slice(dev, &[1i32, 4], &[2])?;
        let loss = |x: &Tensor| -> Result<Tensor> {
            let log_p = x.prod(&[0], false)?.log_softmax(-1)?;
            log_p.mul(&labels.one_hot(6, DType::F32)?)?.sum(&[-1], false)?.neg()?.mean(&[], false)
        };
        let (value, grad) = value_and_grad(loss)(&x)?;
        Ok((kiln::block_on(value.item::<f32>())?, kiln::block_on(grad.to_vec::<f32>())?))
    };
    let (want_loss, want_grad) = loss_and_grad(&Device::cpu()).unwrap();
    let scale = want_grad.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
    for (label, dev) in devices().iter() {
        let (got_loss, got_grad) = loss_and_grad(dev).unwrap();
        assert!(
            (got_loss - want_loss).abs() <= 1e-4 * want_loss.abs().max(1.0),
            "{label}: loss {got_loss}, reference {want_loss}"
        );
        for (i, (g, w)) in got_grad.iter().zip(&want_grad).enumerate() {
            assert!((g - w).abs() <= 1e-4 * scale, "{label}: gradient element {i} is {g}, reference {w}");
        }
        let over = kiln_conformance::bindings::over_cap(dev);
        assert!(over.is_empty(), "{label}: kernels over the binding cap:\n{}", over.join("\n"));
    }
}
