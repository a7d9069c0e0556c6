//! `Device::cuda`: a clear error where there is no CUDA, a described GPU
//! where there is one; the runtime's PTX cache. (What the runtime computes
//! is checked in `cuda.rs`, on the host engine, and by the MNIST trainer.)

use kiln::prelude::*;
use kiln_conformance::cuda_kernels::cuda_tools;

/// The CUDA runtimes to check: the host engine, and the GPU where there
/// is one (`scripts/device-check` runs these tests there).
fn cuda_runtimes() -> Vec<(&'static str, Device)> {
    let mut runtimes = vec![("the host engine", Device::cuda_on_host())];
    match Device::cuda() {
        Ok(gpu) => runtimes.push(("the GPU", gpu)),
        Err(e) => kiln_conformance::require::skip("cuda", &e.to_string()),
    }
    runtimes
}

/// Without a driver (these CI machines) `Device::cuda` is an error naming
/// what is missing and how to get it; with a GPU it is a CUDA device that
/// says which GPU, driver and NVRTC it has. Asking for it by selector is
/// the same.
#[test]
fn device_cuda_opens_a_gpu_or_says_what_is_missing() {
    let opened = [
        Device::cuda(),
        kiln::block_on(Device::with_options(DeviceOptions { adapter: Some("cuda".into()), ..Default::default() })),
    ];
    for device in opened {
        match device {
            Ok(dev) => {
                let info = dev.info();
                assert_eq!(info.backend, "cuda");
                assert!(info.driver.starts_with("CUDA driver "), "{info:?}");
                assert!(info.driver_info.contains("compute capability") && info.driver_info.contains("NVRTC"));
                eprintln!("CUDA: {} ({}, {})", info.name, info.driver, info.driver_info);
            }
            Err(e) => {
                let message = e.to_string();
                assert!(matches!(e, KilnError::Unavailable { .. }), "{message}");
                let named = ["CUDA driver", "CUDA GPU", "NVRTC"].iter().any(|what| message.contains(what));
                assert!(named, "the error names nothing missing: {message}");
                kiln_conformance::require::skip("cuda", &message);
            }
        }
    }
}

/// The host engine describes itself as CUDA, and what its kernels assume
/// is what a CUDA GPU offers.
#[test]
fn the_host_engine_is_described_as_cuda() {
    let info = Device::cuda_on_host().info();
    assert_eq!(info.backend, "cuda");
    let caps = info.caps;
    assert_eq!((caps.subgroup_size, caps.workgroup_memory, caps.storage_textures), (Some(32), true, false));
}

