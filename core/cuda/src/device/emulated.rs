//! The host engine: CUDA's execution model on the CPU (`crate::host`), each
//! call run at once, in order; cuBLAS's products as loops. It is how the CUDA runtime is tested on
//! machines without an NVIDIA GPU, and a way to debug a kernel with the
//! host's tools.

use super::blas::{Gemm, host_gemm};
use super::engine::{Call, Engine, EngineInfo, Graph, Landed, Memory, Module, PendingWords, Stamp, same_engine};
use crate::host::HostLibraries;
use kiln_codegen::cuda::{CudaKernel, batch};
use kiln_ir::error::{KilnError, Result};
use std::cell::UnsafeCell;
use std::time::Instant;

/// Host memory in whole words (vec4-aligned, as kernels load it).
#[derive(Debug)]
struct HostMemory(Box<[UnsafeCell<u128>]>);

// SAFETY: the engine's calls run one at a time (the device serializes
// them), as a stream's would.
unsafe impl Sync for HostMemory {}
unsafe impl Send for HostMemory {}

impl Memory for HostMemory {
    fn address(&self) -> u64 {
        self.0.as_ptr() as u64
    }
}

impl HostMemory {
    fn words(&self) -> usize {
        self.0.len() * 4
    }
}

fn host(m: &dyn Memory) -> Result<&HostMemory> {
    (m as &dyn std::any::Any)
        .downcast_ref()
        .ok_or_else(|| KilnError::Gpu("the host CUDA engine was given another engine's memory".into()))
}

impl Module for HostLibraries {
    unsafe fn launch(&self, index: usize, pointers: &[u64], grid: [u32; 3], block: [u32; 3]) -> Result<()> {
        let pointers: Vec<*mut u32> = pointers.iter().map(|&p| p as *mut u32).collect();
        // SAFETY: the caller vouches for the memory behind the pointers.
        unsafe { HostLibraries::launch(self, index, &pointers, grid, block) }
    }
}

/// Runs kernels built by the host's C++ compiler. Compile-only (env
/// `KILN_CUDA_HOST_COMPILE_ONLY=1`), it builds and runs nothing: each module
/// is only compiled by NVRTC into the PTX cache (for
/// `KILN_CUDA_PREBUILD_ARCH`, else sm_90), and memory keeps what was
/// written to it. Kernel plans do not depend on values, so such a run
/// reaches every module a real one would, in the time NVRTC takes: how
/// `scripts/device-check --collect` fills the cache a GPU then reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostEngine {
    compile_only: bool,
}

/// No kernels: a compile-only engine's modules.
struct NotBuilt;

impl Module for NotBuilt {
    unsafe fn launch(&self, _: usize, _: &[u64], _: [u32; 3], _: [u32; 3]) -> Result<()> {
        Ok(())
    }
}

impl HostEngine {
    /// Running kernels, unless env `KILN_CUDA_HOST_COMPILE_ONLY` is `1`.
    pub fn from_env() -> HostEngine {
        HostEngine { compile_only: std::env::var("KILN_CUDA_HOST_COMPILE_ONLY").is_ok_and(|v| v == "1") }
    }

    /// The architecture modules are also compiled for by NVRTC, if any.
    fn prebuild_arch(&self) -> Option<u32> {
        let arch = std::env::var("KILN_CUDA_PREBUILD_ARCH").ok().and_then(|a| a.parse().ok());
        arch.or(self.compile_only.then_some(90))
    }
}

