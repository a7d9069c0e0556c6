//! The interface a backend implements. Waits are futures (a browser cannot
//! block; native code drives them with `pollster::block_on`), boxed so
//! that the trait is object safe, and `Send` natively.

use crate::info::{DeviceInfo, DeviceStats, KernelTiming, PlannedKernel};
use crate::overrides::Overrides;
use kiln_codegen::matmul::MatmulConfig;
use kiln_ir::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{DeviceArray, MaybeSendSync, Node, Realized};
use std::any::Any;
use std::future::Future;
use std::pin::Pin;

/// What a replay gives: its outputs, and the output it staged toward the
/// host, if any.
pub struct Replayed {
    pub outputs: Vec<DeviceArray>,
    pub staged: Option<Box<dyn Staged>>,
}

/// A runtime's wait.
#[cfg(not(target_arch = "wasm32"))]
pub type DeviceFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// A runtime's wait.
#[cfg(target_arch = "wasm32")]
pub type DeviceFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A realization a runtime recorded for replay ([`Runtime::capture`]).
/// Only the runtime that recorded it looks inside.
pub trait Captured: Any + MaybeSendSync {
    /// Kernels (and library calls) one replay launches.
    fn launches(&self) -> usize;
    /// Outputs each replay returns.
    fn outputs(&self) -> usize;
    fn as_any(&self) -> &dyn Any;
}

/// An output a replay copied toward the host in its own submit
/// ([`Runtime::replay`]); only the runtime that staged it reads it.
pub trait Staged: Any + MaybeSendSync {
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// One backend: a device's memory, kernels and queue. Every method a
/// program can misuse returns an error naming the op.
pub trait Runtime: MaybeSendSync {
    fn info(&self) -> DeviceInfo;

    fn stats(&self) -> DeviceStats;

    /// Whether this is the CPU reference, which runs node by node and
    /// launches nothing (no kernels to plan, capture or profile).
    fn is_reference(&self) -> bool {
        false
    }

    /// The source of every kernel compiled so far, in the runtime's own
    /// dialect (WGSL, CUDA C++).
    fn compiled_sources(&self) -> Vec<String>;

    /// `values` (as many as `shape` holds, checked by the caller) stored as
    /// `dtype` on this device.
    fn upload(&self, dtype: DType, shape: &[usize], values: &[f64]) -> Result<Realized>;

    /// Compute every node in `roots` that is not computed yet (none reads a
    /// vmap placeholder).
    fn realize<'a>(&'a self, roots: &'a [Node]) -> DeviceFuture<'a, Result<()>>;

    /// Realize `node` and read it back as a contiguous host array.
    fn read<'a>(&'a self, node: &'a Node) -> DeviceFuture<'a, Result<HostArray>>;

    /// Wait until everything submitted so far has finished.
    fn synchronize(&self) -> DeviceFuture<'_, Result<()>>;

    /// The kernels realizing `roots` would launch; nothing runs.
    fn plan_kernels(&self, roots: &[Node]) -> Result<Vec<PlannedKernel>>;

    /// Realize `outputs` from the realized `inputs` and record how, to
    /// replay on other inputs of the same shapes, dtypes and layouts.
    /// `None` where there is nothing to record (the CPU reference).
    fn capture(&self, inputs: &[Node], outputs: &[Node]) -> Result<Option<Box<dyn Captured>>>;

    /// Replay `program` (recorded by this runtime) on `inputs`; with `read`,
    /// that output is also staged toward the host where the runtime can do
    /// so in the replay's own submit.
    fn replay(&self, program: &dyn Captured, inputs: &[DeviceArray], read: Option<usize>) -> Result<Replayed>;

    /// The value of an output that [`Runtime::replay`] staged.
    fn read_staged(&self, staged: Box<dyn Staged>) -> DeviceFuture<'_, Result<HostArray>>;

    /// Make every matmul use `config` (`None`: the runtime's own choice);
    /// the caller has checked that the device can run it.
    fn set_matmul_config(&self, config: Option<MatmulConfig>);

    /// TF32 products on tensor cores (CUDA); an error elsewhere.
    fn set_matmul_tf32(&self, on: bool) -> Result<()> {
        let _ = on;
        let info = self.info();
        Err(KilnError::Invalid {
            op: "set_matmul_tf32",
            detail: format!("TF32 is a CUDA mode; this device is {} ({})", info.name, info.backend),
        })
    }

    /// Switch the matmul autotuner (`None`: the runtime's default).
    fn set_matmul_tuning(&self, on: Option<bool>) {
        let _ = on;
    }

    /// The autotuner's choices so far: (shape class, config name).
    fn matmul_choices(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Tune now the matmul shape classes realizing `roots` would meet,
    /// where the runtime cannot tune while realizing (a browser).
    fn tune_matmuls<'a>(&'a self, roots: &'a [Node]) -> DeviceFuture<'a, Result<()>> {
        let _ = roots;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Time every launch on the device's clock from now on (`false`: stop).
    fn set_kernel_profiling(&self, on: bool) -> Result<()>;

    /// The launches timed since profiling began or since the last call.
    fn kernel_profile(&self) -> DeviceFuture<'_, Result<Vec<KernelTiming>>>;

    /// The kernel variants tests pinned, where the runtime has variants.
    fn overrides(&self) -> Option<&Overrides> {
        None
    }
}

/// The device arrays of `inputs`, each realized on a device (`op` names
/// the caller in the error).
pub fn device_arrays(op: &'static str, inputs: &[Node]) -> Result<Vec<DeviceArray>> {
    inputs
        .iter()
        .map(|n| match n.realized_value() {
            Some(Realized::Gpu(a)) => Ok(a),
            _ => Err(KilnError::Invalid {
                op,
                detail: format!("input of shape {:?} must be realized on this device first", n.shape()),
            }),
        })
        .collect()
}
