//! A CUDA device: schedules from `kiln_sched` run on one stream. Each
//! realization gives its slots pooled buffers, binds its items' launches
//! (`kiln_codegen::launch::bind`, as wgpu does), compiles the kernels it
//! has not seen as one module, writes every launch's meta block with one
//! copy and enqueues the launches in order. A read copies into page-locked
//! memory behind the launches and awaits that copy (woken by the engine's
//! waiting thread), not the whole device,
//! so other work (another device's) goes on meanwhile.
//! The engine under it is the driver, or the host ([`CudaDevice::on_host`]).

mod blas;
mod driver;
mod emulated;
mod engine;
mod graphs;
mod kernels;
mod launch_list;
mod lt;
mod lt_epilogue;
pub mod pool;
mod profile;
mod program;
pub mod ptx_cache;
mod waiter;

pub use driver::available as driver_available;
pub use engine::EngineInfo;
pub use program::CudaProgram;

use blas::{Gemm, GemmEpilogue};
use engine::Engine;
use kernels::Kernels;
use kiln_codegen::Caps;
use kiln_codegen::launch::{self, Variants};
use kiln_codegen::matmul::MatmulConfig;
use kiln_ir::dtype::{DType, pack_words, unpack_words};
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{DeviceArray, DeviceBuffer, Node, Realized};
use kiln_ir::shape::{Layout, numel};
use kiln_runtime::{DeviceStats, KernelTiming, PlannedKernel};
use kiln_sched::schedule::{Item, Schedule, slot_of};
use kiln_sched::walk::{HostInputs, Scheduler};
use lt::LT_ALIGNMENT;
use lt_epilogue::lt_epilogue;
use pool::{CudaBuffer, Pool};
use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub struct CudaDevice {
    engine: Box<dyn Engine>,
    caps: Caps,
    id: usize,
    pool: Pool,
    kernels: Kernels,
    /// Held while a realization enqueues, so that its launches stay together.
    enqueue_lock: Mutex<()>,
    /// Pinned by `set_matmul_config`; else each device's default.
    matmul: Mutex<Option<MatmulConfig>>,
    /// cuBLAS products in TF32 (`set_matmul_tf32`).
    tf32: AtomicBool,
    kernels_launched: AtomicU64,
    submits: AtomicU64,
    graphs_launched: AtomicU64,
    profiler: profile::Profiler,
}

impl CudaDevice {
    /// The NVIDIA GPU numbered `ordinal`; an error naming what is missing
    /// (the driver, a GPU, NVRTC) where it cannot run.
    pub fn open(ordinal: usize) -> Result<CudaDevice> {
        Ok(CudaDevice::with_engine(Box::new(driver::DriverEngine::open(ordinal)?)))
    }

    /// CUDA kernels run on the CPU, built by the host's C++ compiler (env
    /// `CXX`, else `c++`): the same runtime and kernels as on a GPU,
    /// slowly. For tests and debugging on machines without one. With env
    /// `KILN_CUDA_HOST_COMPILE_ONLY=1` kernels are compiled by NVRTC and
    /// not run (`emulated::HostEngine`): to fill the PTX cache.
    pub fn on_host() -> CudaDevice {
        CudaDevice::with_engine(Box::new(emulated::HostEngine::from_env()))
    }

    fn with_engine(engine: Box<dyn Engine>) -> CudaDevice {
        static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
        CudaDevice {
            caps: Caps { adapter: engine.info().name, ..Caps::cuda() },
            engine,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            pool: Pool::default(),
            kernels: Kernels::default(),
            enqueue_lock: Mutex::new(()),
            matmul: Mutex::new(None),
            tf32: AtomicBool::new(false),
            kernels_launched: AtomicU64::new(0),
            submits: AtomicU64::new(0),
            graphs_launched: AtomicU64::new(0),
            profiler: profile::Profiler::default(),
        }
    }

    pub fn info(&self) -> EngineInfo {
        self.engine.info()
    }

    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    pub fn stats(&self) -> DeviceStats {
        DeviceStats {
            kernels_launched: self.kernels_launched.load(Ordering::Relaxed),
            // Realizations that launched something (each one launch list).
            submits: self.submits.load(Ordering::Relaxed),
            graphs_launched: self.graphs_launched.load(Ordering::Relaxed),
            pipelines_compiled: self.kernels.len() as u64,
            pool: self.pool.stats(),
            tuning: Default::default(),
        }
    }

