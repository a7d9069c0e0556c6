//! The CUDA driver engine (through cudarc, loaded at run time): one context
//! and one stream per device; memory allocated and freed in stream order;
//! modules compiled by NVRTC for the GPU's own architecture, their PTX kept
//! on disk ([`super::ptx_cache`]).

use super::blas::{Gemm, GemmEpilogue};
use super::engine::{Call, Engine, EngineInfo, Graph, Landed, Memory, Module, PendingWords, Stamp, same_engine};
use super::lt::Lt;
use super::ptx_cache;
use super::waiter::{Signal, Waiter};
use crate::nvrtc;
use cudarc::cublas::{CudaBlas, result as blas, sys as blas_sys};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaStream, DeviceRepr, LaunchConfig, PinnedHostSlice, PushKernelArg, result,
    sys,
};
use kiln_codegen::cuda::{CudaKernel, batch, entry_of};
use kiln_ir::dtype::DType;
use kiln_ir::error::{KilnError, Result};
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::task::Waker;

fn driver_error(what: &str) -> impl Fn(result::DriverError) -> KilnError + '_ {
    move |e| KilnError::Gpu(format!("CUDA driver: {what}: {e}"))
}

/// Whether the driver library can be loaded; the error says how to get it.
pub fn available() -> Result<()> {
    // SAFETY: only tries to dlopen the library's candidate names.
    if unsafe { sys::is_culib_present() } {
        return Ok(());
    }
    Err(KilnError::Unavailable {
        what: "the CUDA driver (libcuda.so)",
        detail: "install NVIDIA's GPU driver, version 580 or newer (CUDA 13); this machine has none".into(),
    })
}

/// Written while any engine captures a graph; read around every call that
/// may wait for the device or enter a stream from another thread: opening
/// and closing an engine (a context's first stream, cuBLAS's handles),
/// page-locked allocation and freeing, module loading and unloading,
/// stream-ordered allocation and waits. A device-wide wait on any thread
/// invalidates a capture even in thread-local mode, and an allocation on a
/// capturing stream would join its graph.
static CAPTURE: RwLock<()> = RwLock::new(());

/// Held while a call that must stay out of captures runs.
fn no_capture() -> RwLockReadGuard<'static, ()> {
    CAPTURE.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub struct DriverEngine {
    stream: Arc<CudaStream>,
    /// cuBLAS on the stream, where the library is found and opens, and its
    /// workspace (after it: freed once the handle is gone).
    blas: Option<CudaBlas>,
    /// cuBLASLt, for products with an epilogue (it shares the workspace).
    lt: Option<Lt>,
    blas_workspace: Option<DeviceMemory>,
    info: EngineInfo,
    /// NVRTC's target: compute_{arch}.
    arch: u32,
    staging: Staging,
    /// Wakes awaited reads (`None`: its thread did not start; reads poll).
    waiter: Option<Arc<Waiter>>,
}

