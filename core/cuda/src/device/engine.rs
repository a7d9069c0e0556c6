//! What a CUDA device runs on: memory, modules and launches in one stream
//! order. The driver ([`super::driver`]) is the real one; the host engine
//! ([`super::emulated`]) runs the same kernels on the CPU, so that the whole
//! runtime above it is tested on machines without an NVIDIA GPU.

use super::blas::Gemm;
use super::kernels::Loaded;
use kiln_codegen::cuda::CudaKernel;
use kiln_ir::error::Result;
use std::sync::Arc;
use std::task::Waker;

/// An allocation, by the address kernels see it at.
pub trait Memory: std::any::Any + Send + Sync + std::fmt::Debug {
    fn address(&self) -> u64;
}

/// A module of kernels (a [`kiln_codegen::cuda::batch`]), loaded.
pub trait Module: Send + Sync {
    /// Enqueue kernel `index` over `grid` blocks of `block` threads, its
    /// `Globals` holding `pointers` (in field order).
    ///
    /// # Safety
    /// Each pointer must address memory holding every element the kernel
    /// reads or writes there, alive until the launch has run.
    unsafe fn launch(&self, index: usize, pointers: &[u64], grid: [u32; 3], block: [u32; 3]) -> Result<()>;
}

/// One call on a stream, at the addresses it binds.
#[derive(Clone)]
pub enum Call {
    /// `kernel` over `grid` blocks, its `Globals` holding `pointers`.
    Launch {
        kernel: Arc<Loaded>,
        pointers: Vec<u64>,
        grid: [u32; 3],
    },
    Gemm(Gemm),
}

impl Call {
    /// The kernel's name, or the cuBLAS routine's.
    pub fn name(&self) -> &str {
        match self {
            Call::Launch { kernel, .. } => &kernel.name,
            Call::Gemm(g) => g.name(),
        }
    }

    /// Blocks launched (a cuBLAS call's own grid is cuBLAS's: one).
    pub fn grid(&self) -> [u32; 3] {
        match self {
            Call::Launch { grid, .. } => *grid,
            Call::Gemm(_) => [1, 1, 1],
        }
    }

    /// Every address the call binds, in order: calls of one launch list
    /// with equal addresses are the same calls.
    pub fn addresses(&self) -> impl Iterator<Item = u64> + '_ {
        let (pointers, gemm): (&[u64], _) = match self {
            Call::Launch { pointers, .. } => (pointers, None),
            Call::Gemm(g) => (&[], Some([g.a, g.b, g.c, g.bias])),
        };
        pointers.iter().copied().chain(gemm.into_iter().flatten())
    }
}

/// Calls captured once (a CUDA graph), enqueued whole by one launch.
pub trait Graph: Send {
    /// Enqueue the captured calls.
    ///
    /// # Safety
    /// The addresses they were captured with must still hold every
    /// element they read and write, alive until the launch has run.
    unsafe fn launch(&self) -> Result<()>;
}

/// A point in a stream's order, passed once the work enqueued before it
/// has run: kernel timing's clock.
pub trait Stamp: std::any::Any + Send {
    /// Nanoseconds from `earlier` (a stamp of the same engine) to this
    /// one, once both have passed (waiting for them).
    fn nanos_since(&self, earlier: &dyn Stamp) -> Result<f64>;
}

/// `stamp` as the stamp type `S` of the engine comparing it.
pub fn same_engine<S: Stamp>(stamp: &dyn Stamp) -> Result<&S> {
    (stamp as &dyn std::any::Any)
        .downcast_ref()
        .ok_or_else(|| kiln_ir::error::KilnError::Gpu("a stamp compared with another engine's".into()))
}

/// Words on their way from device memory to the host.
pub trait PendingWords: Send {
    /// The words once the copy has landed, `None` while it is in flight
    /// (then `waker` is woken when it is worth polling again). Called until
    /// it gives them, not after.
    fn poll(&mut self, waker: &Waker) -> Result<Option<Vec<u32>>>;
}

/// A copy that landed as it was enqueued (the host engine's).
pub struct Landed(pub Option<Vec<u32>>);

impl PendingWords for Landed {
    fn poll(&mut self, _: &Waker) -> Result<Option<Vec<u32>>> {
        Ok(self.0.take())
    }
}

/// What a device is, for `Device::info`.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// The driver's CUDA version, as "13.0".
    pub driver: String,
    /// NVRTC's version, as "13.0".
    pub nvrtc: String,
}

/// One device and its stream: every call is enqueued behind the previous
/// ones, so kernels see the writes before them.
pub trait Engine: Send + Sync {
    fn info(&self) -> EngineInfo;
    fn alloc(&self, bytes: u64) -> Result<Box<dyn Memory>>;
    /// Write `words` at the start of `to`.
    fn write(&self, to: &dyn Memory, words: &[u32]) -> Result<()>;
    /// Copy the first `bytes` of `from` to the start of `to`, in order.
    fn copy(&self, from: &dyn Memory, to: &dyn Memory, bytes: u64) -> Result<()>;
    /// Start copying `words` words from `offset` bytes into `from` to the
    /// host, behind all enqueued work; [`PendingWords::poll`] gives them.
    fn read(&self, from: &dyn Memory, offset: u64, words: usize) -> Result<Box<dyn PendingWords>>;
    /// `kernels` compiled and loaded as one module.
    fn load(&self, kernels: &[CudaKernel]) -> Result<Box<dyn Module>>;
    /// Wait for everything enqueued.
    fn synchronize(&self) -> Result<()>;
    /// Whether [`Engine::gemm`] runs (cuBLAS was found).
    fn has_blas(&self) -> bool;
    /// Whether [`Engine::gemm`] runs `g` with its epilogue: cuBLASLt was
    /// found and has an algorithm for it.
    fn blas_lt_runs(&self, g: &Gemm) -> bool;
    /// Enqueue a cuBLAS sgemm (through cuBLASLt, with its epilogue).
    ///
    /// # Safety
    /// The addresses must hold every element `g` reads and writes.
    unsafe fn gemm(&self, g: &Gemm) -> Result<()>;

    /// A stamp behind everything enqueued so far.
    fn stamp(&self) -> Result<Box<dyn Stamp>>;

    /// Enqueue `calls` in order.
    ///
    /// # Safety
    /// Every address must hold every element its call reads and writes,
    /// alive until the call has run.
    unsafe fn enqueue(&self, calls: &[Call]) -> Result<()> {
        for call in calls {
            // SAFETY: the caller's promise, passed on.
            match call {
                Call::Launch { kernel, pointers, grid } => unsafe {
                    kernel.module.launch(kernel.index, pointers, *grid, kernel.kernel.workgroup_size)?
                },
                Call::Gemm(g) => unsafe { self.gemm(g)? },
            }
        }
        Ok(())
    }

    /// `calls` captured as one graph, enqueuing nothing now. The caller
    /// holds the device's enqueue order meanwhile, so that nothing else
    /// joins the capture.
    ///
    /// # Safety
    /// As [`Engine::enqueue`], for every launch of the graph.
    unsafe fn capture(&self, calls: &[Call]) -> Result<Box<dyn Graph>>;
}
