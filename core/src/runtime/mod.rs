//! Devices: the CPU reference, a wgpu adapter with its buffer pool and
//! pipeline cache, or (natively) a CUDA GPU. The backend is a runtime
//! value; there is no global device.

mod adapter;
mod context;
#[cfg(not(target_arch = "wasm32"))]
mod cuda;
mod jit;
mod launch;
mod oneshot;
mod overrides;
mod pipelines;
pub mod pool;
mod profile;
mod readback;
mod realize;
mod resources;
mod textures;
mod tune;

use crate::DType;
use crate::codegen::Caps;
use crate::codegen::matmul::MatmulConfig;
use crate::error::{KilnError, Result};
use crate::interp::{self, HostArray};
use crate::ir::DeviceArray;
use crate::ir::{Node, Realized};
use context::Context;
use pool::PoolStats;
use resources::Resources;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use adapter::describe as describe_adapter;
pub use jit::{PendingRead, Program};
#[cfg(feature = "testing")]
pub use overrides::TestHooks;
pub use profile::KernelTiming;
pub use realize::{PlannedKernel, cuda_kernels_for, kernels_for, schedule_for};
pub use tune::TuningStats;

/// A realized GPU value: a pooled buffer (behind the IR's opaque handle)
/// seen through a strided layout.
pub type GpuArray = DeviceArray;

/// What a device is, for logs, reports and `Device::info()`.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub name: String,
    /// "cpu-reference", "vulkan", "gl", "metal", "dx12", "webgpu" or "cuda".
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub limits: wgpu::Limits,
    pub shader_f16: bool,
    /// Elementwise kernels compute f16 as f16 (`shader-f16`, unless
    /// `KILN_F16_COMPUTE=0`); otherwise f16 is packed two per word and
    /// computed in f32 ([`DeviceInfo::f16_path`]).
    pub f16_compute: bool,
    pub subgroups: bool,
    /// The subgroup width when the adapter has subgroups and they are
    /// always this wide (the subgroup-lanes row kernel needs to know it).
    pub subgroup_size: Option<u32>,
    /// Whether kernels may use workgroup memory: everywhere but on a Vulkan
    /// device without passthrough shaders, through which kiln hands Vulkan
    /// SPIR-V without the layouts naga gives workgroup arrays (`crate::spirv`).
    pub workgroup_memory: bool,
}

impl DeviceInfo {
    /// Whether the adapter is a CPU (SwiftShader, llvmpipe), whose compilers
    /// and costs differ from a GPU's: the tuner, the matmul defaults and the
    /// reductions ask.
    pub fn is_cpu_adapter(&self) -> bool {
        self.device_type == "Cpu"
    }

    /// How this device computes f16, in words.
    pub fn f16_path(&self) -> &'static str {
        if self.f16_compute {
            "f16 arithmetic (shader-f16), f32 accumulation"
        } else {
            "f16 packed in words, f32 arithmetic"
        }
    }

    /// What codegen may assume of this device.
    pub fn caps(&self) -> Caps {
        if self.backend == "cuda" {
            return Caps { adapter: self.name.clone(), ..Caps::cuda() };
        }
        Caps {
            // On the web the adapter's name is often empty.
            adapter: if self.name.is_empty() { self.backend.clone() } else { self.name.clone() },
            backend: self.backend.clone(),
            cpu: self.is_cpu_adapter(),
            subgroups: self.subgroups,
            subgroup_size: self.subgroup_size,
            workgroup_memory: self.workgroup_memory,
            storage_textures: self.limits.max_storage_textures_per_shader_stage > 0,
            max_storage_buffers: self.limits.max_storage_buffers_per_shader_stage,
            max_texture_side: self.limits.max_texture_dimension_2d,
            max_texture_layers: self.limits.max_texture_array_layers,
            max_workgroups_per_dimension: self.limits.max_compute_workgroups_per_dimension,
            f16_compute: self.f16_compute,
        }
    }
}

/// Counters that tests and benchmarks read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DeviceStats {
    pub kernels_launched: u64,
    pub submits: u64,
    /// jit replays enqueued as one CUDA graph (CUDA only).
    pub graphs_launched: u64,
    pub pipelines_compiled: u64,
    pub pool: PoolStats,
    pub tuning: TuningStats,
}