    /// The CUDA C++ of every kernel compiled so far.
    pub fn sources(&self) -> Vec<String> {
        self.kernels.sources()
    }

    /// Make every matmul use `config` (`None`: the default).
    pub fn set_matmul_config(&self, config: Option<MatmulConfig>) {
        *self.matmul.lock().unwrap() = config;
    }

    /// Let cuBLAS's f32 products round their operands to TF32 on tensor
    /// cores (faster, about 3 significant digits; docs/SHARP_EDGES.md), or
    /// keep them exact (the default). A jit'd function keeps the setting of
    /// its capture.
    pub fn set_matmul_tf32(&self, on: bool) {
        self.tf32.store(on, Ordering::Relaxed);
    }

    fn matmul_config(&self) -> MatmulConfig {
        self.matmul.lock().unwrap().unwrap_or_else(|| MatmulConfig::default_for(&self.caps))
    }

    fn buffer(&self, op: &'static str, dtype: DType, shape: &[usize]) -> Result<Arc<CudaBuffer>> {
        let bytes = dtype.storage_bytes(numel(shape));
        self.pool.get(&*self.engine, bytes, self.id).map_err(|e| match e {
            KilnError::OutOfMemory(detail) => KilnError::OutOfMemory(format!("{op}: {dtype:?} {shape:?}: {detail}")),
            other => other,
        })
    }

    /// `values` in a new buffer on this device.
    pub fn upload(&self, dtype: DType, shape: &[usize], values: &[f64]) -> Result<DeviceArray> {
        let buffer = self.buffer("upload", dtype, shape)?;
        let words = pack_words(dtype, values);
        if !words.is_empty() {
            let _order = self.enqueue_lock.lock().unwrap();
            self.engine.write(buffer.memory(), &words)?;
        }
        Ok(DeviceArray { buffer, layout: Layout::contiguous(shape), dtype })
    }

