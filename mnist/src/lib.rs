//! The MNIST demo's models and training loop, shared by the desktop demo
//! (`native-demo/`) and the browser demo (`web/`): the same Rust code
//! trains in both.

mod augment;
mod data_parallel;
mod model;
pub mod per_example;
mod trainer;

pub use data_parallel::DataParallelTrainer;
pub use model::{Config, ModelKind};
pub use trainer::{QuantizedEval, Trainer, evaluate_checkpoint};
