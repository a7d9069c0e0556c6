//! The CPU reference interpreter (f64) as a runtime: the oracle of the test
//! suite. It computes node by node, so it has no kernels to plan, capture,
//! replay or time.

use crate::info::{DeviceInfo, DeviceStats, KernelTiming, Limits, PlannedKernel};
use crate::runtime::{Captured, DeviceFuture, Replayed, Runtime, Staged};
use kiln_codegen::Caps;
use kiln_codegen::matmul::MatmulConfig;
use kiln_ir::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::{self, HostArray};
use kiln_ir::ir::{DeviceArray, Node, Realized};
use std::sync::Arc;

/// The CPU reference runtime.
#[derive(Debug, Default)]
pub struct CpuReference;

fn launches_nothing(op: &'static str) -> KilnError {
    KilnError::Invalid { op, detail: "the CPU reference runs node by node and launches no kernels".into() }
}

impl Runtime for CpuReference {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "CPU reference (f64)".into(),
            backend: "cpu-reference".into(),
            device_type: "Cpu".into(),
            driver: String::new(),
            driver_info: String::new(),
            limits: Limits::webgpu(),
            shader_f16: true,
            f16_compute: false,
            subgroups: false,
            subgroup_size: None,
            workgroup_memory: false,
            caps: Caps {
                adapter: "CPU reference (f64)".into(),
                backend: "cpu-reference".into(),
                cpu: true,
                workgroup_memory: false,
                f16_compute: false,
                ..Caps::webgpu()
            },
        }
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }

    fn is_reference(&self) -> bool {
        true
    }

    fn compiled_sources(&self) -> Vec<String> {
        Vec::new()
    }

    fn upload(&self, dtype: DType, shape: &[usize], values: &[f64]) -> Result<Realized> {
        Ok(Realized::Host(Arc::new(HostArray::new(dtype, shape.to_vec(), values.to_vec()))))
    }

    fn realize<'a>(&'a self, roots: &'a [Node]) -> DeviceFuture<'a, Result<()>> {
        Box::pin(std::future::ready(interp::realize(roots)))
    }

    fn read<'a>(&'a self, node: &'a Node) -> DeviceFuture<'a, Result<HostArray>> {
        let value = interp::realize(std::slice::from_ref(node)).and_then(|()| match node.realized_value() {
            Some(Realized::Host(h)) => Ok((*h).clone()),
            _ => Err(KilnError::Readback("a GPU tensor read through the CPU device".into())),
        });
        Box::pin(std::future::ready(value))
    }

    fn synchronize(&self) -> DeviceFuture<'_, Result<()>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn plan_kernels(&self, _: &[Node]) -> Result<Vec<PlannedKernel>> {
        Err(launches_nothing("plan_kernels"))
    }

    /// Computes the outputs; there is nothing to record.
    fn capture(&self, _: &[Node], outputs: &[Node]) -> Result<Option<Box<dyn Captured>>> {
        interp::realize(outputs).map(|()| None)
    }

    fn replay(&self, _: &dyn Captured, _: &[DeviceArray], _: Option<usize>) -> Result<Replayed> {
        Err(launches_nothing("jit"))
    }

    fn read_staged(&self, _: Box<dyn Staged>) -> DeviceFuture<'_, Result<HostArray>> {
        Box::pin(std::future::ready(Err(launches_nothing("jit"))))
    }

    fn set_matmul_config(&self, _: Option<MatmulConfig>) {}

    fn set_kernel_profiling(&self, _: bool) -> Result<()> {
        Err(launches_nothing("set_kernel_profiling"))
    }

    fn kernel_profile(&self) -> DeviceFuture<'_, Result<Vec<KernelTiming>>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}
