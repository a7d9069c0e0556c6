//! Layers, losses, optax-style optimizers, checkpoints and datasets for kiln.

pub mod checkpoint;
pub mod data;
pub mod optim;