impl DriverEngine {
    /// The GPU numbered `ordinal`, with NVRTC to compile for it.
    pub fn open(ordinal: usize) -> Result<DriverEngine> {
        available()?;
        nvrtc::available()?;
        let _no_capture = no_capture();
        let no_gpu = |e: result::DriverError| KilnError::Unavailable {
            what: "a CUDA GPU",
            detail: format!("the driver loaded, but GPU {ordinal} did not open: {e}"),
        };
        let ctx = CudaContext::new(ordinal).map_err(no_gpu)?;
        // SAFETY: kiln holds no `CudaSlice` (its memory is raw and stream
        // ordered); tracking would make the first stream wait for the
        // whole context.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().map_err(driver_error("compute capability"))?;
        let name = ctx.name().map_err(driver_error("device name"))?;
        let mut version = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut version) }.result().map_err(driver_error("driver version"))?;
        if version < 13000 {
            // NVRTC 13's PTX would not load, nor cuBLAS 13 open.
            return Err(KilnError::Unavailable {
                what: "a CUDA 13 driver",
                detail: format!(
                    "this driver supports CUDA {}.{}; install version 580 or newer",
                    version / 1000,
                    version % 1000 / 10
                ),
            });
        }
        let info = EngineInfo {
            name,
            compute_capability: (major as u32, minor as u32),
            driver: format!("{}.{}", version / 1000, version % 1000 / 10),
            nvrtc: nvrtc::version()?,
        };
        let stream = ctx.new_stream().map_err(driver_error("stream"))?;
        // SAFETY: only tries to dlopen the library's candidate names.
        let blas = if unsafe { blas_sys::is_culib_present() } {
            CudaBlas::new(stream.clone())
                .inspect_err(|e| log::warn!("cuBLAS did not open ({e}): matmuls run kiln's own kernels"))
                .ok()
        } else {
            log::warn!("cuBLAS (libcublas.so.13) not found: matmuls run kiln's own kernels");
            None
        };
        let blas_workspace = blas.as_ref().map(|b| blas_workspace(&stream, b)).transpose()?;
        let lt = blas.as_ref().and(Lt::open());
        let waiter = Waiter::start(ctx.clone())
            .inspect_err(|e| log::warn!("CUDA: no thread to wait for reads ({e}): reads poll"))
            .ok()
            .map(Arc::new);
        Ok(DriverEngine {
            stream,
            blas,
            lt,
            blas_workspace,
            info,
            arch: (major * 10 + minor) as u32,
            staging: Staging::default(),
            waiter,
        })
    }

    fn bind(&self) -> Result<()> {
        self.stream.context().bind_to_thread().map_err(driver_error("binding the context"))
    }

    /// Bind the context without taking up an error another call left
    /// recorded (cudarc's bind returns and clears it).
    fn bind_quietly(&self) -> bool {
        // SAFETY: the engine's live context.
        unsafe { result::ctx::set_current(self.stream.context().cu_ctx()) }.is_ok()
    }
}

impl Drop for DriverEngine {
    fn drop(&mut self) {
        // Closing cuBLAS's handles waits for the whole device.
        let _no_capture = no_capture();
        let _ = self.bind();
        self.lt.take();
        let blas = self.blas.take();
        if std::thread::panicking() {
            // cudarc panics when closing fails (after a kernel fault, say),
            // and a panic while unwinding would abort the process: leaked.
            std::mem::forget(blas);
        } else {
            drop(blas);
        }
    }
}

/// cuBLAS's workspace: what NVIDIA advises for Hopper, and ample before it.
const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

/// A workspace of kiln's own for `blas`: with the default one, cuBLAS
/// allocates during a graph capture (memory nodes in each graph) or, before
/// CUDA 12.2, gave each captured graph a workspace of its own.
fn blas_workspace(stream: &Arc<CudaStream>, blas: &CudaBlas) -> Result<DeviceMemory> {
    // SAFETY: a fresh allocation on the stream, held as long as the handle.
    let address = unsafe { result::malloc_async(stream.cu_stream(), BLAS_WORKSPACE_BYTES) }
        .map_err(driver_error("cuBLAS workspace"))?;
    let memory = DeviceMemory { address, stream: stream.clone() };
    // SAFETY: a live handle; the workspace outlives it (`DriverEngine`'s
    // field order) and is used on the handle's one stream only.
    unsafe { blas_sys::cublasSetWorkspace_v2(*blas.handle(), address as *mut _, BLAS_WORKSPACE_BYTES) }
        .result()
        .map_err(|e| KilnError::Gpu(format!("cuBLAS workspace: {e}")))?;
    Ok(memory)
}

/// How many staging buffers are kept for later reads.
const STAGING_KEPT: usize = 4;

/// Readbacks up to this size land in kept staging buffers; a larger one in
/// a buffer of its own, freed after: page-locked memory is scarce.
const STAGING_KEPT_MAX_BYTES: usize = 64 << 20;

