//! [`Device`]: a handle on one runtime, the CPU reference, a wgpu adapter
//! or (natively) a CUDA GPU. The backend is chosen where a device is
//! opened, and only there; everything else goes through [`Runtime`].
//! There is no global device.

use kiln_codegen::matmul::MatmulConfig;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{Node, Prim};
use kiln_ir::{DType, shape};
use kiln_runtime::{CpuReference, DeviceInfo, DeviceStats, KernelTiming, Overrides, Pinned, PlannedKernel, Runtime};
use kiln_wgpu::wgpu;
use std::sync::Arc;

/// A device tensors live on. Cheap to clone (shared).
#[derive(Clone)]
pub struct Device {
    pub(crate) runtime: Arc<dyn Runtime>,
    /// Bytes over which a tensor is held as pieces ([`Device::binding_limit`]).
    pub(crate) binding_limit: u64,
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

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let info = self.info();
        write!(f, "Device({} on {})", info.name, info.backend)
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.runtime, &other.runtime)
    }
}

/// Where a backend is chosen: the constructors.
impl Device {
    /// A device over `runtime`: how a backend outside kiln plugs in.
    pub fn from_runtime(runtime: Arc<dyn Runtime>) -> Device {
        Device::over(runtime)
    }

    fn over(runtime: Arc<dyn Runtime>) -> Device {
        let limit = runtime.info().limits.max_storage_buffer_binding_size;
        Device { runtime, binding_limit: u64::MAX }.with_binding_limit(limit)
    }

    /// The CPU reference interpreter (f64), the oracle of the test suite.
    pub fn cpu() -> Device {
        Device::over(Arc::new(CpuReference))
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
        let gpu = kiln_wgpu::open_selected(selector.as_deref(), options.backends).await?;
        Ok(Device::over(Arc::new(gpu)))
    }

    /// `cuda`, or `cuda-host`: its runtime with the kernels run on the CPU.
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    fn cuda_selected(on_host: bool) -> Result<Device> {
        if on_host { Ok(Device::cuda_on_host()) } else { Device::cuda() }
    }

    #[cfg(all(not(feature = "cuda"), not(target_arch = "wasm32")))]
    fn cuda_selected(_: bool) -> Result<Device> {
        let detail = "kiln was built without its `cuda` feature: add `features = [\"cuda\"]` to kiln in Cargo.toml";
        Err(KilnError::Unavailable { what: "CUDA", detail: detail.into() })
    }

    #[cfg(target_arch = "wasm32")]
    fn cuda_selected(_: bool) -> Result<Device> {
        Err(KilnError::Unavailable { what: "CUDA", detail: "a browser has no CUDA; choose a WebGPU adapter".into() })
    }

    /// One device per adapter found on `backends` (each `Err` names its adapter).
    pub async fn all(backends: wgpu::Backends) -> Vec<(String, Result<Device>)> {
        let opened = kiln_wgpu::open_all(backends).await;
        opened.into_iter().map(|(name, gpu)| (name, gpu.map(|g| Device::over(Arc::new(g))))).collect()
    }

    /// Open a device on `adapter` with the adapter's real limits.
    pub async fn from_adapter(adapter: wgpu::Adapter) -> Result<Device> {
        Ok(Device::over(Arc::new(kiln_wgpu::Gpu::open(adapter).await?)))
    }

    /// The first NVIDIA GPU, through the CUDA driver: kernels compiled by
    /// NVRTC for its architecture. An error, never a panic, names what is
    /// missing where it cannot run: the driver library, a GPU, or NVRTC
    /// (`libnvrtc.so.13`). `KILN_ADAPTER=cuda` picks it for [`Device::gpu`].
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    pub fn cuda() -> Result<Device> {
        Device::cuda_on(0)
    }

