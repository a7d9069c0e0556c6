//! kiln-ops: the user-facing `Tensor`. Every op builds a lazy graph node
//! (checked at once: a bad shape or dtype is an `Err` naming the op and the
//! shapes); nothing runs until a readback (`to_vec().await`) or `realize()`.
#![deny(missing_docs)]
// On wasm, wgpu's handles are not Send/Sync (see kiln-core).
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

mod creation;
mod elementwise;
mod grad_helpers;
mod graph;
mod indexing;
mod jit;
mod linalg;
mod operators;
mod quant;
pub mod random;
mod reduce;
mod softmax;
mod split;
mod tensor;
mod views;

pub use graph::{DotView, Graph};
pub use jit::{Captures, Jit, Ran, jit};
pub use kiln_core::shape::SliceSpec;
pub use kiln_core::{DType, Device, Element, KilnError, QuantFormat, Result};
pub use operators::Operand;
pub use quant::QUANT_MATMUL_MAX_ROWS;
pub use random::Key;
pub use tensor::Tensor;
