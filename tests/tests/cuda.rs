//! The CUDA kernels of every conformance case, gradient check, fusion
//! test and MNIST step (`kiln_conformance::cuda_kernels`), compiled by
//! NVRTC and assembled by ptxas for each architecture kiln targets, with
//! no error and no warning. Without NVRTC and ptxas the check is skipped
//! by name, unless `KILN_REQUIRE_CUDA_TOOLS=1` (scripts/test sets it).

use kiln::core::codegen::cuda::{self, CudaKernel};
use kiln_conformance::cuda_kernels::{self, BATCH, compile, cuda_tools};

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
