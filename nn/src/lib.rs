//! Layers, losses and optax-style optimizers for kiln. Models are parameter
//! trees (`#[derive(Tree)]`), so `grad` returns a tree of the model's type.

pub mod init;
pub mod layers;
pub mod loss;
pub mod metrics;

pub use layers::{
    AvgPool2d, Conv2d, Conv2dConfig, Dropout, Embedding, Layer, LayerNorm, Linear, MaxPool2d, Sequential, mlp,
};
