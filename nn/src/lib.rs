//! Layers, losses, initializers, optax-style optimizers, checkpoints and
//! datasets for kiln. Models are parameter trees (`#[derive(Tree)]`), so
//! `grad` returns a tree of the model's type.
#![deny(missing_docs)]

pub mod checkpoint;
pub mod data;
pub mod init;
pub mod layers;
pub mod loss;
pub mod metrics;
pub mod optim;

pub use layers::{
    Adapted, AvgPool2d, Block, CausalSelfAttention, Conv2d, Conv2dConfig, ConvAlgorithm, Dense, Dropout, Embedding,
    GeluMlp, KvCache, Layer, LayerNorm, Linear, Lora, MaxPool2d, QuantizedConv2d, QuantizedLinear, QuantizedTree,
    RmsNorm, Sequential, attention_at, causal_attention, causal_attention_flops, codes_under, mlp,
};
