//! kiln in the browser: a wasm-bindgen API over the browser's WebGPU
//! adapter for the MNIST training demo (`Gpu`, `Dataset`, `Trainer`) and the
//! conformance page (`Conformance`). The kernels are kiln's own and the
//! model and training loop are `kiln-mnist`'s, shared with the desktop
//! demo; nothing here is browser-specific except the bindings.

mod bindings;

pub use bindings::{Conformance, Dataset, Gpu, Trainer};
