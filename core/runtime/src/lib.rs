//! kiln-runtime: the interface every backend implements ([`Runtime`]), what
//! a device reports ([`DeviceInfo`], [`DeviceStats`]), and the CPU
//! reference as a runtime ([`CpuReference`]).
//!
//! Backends are sibling crates under this one: `kiln-wgpu` (Vulkan, Metal,
//! DX12, GL, WebGPU) and `kiln-cuda`. Neither knows the other; `kiln-core`'s
//! `Device` holds one as `Arc<dyn Runtime>` and chooses which where a device
//! is opened. A new backend is one crate implementing [`Runtime`].

// On wasm, wgpu's handles are not Send/Sync and the browser runs kiln on
// one thread; the Arcs are shared ownership, not cross-thread sharing.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

pub mod clock;
mod cpu;
mod info;
mod overrides;
mod plans;
mod runtime;

pub use cpu::CpuReference;
pub use info::{DeviceInfo, DeviceStats, KernelTiming, Limits, PlannedKernel, TuningStats};
#[cfg(feature = "testing")]
pub use overrides::TestHooks;
pub use overrides::{Overrides, Pinned};
pub use plans::{cuda_kernels_for, kernels_for, schedule_for};
pub use runtime::{Captured, DeviceFuture, Replayed, Runtime, Staged, device_arrays};