/// Page-locked host memory a readback lands in, zeroed when allocated so
/// that slices over it are of initialized words.
struct Pinned {
    /// Freed by `Drop`, out of any capture (freeing page-locked memory
    /// waits for the device).
    memory: ManuallyDrop<PinnedHostSlice<u32>>,
    /// Its start, taken once: cudarc's accessors wait on an event of its
    /// own and bind the context, which a copy behind kiln's event needs
    /// neither of (and a stale error from another call could fail).
    at: *mut u32,
}

// SAFETY: `at` points into `memory`, which moves with it.
unsafe impl Send for Pinned {}

impl Pinned {
    fn new(ctx: &Arc<CudaContext>, words: usize) -> Result<Pinned> {
        let pinned = driver_error("page-locked staging memory");
        let allocated = {
            let _no_capture = no_capture();
            // Not write-combined (cudarc's default): the host reads it.
            // SAFETY: zeroed below before anything reads it.
            unsafe { ctx.alloc_pinned_with_flags::<u32>(words, 0) }
        };
        // Whole before its start is asked for, so that an error frees it.
        let mut buffer = Pinned { memory: ManuallyDrop::new(allocated.map_err(&pinned)?), at: std::ptr::null_mut() };
        // Its own event was never recorded: no wait.
        buffer.at = buffer.memory.as_mut_ptr().map_err(&pinned)?;
        // SAFETY: `at` starts `words` words just allocated.
        unsafe { std::ptr::write_bytes(buffer.at, 0, words) };
        Ok(buffer)
    }

    fn len(&self) -> usize {
        self.memory.len()
    }

    fn kept(&self) -> bool {
        self.len() * 4 <= STAGING_KEPT_MAX_BYTES
    }

    /// The first `n` words.
    ///
    /// # Safety
    /// No copy into them may be in flight.
    unsafe fn words(&self, n: usize) -> &[u32] {
        // SAFETY: in bounds and initialized; the caller rules out writers.
        unsafe { std::slice::from_raw_parts(self.at, n.min(self.len())) }
    }

    /// The first `n` words, for a copy to land in.
    fn words_mut(&mut self, n: usize) -> &mut [u32] {
        // SAFETY: in bounds and initialized; `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.at, n.min(self.len())) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _no_capture = no_capture();
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.memory) };
    }
}

/// Staging buffers for readbacks, kept for the next read: a copy into
/// pageable memory returns only once it is done, and allocating
/// page-locked memory costs more than a small copy.
#[derive(Clone, Default)]
struct Staging(Arc<Mutex<StagingState>>);

#[derive(Default)]
struct StagingState {
    kept: Vec<Pinned>,
    /// Buffers of reads dropped while their copy was in flight, each with
    /// the event behind its copy: kept once that has passed.
    abandoned: Vec<(Arc<CudaEvent>, Pinned)>,
}

impl Staging {
    /// The smallest kept buffer of at least `words`, or a new one (of its
    /// own size past [`STAGING_KEPT_MAX_BYTES`]).
    fn take(&self, ctx: &Arc<CudaContext>, words: usize) -> Result<Pinned> {
        let mut state = self.0.lock().unwrap();
        state.reclaim();
        if words * 4 > STAGING_KEPT_MAX_BYTES {
            drop(state);
            return Pinned::new(ctx, words);
        }
        let kept = &mut state.kept;
        let fit =
            kept.iter().enumerate().filter(|(_, b)| b.len() >= words).min_by_key(|(_, b)| b.len()).map(|(i, _)| i);
        if let Some(i) = fit {
            return Ok(kept.swap_remove(i));
        }
        drop(state);
        Pinned::new(ctx, words.next_power_of_two().max(1024))
    }

    /// `buffer`, no copy into it in flight, kept for a later read or freed.
    fn give_back(&self, buffer: Pinned) {
        self.0.lock().unwrap().keep(buffer);
    }

    /// `buffer`, which the copy behind `done` may still be writing.
    fn abandon(&self, done: Arc<CudaEvent>, buffer: Pinned) {
        self.0.lock().unwrap().abandoned.push((done, buffer));
    }
}

