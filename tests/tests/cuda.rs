//! The CUDA kernels of every conformance case, gradient check, fusion
//! test and MNIST step (`kiln_conformance::cuda_kernels`), compiled by
//! NVRTC and assembled by ptxas for each architecture kiln targets, with
//! no error and no warning. Without NVRTC and ptxas the check is skipped
//! by name, unless `KILN_REQUIRE_CUDA_TOOLS=1` (scripts/test sets it).

use kiln::core::HostArray;
use kiln::core::codegen::Caps;
use kiln::core::codegen::cuda::{self, CudaKernel};
use kiln::core::{Realized, schedule_for};
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
    eprintln!("{} CUDA kernels compiled by NVRTC and assembled by ptxas for sm_80 and sm_90", kernels.len());
}

/// Judges the values of a graph's roots (each flat) against the reference's.
type Judge = Box<dyn Fn(&[Vec<f64>], &[Vec<f64>]) -> Outcome>;

/// A graph to run as CUDA on the host, and how to judge its values.
struct Checked {
    name: String,
    roots: Vec<Tensor>,
    judge: Judge,
}

/// Every conformance case and gradient check run as CUDA on the host
/// (`kiln_cuda::host`: the same CUDA C++, built by the system's C++
/// compiler over CUDA's execution model) matches the CPU reference within
/// its tolerance.
#[test]
fn the_cuda_kernels_compute_every_conformance_case_and_gradient_on_the_host() {
    let cpu = Device::cpu();
    let caps = Caps::cuda();
    let mut checked = Vec::new();
    for case in cases::all() {
        // Cases that check an error, and values that are inputs, run nothing.
        let Ok(t) = (case.build)(&cpu) else { continue };
        if t.node().realized_value().is_none() {
            let tol = case.tol;
            let judge = Box::new(move |got: &[Vec<f64>], want: &[Vec<f64>]| compare(&got[0], &want[0], tol));
            checked.push(Checked { name: format!("{} ({})", case.op, case.detail), roots: vec![t], judge });
        }
    }
    for case in grad_cases::all() {
        let roots = cuda_kernels::gradients(&cpu, &case).unwrap();
        let how = case.check;
        // The first root is the value; the gradients follow, as host arrays.
        let judge = Box::new(move |got: &[Vec<f64>], want: &[Vec<f64>]| {
            let got: Vec<HostArray> = got[1..]
                .iter()
                .map(|g| HostArray { dtype: DType::F32, shape: vec![g.len()], data: g.clone() })
                .collect();
            grad_check::check(&got, &want[1..], how)
        });
        checked.push(Checked { name: format!("grad {} ({})", case.op, case.detail), roots, judge });
    }
    let nodes = |c: &Checked| c.roots.iter().map(|t| t.node().clone()).collect::<Vec<_>>();
    let schedules = checked.iter().map(|c| schedule_for(&caps, &nodes(c)).unwrap()).collect();
    let started = std::time::Instant::now();
    let runs = kiln_cuda::host::run(schedules, &caps).unwrap();
    eprintln!("{} graphs run as CUDA on the host in {:.1} s", runs.len(), started.elapsed().as_secs_f64());
    let mut failures = Vec::new();
    for (c, run) in checked.iter().zip(runs) {
        let results = match run {
            Ok(results) => results,
            Err(e) => {
                failures.push(format!("{}: {e}", c.name));
                continue;
            }
        };
        let roots = nodes(c);
        // A root the schedule does not compute was an input already.
        let got: Vec<Vec<f64>> = roots
            .iter()
            .map(|n| match (results.iter().find(|r| r.node.id() == n.id()), n.realized_value()) {
                (Some(r), _) => r.values.clone(),
                (None, Some(Realized::Host(h))) => h.data.clone(),
                (None, _) => Vec::new(),
            })
            .collect();
        kiln::block_on(cpu.realize(&roots)).unwrap();
        let want: Vec<Vec<f64>> = roots
            .iter()
            .map(|n| match n.realized_value() {
                Some(Realized::Host(h)) => h.data.clone(),
                _ => unreachable!("realized on the CPU reference"),
            })
            .collect();
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
    eprintln!("{n} conformance cases and gradient checks computed by the CUDA kernels on the host match the reference");
}
