//! [`Runtime`] on wgpu: each method over the device's context, resources,
//! tuner and profiler.

use super::program::{WgpuProgram, WgpuStaged};
use super::{Gpu, GpuArray};
use crate::DType;
use crate::codegen::matmul::MatmulConfig;
use crate::error::{KilnError, Result};
use crate::interp::HostArray;
use crate::ir::{DeviceArray, Node, Realized};
use kiln_runtime::{
    Captured, DeviceFuture, DeviceInfo, DeviceStats, KernelTiming, Overrides, PlannedKernel, Replayed, Runtime, Staged,
    device_arrays,
};
use std::sync::atomic::Ordering;

fn foreign(what: &str) -> KilnError {
    KilnError::Invalid { op: "jit", detail: format!("{what} made by another device's runtime") }
}

impl Runtime for Gpu {
    fn info(&self) -> DeviceInfo {
        self.ctx.info.clone()
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            kernels_launched: self.kernels_launched.load(Ordering::Relaxed),
            submits: self.submits.load(Ordering::Relaxed),
            graphs_launched: 0,
            pipelines_compiled: self.resources.pipelines.len() as u64,
            pool: self.resources.pool.stats(),
            tuning: self.tuner.stats(),
        }
    }

    fn compiled_sources(&self) -> Vec<String> {
        self.resources.pipelines.sources()
    }

    fn upload(&self, dtype: DType, shape: &[usize], values: &[f64]) -> Result<Realized> {
        Ok(Realized::Gpu(self.resources.upload(&self.ctx.queue, dtype, shape, values)?))
    }

    fn realize<'a>(&'a self, roots: &'a [Node]) -> DeviceFuture<'a, Result<()>> {
        Box::pin(Gpu::realize(self, roots))
    }

    fn read<'a>(&'a self, node: &'a Node) -> DeviceFuture<'a, Result<HostArray>> {
        Box::pin(Gpu::read(self, node))
    }

    fn synchronize(&self) -> DeviceFuture<'_, Result<()>> {
        Box::pin(self.ctx.synchronize())
    }

    fn plan_kernels(&self, roots: &[Node]) -> Result<Vec<PlannedKernel>> {
        Gpu::plan_kernels(self, roots)
    }

    fn capture(&self, inputs: &[Node], outputs: &[Node]) -> Result<Option<Box<dyn Captured>>> {
        let inputs = device_arrays("jit", inputs)?;
        Ok(Some(Box::new(Gpu::capture(self, &inputs, outputs)?)))
    }

    fn replay(&self, program: &dyn Captured, inputs: &[DeviceArray], read: Option<usize>) -> Result<Replayed> {
        let program = program.as_any().downcast_ref::<WgpuProgram>().ok_or_else(|| foreign("a program"))?;
        let (arrays, staged): (Vec<GpuArray>, _) = program.replay(self, inputs, read)?;
        Ok(Replayed { outputs: arrays, staged: staged.map(|s| Box::new(s) as Box<dyn Staged>) })
    }

    fn read_staged(&self, staged: Box<dyn Staged>) -> DeviceFuture<'_, Result<HostArray>> {
        Box::pin(async move {
            let staged = staged.into_any().downcast::<WgpuStaged>().map_err(|_| foreign("a staged read"))?;
            Gpu::read_staged(self, &staged).await
        })
    }

    fn set_matmul_config(&self, config: Option<MatmulConfig>) {
        self.tuner.force(config);
    }

    fn set_matmul_tuning(&self, on: Option<bool>) {
        self.tuner.set_enabled(on);
    }

    fn matmul_choices(&self) -> Vec<(String, String)> {
        self.tuner.choices()
    }

    /// Natively realization tunes a class itself, waiting on the GPU; a
    /// browser cannot wait, so there classes are tuned here.
    fn tune_matmuls<'a>(&'a self, roots: &'a [Node]) -> DeviceFuture<'a, Result<()>> {
        Box::pin(async move {
            if cfg!(target_arch = "wasm32") {
                self.tuner.queue(&self.schedule(roots)?);
                self.tuner.tune_pending(self).await?;
            }
            Ok(())
        })
    }

    fn set_kernel_profiling(&self, on: bool) -> Result<()> {
        self.profiler.set(&self.ctx, on)
    }

    fn kernel_profile(&self) -> DeviceFuture<'_, Result<Vec<KernelTiming>>> {
        Box::pin(self.profiler.take(&self.ctx))
    }

    fn overrides(&self) -> Option<&Overrides> {
        Some(&self.overrides)
    }
}
