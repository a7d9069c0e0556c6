//! kiln in the browser: a wasm-bindgen API over the browser's WebGPU
//! adapter for the MNIST training demo (`Gpu`, `Dataset`, `Trainer`) and the
//! conformance page (`Conformance`). The kernels are kiln's own; nothing
//! here is browser-specific except the bindings.

mod bindings;
pub mod data;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
pub mod train;

pub use bindings::{Conformance, Dataset, Gpu, Trainer};
