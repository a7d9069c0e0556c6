//! The two demo models and their default hyperparameters.

use kiln::prelude::*;
use kiln::{Key, KilnError};
use kiln_nn::data::ImageLayout;
use kiln_nn::{Conv2d, Conv2dConfig, Layer, Linear, MaxPool2d, Sequential};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// 784-512-10 with ReLU.
    Mlp,
    /// conv 5×5 (16) → ReLU → max-pool 2 → conv 5×5 (32) → ReLU → max-pool 2
    /// → linear 512-10.
    Cnn,
}

impl ModelKind {
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
        }
    }

    /// How this model takes its images.
    pub fn layout(self) -> ImageLayout {
        match self {
            ModelKind::Mlp => ImageLayout::Flat,
            ModelKind::Cnn => ImageLayout::Nchw,
        }
    }

    /// The model with weights drawn from `key`.
    pub fn build(self, dev: &Device, key: Key) -> Result<Sequential> {
        let k = key.split(3);
        Ok(Sequential::new(match self {
            ModelKind::Mlp => vec![
                Layer::Linear(Linear::new(dev, k[0], 784, 512)?),
                Layer::Relu,
                Layer::Linear(Linear::new(dev, k[1], 512, 10)?),
            ],
            ModelKind::Cnn => vec![
                Layer::Conv2d(Conv2d::new(dev, k[0], 1, 16, 5, Conv2dConfig::default())?),
                Layer::Relu,
                Layer::MaxPool2d(MaxPool2d::new(2)),
                Layer::Conv2d(Conv2d::new(dev, k[1], 16, 32, 5, Conv2dConfig::default())?),
                Layer::Relu,
                Layer::MaxPool2d(MaxPool2d::new(2)),
                Layer::Flatten,
                Layer::Linear(Linear::new(dev, k[2], 512, 10)?),
            ],
        }))
    }

    /// Hyperparameters that reach the accuracy goals on the bundled subset
    /// (docs/BENCHMARKS.md, 'What was tried' (demo/training)).
    pub fn default_config(self) -> Config {
        match self {
            ModelKind::Mlp => {
                Config { model: self, epochs: 12, batch_size: 64, lr: 3e-3, seed: 0, precision: DType::F32 }
            }
            ModelKind::Cnn => {
                Config { model: self, epochs: 6, batch_size: 64, lr: 3e-3, seed: 0, precision: DType::F32 }
            }
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModelKind {
    type Err = KilnError;
    fn from_str(s: &str) -> Result<ModelKind> {
        match s {
            "mlp" => Ok(ModelKind::Mlp),
            "cnn" => Ok(ModelKind::Cnn),
            _ => Err(KilnError::Invalid { op: "model", detail: format!("unknown model `{s}` (expected mlp or cnn)") }),
        }
    }
}

/// What a training run is: the model, its schedule and its seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Config {
    pub model: ModelKind,
    pub epochs: usize,
    pub batch_size: usize,
    /// Peak learning rate of Adam's warmup + cosine schedule.
    pub lr: f64,
    pub seed: u64,
    /// What the forward and backward passes compute in: f32, or f16 or bf16
    /// (mixed precision: f32 master weights and optimizer state; f16 with
    /// dynamic loss scaling).
    pub precision: DType,
}

impl Config {
    pub fn check(&self) -> Result<()> {
        let bad = |detail: String| Err(KilnError::Invalid { op: "config", detail });
        if self.batch_size == 0 || self.batch_size > 4096 {
            return bad(format!("batch size {} is not in 1..=4096", self.batch_size));
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("learning rate {} is not a positive number", self.lr));
        }
        if self.epochs == 0 {
            return bad("epochs must be at least 1".into());
        }
        if !self.precision.is_float() {
            return bad(format!("precision {} is not a float dtype (f32, f16 or bf16)", self.precision));
        }
        Ok(())
    }
}
