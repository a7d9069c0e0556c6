//! Layers, losses and optax-style optimizers for kiln. Not built yet (nn issue).
