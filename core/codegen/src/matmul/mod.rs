//! The matmul kernel family: one generated kernel per [`MatmulConfig`]
//! (register block per invocation, workgroup shape, subgroup sharing of A),
//! each accepting f32 or packed-f16 operands through any strides, any
//! batch dims, any shape (edges clamp their loads and skip their stores)
//! and a fused epilogue. The runtime's autotuner picks the config per
//! adapter; every config computes each output as one in-order k sum, so
//! they agree to rounding.

mod config;
mod kernel;

pub use config::{MatmulConfig, STAGE_K, ShapeClass};
pub use kernel::matmul_kernel;