    fn scheduler(&self) -> Scheduler<'_> {
        Scheduler::new(&self.caps, HostInputs::Refuse)
    }

    /// Compute every node of `roots` not computed yet: one launch list.
    pub fn realize(&self, roots: &[Node]) -> Result<()> {
        let mut scheduler = self.scheduler();
        scheduler.run(roots)?;
        self.run(scheduler.finish()).map(drop)
    }

    /// The kernels realizing `roots` would launch; nothing is launched.
    pub fn plan(&self, roots: &[Node]) -> Result<Vec<PlannedKernel>> {
        let mut scheduler = self.scheduler();
        scheduler.run(roots)?;
        let variants = Variants::of(&self.caps);
        let mut planned = Vec::new();
        for k in scheduler.finish().items {
            let mut item = &k.item;
            let pass;
            if let Some((gemm, _)) = self.gemm_plan(item) {
                planned.push(PlannedKernel { name: gemm.name().into(), nodes: k.covers.clone() });
                if gemm.epilogue != GemmEpilogue::None {
                    continue;
                }
                // Names only: the item's own output stands in for the product.
                let Some(p) = item.epilogue_pass(item.writes()[0].clone()) else { continue };
                pass = p;
                item = &pass;
            }
            for key in launch::item_kernels(&self.caps, &variants, k.op, item, |_, _| self.matmul_config())? {
                planned.push(PlannedKernel { name: key.name(), nodes: k.covers.clone() });
            }
        }
        Ok(planned)
    }

    /// Realize `node` and read it back as a contiguous host array.
    pub async fn read(&self, node: &Node) -> Result<HostArray> {
        let mut scheduler = self.scheduler();
        let value = scheduler.readback(node)?;
        let slots = self.run(scheduler.finish())?;
        let held = resolved(&slots, &value.array.buffer);
        let buffer = self.own(&held)?;
        let (dtype, shape) = (value.array.dtype, value.array.layout.shape);
        let data = if value.words == 0 {
            Vec::new()
        } else {
            let mut copy = {
                let _order = self.enqueue_lock.lock().unwrap();
                self.engine.read(buffer.memory(), value.first_word * 4, value.words as usize)?
            };
            // Pending until the engine wakes the task: the copy landed.
            let words = std::future::poll_fn(|cx| match copy.poll(cx.waker()) {
                Ok(None) => std::task::Poll::Pending,
                done => std::task::Poll::Ready(done.map(|w| w.unwrap_or_default())),
            })
            .await?;
            unpack_words(dtype, &words, numel(&shape))
        };
        Ok(HostArray { dtype, shape, data })
    }

    /// Time every call (kernel launch or cuBLAS call) from now on on the
    /// device's own clock (`false`: stop), for [`CudaDevice::kernel_profile`].
    /// jit replays then enqueue their calls one by one, not as graphs.
    pub fn set_kernel_profiling(&self, on: bool) {
        self.profiler.set(on);
    }

    /// The calls timed since profiling began or since the last call, in
    /// enqueue order; waits for them to run.
    pub fn kernel_profile(&self) -> Result<Vec<KernelTiming>> {
        self.profiler.take()
    }

    /// Wait for everything enqueued so far.
    pub fn synchronize(&self) -> Result<()> {
        self.engine.synchronize()
    }

    /// `buffer` as one of this device's own.
    fn own<'b>(&self, buffer: &'b Arc<dyn DeviceBuffer>) -> Result<&'b CudaBuffer> {
        let any: &dyn Any = buffer.as_ref();
        match any.downcast_ref::<CudaBuffer>() {
            Some(b) if b.owner == self.id => Ok(b),
            _ => Err(KilnError::DeviceMismatch {
                op: "realize",
                left: format!("CUDA device {:?}", self.caps.adapter),
                right: "a tensor realized on another device".into(),
            }),
        }
    }

    /// `item`'s product as one cuBLAS call where cuBLAS runs it: an f32,
    /// f16 or bf16 product, cuBLAS found, no kiln matmul config pinned by a
    /// test, and operands that lie as cuBLAS reads them (`blas::plan`). An
    /// epilogue runs inside the call where cuBLASLt runs it (one f32
    /// product; [`lt_epilogue`]), with the buffer its bias reads; any other
    /// runs as a pass of its own ([`Item::epilogue_pass`]): one more read
    /// and write of the output, against a product in cuBLAS rather than in
    /// kiln's kernel.
    fn gemm_plan(&self, item: &Item) -> Option<(Gemm, Option<Arc<dyn DeviceBuffer>>)> {
        let Item::Matmul { a, b, operands, shape, epilogue, args, .. } = item else { return None };
        if !self.engine.has_blas() || self.matmul.lock().unwrap().is_some() {
            return None;
        }
        let tf32 = self.tf32.load(Ordering::Relaxed);
        let gemm = Gemm { tf32, ..blas::plan(a, b, shape, *operands)? };
        // cuBLASLt's algorithms assume 256-byte aligned operands (as the
        // pool's buffers are at their start).
        let aligned = |offset: u64| offset.is_multiple_of(LT_ALIGNMENT);
        let fused = epilogue
            .as_ref()
            .filter(|_| gemm.batch == 1 && *operands == DType::F32)
            .filter(|_| [gemm.a, gemm.b, gemm.c].into_iter().all(aligned))
            .and_then(|sig| match lt_epilogue(sig, &args.layouts, shape)? {
                (epilogue, None) => Some((Gemm { epilogue, ..gemm }, None)),
                (epilogue, Some(leaf)) => {
                    let offset = 4 * args.layouts[leaf].offset as u64;
                    let buffer = args.buffers.get(sig.leaves[leaf].buffer?).filter(|_| aligned(offset))?;
                    Some((Gemm { epilogue, bias: offset, ..gemm }, Some(buffer.clone())))
                }
            })
            .filter(|(fused, _)| self.engine.blas_lt_runs(fused));
        fused.or(Some((gemm, None)))
    }

    /// Enqueue `schedule` and store its results in their nodes; the
    /// buffer each slot was given.
    fn run(&self, schedule: Schedule) -> Result<Vec<Arc<dyn DeviceBuffer>>> {
        let (list, slots) = self.record(&schedule)?;
        self.enqueue(&list, |b| Ok(self.own(b)?.address()))?;
        store(schedule.results, &slots);
        Ok(slots)
    }
}

/// The values a schedule computed, stored in their nodes.
fn store(results: Vec<(Node, DeviceArray)>, slots: &[Arc<dyn DeviceBuffer>]) {
    for (node, array) in results {
        node.set_realized(Realized::Gpu(DeviceArray { buffer: resolved(slots, &array.buffer), ..array }));
    }
}

/// `b`, or the buffer its slot was given.
fn resolved(slots: &[Arc<dyn DeviceBuffer>], b: &Arc<dyn DeviceBuffer>) -> Arc<dyn DeviceBuffer> {
    slot_of(b).map_or_else(|| b.clone(), |s| slots[s].clone())
}
