//! Layers, losses, optax-style optimizers, checkpoints and datasets for kiln.

pub mod optim;
pub mod checkpoint;
pub mod data;