/// NVRTC's PTX is kept on disk by source and architecture: the second ask
/// reads the file the first one wrote.
#[test]
fn compiled_ptx_is_kept_on_disk() {
    use kiln_cuda::device::ptx_cache;
    if !cuda_tools() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("kiln-ptx-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let caps = kiln::core::codegen::Caps::cuda();
    let cpu = Device::cpu();
    let x = Tensor::ones(&cpu, &[4, 8], DType::F32).unwrap().exp().unwrap().sum(&[1], false).unwrap();
    let keys = kiln::core::kernels_for(&caps, &[x.node().clone()]).unwrap();
    let kernels: Vec<_> = keys.iter().map(|k| k.cuda().unwrap()).collect();
    let source = kiln::core::codegen::cuda::batch(&kernels);
    let path = ptx_cache::path_in(&dir, &source, 80).unwrap();
    assert!(!path.exists());
    let first = ptx_cache::ptx_in(Some(&dir), &source, 80).unwrap();
    assert!(first.contains(".entry kiln_main_0"), "{first}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), first);
    std::fs::write(&path, format!("{first}// read from the cache\n")).unwrap();
    assert!(ptx_cache::ptx_in(Some(&dir), &source, 80).unwrap().ends_with("// read from the cache\n"));
    assert_ne!(ptx_cache::path_in(&dir, &source, 90).unwrap(), path, "another architecture, another file");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// f32 and f16 matmuls (batched, transposed or broadcast operands too) go
/// to cuBLAS (on the host engine, its products as loops); a bias, ReLU or
/// GELU epilogue of an f32 product runs inside cuBLASLt, any other epilogue
/// (or an unaligned bias) as a pass after the product; those with a pinned
/// kiln config go to kiln's kernels; each matches the reference.
#[test]
fn raw_matmuls_run_through_cublas_and_match_the_reference() {
    for (label, dev) in cuda_runtimes() {
        raw_matmuls_on(label, &dev);
    }
}

fn raw_matmuls_on(label: &str, dev: &Device) {
    let cpu = Device::cpu();
    let input =
        |d: &Device, shape: &[usize], seed: u64| kiln_conformance::cases::input(d, seed, shape, DType::F32, -1.0, 1.0);
    type Product = fn(&Tensor, &Tensor) -> kiln::Result<Tensor>;
    /// What it checks, A's and B's shapes, the product, its kernels' names.
    type Case<'a> = (&'a str, &'a [usize], &'a [usize], Product, &'a [&'a str]);
    /// B's row `r` as a bias over the product's columns (a view: no kernel).
    fn row(b: &Tensor, r: usize) -> kiln::Result<Tensor> {
        b.narrow(0, r, 1)?.reshape(&[-1])
    }
    let products: [Case; 12] = [
        ("plain", &[33, 20], &[20, 17], |a, b| a.matmul(b), &["cublas_sgemm"]),
        (
            "f16 operands",
            &[9, 16],
            &[16, 7],
            |a, b| a.cast(DType::F16)?.matmul(&b.cast(DType::F16)?),
            &["ew_cast", "ew_cast", "cublas_gemm_ex_f16", "ew_cast"],
        ),
        ("batched, B transposed", &[3, 9, 8], &[3, 5, 8], |a, b| a.matmul(&b.transpose(-1, -2)?), &["cublas_sgemm"]),
        ("broadcast B (rows folded)", &[4, 6, 8], &[8, 5], |a, b| a.matmul(b), &["cublas_sgemm"]),
        ("ReLU inside cuBLASLt", &[16, 8], &[8, 12], |a, b| a.matmul(b)?.relu(), &["cublaslt_sgemm_relu"]),
        ("GELU inside cuBLASLt", &[16, 8], &[8, 12], |a, b| a.matmul(b)?.gelu(), &["cublaslt_sgemm_gelu"]),
        ("a bias inside cuBLASLt", &[16, 8], &[8, 12], |a, b| a.matmul(b)?.add(&row(b, 0)?), &["cublaslt_sgemm_bias"]),
        (
            "bias then ReLU, a dense layer over sequences (rows folded)",
            &[3, 9, 8],
            &[8, 5],
            |a, b| a.matmul(b)?.add(&row(b, 0)?)?.relu(),
            &["cublaslt_sgemm_bias_relu"],
        ),
        (
            "GELU of bias plus product",
            &[16, 8],
            &[8, 12],
            |a, b| row(b, 0)?.add(&a.matmul(b)?)?.gelu(),
            &["cublaslt_sgemm_bias_gelu"],
        ),
        (
            "a bias not 256-byte aligned: a pass",
            &[16, 8],
            &[8, 12],
            |a, b| a.matmul(b)?.add(&row(b, 1)?)?.relu(),
            &["cublas_sgemm", "ew_"],
        ),
        (
            "an epilogue cuBLASLt has not: a pass",
            &[16, 8],
            &[8, 12],
            |a, b| a.matmul(b)?.tanh(),
            &["cublas_sgemm", "ew_"],
        ),
        (
            "batched, with a computed bias and tanh",
            &[3, 9, 8],
            &[8, 5],
            |a, b| a.matmul(b)?.add(&b.sum(&[0], false)?)?.tanh(),
            &["sum", "cublas_sgemm", "ew_"],
        ),
    ];
    // Every case runs before the test fails, so that one run on a GPU shows
    // each way cuBLAS or cuBLASLt differs (a call it declines, its GELU).
    let mut failures = Vec::new();
    for (what, sa, sb, product, kernels) in products {
        let mut check = || -> kiln::Result<()> {
            let on = |d: &Device| product(&input(d, sa, 1)?, &input(d, sb, 2)?);
            let (got, want) = (on(dev)?, on(&cpu)?);
            let planned = dev.plan_kernels(&[got.node().clone()])?;
            let names: Vec<&str> = planned.iter().map(|k| k.name.as_str()).collect();
            let expected = names.len() == kernels.len() && names.iter().zip(kernels).all(|(n, k)| n.starts_with(k));
            if !expected {
                failures.push(format!("{what}: {names:?}, expected {kernels:?}"));
            }
            let tol = if got.dtype() == DType::F16 { kiln_conformance::Tol::F16 } else { kiln_conformance::Tol::F32 };
            let got = kiln::block_on(dev.read(got.node()))?.data;
            let want = kiln::block_on(cpu.read(want.node()))?.data;
            let outcome = kiln_conformance::compare(&got, &want, tol);
            if !outcome.passed {
                failures.push(format!("{what}: {:?}", outcome.failure));
            }
            Ok(())
        };
        if let Err(e) = check() {
            failures.push(format!("{what}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{label}:\n{}", failures.join("\n"));
    let default = kiln::core::codegen::matmul::MatmulConfig::default_for(&dev.info().caps);
    let odd = kiln::core::codegen::matmul::MatmulConfig { wx: 0, ..default };
    let e = dev.set_matmul_config(Some(odd)).unwrap_err().to_string();
    assert!(e.ends_with("is not a member of kiln's matmul family (MatmulConfig::CANDIDATES)"), "{e}");
    dev.set_matmul_config(Some(default)).unwrap();
    let pinned = input(dev, &[8, 8], 3).unwrap().matmul(&input(dev, &[8, 8], 4).unwrap()).unwrap();
    let planned = dev.plan_kernels(&[pinned.node().clone()]).unwrap();
    assert!(planned.iter().all(|k| !k.name.starts_with("cublas")), "{label}: a pinned config: {planned:?}");
    dev.set_matmul_config(None).unwrap();
}

/// `kiln::jit` on the CUDA runtime: the first call captures, the next
/// ones replay its launch list (one list per call, nothing compiled) and
/// equal the function run as traced.
#[test]
fn jit_replays_its_launch_list_on_the_cuda_runtime() {
    for (label, dev) in cuda_runtimes() {
        jit_replays_on(label, &dev);
    }
}

/// The same seeded input on `dev`.
fn input(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    kiln_conformance::cases::input(dev, seed, shape, DType::F32, -1.0, 1.0).unwrap()
}

/// `t`'s values, as `dev` holds them.
fn read(dev: &Device, t: &Tensor) -> Vec<f64> {
    kiln::block_on(dev.read(t.node())).unwrap().data
}

/// `values` of `shape` as a tensor on the CPU reference `cpu`.
fn on_cpu(cpu: &Device, values: &[f64], shape: &[usize]) -> Tensor {
    let values: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    Tensor::from_slice(cpu, &values, shape).unwrap()
}

fn jit_replays_on(label: &str, dev: &Device) {
    let cpu = Device::cpu();
    // A matmul with an epilogue (cuBLAS, then a pass), a raw one and a reduction.
    let f = |x: &[Tensor]| Ok(vec![x[0].matmul(&x[1])?.relu()?.sum(&[-1], false)?, x[0].matmul(&x[1])?]);
    let step = kiln::jit_flat(f);
    let w = input(dev, &[8, 6], 9);
    for seed in 0..3 {
        let x = input(dev, &[5, 8], seed);
        let before = dev.stats();
        let out = kiln::block_on(step.call(&[x.clone(), w.clone()])).unwrap();
        let after = dev.stats();
        if seed > 0 {
            assert_eq!(after.submits - before.submits, 1, "a replay is one launch list");
            assert_eq!(after.pipelines_compiled, before.pipelines_compiled, "a replay compiles nothing");
        }
        // The CPU reference on the same inputs.
        let want = f(&[input(&cpu, &[5, 8], seed), input(&cpu, &[8, 6], 9)]).unwrap();
        for (got, want) in out.iter().zip(&want) {
            let (got, want) = (read(dev, got), read(&cpu, want));
            let outcome = kiln_conformance::compare(&got, &want, kiln_conformance::Tol::F32);
            assert!(outcome.passed, "{label}: call {seed}: {:?}", outcome.failure);
        }
    }
    assert_eq!(step.captures(), 1);
}

/// A training loop's replays come back to the same buffers (each step's
/// output is the next one's input, and the pool hands freed buffers back),
/// so they run as CUDA graphs, captured the second time their addresses
/// are seen; the values stay those of the function run as traced, step
/// after step, the kept small outputs too (they land in the program's own
/// buffer, then a copy). A replay over other addresses enqueues its calls.
#[test]
fn jit_replays_run_as_cuda_graphs_where_their_buffers_recur() {
    for (label, dev) in cuda_runtimes() {
        cuda_graphs_on(label, &dev);
    }
}

fn cuda_graphs_on(label: &str, dev: &Device) {
    let cpu = Device::cpu();
    let read_cpu = |t: &Tensor| read(&cpu, t);
    // The next state, and a loss-like sum that the loop keeps.
    let f = |x: &[Tensor]| {
        let next = x[0].matmul(&x[1])?.tanh()?.add(&x[0])?;
        Ok(vec![next.sum(&[0, 1], false)?, next])
    };
    let step = kiln::jit_flat(f);
    let w = input(dev, &[8, 8], 1);
    let read = |t: &Tensor| read(dev, t);
    // The loop alone first (so that nothing else takes its freed buffers).
    let mut state = input(dev, &[4, 8], 2);
    let (mut states, mut sums) = (Vec::new(), Vec::new());
    for _ in 0..8 {
        let mut out = kiln::block_on(step.call(&[state.clone(), w.clone()])).unwrap();
        state = out.remove(1);
        states.push(read(&state));
        sums.push(out.remove(0));
    }
    let graphs = dev.stats().graphs_launched;
    // From the third replay on, each output takes back the buffer it had
    // two replays before, so the replays alternate between two sets of
    // addresses: each set is seen once, then captured and replayed.
    assert!(graphs >= 3, "{label}: 7 replays over recurring buffers launched {graphs} graphs");
    // Each step against the CPU reference from the state the device had
    // before it (so that rounding does not pile up over the steps).
    let w_cpu = input(&cpu, &[8, 8], 1);
    let mut before = read(&input(dev, &[4, 8], 2));
    for (call, (got, sum)) in states.iter().zip(&sums).enumerate() {
        let want = f(&[on_cpu(&cpu, &before, &[4, 8]), w_cpu.clone()]).unwrap();
        let outcome = kiln_conformance::compare(got, &read_cpu(&want[1]), kiln_conformance::Tol::F32);
        assert!(outcome.passed, "{label}: step {call}: {:?}", outcome.failure);
        let outcome = kiln_conformance::compare(&read(sum), &read_cpu(&want[0]), kiln_conformance::Tol::F32);
        assert!(outcome.passed, "{label}: step {call}'s sum, kept: {:?}", outcome.failure);
        before = got.clone();
    }
    // Every output kept: fresh addresses each call, no graph.
    let mut kept = Vec::new();
    for seed in 0..4 {
        let x = input(dev, &[4, 8], 10 + seed);
        let got = kiln::block_on(step.call(&[x.clone(), w.clone()])).unwrap().remove(1);
        let want = f(&[input(&cpu, &[4, 8], 10 + seed), w_cpu.clone()]).unwrap().remove(1);
        let outcome = kiln_conformance::compare(&read(&got), &read_cpu(&want), kiln_conformance::Tol::F32);
        assert!(outcome.passed, "{label}: {:?}", outcome.failure);
        kept.extend([x, got]);
    }
    assert_eq!(dev.stats().graphs_launched, graphs, "{label}: fresh addresses each call");
}

/// `x` rounded to the nearest value with a 10-bit mantissa (ties to even),
/// in f64 arithmetic: TF32's rounding of an operand, computed apart from
/// the runtime's own.
fn tf32_reference(x: f64) -> f64 {
    if x == 0.0 {
        return 0.0;
    }
    let quantum = 2f64.powi(x.abs().log2().floor() as i32 - 10);
    (x / quantum).round_ties_even() * quantum
}

/// TF32 is an opt-in: off, cuBLAS's products are exact f32; on, operands
/// round to 10-bit mantissas, so the product is the CPU reference's product
/// of operands rounded so (within f32 accumulation) and moves off the exact
/// one by about TF32's precision (README: about 3 significant digits).
/// Other devices refuse it by name.
#[test]
fn tf32_is_an_opt_in_that_costs_precision() {
    let (cpu, dev) = (Device::cpu(), Device::cuda_on_host());
    let (a_shape, b_shape) = ([32, 64], [64, 16]);
    let product = |d: &Device| input(d, &a_shape, 1).matmul(&input(d, &b_shape, 2)).unwrap();
    let want = read(&cpu, &product(&cpu));
    let exact = read(&dev, &product(&dev));
    dev.set_matmul_tf32(true).unwrap();
    let tf32 = read(&dev, &product(&dev));
    let rounded = |shape: &[usize], seed| {
        let values: Vec<f64> = read(&cpu, &input(&cpu, shape, seed)).into_iter().map(tf32_reference).collect();
        on_cpu(&cpu, &values, shape)
    };
    let want_tf32 = read(&cpu, &rounded(&a_shape, 1).matmul(&rounded(&b_shape, 2)).unwrap());
    let worst = |got: &[f64]| got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0, f64::max);
    let (exact_err, tf32_err) = (worst(&exact), worst(&tf32));
    eprintln!("largest error of a 32×64×16 product: exact f32 {exact_err:e}, TF32 {tf32_err:e}");
    assert!(exact_err < 1e-5, "exact f32: {exact_err:e}");
    assert!(tf32_err > 10.0 * exact_err && tf32_err < 2e-2, "TF32: {tf32_err:e} (exact {exact_err:e})");
    let outcome = kiln_conformance::compare(&tf32, &want_tf32, kiln_conformance::Tol::F32);
    assert!(outcome.passed, "TF32 against operands rounded on the CPU reference: {:?}", outcome.failure);
    let refused = Device::cpu().set_matmul_tf32(true).unwrap_err().to_string();
    assert!(refused.contains("set_matmul_tf32") && refused.contains("CUDA"), "{refused}");
}
