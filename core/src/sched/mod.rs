//! The scheduler's data: fused values (`expr`) and their lowering to a
//! kernel's structure (`lower`). The walk that decides kernel boundaries
//! lives with the runtime (`runtime/realize.rs`), which owns the buffers.

pub mod expr;
pub mod lower;
