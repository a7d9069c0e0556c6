//! kiln-core: dtypes, shapes, the IR, the CPU reference interpreter, WGSL
//! code generation and the wgpu runtime. Users reach it through `kiln`.

pub mod codegen;
pub mod dtype;
pub mod error;
pub mod interp;
pub mod ir;
pub mod runtime;
pub mod sched;
pub mod shape;
pub mod validate;

pub use dtype::{DType, Element};
pub use error::{KilnError, Result};
pub use interp::HostArray;
pub use ir::{Node, Prim, Realized};
pub use runtime::{Device, DeviceInfo, DeviceOptions, DeviceStats, PlannedKernel, Program};
pub use wgpu;