/// How to pick a GPU adapter.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// A backend name (`vulkan`, `gl`, `metal`, `dx12`, `webgpu`, `cuda`;
    /// `cuda-host` runs CUDA's kernels on the CPU) or a piece of the
    /// adapter's name; `None` reads env `KILN_ADAPTER`, and without
    /// it the fastest adapter is chosen.
    pub adapter: Option<String>,
    pub backends: wgpu::Backends,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions { adapter: None, backends: wgpu::Backends::all() }
    }
}

/// A wgpu device as kiln runs it: what it is and its queue (`context`),
/// what kernels run with (`resources`), the matmul tuner, the kernel
/// profiler, the variants tests pinned, and the counters of `Device::stats`.
pub(crate) struct Gpu {
    ctx: Context,
    resources: Resources,
    tuner: tune::Tuner,
    /// Switched by [`Device::set_kernel_profiling`].
    profiler: profile::Profiler,
    /// Kernel variants pinned by tests.
    overrides: overrides::Overrides,
    kernels_launched: AtomicU64,
    submits: AtomicU64,
}

enum Backend {
    Cpu,
    Gpu(Box<Gpu>),
    #[cfg(not(target_arch = "wasm32"))]
    Cuda(Box<kiln_cuda::device::CudaDevice>),
}