impl Engine for HostEngine {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: if self.compile_only { "CUDA on the host (compile-only)" } else { "CUDA on the host (emulated)" }
                .into(),
            compute_capability: (0, 0),
            driver: "none".into(),
            nvrtc: "none (the host C++ compiler)".into(),
        }
    }

    fn alloc(&self, bytes: u64) -> Result<Box<dyn Memory>> {
        let vec4s = (bytes as usize).div_ceil(16).max(1);
        Ok(Box::new(HostMemory((0..vec4s).map(|_| UnsafeCell::new(0)).collect())))
    }

    fn write(&self, to: &dyn Memory, words: &[u32]) -> Result<()> {
        let to = host(to)?;
        if words.len() > to.words() {
            return Err(KilnError::Gpu(format!("a write of {} words into {}", words.len(), to.words())));
        }
        // SAFETY: in bounds (checked), and no kernel runs meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), to.address() as *mut u32, words.len()) };
        Ok(())
    }

    fn copy(&self, from: &dyn Memory, to: &dyn Memory, bytes: u64) -> Result<()> {
        let (from, to) = (host(from)?, host(to)?);
        let words = bytes.div_ceil(4) as usize;
        if words > from.words() || words > to.words() {
            return Err(KilnError::Gpu(format!(
                "a copy of {bytes} bytes from {} into {}",
                from.words() * 4,
                to.words() * 4
            )));
        }
        // SAFETY: in bounds (checked), two allocations, and no kernel runs meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(from.address() as *const u32, to.address() as *mut u32, words) };
        Ok(())
    }

    fn read(&self, from: &dyn Memory, offset: u64, words: usize) -> Result<Box<dyn PendingWords>> {
        let from = host(from)?;
        let first = (offset / 4) as usize;
        if !offset.is_multiple_of(4) || first + words > from.words() {
            return Err(KilnError::Readback(format!("{words} words at byte {offset} of {}", from.words() * 4)));
        }
        let mut out = vec![0u32; words];
        // SAFETY: in bounds (checked), and no kernel runs meanwhile.
        unsafe { std::ptr::copy_nonoverlapping((from.address() as *const u32).add(first), out.as_mut_ptr(), words) };
        Ok(Box::new(Landed(Some(out))))
    }

    /// With env `KILN_CUDA_PREBUILD_ARCH` (e.g. `90`), each module is also
    /// compiled by NVRTC for that architecture into the PTX cache, as a GPU
    /// of it would load the same module: a run on the host fills the cache
    /// a later run on such a GPU reads (`scripts/device-check --collect`).
    fn load(&self, kernels: &[CudaKernel]) -> Result<Box<dyn Module>> {
        if let Some(arch) = self.prebuild_arch() {
            super::ptx_cache::ptx(&batch(kernels), arch)?;
        }
        if self.compile_only {
            return Ok(Box::new(NotBuilt));
        }
        Ok(Box::new(HostLibraries::build(kernels)?))
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    /// The host's clock: calls run as they are enqueued.
    fn stamp(&self) -> Result<Box<dyn Stamp>> {
        Ok(Box::new(HostStamp(Instant::now())))
    }

    /// cuBLAS's sgemm as a plain loop, so that the runtime routes raw
    /// matmuls here as it does on a GPU.
    fn has_blas(&self) -> bool {
        true
    }

    fn blas_lt_runs(&self, _: &Gemm) -> bool {
        true
    }

    unsafe fn gemm(&self, g: &Gemm) -> Result<()> {
        if !self.compile_only {
            // SAFETY: the caller's promise, passed on.
            unsafe { host_gemm(g) };
        }
        Ok(())
    }

    /// The calls kept, to run again at each launch: how a graph replays,
    /// so that the runtime's use of graphs is tested here too.
    unsafe fn capture(&self, calls: &[Call]) -> Result<Box<dyn Graph>> {
        Ok(Box::new(HostGraph(*self, calls.to_vec())))
    }
}

struct HostStamp(Instant);

impl Stamp for HostStamp {
    fn nanos_since(&self, earlier: &dyn Stamp) -> Result<f64> {
        let earlier: &HostStamp = same_engine(earlier)?;
        Ok(self.0.saturating_duration_since(earlier.0).as_nanos() as f64)
    }
}

struct HostGraph(HostEngine, Vec<Call>);

impl Graph for HostGraph {
    unsafe fn launch(&self) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.0.enqueue(&self.1) }
    }
}
