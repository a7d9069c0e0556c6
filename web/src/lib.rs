//! kiln in the browser: a wasm-bindgen API over the browser's WebGPU
//! adapter for the MNIST training demo (`Gpu`, `Dataset`, `Trainer`), the
//! GPT page (`GptTrainer`, `GptModel`), the Hugging Face page (`HfModel`:
//! `kiln-models`' GPT-2 and Llama, generated and fine-tuned), the benchmark page
//! (`AttentionLayer` beside those) and the conformance page
//! (`Conformance`). The kernels are kiln's own and the models and training
//! loops are `kiln-mnist`'s and `kiln-gpt`'s, shared with the desktop demo;
//! nothing here is browser-specific except the bindings.

mod bindings;
mod gpt;
mod hf;

pub use bindings::{Conformance, Dataset, Gpu, Trainer};
pub use gpt::{AttentionLayer, GptModel, GptTrainer};
pub use hf::HfModel;
