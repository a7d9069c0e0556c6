//! kiln-core: the wgpu runtime, over the layers below it, which it
//! re-exports under their old paths. Users reach it through `kiln`.
//!
//! The layers form a line that Cargo enforces (no crate imports one above it):
//! `kiln-ir` (dtypes, shapes, primitives, nodes, the CPU reference) →
//! `kiln-sched` (fused values, lowering) → `kiln-codegen` (WGSL) →
//! `kiln-core` (the runtime: scheduling walk, pool, pipelines, tuner, submit).

// On wasm, wgpu's handles are not Send/Sync and the browser runs kiln on
// one thread; the Arcs are shared ownership, not cross-thread sharing.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

pub mod clock;
pub mod runtime;

pub use kiln_codegen as codegen;
pub use kiln_codegen::{spirv, validate};
pub use kiln_ir::{DType, Element, HostArray, KilnError, Node, Prim, QuantFormat, Realized, Result};
pub use kiln_ir::{dtype, error, interp, ir, quant, shape};
pub use kiln_sched as sched;
pub use runtime::{cuda_kernels_for, kernels_for, schedule_for};

/// Pins for the runtime's choices of kernel variant, for tests (feature `testing`).
#[cfg(feature = "testing")]
pub mod testing {
    pub use crate::runtime::TestHooks;
}
pub use runtime::{
    Device, DeviceInfo, DeviceOptions, DeviceStats, KernelTiming, PendingRead, PlannedKernel, Program, TuningStats,
};
pub use wgpu;
