//! kiln-wgpu: kiln's runtime on wgpu (Vulkan, Metal, DX12, GL, WebGPU): an
//! adapter with its buffer pool, pipeline cache, matmul tuner and kernel
//! profiler, implementing [`kiln_runtime::Runtime`].

// On wasm, wgpu's handles are not Send/Sync and the browser runs kiln on
// one thread; the Arcs are shared ownership, not cross-thread sharing.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

mod adapter;
mod context;
mod launch;
mod oneshot;
mod pipelines;
pub mod pool;
mod profile;
mod program;
mod quiet_wayland;
mod readback;
mod realize;
mod resources;
mod runtime;
mod textures;
mod tune;

// The layers below, under the paths this crate's modules use.
use kiln_codegen as codegen;
use kiln_codegen::{spirv, validate};
use kiln_ir::{DType, dtype, error, interp, ir, shape};
use kiln_runtime::clock;
use kiln_sched as sched;

use codegen::Caps;
use context::Context;
use error::{KilnError, Result};
use ir::DeviceArray;
use kiln_runtime::{DeviceInfo, Limits, Overrides};
use resources::Resources;
use std::sync::atomic::AtomicU64;

pub use adapter::describe as describe_adapter;
pub use wgpu;

/// A realized GPU value: a pooled buffer (behind the IR's opaque handle)
/// seen through a strided layout.
pub type GpuArray = DeviceArray;

/// A wgpu device as kiln runs it: what it is and its queue (`context`),
/// what kernels run with (`resources`), the matmul tuner, the kernel
/// profiler, the variants tests pinned, and the counters of its stats.
pub struct Gpu {
    ctx: Context,
    resources: Resources,
    tuner: tune::Tuner,
    profiler: profile::Profiler,
    /// Kernel variants pinned by tests.
    overrides: Overrides,
    kernels_launched: AtomicU64,
    submits: AtomicU64,
}

/// `KILN_F16_COMPUTE=0` keeps f16 packed and computed in f32 even where
/// the adapter has `shader-f16` (to compare the two paths).
fn f16_compute_allowed() -> bool {
    std::env::var("KILN_F16_COMPUTE").map_or(true, |v| v != "0")
}

fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    quiet_wayland::install();
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    wgpu::Instance::new(desc)
}

/// The adapter on `backends` that `selector` picks (a backend name,
/// `lavapipe`, or a piece of its name), else the fastest, opened.
pub async fn open_selected(selector: Option<&str>, backends: wgpu::Backends) -> Result<Gpu> {
    let adapters = instance(backends).enumerate_adapters(backends).await;
    Gpu::open(adapter::choose(adapters, selector, backends)?).await
}

/// Every adapter on `backends`, each opened (an `Err` names its adapter).
pub async fn open_all(backends: wgpu::Backends) -> Vec<(String, Result<Gpu>)> {
    let mut out = Vec::new();
    for adapter in instance(backends).enumerate_adapters(backends).await {
        let name = adapter::describe(&adapter.get_info());
        out.push((name, Gpu::open(adapter).await));
    }
    out
}

/// kiln's limits from the adapter's.
fn limits_of(l: &wgpu::Limits) -> Limits {
    Limits {
        max_storage_buffer_binding_size: l.max_storage_buffer_binding_size,
        max_buffer_size: l.max_buffer_size,
        max_compute_workgroup_storage_size: l.max_compute_workgroup_storage_size,
        max_compute_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
        max_compute_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        max_storage_buffers_per_shader_stage: l.max_storage_buffers_per_shader_stage,
        max_storage_textures_per_shader_stage: l.max_storage_textures_per_shader_stage,
        max_texture_dimension_2d: l.max_texture_dimension_2d,
        max_texture_array_layers: l.max_texture_array_layers,
    }
}

/// What codegen may assume of an adapter described by `info`.
fn caps_of(info: &DeviceInfo) -> Caps {
    Caps {
        // On the web the adapter's name is often empty.
        adapter: if info.name.is_empty() { info.backend.clone() } else { info.name.clone() },
        backend: info.backend.clone(),
        cpu: info.is_cpu_adapter(),
        subgroups: info.subgroups,
        subgroup_size: info.subgroup_size,
        workgroup_memory: info.workgroup_memory,
        storage_textures: info.limits.max_storage_textures_per_shader_stage > 0,
        max_storage_buffers: info.limits.max_storage_buffers_per_shader_stage,
        max_texture_side: info.limits.max_texture_dimension_2d,
        max_texture_layers: info.limits.max_texture_array_layers,
        max_workgroups_per_dimension: info.limits.max_compute_workgroups_per_dimension,
        f16_compute: info.f16_compute,
    }
}

impl Gpu {
    /// Open a device on `adapter` with the adapter's real limits.
    pub async fn open(adapter: wgpu::Adapter) -> Result<Gpu> {
        let ai = adapter.get_info();
        let limits = adapter.limits();
        let features = adapter.features();
        // Passthrough shaders on Vulkan, for kernels with workgroup memory
        // (see `kiln_codegen::spirv`).
        let own_spirv = ai.backend == wgpu::Backend::Vulkan && features.contains(wgpu::Features::PASSTHROUGH_SHADERS);
        let passthrough = if own_spirv { wgpu::Features::PASSTHROUGH_SHADERS } else { wgpu::Features::empty() };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("kiln"),
                // Subgroup operations where offered: some matmul kernels use
                // them. Timestamps for kernel profiling.
                required_features: (features
                    & (wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16))
                    | passthrough,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| KilnError::RequestDevice { adapter: adapter::describe(&ai), detail: e.to_string() })?;
        let subgroups = features.contains(wgpu::Features::SUBGROUP);
        let mut info = DeviceInfo {
            name: ai.name.clone(),
            backend: ai.backend.to_str().to_string(),
            device_type: format!("{:?}", ai.device_type),
            driver: ai.driver.clone(),
            driver_info: ai.driver_info.clone(),
            limits: limits_of(&limits),
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            f16_compute: features.contains(wgpu::Features::SHADER_F16) && f16_compute_allowed(),
            subgroups,
            subgroup_size: (subgroups && ai.subgroup_min_size == ai.subgroup_max_size).then_some(ai.subgroup_min_size),
            workgroup_memory: ai.backend != wgpu::Backend::Vulkan || own_spirv,
            caps: Caps::webgpu(),
        };
        info.caps = caps_of(&info);
        Ok(Gpu {
            resources: Resources::new(&device, &info.limits, own_spirv),
            tuner: tune::Tuner::new(&info),
            ctx: Context::new(device, queue, info),
            profiler: profile::Profiler::default(),
            overrides: Overrides::default(),
            kernels_launched: AtomicU64::new(0),
            submits: AtomicU64::new(0),
        })
    }

    /// The kernel variants this device runs (its own, or as a test pinned them).
    fn variants(&self) -> codegen::launch::Variants {
        self.overrides.variants(&self.ctx.caps)
    }
}

/// The scheduler asks the device's caps, and its variants (which tests
/// may pin) whether attention is one kernel.
impl sched::schedule::Target for Gpu {
    fn max_bindings(&self) -> usize {
        self.ctx.caps.max_bindings()
    }

    fn meta_room(&self, rank: usize) -> usize {
        self.ctx.caps.meta_room(rank)
    }

    fn streams_rows(&self, rows: usize, len: usize) -> bool {
        self.ctx.caps.streams_rows(rows, len)
    }

    fn runs_attention(&self, item: &sched::schedule::Item) -> bool {
        codegen::runs_attention(&self.ctx.caps, &self.variants(), item)
    }
}
