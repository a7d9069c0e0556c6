//! kiln-core: dtypes, shapes, the IR, the CPU reference interpreter, WGSL
//! code generation and the wgpu runtime. Users reach it through `kiln`.

// On wasm, wgpu's handles are not Send/Sync and the browser runs kiln on
// one thread; the Arcs are shared ownership, not cross-thread sharing.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

pub mod codegen;
pub mod dtype;
pub mod error;
pub mod interp;
pub mod ir;
pub mod runtime;
pub mod sched;
pub mod shape;
pub mod spirv;
pub mod validate;

pub use dtype::{DType, Element};
pub use error::{KilnError, Result};
pub use interp::HostArray;
pub use ir::{Node, Prim, Realized};
pub use runtime::{Device, DeviceInfo, DeviceOptions, DeviceStats, KernelTiming, PlannedKernel, Program, TuningStats};
pub use wgpu;
