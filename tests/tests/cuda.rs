//! The CUDA kernels of every conformance case, gradient check, fusion
//! test and MNIST step (`kiln_conformance::cuda_kernels`), compiled by
//! NVRTC and assembled by ptxas for each architecture kiln targets, with
//! no error and no warning. Without NVRTC and ptxas the check is skipped
//! by name, unless the run requires `nvrtc` (`KILN_REQUIRE`, which scripts/test sets).

use kiln::core::HostArray;
use kiln::core::codegen::KernelKey;
use kiln::core::codegen::cuda::{self, CudaKernel};
use kiln::core::codegen::matmul::MatmulConfig;
use kiln::prelude::*;
use kiln_conformance::cuda_kernels::{self, BATCH, compile, cuda_tools};
use kiln_conformance::{Outcome, cases, compare, grad_cases, grad_check};

#[test]
fn every_cuda_kernel_of_the_suite_compiles_with_nvrtc_and_ptxas_cleanly() {
    let collected = cuda_kernels::collect();
    assert!(collected.failures.is_empty(), "cases not scheduled for CUDA:\n{}", collected.failures.join("\n"));
    let mut kernels = Vec::new();
    for (wgsl, (_, case)) in &collected.kernels {
        kernels.push(cuda::from_wgsl(wgsl).unwrap_or_else(|e| panic!("{case}: {e}")));
    }
    // The copy of a transposed operand into rows, which CUDA's untuned
    // matmul config (no vec4 loads) never asks for, but a pinned one does.
    for batch_rank in 0..4 {
        kernels.push(KernelKey::Transpose { batch_rank }.cuda().unwrap());
    }
    // Every member of the matmul family (`Device::set_matmul_config` pins
    // any; CUDA has no tuner to reach them), on each float dtype, without
    // textures, which CUDA kernels do not read.
    for config in MatmulConfig::CANDIDATES.map(|c| MatmulConfig { tex: false, ..c }) {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for batch_rank in 0..3 {
                let key = KernelKey::Matmul { dtype, batch_rank, epilogue: None, config };
                kernels.push(key.cuda().unwrap_or_else(|e| panic!("{} {dtype}: {e}", config.name())));
            }
        }
    }
    assert!(kernels.len() > 100, "only {} kernels collected", kernels.len());
    if !cuda_tools() {
        return;
    }
    let batches: Vec<&[CudaKernel]> = kernels.chunks(BATCH).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    while let Some(b) = batches.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        failed.extend(compile(b));
                    }
                    failed
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let first = failures.first().map_or("", |f| f.as_str());
    assert!(failures.is_empty(), "{} of {} batches failed; the first:\n{first}", failures.len(), batches.len());
    let known = cuda_kernels::SKIPPED_AS_CLEAN.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "{} CUDA kernels clean through NVRTC and ptxas for sm_80 and sm_90 ({known} of them known clean from \
         the verdict cache, KILN_CUDA_VERDICTS)",
        kernels.len()
    );
}

/// Judges the values of a graph's roots (each flat) against the reference's.
type Judge = Box<dyn Fn(&[Vec<f64>], &[Vec<f64>]) -> Outcome>;

/// A graph built on the CUDA device and on the reference, and how to judge
/// its values.
struct Checked {
    name: String,
    roots: Vec<Tensor>,
    reference: Vec<Tensor>,
    judge: Judge,
}

/// Every conformance case and gradient check run by the CUDA runtime
/// (`Device::cuda_on_host`: the runtime `Device::cuda` runs, its kernels
/// the same CUDA C++ built by the system's C++ compiler over CUDA's
/// execution model) matches the CPU reference within its tolerance. All of
/// them are realized at once: one launch list, its new kernels compiled as
/// one module.
#[test]
fn the_cuda_runtime_computes_every_conformance_case_and_gradient_on_the_host() {
    let (cpu, dev) = (Device::cpu(), Device::cuda_on_host());
    let (mut checked, mut failures) = (Vec::new(), Vec::new());
    for case in cases::all() {
        // Cases that check an error, and values that are inputs, run nothing.
        let (t, want) = match ((case.build)(&dev), (case.build)(&cpu)) {
            (Ok(t), Ok(want)) => (t, want),
            (Err(_), Err(_)) => continue,
            (Err(e), Ok(_)) | (Ok(_), Err(e)) => {
                failures.push(format!("{} ({}): only one device errs: {e}", case.op, case.detail));
                continue;
            }
        };
        if t.node().realized_value().is_none() {
            let tol = case.tol;
            let judge = Box::new(move |got: &[Vec<f64>], want: &[Vec<f64>]| compare(&got[0], &want[0], tol));
            let name = format!("{} ({})", case.op, case.detail);
            checked.push(Checked { name, roots: vec![t], reference: vec![want], judge });
        }
    }
    for case in grad_cases::all() {
        let roots = cuda_kernels::gradients(&dev, &case).unwrap();
        let reference = cuda_kernels::gradients(&cpu, &case).unwrap();
        let how = case.check;
        // The first root is the value; the gradients follow, as host arrays.
        let judge = Box::new(move |got: &[Vec<f64>], want: &[Vec<f64>]| {
            let got: Vec<HostArray> = got[1..]
                .iter()
                .map(|g| HostArray { dtype: DType::F32, shape: vec![g.len()], data: g.clone() })
                .collect();
            grad_check::check(&got, &want[1..], how)
        });
        checked.push(Checked { name: format!("grad {} ({})", case.op, case.detail), roots, reference, judge });
    }
    let (started, before) = (std::time::Instant::now(), dev.stats());
    let all: Vec<&Tensor> = checked.iter().flat_map(|c| &c.roots).collect();
    kiln::block_on(Tensor::realize_all(&all)).unwrap();
    let stats = dev.stats();
    // Some cases realize a little while they are built (random keys).
    assert_eq!(stats.submits - before.submits, 1, "one realization, one launch list");
    eprintln!(
        "{} graphs realized by the CUDA runtime on the host in {:.1} s: {} launches, {} kernels",
        checked.len(),
        started.elapsed().as_secs_f64(),
        stats.kernels_launched - before.kernels_launched,
        stats.pipelines_compiled,
    );
    let values = |ts: &[Tensor]| -> kiln::Result<Vec<Vec<f64>>> {
        ts.iter().map(|t| Ok(kiln::block_on(t.device().read(t.node()))?.data)).collect()
    };
    for c in &checked {
        let (got, want) = match (values(&c.roots), values(&c.reference)) {
            (Ok(got), Ok(want)) => (got, want),
            (Err(e), _) | (_, Err(e)) => {
                failures.push(format!("{}: {e}", c.name));
                continue;
            }
        };
        let sizes = |vs: &[Vec<f64>]| vs.iter().map(Vec::len).collect::<Vec<_>>();
        if sizes(&got) != sizes(&want) {
            failures.push(format!("{}: {:?} elements, want {:?}", c.name, sizes(&got), sizes(&want)));
            continue;
        }
        let outcome = (c.judge)(&got, &want);
        if !outcome.passed {
            failures.push(format!("{}: {}", c.name, outcome.failure.unwrap_or_default()));
        }
    }
    let n = checked.len();
    assert!(failures.is_empty(), "{} of {n} graphs differ:\n{}", failures.len(), failures.join("\n"));
    eprintln!("{n} conformance cases and gradient checks computed by the CUDA runtime on the host match the reference");
}
