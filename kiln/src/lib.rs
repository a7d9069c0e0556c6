//! kiln: tensors and kernels on any GPU and in the browser. Ops build a lazy
//! graph of primitives; realization compiles it to WGSL compute kernels and
//! runs them through wgpu (Vulkan, Metal, DX12, OpenGL, WebGPU), or on the
//! f64 CPU reference.
//!
//! ```no_run
//! use kiln::prelude::*;
//! # fn main() -> kiln::Result<()> {
//! let dev = kiln::block_on(Device::gpu())?;
//! let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[3])?;
//! let y = x.mul(&x)?.sum(&[], false)?;
//! assert_eq!(kiln::block_on(y.item::<f32>())?, 14.0);
//! # Ok(()) }
//! ```
//!
//! Gradients over parameter trees (here on the f64 CPU reference):
//!
//! ```
//! use kiln::prelude::*;
//! # fn main() -> kiln::Result<()> {
//! #[derive(Tree)]
//! struct Linear {
//!     weight: Tensor,
//!     bias: Tensor,
//! }
//! let dev = Device::cpu();
//! let p = Linear { weight: Tensor::ones(&dev, &[3, 2], DType::F32)?, bias: Tensor::zeros(&dev, &[2], DType::F32)? };
//! let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[1, 3])?;
//! let (loss, g) = value_and_grad(|p: &Linear| x.matmul(&p.weight)?.add(&p.bias)?.sum(&[], false))(&p)?;
//! assert_eq!(kiln::block_on(loss.item::<f32>())?, 12.0);
//! assert_eq!(kiln::block_on(g.weight.to_vec::<f32>())?, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
//! assert_eq!(g.named_leaves()[1].0, "bias");
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub use kiln_autodiff::{
    Jit, Transform, Tree, Vjp, VmapJit, grad, jit, optimizer, stop_gradient, tree, value_and_grad, vjp, vmap,
};
pub use kiln_core::{
    self as core, DType, Device, DeviceInfo, DeviceOptions, DeviceStats, Element, KernelTiming, KilnError, QuantFormat,
    Result, TuningStats,
};
/// `#[derive(Tree)]` for parameter structs (see [`Tree`]).
pub use kiln_derive::Tree;
pub use kiln_ops::{DotView, Graph, Key, Operand, Tensor, random};
/// `jit` over a flat slice of tensors, the layer under [`jit`](fn@jit):
/// `jit_flat(|xs: &[Tensor]| ..)`, and its `.vmap(..)` ([`VmapJit`]).
pub use kiln_ops::{Jit as FlatJit, jit as jit_flat};

/// Run a future to completion on native targets (readback is async).
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

/// What most programs use: `use kiln::prelude::*;`.
pub mod prelude {
    pub use crate::{
        DType, Device, DeviceOptions, Key, KilnError, QuantFormat, Result, Tensor, Transform, Tree, VmapJit, grad, jit,
        stop_gradient, value_and_grad, vjp, vmap,
    };
}
