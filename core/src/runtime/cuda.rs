//! `Device` on CUDA (native only): the runtime is `kiln_cuda::device`; this
//! module opens it and describes it as a `Device` does.

use super::{Backend, Device, DeviceInfo, DeviceStats, KernelTiming};
use crate::error::Result;
use kiln_cuda::device::CudaDevice;
use std::sync::Arc;

impl Device {
    /// The first NVIDIA GPU, through the CUDA driver: kernels compiled by
    /// NVRTC for its architecture. An error, never a panic, names what is
    /// missing where it cannot run: the driver library, a GPU, or NVRTC
    /// (`libnvrtc.so.13`). `KILN_ADAPTER=cuda` picks it for [`Device::gpu`].
    pub fn cuda() -> Result<Device> {
        Device::cuda_on(0)
    }

    /// The NVIDIA GPU of CUDA ordinal `ordinal` (fastest first, unless
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID` orders them as `nvidia-smi` does), as
    /// [`Device::cuda`] opens the first: one device per GPU of a mesh.
    pub fn cuda_on(ordinal: usize) -> Result<Device> {
        Ok(Device(Arc::new(Backend::Cuda(Box::new(CudaDevice::open(ordinal)?)))))
    }

    /// The CUDA runtime with its kernels run on the CPU, built by the
    /// host's C++ compiler (env `CXX`, else `c++`): what [`Device::cuda`]
    /// runs, without a GPU and slowly. For tests and for debugging a kernel.
    pub fn cuda_on_host() -> Device {
        Device(Arc::new(Backend::Cuda(Box::new(CudaDevice::on_host()))))
    }
}

pub(super) fn info(device: &CudaDevice) -> DeviceInfo {
    let info = device.info();
    let caps = device.caps();
    let (major, minor) = info.compute_capability;
    DeviceInfo {
        name: info.name,
        backend: "cuda".into(),
        device_type: if major == 0 { "Cpu".into() } else { "DiscreteGpu".into() },
        driver: format!("CUDA driver {}", info.driver),
        driver_info: format!("compute capability {major}.{minor}, NVRTC {}", info.nvrtc),
        limits: wgpu::Limits {
            max_storage_buffers_per_shader_stage: caps.max_storage_buffers,
            max_compute_workgroups_per_dimension: caps.max_workgroups_per_dimension,
            max_storage_textures_per_shader_stage: 0,
            ..wgpu::Limits::default()
        },
        shader_f16: false,
        f16_compute: false,
        subgroups: caps.subgroups,
        subgroup_size: caps.subgroup_size,
        workgroup_memory: caps.workgroup_memory,
    }
}

pub(super) fn stats(device: &CudaDevice) -> DeviceStats {
    let s = device.stats();
    DeviceStats {
        kernels_launched: s.kernels_launched,
        submits: s.submits,
        graphs_launched: s.graphs_launched,
        pipelines_compiled: s.kernels_compiled,
        pool: s.pool,
        tuning: Default::default(),
    }
}

/// The CUDA device's call timings as kernel timings (a cuBLAS call's grid
/// is one block: cuBLAS picks its own).
pub(super) fn kernel_profile(device: &CudaDevice) -> Result<Vec<KernelTiming>> {
    let timings = device.kernel_profile()?;
    Ok(timings.into_iter().map(|t| KernelTiming { name: t.name, groups: t.grid, nanos: t.nanos }).collect())
}
