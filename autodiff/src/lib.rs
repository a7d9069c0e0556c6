//! Reverse-mode autodiff for kiln as a graph transform.
//!
//! - [`tree`]: parameter trees (flatten to named leaves, rebuild).
//! - [`transforms`]: `grad`, `value_and_grad`, `vjp`, `stop_gradient`.
//! - `vjp_rules`: one exhaustive `match` over the primitives.
//! - [`jit`](fn@jit): capture and replay over trees.
//! - [`optimizer`]: the [`Transform`] trait optimizers implement.
//! - `backprop`: reverse accumulation over a traced graph.
//! - [`vmap`](fn@vmap): a function of one example mapped over a batch axis;
//!   `batch_rules`: one exhaustive `match` over the primitives.
//!
//! Closures are traced afresh on every call; the backward pass is an
//! ordinary lazy graph, so it realizes (and fuses) like any other, and can
//! be differentiated again (grad of grad).
#![deny(missing_docs)]

mod backprop;
mod batch_rules;
pub mod jit;
pub mod optimizer;
pub mod transforms;
pub mod tree;
mod vjp_rules;
pub mod vmap;

pub use jit::{Jit, jit};
pub use kiln_core::Result;
pub use kiln_ops::Tensor;
pub use optimizer::Transform;
pub use transforms::{Vjp, grad, stop_gradient, value_and_grad, vjp};
pub use tree::{Leaves, Path, Structure, Tree};
pub use vmap::{VmapJit, vmap};