impl StagingState {
    /// Keep `buffer` for a later read (the largest goes past the limit), or
    /// free it.
    fn keep(&mut self, buffer: Pinned) {
        if !buffer.kept() {
            return;
        }
        self.kept.push(buffer);
        if self.kept.len() > STAGING_KEPT {
            let largest = (0..self.kept.len()).max_by_key(|&i| self.kept[i].len()).expect("not empty");
            self.kept.swap_remove(largest);
        }
    }

    /// Keep the abandoned buffers whose copies have landed.
    fn reclaim(&mut self) {
        let (landed, flying) = std::mem::take(&mut self.abandoned)
            .into_iter()
            .partition::<Vec<_>, _>(|(done, _)| matches!(done.try_is_complete(), Ok(true)));
        self.abandoned = flying;
        landed.into_iter().for_each(|(_, buffer)| self.keep(buffer));
    }
}

impl Drop for StagingState {
    fn drop(&mut self) {
        // The engine is going: wait for abandoned copies before freeing
        // their buffers; one whose wait fails is leaked, not freed. Raw:
        // cudarc's wait fails on any error another call left recorded.
        for (done, buffer) in self.abandoned.drain(..) {
            // SAFETY: a live event.
            if unsafe { result::event::synchronize(done.cu_event()) }.is_err() {
                std::mem::forget(buffer);
            }
        }
    }
}

/// A readback in flight: the event behind the copy and its staging
/// buffer, and the waiting thread that wakes its poller.
struct DriverCopy {
    copy: Option<(Arc<CudaEvent>, Pinned)>,
    words: usize,
    kept: Staging,
    signal: Arc<Signal>,
    /// The engine's waiting thread wakes the poller (else it polls).
    watched: bool,
}

impl PendingWords for DriverCopy {
    fn poll(&mut self, waker: &Waker) -> Result<Option<Vec<u32>>> {
        let (done, staging) =
            self.copy.as_ref().ok_or_else(|| KilnError::Readback("a readback polled again".into()))?;
        if !done.try_is_complete().map_err(driver_error("readback"))? {
            self.signal.wake_later(Some(waker));
            // Without a waiting thread, or once it is done with the event
            // (maybe between the query and now), poll again.
            if !self.watched || self.signal.passed() {
                std::thread::yield_now();
                waker.wake_by_ref();
            }
            return Ok(None);
        }
        // SAFETY: the event behind the copy has passed.
        Ok(Some(unsafe { staging.words(self.words) }.to_vec()))
    }
}

impl Drop for DriverCopy {
    fn drop(&mut self) {
        // Never waits: a read dropped unawaited leaves its buffer to be
        // kept once its copy has landed (and its task is not woken).
        self.signal.wake_later(None);
        if let Some((done, staging)) = self.copy.take() {
            match done.try_is_complete() {
                Ok(true) => self.kept.give_back(staging),
                _ => self.kept.abandon(done, staging),
            }
        }
    }
}

/// Device memory, freed in stream order.
#[derive(Debug)]
struct DeviceMemory {
    address: sys::CUdeviceptr,
    stream: Arc<CudaStream>,
}

impl Memory for DeviceMemory {
    fn address(&self) -> u64 {
        self.address
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let ctx = self.stream.context();
        ctx.record_err(ctx.bind_to_thread());
        // SAFETY: allocated on this stream, freed once, after the work
        // enqueued before this point.
        ctx.record_err(unsafe { result::free_async(self.address, self.stream.cu_stream()) });
    }
}

/// A kernel's `Globals`, passed by value: a pointer per field. Larger than
/// any kernel's (the driver copies the size the kernel declares).
#[repr(C)]
#[derive(Clone, Copy)]
struct Globals([u64; 32]);

// SAFETY: plain words, as the kernel's struct of pointers is.
unsafe impl DeviceRepr for Globals {}

struct DriverModule {
    functions: Vec<CudaFunction>,
    stream: Arc<CudaStream>,
}

impl Drop for DriverModule {
    fn drop(&mut self) {
        // Unloading a module may wait for the device.
        let _no_capture = no_capture();
        self.functions.clear();
    }
}

