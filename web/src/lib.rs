//! kiln in the browser: a wasm-bindgen API over the browser's WebGPU
//! adapter for the MNIST training demo (`Gpu`, `Dataset`, `Trainer`), the
//! GPT page (`GptTrainer`, `GptModel`), the benchmark page
//! (`AttentionLayer` beside those) and the conformance page
//! (`Conformance`). The kernels are kiln's own and the models and training
//! loops are `kiln-mnist`'s and `kiln-gpt`'s, shared with the desktop demo;
//! nothing here is browser-specific except the bindings.

mod bindings;
mod gpt;

pub use bindings::{Conformance, Dataset, Gpu, Trainer};
pub use gpt::{AttentionLayer, GptModel, GptTrainer};
