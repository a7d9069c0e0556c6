//! [`Runtime`] on CUDA: each method over [`CudaDevice`], with what it is
//! described as any device is.

use crate::device::{CudaDevice, CudaProgram};
use kiln_codegen::matmul::MatmulConfig;
use kiln_ir::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{DeviceArray, Node, Realized};
use kiln_runtime::{
    Captured, DeviceFuture, DeviceInfo, DeviceStats, KernelTiming, Limits, PlannedKernel, Replayed, Runtime, Staged,
    device_arrays,
};
use std::any::Any;

impl Captured for CudaProgram {
    fn launches(&self) -> usize {
        CudaProgram::launches(self)
    }

    fn outputs(&self) -> usize {
        CudaProgram::outputs(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Runtime for CudaDevice {
    fn info(&self) -> DeviceInfo {
        let info = CudaDevice::info(self);
        let caps = self.caps().clone();
        let (major, minor) = info.compute_capability;
        DeviceInfo {
            name: info.name,
            backend: "cuda".into(),
            // The host engine reports compute capability 0.0.
            device_type: if major == 0 { "Cpu".into() } else { "DiscreteGpu".into() },
            driver: format!("CUDA driver {}", info.driver),
            driver_info: format!("compute capability {major}.{minor}, NVRTC {}", info.nvrtc),
            limits: Limits {
                max_storage_buffers_per_shader_stage: caps.max_storage_buffers,
                max_compute_workgroups_per_dimension: caps.max_workgroups_per_dimension,
                max_storage_textures_per_shader_stage: 0,
                ..Limits::webgpu()
            },
            shader_f16: false,
            f16_compute: false,
            subgroups: caps.subgroups,
            subgroup_size: caps.subgroup_size,
            workgroup_memory: caps.workgroup_memory,
            caps,
        }
    }

    fn stats(&self) -> DeviceStats {
        CudaDevice::stats(self)
    }

    fn compiled_sources(&self) -> Vec<String> {
        self.sources()
    }

    fn upload(&self, dtype: DType, shape: &[usize], values: &[f64]) -> Result<Realized> {
        Ok(Realized::Gpu(CudaDevice::upload(self, dtype, shape, values)?))
    }

    fn realize<'a>(&'a self, roots: &'a [Node]) -> DeviceFuture<'a, Result<()>> {
        Box::pin(std::future::ready(CudaDevice::realize(self, roots)))
    }

    fn read<'a>(&'a self, node: &'a Node) -> DeviceFuture<'a, Result<HostArray>> {
        Box::pin(CudaDevice::read(self, node))
    }

    fn synchronize(&self) -> DeviceFuture<'_, Result<()>> {
        Box::pin(std::future::ready(CudaDevice::synchronize(self)))
    }

    fn plan_kernels(&self, roots: &[Node]) -> Result<Vec<PlannedKernel>> {
        self.plan(roots)
    }

    fn capture(&self, inputs: &[Node], outputs: &[Node]) -> Result<Option<Box<dyn Captured>>> {
        let inputs = device_arrays("jit", inputs)?;
        Ok(Some(Box::new(CudaDevice::capture(self, &inputs, outputs)?)))
    }

    /// Replays stage nothing: a read after one is a copy of its own.
    fn replay(&self, program: &dyn Captured, inputs: &[DeviceArray], _read: Option<usize>) -> Result<Replayed> {
        let program = program.as_any().downcast_ref::<CudaProgram>().ok_or_else(|| KilnError::Invalid {
            op: "jit",
            detail: "a program made by another device's runtime".into(),
        })?;
        Ok(Replayed { outputs: CudaDevice::replay(self, program, inputs)?, staged: None })
    }

    fn read_staged(&self, _: Box<dyn Staged>) -> DeviceFuture<'_, Result<HostArray>> {
        let e = KilnError::Invalid { op: "jit", detail: "a CUDA replay stages no reads".into() };
        Box::pin(std::future::ready(Err(e)))
    }

    fn set_matmul_config(&self, config: Option<MatmulConfig>) {
        CudaDevice::set_matmul_config(self, config);
    }

    fn set_matmul_tf32(&self, on: bool) -> Result<()> {
        CudaDevice::set_matmul_tf32(self, on);
        Ok(())
    }

    fn set_kernel_profiling(&self, on: bool) -> Result<()> {
        CudaDevice::set_kernel_profiling(self, on);
        Ok(())
    }

    fn kernel_profile(&self) -> DeviceFuture<'_, Result<Vec<KernelTiming>>> {
        Box::pin(std::future::ready(CudaDevice::kernel_profile(self)))
    }
}
