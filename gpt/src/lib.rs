//! A small character-level GPT on kiln: the corpus and its vocabulary,
//! the model (a pre-norm transformer with tied embeddings), a jit-captured
//! AdamW training step, validation in bits per character, and sampling
//! with an explicit key, with or without a KV cache.
#![deny(missing_docs)]

mod corpus;
mod model;
mod sample;
mod trainer;

pub use corpus::{Corpus, Vocab};
pub use model::{Gpt, GptConfig};
pub use sample::{Sampling, generate};
pub use trainer::{GptTrainer, TrainConfig, load_model};