impl Module for DriverModule {
    unsafe fn launch(&self, index: usize, pointers: &[u64], grid: [u32; 3], block: [u32; 3]) -> Result<()> {
        if grid.contains(&0) {
            // Nothing to compute (CUDA rejects an empty grid).
            return Ok(());
        }
        let mut globals = Globals([0; 32]);
        globals
            .0
            .get_mut(..pointers.len())
            .ok_or_else(|| KilnError::Gpu("too many bindings".into()))?
            .copy_from_slice(pointers);
        let config = LaunchConfig {
            grid_dim: (grid[0], grid[1], grid[2]),
            block_dim: (block[0], block[1], block[2]),
            shared_mem_bytes: 0,
        };
        let mut args = self.stream.launch_builder(&self.functions[index]);
        args.arg(&globals);
        // SAFETY: the caller vouches for the memory behind the pointers;
        // the driver copies `globals` when the launch is enqueued.
        unsafe { args.launch(config) }.map(|_| ()).map_err(driver_error("launch"))
    }
}

impl Engine for DriverEngine {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    fn alloc(&self, bytes: u64) -> Result<Box<dyn Memory>> {
        let _no_capture = no_capture();
        self.bind()?;
        // SAFETY: a fresh allocation on this engine's stream.
        let address =
            unsafe { result::malloc_async(self.stream.cu_stream(), bytes.max(16) as usize) }.map_err(|e| {
                match e.0 {
                    sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                        KilnError::OutOfMemory(format!("{bytes} bytes on {}: {e}", self.info.name))
                    }
                    _ => driver_error("allocating")(e),
                }
            })?;
        Ok(Box::new(DeviceMemory { address, stream: self.stream.clone() }))
    }

    fn write(&self, to: &dyn Memory, words: &[u32]) -> Result<()> {
        self.bind()?;
        // SAFETY: `to` holds at least `words` (the device sizes it); the
        // driver stages pageable memory before returning.
        unsafe { result::memcpy_htod_async(to.address(), words, self.stream.cu_stream()) }
            .map_err(driver_error("upload"))
    }

    fn copy(&self, from: &dyn Memory, to: &dyn Memory, bytes: u64) -> Result<()> {
        self.bind()?;
        // SAFETY: the device asks only for what both allocations hold.
        unsafe { result::memcpy_dtod_async(to.address(), from.address(), bytes as usize, self.stream.cu_stream()) }
            .map_err(driver_error("device copy"))
    }

    fn read(&self, from: &dyn Memory, offset: u64, words: usize) -> Result<Box<dyn PendingWords>> {
        self.bind()?;
        let Ok(mut staging) = self.staging.take(self.stream.context(), words) else {
            // No page-locked memory to be had: a copy into pageable memory,
            // which returns once it is done.
            let mut out = vec![0u32; words];
            // SAFETY: `from` holds the range; the copy is done on return.
            unsafe { result::memcpy_dtoh_async(&mut out, from.address() + offset, self.stream.cu_stream()) }
                .map_err(driver_error("readback"))?;
            self.synchronize()?;
            return Ok(Box::new(Landed(Some(out))));
        };
        // SAFETY: `from` holds the range (the device asks only for what a
        // value spans); the staging buffer outlives the copy: neither
        // `DriverCopy` nor `Staging` reuses or frees it before `done` passes.
        unsafe {
            result::memcpy_dtoh_async(staging.words_mut(words), from.address() + offset, self.stream.cu_stream())
        }
        .map_err(driver_error("readback"))?;
        // Blocking sync: the waiting thread sleeps rather than spins.
        let done = match self.stream.record_event(Some(sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC)) {
            Ok(done) => done,
            Err(e) => {
                // The copy is enqueued: its buffer must outlive it.
                if self.synchronize().is_err() {
                    std::mem::forget(staging);
                }
                return Err(driver_error("readback event")(e));
            }
        };
        let (done, signal) = (Arc::new(done), Arc::<Signal>::default());
        let watched = self.waiter.as_ref().is_some_and(|w| w.watch(done.clone(), signal.clone()));
        Ok(Box::new(DriverCopy { copy: Some((done, staging)), words, kept: self.staging.clone(), signal, watched }))
    }

    fn load(&self, kernels: &[CudaKernel]) -> Result<Box<dyn Module>> {
        let ptx = ptx_cache::ptx(&batch(kernels), self.arch)?;
        let _no_capture = no_capture();
        let module = self
            .stream
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
            .map_err(driver_error("loading a module"))?;
        let functions = (0..kernels.len())
            .map(|i| module.load_function(&entry_of(i)).map_err(driver_error("finding a kernel")))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(DriverModule { functions, stream: self.stream.clone() }))
    }

    fn synchronize(&self) -> Result<()> {
        let _no_capture = no_capture();
        self.stream.synchronize().map_err(driver_error("synchronize"))
    }

    fn stamp(&self) -> Result<Box<dyn Stamp>> {
        // Timing on (cudarc's default event has it off).
        let timed = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(Box::new(DriverStamp(self.stream.record_event(timed).map_err(driver_error("timing event"))?)))
    }

    fn has_blas(&self) -> bool {
        self.blas.is_some()
    }

    fn blas_lt_runs(&self, g: &Gemm) -> bool {
        match (&self.lt, &self.blas_workspace) {
            (Some(lt), Some(_)) => self.bind_quietly() && lt.runs(g, BLAS_WORKSPACE_BYTES),
            _ => false,
        }
    }

    unsafe fn gemm(&self, g: &Gemm) -> Result<()> {
        if g.epilogue != GemmEpilogue::None {
            let (Some(lt), Some(workspace)) = (&self.lt, &self.blas_workspace) else {
                return Err(KilnError::Gpu(format!("{}: cuBLASLt is not loaded", g.name())));
            };
            self.bind()?;
            // SAFETY: the caller's promise; the workspace is this stream's.
            return unsafe { lt.gemm(g, self.stream.cu_stream() as _, (workspace.address, BLAS_WORKSPACE_BYTES)) };
        }
        let blas_handle = self.blas.as_ref().ok_or_else(|| KilnError::Gpu("cuBLAS is not loaded".into()))?;
        let op = |t: bool| {
            if t { blas_sys::cublasOperation_t::CUBLAS_OP_T } else { blas_sys::cublasOperation_t::CUBLAS_OP_N }
        };
        let (alpha, beta) = (1f32, 0f32);
        self.bind()?;
        let mode = match g.tf32 {
            true => blas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH,
            false => blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
        };
        // SAFETY: the handle is live; the mode is one of cuBLAS's.
        unsafe { blas_sys::cublasSetMathMode(*blas_handle.handle(), mode) }
            .result()
            .map_err(|e| KilnError::Gpu(format!("cuBLAS math mode: {e}")))?;
        let handle = *blas_handle.handle();
        let (m, n, k, lda, ldb, ldc, batch) =
            (g.m as i32, g.n as i32, g.k as i32, g.lda as i32, g.ldb as i32, g.ldc as i32, g.batch as i32);
        let (stride_a, stride_b, stride_c) = (g.stride_a as i64, g.stride_b as i64, g.stride_c as i64);
        // SAFETY: the caller vouches for the operands; cuBLAS runs on
        // this engine's stream, behind the launches before it.
        unsafe {
            match g.operands {
                DType::F16 | DType::BF16 => {
                    let half = match g.operands {
                        DType::F16 => blas_sys::cudaDataType::CUDA_R_16F,
                        _ => blas_sys::cudaDataType::CUDA_R_16BF,
                    };
                    let f32 = blas_sys::cudaDataType::CUDA_R_32F;
                    let alpha: *const f32 = &alpha;
                    let beta: *const f32 = &beta;
                    blas::gemm_strided_batched_ex(
                        handle,
                        op(g.trans_a),
                        op(g.trans_b),
                        m,
                        n,
                        k,
                        alpha.cast(),
                        g.a as *const _,
                        half,
                        lda,
                        stride_a,
                        g.b as *const _,
                        half,
                        ldb,
                        stride_b,
                        beta.cast(),
                        g.c as *mut _,
                        f32,
                        ldc,
                        stride_c,
                        batch,
                        blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                }
                _ => blas::sgemm_strided_batched(
                    handle,
                    op(g.trans_a),
                    op(g.trans_b),
                    m,
                    n,
                    k,
                    &alpha,
                    g.a as *const f32,
                    lda,
                    stride_a,
                    g.b as *const f32,
                    ldb,
                    stride_b,
                    &beta,
                    g.c as *mut f32,
                    ldc,
                    stride_c,
                    batch,
                ),
            }
        }
        .map_err(|e| KilnError::Gpu(format!("{}: {e}", g.name())))
    }

    unsafe fn capture(&self, calls: &[Call]) -> Result<Box<dyn Graph>> {
        let _capturing = CAPTURE.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.bind()?;
        let stream = self.stream.cu_stream();
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: the engine's live stream.
        unsafe { result::stream::begin_capture(stream, mode) }.map_err(driver_error("starting a graph capture"))?;
        // SAFETY: the caller's promise; captured, nothing runs now. A panic
        // is held until the capture has ended, or the stream would stay
        // capturing every later call.
        let enqueued = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { self.enqueue(calls) }));
        // Ended whatever happened, through the raw call: cudarc's first
        // returns any error another call left recorded in the context,
        // which would leave the stream capturing every later call.
        // SAFETY: the stream is capturing (begun above).
        let graph = unsafe { result::stream::end_capture(stream) }.map_err(driver_error("capturing a graph"));
        let graph = match (enqueued, graph) {
            (Ok(Ok(())), Ok(graph)) if !graph.is_null() => graph,
            (enqueued, graph) => {
                if let Ok(&graph) = graph.as_ref()
                    && !graph.is_null()
                {
                    // SAFETY: captured above, used by nothing.
                    self.stream.context().record_err(unsafe { result::graph::destroy(graph) });
                }
                enqueued.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                graph?;
                return Err(KilnError::Gpu("CUDA driver: a capture gave no graph".into()));
            }
        };
        // SAFETY: a graph just captured; the executable graph does not need
        // it once instantiated.
        let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
        self.stream.context().record_err(unsafe { result::graph::destroy(graph) });
        let exec = exec.map_err(driver_error("instantiating a graph"))?;
        Ok(Box::new(DriverGraph { exec, stream: self.stream.clone() }))
    }
}

