//! What a device reports: its description and limits, its counters, and
//! the kernels it launched or would launch.

use kiln_codegen::Caps;
use kiln_ir::ir::PoolStats;

/// What a device is, for logs, reports and `Device::info()`.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    pub name: String,
    /// "cpu-reference", "vulkan", "gl", "metal", "dx12", "webgpu" or "cuda".
    pub backend: String,
    /// "Cpu", "DiscreteGpu", "IntegratedGpu", "VirtualGpu" or "Other".
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub limits: Limits,
    pub shader_f16: bool,
    /// Elementwise kernels compute f16 as f16 (`shader-f16`, unless
    /// `KILN_F16_COMPUTE=0`); otherwise f16 is packed two per word and
    /// computed in f32 ([`DeviceInfo::f16_path`]).
    pub f16_compute: bool,
    pub subgroups: bool,
    /// The subgroup width when the device has subgroups and they are
    /// always this wide (the subgroup-lanes row kernel needs to know it).
    pub subgroup_size: Option<u32>,
    /// Whether kernels may use workgroup memory (on wgpu: everywhere but on
    /// a Vulkan device without passthrough shaders, through which kiln
    /// hands Vulkan SPIR-V without the layouts naga gives workgroup arrays).
    pub workgroup_memory: bool,
    /// What code generation may assume of this device.
    pub caps: Caps,
}

/// The limits kiln's kernels and buffers keep within, whatever the backend.
/// On wgpu they are the adapter's; on CUDA those that apply to its kernels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one kernel may bind of one storage buffer.
    pub max_storage_buffer_binding_size: u64,
    /// Bytes of one buffer.
    pub max_buffer_size: u64,
    /// Bytes of workgroup (shared) memory one workgroup may use.
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub max_compute_workgroups_per_dimension: u32,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_storage_textures_per_shader_stage: u32,
    pub max_texture_dimension_2d: u32,
    pub max_texture_array_layers: u32,
}

impl Limits {
    /// What WebGPU guarantees every adapter (the W3C spec's defaults).
    pub fn webgpu() -> Limits {
        Limits {
            max_storage_buffer_binding_size: 128 << 20,
            max_buffer_size: 256 << 20,
            max_compute_workgroup_storage_size: 16384,
            max_compute_invocations_per_workgroup: 256,
            max_compute_workgroups_per_dimension: 65535,
            max_storage_buffers_per_shader_stage: 8,
            max_storage_textures_per_shader_stage: 4,
            max_texture_dimension_2d: 8192,
            max_texture_array_layers: 256,
        }
    }
}

impl DeviceInfo {
    /// Whether the device is a CPU (SwiftShader, llvmpipe, the CPU
    /// reference, CUDA's host engine), whose compilers and costs differ
    /// from a GPU's: the tuner, the matmul defaults and the reductions ask.
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

/// What the matmul tuner has done on a device (see `Device::stats`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TuningStats {
    /// Shape classes tuned on this device (not read from the cache).
    pub classes_tuned: u64,
    /// Classes met but not tuned yet (in a browser, where tuning waits for
    /// the next awaited realization).
    pub classes_pending: u64,
    /// Wall time spent tuning.
    pub time: std::time::Duration,
}

/// One launch as the device timed it.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTiming {
    /// The kernel's name, as `KILN_LOG=kernels` and `KILN_DUMP_WGSL` give it.
    pub name: String,
    /// Workgroups (CUDA: blocks) launched along x, y, z.
    pub groups: [u32; 3],
    /// Nanoseconds from its start to its end on the device's clock.
    pub nanos: f64,
}

/// One kernel of a plan: its name and the IR nodes it computes.
#[derive(Debug, Clone)]
pub struct PlannedKernel {
    pub name: String,
    pub nodes: Vec<u64>,
}