/// A device tensors live on. Cheap to clone (shared).
#[derive(Clone)]
pub struct Device(Arc<Backend>);

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({} on {})", self.info().name, self.info().backend)
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// `KILN_F16_COMPUTE=0` keeps f16 packed and computed in f32 even where
/// the adapter has `shader-f16` (to compare the two paths).
fn f16_compute_allowed() -> bool {
    std::env::var("KILN_F16_COMPUTE").map_or(true, |v| v != "0")
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

impl Device {
    /// The CPU reference interpreter (f64), the oracle of the test suite.
    pub fn cpu() -> Device {
        Device(Arc::new(Backend::Cpu))
    }

    /// The best GPU adapter, or the one env `KILN_ADAPTER` names.
    pub async fn gpu() -> Result<Device> {
        Device::with_options(DeviceOptions::default()).await
    }

    pub async fn with_options(options: DeviceOptions) -> Result<Device> {
        let selector = options.adapter.clone().or_else(|| std::env::var("KILN_ADAPTER").ok());
        if let Some(cuda @ ("cuda" | "cuda-host")) = selector.as_deref() {
            return Device::cuda_selected(cuda == "cuda-host");
        }
        let instance = instance(options.backends);
        let adapters = instance.enumerate_adapters(options.backends).await;
        let adapter = adapter::choose(adapters, selector.as_deref(), options.backends)?;
        Device::from_adapter(adapter).await
    }

    /// `cuda`, or `cuda-host`: its runtime with the kernels run on the CPU.
    #[cfg(not(target_arch = "wasm32"))]
    fn cuda_selected(on_host: bool) -> Result<Device> {
        if on_host { Ok(Device::cuda_on_host()) } else { Device::cuda() }
    }

    #[cfg(target_arch = "wasm32")]
    fn cuda_selected(_: bool) -> Result<Device> {
        Err(KilnError::Unavailable { what: "CUDA", detail: "a browser has no CUDA; choose a WebGPU adapter".into() })
    }

    /// One device per adapter found on `backends` (each `Err` names its adapter).
    pub async fn all(backends: wgpu::Backends) -> Vec<(String, Result<Device>)> {
        let mut out = Vec::new();
        for adapter in instance(backends).enumerate_adapters(backends).await {
            let name = adapter::describe(&adapter.get_info());
            out.push((name, Device::from_adapter(adapter).await));
        }
        out
    }

    /// Open a device on `adapter` with the adapter's real limits.
    pub async fn from_adapter(adapter: wgpu::Adapter) -> Result<Device> {
        let ai = adapter.get_info();
        let limits = adapter.limits();
        let features = adapter.features();
        // Passthrough shaders on Vulkan, for kernels with workgroup memory
        // (see `crate::spirv`).
        let own_spirv = ai.backend == wgpu::Backend::Vulkan && features.contains(wgpu::Features::PASSTHROUGH_SHADERS);
        let passthrough = if own_spirv { wgpu::Features::PASSTHROUGH_SHADERS } else { wgpu::Features::empty() };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("kiln"),
                // Subgroup operations where offered: some matmul kernels use
                // them. Timestamps for `set_kernel_profiling`.
                required_features: (features
                    & (wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16))
                    | passthrough,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| KilnError::RequestDevice { adapter: adapter::describe(&ai), detail: e.to_string() })?;
        let info = DeviceInfo {
            name: ai.name.clone(),
            backend: ai.backend.to_str().to_string(),
            device_type: format!("{:?}", ai.device_type),
            driver: ai.driver.clone(),
            driver_info: ai.driver_info.clone(),
            limits,
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            f16_compute: features.contains(wgpu::Features::SHADER_F16) && f16_compute_allowed(),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
            subgroup_size: (features.contains(wgpu::Features::SUBGROUP)
                && ai.subgroup_min_size == ai.subgroup_max_size)
                .then_some(ai.subgroup_min_size),
            workgroup_memory: ai.backend != wgpu::Backend::Vulkan || own_spirv,
        };
        Ok(Device(Arc::new(Backend::Gpu(Box::new(Gpu {
            resources: Resources::new(&device, &info.limits, own_spirv),
            tuner: tune::Tuner::new(&info),
            ctx: Context::new(device, queue, info),
            profiler: profile::Profiler::default(),
            overrides: overrides::Overrides::default(),
            kernels_launched: AtomicU64::new(0),
            submits: AtomicU64::new(0),
        })))))
    }

    /// Make every matmul use `config` (`None`: the autotuner's choice), to
    /// test or benchmark one member of the kernel family. No-op on the CPU.
    /// Errors when the device cannot run `config` ([`MatmulConfig::refusal`]).
    pub fn set_matmul_config(&self, config: Option<MatmulConfig>) -> Result<()> {
        if self.is_cpu() {
            return Ok(());
        }
        if let Some(detail) = config.and_then(|c| c.refusal(&self.info().caps())) {
            return Err(KilnError::Invalid { op: "set_matmul_config", detail });
        }
        match &*self.0 {
            Backend::Cpu => {}
            Backend::Gpu(g) => g.tuner.force(config),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => c.set_matmul_config(config),
        }
        Ok(())
    }

    /// On CUDA, let cuBLAS's f32 matmuls round their operands to TF32 on
    /// tensor cores (much faster; about 3 significant digits per product,
    /// docs/SHARP_EDGES.md), or keep them exact f32, the default. An error
    /// on other devices, which have no TF32.
    pub fn set_matmul_tf32(&self, on: bool) -> Result<()> {
        #[cfg(target_arch = "wasm32")]
        let _ = on; // no CUDA in a browser
        match &*self.0 {
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => {
                c.set_matmul_tf32(on);
                Ok(())
            }
            _ => Err(KilnError::Invalid {
                op: "set_matmul_tf32",
                detail: format!("TF32 is a CUDA mode; this device is {} ({})", self.info().name, self.info().backend),
            }),
        }
    }

    /// Turn the matmul autotuner on or off for this device (`None`: the
    /// default, on natively unless env `KILN_TUNE=off`, and in a browser on
    /// for GPUs but off for CPU adapters, where each page load would spend
    /// most of a minute compiling and timing candidates). Off, matmuls of classes not
    /// yet tuned run the default config. No-op on the CPU reference.
    pub fn set_matmul_tuning(&self, on: Option<bool>) {
        if let Backend::Gpu(g) = &*self.0 {
            g.tuner.set_enabled(on);
        }
    }

    /// The variant pins of a GPU device (none on the CPU reference).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    fn overrides(&self) -> Option<&overrides::Overrides> {
        match &*self.0 {
            Backend::Gpu(g) => Some(&g.overrides),
            _ => None,
        }
    }

    /// Time every kernel launch on the device's own clock from now on
    /// (`false`: stop), for [`Device::kernel_profile`]. Each launch then
    /// runs in a compute pass of its own (on CUDA: between two events,
    /// cuBLAS calls too, and jit replays without graphs). An error on the
    /// CPU device and on adapters without timestamp queries (browsers that
    /// do not grant `timestamp-query`, for one).
    pub fn set_kernel_profiling(&self, on: bool) -> Result<()> {
        match &*self.0 {
            Backend::Cpu => Err(KilnError::Invalid {
                op: "set_kernel_profiling",
                detail: "the CPU reference device launches no kernels".into(),
            }),
            Backend::Gpu(g) => g.profiler.set(&g.ctx, on),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => {
                c.set_kernel_profiling(on);
                Ok(())
            }
        }
    }

    /// The launches timed since profiling began or since the last call, in
    /// launch order; waits for their submits to finish. Empty on the CPU
    /// device.
    pub async fn kernel_profile(&self) -> Result<Vec<KernelTiming>> {
        match &*self.0 {
            Backend::Gpu(g) => g.profiler.take(&g.ctx).await,
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => cuda::kernel_profile(c),
            Backend::Cpu => Ok(Vec::new()),
        }
    }

    /// The autotuner's choices so far: (shape class, config name).
    pub fn matmul_choices(&self) -> Vec<(String, String)> {
        match &*self.0 {
            Backend::Gpu(g) => g.tuner.choices(),
            _ => Vec::new(),
        }
    }

    /// Tune now the matmul shape classes that realizing `roots` would meet.
    /// Natively realization tunes them itself, waiting on the GPU. A browser
    /// cannot wait, so there a class first runs the default config and is
    /// tuned once that realization is awaited: call this before a
    /// realization captured for replay ([`Device::capture`], `jit`), which
    /// would otherwise keep the default.
    pub async fn tune_matmuls(&self, roots: &[Node]) -> Result<()> {
        match &*self.0 {
            Backend::Gpu(g) if cfg!(target_arch = "wasm32") => {
                g.tuner.queue(&g.schedule(roots)?);
                g.tuner.tune_pending(g).await
            }
            _ => Ok(()),
        }
    }

    /// A number identifying this device while it lives (for caches).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    pub fn is_cpu(&self) -> bool {
        matches!(*self.0, Backend::Cpu)
    }

    pub fn info(&self) -> DeviceInfo {
        match &*self.0 {
            Backend::Cpu => DeviceInfo {
                name: "CPU reference (f64)".into(),
                backend: "cpu-reference".into(),
                device_type: "Cpu".into(),
                driver: String::new(),
                driver_info: String::new(),
                limits: wgpu::Limits::default(),
                shader_f16: true,
                f16_compute: false,
                subgroups: false,
                subgroup_size: None,
                workgroup_memory: false,
            },
            Backend::Gpu(g) => g.ctx.info.clone(),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => cuda::info(c),
        }
    }

    pub fn stats(&self) -> DeviceStats {
        match &*self.0 {
            Backend::Cpu => DeviceStats::default(),
            Backend::Gpu(g) => DeviceStats {
                kernels_launched: g.kernels_launched.load(Ordering::Relaxed),
                submits: g.submits.load(Ordering::Relaxed),
                graphs_launched: 0,
                pipelines_compiled: g.resources.pipelines.len() as u64,
                pool: g.resources.pool.stats(),
                tuning: g.tuner.stats(),
            },
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => cuda::stats(c),
        }
    }

    /// The source of every kernel this device has compiled: WGSL, or on
    /// CUDA its CUDA C++.
    pub fn compiled_sources(&self) -> Vec<String> {
        match &*self.0 {
            Backend::Cpu => Vec::new(),
            Backend::Gpu(g) => g.resources.pipelines.sources(),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => c.sources(),
        }
    }

    /// Put host data on this device as a realized input node.
    pub fn upload(&self, dtype: DType, shape: &[usize], values: &[f64]) -> Result<Node> {
        if crate::shape::checked_numel(shape) != Some(values.len()) {
            return Err(KilnError::Shape {
                op: "upload",
                detail: format!("{} values do not fill shape {shape:?}", values.len()),
            });
        }
        let prim = crate::ir::Prim::Input { shape: shape.to_vec(), dtype };
        let value = match &*self.0 {
            Backend::Cpu => Realized::Host(Arc::new(HostArray::new(dtype, shape.to_vec(), values.to_vec()))),
            Backend::Gpu(g) => Realized::Gpu(g.resources.upload(&g.ctx.queue, dtype, shape, values)?),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => Realized::Gpu(c.upload(dtype, shape, values)?),
        };
        Node::realized(prim, value)
    }

    /// Compute every node in `roots` that is not computed yet: on a GPU, all
    /// their kernels in one command encoder and one submit.
    /// Nodes that read a `vmap` placeholder stay lazy (a function mapped by
    /// `vmap` may realize what it computes; its values exist only batched).
    pub async fn realize(&self, roots: &[Node]) -> Result<()> {
        let computable: Vec<Node>;
        let roots = match roots.iter().any(Node::reads_placeholder) {
            true => {
                computable = roots.iter().filter(|n| !n.reads_placeholder()).cloned().collect();
                &computable[..]
            }
            false => roots,
        };
        match &*self.0 {
            Backend::Cpu => interp::realize(roots),
            Backend::Gpu(g) => g.realize(roots).await,
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => c.realize(roots),
        }
    }

    /// Wait until every kernel submitted so far has finished. Realizing
    /// only submits; reading waits for what it reads. Call this before
    /// timing a realize, and before the process exits while a device that
    /// is never dropped (in a `static`) may still run work: lavapipe
    /// compiles a kernel on its queue thread at first launch, and one still
    /// compiling while the process exits crashes in LLVM's torn-down state.
    pub async fn synchronize(&self) -> Result<()> {
        match &*self.0 {
            Backend::Cpu => Ok(()),
            Backend::Gpu(g) => g.ctx.synchronize().await,
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => c.synchronize(),
        }
    }

    /// The kernels that realizing `roots` would launch, each with the IR
    /// nodes it computes; nothing is launched or stored.
    pub fn plan_kernels(&self, roots: &[Node]) -> Result<Vec<PlannedKernel>> {
        match &*self.0 {
            Backend::Cpu => Err(KilnError::Invalid {
                op: "plan_kernels",
                detail: "the CPU reference runs node by node; kernel plans need a GPU device".into(),
            }),
            Backend::Gpu(g) => g.plan_kernels(roots),
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => {
                Ok(c.plan(roots)?.into_iter().map(|k| PlannedKernel { name: k.name, nodes: k.nodes }).collect())
            }
        }
    }

    /// Realize `node` and read it back as a contiguous host array.
    pub async fn read(&self, node: &Node) -> Result<HostArray> {
        if node.reads_placeholder() {
            return Err(KilnError::Invalid {
                op: "read",
                detail: format!(
                    "a {} {:?} value computed from a vmap input inside the mapped function has no values of \
                     its own; return it from the function and read the batched result",
                    node.dtype(),
                    node.shape()
                ),
            });
        }
        match &*self.0 {
            Backend::Cpu => {
                interp::realize(std::slice::from_ref(node))?;
                match node.realized_value() {
                    Some(Realized::Host(h)) => Ok((*h).clone()),
                    _ => Err(KilnError::Readback("a GPU tensor read through the CPU device".into())),
                }
            }
            Backend::Gpu(g) => g.read(node).await,
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => c.read(node).await,
        }
    }
}

impl Gpu {
    /// The kernel variants this device runs (its own, or as a test pinned them).
    fn variants(&self) -> crate::codegen::launch::Variants {
        self.overrides.variants(&self.ctx.caps)
    }
}

/// The scheduler asks the device's caps, and its variants (which tests
/// may pin) whether attention is one kernel.
impl crate::sched::schedule::Target for Gpu {
    fn max_bindings(&self) -> usize {
        self.ctx.caps.max_bindings()
    }

    fn meta_room(&self, rank: usize) -> usize {
        self.ctx.caps.meta_room(rank)
    }

    fn streams_rows(&self, rows: usize, len: usize) -> bool {
        self.ctx.caps.streams_rows(rows, len)
    }

    fn runs_attention(&self, item: &crate::sched::schedule::Item) -> bool {
        crate::codegen::runs_attention(&self.ctx.caps, &self.variants(), item)
    }
}