/// A timing event, recorded on the engine's stream.
struct DriverStamp(CudaEvent);

impl Stamp for DriverStamp {
    fn nanos_since(&self, earlier: &dyn Stamp) -> Result<f64> {
        let earlier: &DriverStamp = same_engine(earlier)?;
        let millis = earlier.0.elapsed_ms(&self.0).map_err(driver_error("kernel timing"))?;
        Ok(f64::from(millis) * 1e6)
    }
}

/// A captured CUDA graph, instantiated, and the stream it launches on
/// (which keeps the context alive).
struct DriverGraph {
    exec: sys::CUgraphExec,
    stream: Arc<CudaStream>,
}

// SAFETY: an executable graph may be used from any thread, one call at a
// time; the runtime keeps each in a mutex.
unsafe impl Send for DriverGraph {}

impl Graph for DriverGraph {
    unsafe fn launch(&self) -> Result<()> {
        self.stream.context().bind_to_thread().map_err(driver_error("binding the context"))?;
        // SAFETY: a live executable graph and stream.
        unsafe { result::graph::launch(self.exec, self.stream.cu_stream()) }.map_err(driver_error("launching a graph"))
    }
}

impl Drop for DriverGraph {
    fn drop(&mut self) {
        // The driver frees an executable graph still running once it ends.
        // SAFETY: destroyed once.
        self.stream.context().record_err(unsafe { result::graph::exec_destroy(self.exec) });
    }
}
