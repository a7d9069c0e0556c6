//! kiln-ir: the bottom layer. Dtypes, shapes, the one error type, the closed
//! set of primitives with their shape inference, lazy graph nodes, and the
//! f64 CPU reference interpreter. Knows no GPU API: a device's buffers are
//! opaque to it ([`ir::DeviceBuffer`]).

pub mod dtype;
pub mod error;
pub mod interp;
pub mod ir;
pub mod quant;
pub mod shape;

pub use dtype::{DType, Element};
pub use error::{KilnError, Result};
pub use interp::HostArray;
pub use ir::{Node, Prim, Realized};
pub use quant::QuantFormat;