    /// The NVIDIA GPU of CUDA ordinal `ordinal` (fastest first, unless
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID` orders them as `nvidia-smi` does), as
    /// [`Device::cuda`] opens the first: one device per GPU of a mesh.
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    pub fn cuda_on(ordinal: usize) -> Result<Device> {
        Ok(Device::over(Arc::new(kiln_cuda::device::CudaDevice::open(ordinal)?)))
    }

    /// The CUDA runtime with its kernels run on the CPU, built by the
    /// host's C++ compiler (env `CXX`, else `c++`): what [`Device::cuda`]
    /// runs, without a GPU and slowly. For tests and for debugging a kernel.
    #[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
    pub fn cuda_on_host() -> Device {
        Device::over(Arc::new(kiln_cuda::device::CudaDevice::on_host()))
    }
}

impl Device {
    /// Make every matmul use `config` (`None`: the autotuner's choice), to
    /// test or benchmark one member of the kernel family. No-op on the CPU.
    /// Errors when the device cannot run `config` ([`MatmulConfig::refusal`]).
    pub fn set_matmul_config(&self, config: Option<MatmulConfig>) -> Result<()> {
        if self.is_cpu() {
            return Ok(());
        }
        if let Some(detail) = config.and_then(|c| c.refusal(&self.info().caps)) {
            return Err(KilnError::Invalid { op: "set_matmul_config", detail });
        }
        self.runtime.set_matmul_config(config);
        Ok(())
    }

    /// On CUDA, let cuBLAS's f32 matmuls round their operands to TF32 on
    /// tensor cores (much faster; about 3 significant digits per product,
    /// docs/SHARP_EDGES.md), or keep them exact f32, the default. An error
    /// on other devices, which have no TF32.
    pub fn set_matmul_tf32(&self, on: bool) -> Result<()> {
        self.runtime.set_matmul_tf32(on)
    }

    /// Turn the matmul autotuner on or off for this device (`None`: the
    /// default, on natively unless env `KILN_TUNE=off`, and in a browser on
    /// for GPUs but off for CPU adapters, where each page load would spend
    /// most of a minute compiling and timing candidates). Off, matmuls of classes not
    /// yet tuned run the default config. No-op on the CPU reference and on CUDA.
    pub fn set_matmul_tuning(&self, on: Option<bool>) {
        self.runtime.set_matmul_tuning(on)
    }

    /// Time every kernel launch on the device's own clock from now on
    /// (`false`: stop), for [`Device::kernel_profile`]. Each launch then
    /// runs in a compute pass of its own (on CUDA: between two events,
    /// cuBLAS calls too, and jit replays without graphs). An error on the
    /// CPU device and on adapters without timestamp queries (browsers that
    /// do not grant `timestamp-query`, for one).
    pub fn set_kernel_profiling(&self, on: bool) -> Result<()> {
        self.runtime.set_kernel_profiling(on)
    }

    /// The launches timed since profiling began or since the last call, in
    /// launch order; waits for their submits to finish. Empty on the CPU
    /// device.
    pub async fn kernel_profile(&self) -> Result<Vec<KernelTiming>> {
        self.runtime.kernel_profile().await
    }

    /// The autotuner's choices so far: (shape class, config name).
    pub fn matmul_choices(&self) -> Vec<(String, String)> {
        self.runtime.matmul_choices()
    }

    /// Tune now the matmul shape classes that realizing `roots` would meet.
    /// Natively realization tunes them itself, waiting on the GPU. A browser
    /// cannot wait, so there a class first runs the default config and is
    /// tuned once that realization is awaited: call this before a
    /// realization captured for replay ([`Device::capture`], `jit`), which
    /// would otherwise keep the default.
    pub async fn tune_matmuls(&self, roots: &[Node]) -> Result<()> {
        self.runtime.tune_matmuls(&self.storage(roots).0).await
    }

    /// A number identifying this device while it lives (for caches).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.runtime) as *const () as usize
    }

    pub fn is_cpu(&self) -> bool {
        self.runtime.is_reference()
    }

    pub fn info(&self) -> DeviceInfo {
        self.runtime.info()
    }

    pub fn stats(&self) -> DeviceStats {
        self.runtime.stats()
    }

    /// The source of every kernel this device has compiled: WGSL, or on
    /// CUDA its CUDA C++.
    pub fn compiled_sources(&self) -> Vec<String> {
        self.runtime.compiled_sources()
    }

    /// Put host data on this device as a realized input node.
    pub fn upload(&self, dtype: DType, shape: &[usize], values: &[f64]) -> Result<Node> {
        if shape::checked_numel(shape) != Some(values.len()) {
            return Err(KilnError::Shape {
                op: "upload",
                detail: format!("{} values do not fill shape {shape:?}", values.len()),
            });
        }
        if let Some(split) = self.upload_split(dtype, shape, values)? {
            return Ok(split);
        }
        let prim = Prim::Input { shape: shape.to_vec(), dtype };
        Node::realized(prim, self.runtime.upload(dtype, shape, values)?)
    }

    /// Compute every node in `roots` that is not computed yet: on a GPU, all
    /// their kernels in one command encoder and one submit.
    /// Nodes that read a `vmap` placeholder stay lazy (a function mapped by
    /// `vmap` may realize what it computes; its values exist only batched).
    pub async fn realize(&self, roots: &[Node]) -> Result<()> {
        let roots = &self.storage(roots).0;
        if roots.iter().any(Node::reads_placeholder) {
            let computable: Vec<Node> = roots.iter().filter(|n| !n.reads_placeholder()).cloned().collect();
            return self.runtime.realize(&computable).await;
        }
        self.runtime.realize(roots).await
    }

    /// Wait until every kernel submitted so far has finished. Realizing
    /// only submits; reading waits for what it reads. Call this before
    /// timing a realize, and before the process exits while a device that
    /// is never dropped (in a `static`) may still run work: lavapipe
    /// compiles a kernel on its queue thread at first launch, and one still
    /// compiling while the process exits crashes in LLVM's torn-down state.
    pub async fn synchronize(&self) -> Result<()> {
        self.runtime.synchronize().await
    }

    /// The kernels that realizing `roots` would launch, each with the IR
    /// nodes it computes; nothing is launched or stored. An error on the
    /// CPU reference, which runs node by node.
    pub fn plan_kernels(&self, roots: &[Node]) -> Result<Vec<PlannedKernel>> {
        self.runtime.plan_kernels(&self.storage(roots).0)
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
        if self.is_split(node) {
            return self.read_split(node).await;
        }
        self.runtime.read(node).await
    }
}

/// Tests pin kernel variants through the runtime's [`Overrides`].
impl Pinned for Device {
    fn overrides(&self) -> Option<&Overrides> {
        self.runtime.overrides()
    }
}
