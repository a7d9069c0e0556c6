//! kiln-core: [`Device`], the facade over the runtimes (the CPU reference,
//! `kiln-wgpu`, and natively `kiln-cuda`), and the layers below it,
//! re-exported under their old paths. Users reach it through `kiln`.
//!
//! The layers form a line that Cargo enforces (no crate imports one above it):
//! `kiln-ir` (dtypes, shapes, primitives, nodes, the CPU interpreter) →
//! `kiln-sched` (fused values, lowering) → `kiln-codegen` (WGSL, CUDA C++) →
//! `kiln-runtime` (the `Runtime` trait) → `kiln-wgpu` | `kiln-cuda` → `kiln-core`.

// On wasm, wgpu's handles are not Send/Sync and the browser runs kiln on
// one thread; the Arcs are shared ownership, not cross-thread sharing.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

mod device;
mod program;
mod split;

pub use kiln_codegen as codegen;
pub use kiln_codegen::{spirv, validate};
pub use kiln_ir::{DType, Element, HostArray, KilnError, Node, Prim, QuantFormat, Realized, Result};
pub use kiln_ir::{dtype, error, interp, ir, quant, shape};
pub use kiln_runtime::clock;
pub use kiln_runtime::{
    DeviceInfo, DeviceStats, KernelTiming, Limits, PlannedKernel, Runtime, TuningStats, cuda_kernels_for, kernels_for,
    schedule_for,
};
pub use kiln_sched as sched;
pub use kiln_wgpu::{describe_adapter, wgpu};

pub use device::{Device, DeviceOptions};
pub use program::{PendingRead, Program};
pub use split::{Parts, node_bytes};

/// Pins for the runtime's choices of kernel variant, for tests (feature `testing`).
#[cfg(feature = "testing")]
pub mod testing {
    pub use kiln_runtime::TestHooks;
}
