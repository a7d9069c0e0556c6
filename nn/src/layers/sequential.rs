//! `Sequential`: a list of layers applied in order, and the `mlp` helper.

use super::quantized::codes_under;
use super::{
    AvgPool2d, Conv2d, Dropout, Embedding, LayerNorm, Linear, MaxPool2d, QuantizedConv2d, QuantizedLinear,
    QuantizedTree,
};
use kiln::prelude::*;
use kiln::tree::{Leaves, Path};

/// One step of a [`Sequential`]: a layer with parameters, a pooling or
/// dropout layer, or a parameter-free function.
#[derive(Clone, Debug)]
pub enum Layer {
    /// A `Linear` layer: `x @ weight + bias`.
    Linear(Linear),
    /// A `Conv2d` layer over `[N, C, H, W]`.
    Conv2d(Conv2d),
    /// A `QuantizedLinear` layer: a `Linear` with integer weights.
    QuantizedLinear(QuantizedLinear),
    /// A `QuantizedConv2d` layer: a `Conv2d` with integer weights.
    QuantizedConv2d(QuantizedConv2d),
    /// A `LayerNorm` over the last axis.
    LayerNorm(LayerNorm),
    /// An `Embedding`: integer ids → rows of its table.
    Embedding(Embedding),
    /// A `MaxPool2d`: each window's maximum.
    MaxPool2d(MaxPool2d),
    /// An `AvgPool2d`: each window's mean.
    AvgPool2d(AvgPool2d),
    /// A `Dropout`: drops only when given a key, else the identity.
    Dropout(Dropout),
    /// `max(x, 0)`, elementwise.
    Relu,
    /// GELU (tanh approximation, as GPT-2), elementwise.
    Gelu,
    /// `tanh(x)`, elementwise.
    Tanh,
    /// `1 / (1 + e^-x)`, elementwise.
    Sigmoid,
    /// Merge every axis after the first (`[N, C, H, W]` → `[N, C·H·W]`).
    Flatten,
}

impl Tree for Layer {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        match self {
            Layer::Linear(l) => l.visit(path, f),
            Layer::Conv2d(l) => l.visit(path, f),
            Layer::QuantizedLinear(l) => l.visit(path, f),
            Layer::QuantizedConv2d(l) => l.visit(path, f),
            Layer::LayerNorm(l) => l.visit(path, f),
            Layer::Embedding(l) => l.visit(path, f),
            _ => {}
        }
    }

    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        Ok(match self {
            Layer::Linear(l) => Layer::Linear(l.rebuild(path, leaves)?),
            Layer::Conv2d(l) => Layer::Conv2d(l.rebuild(path, leaves)?),
            Layer::QuantizedLinear(l) => Layer::QuantizedLinear(l.rebuild(path, leaves)?),
            Layer::QuantizedConv2d(l) => Layer::QuantizedConv2d(l.rebuild(path, leaves)?),
            Layer::LayerNorm(l) => Layer::LayerNorm(l.rebuild(path, leaves)?),
            Layer::Embedding(l) => Layer::Embedding(l.rebuild(path, leaves)?),
            other => other.clone(),
        })
    }
}

impl Layer {
    /// Whether the layer holds integer weights.
    pub fn is_quantized(&self) -> bool {
        matches!(self, Layer::QuantizedLinear(_) | Layer::QuantizedConv2d(_))
    }

    /// Apply the layer; `key` is used by dropout only (`None`: evaluation).
    pub fn forward(&self, x: &Tensor, key: Option<Key>) -> Result<Tensor> {
        match self {
            Layer::Linear(l) => l.forward(x),
            Layer::Conv2d(l) => l.forward(x),
            Layer::QuantizedLinear(l) => l.forward(x),
            Layer::QuantizedConv2d(l) => l.forward(x),
            Layer::LayerNorm(l) => l.forward(x),
            Layer::Embedding(l) => l.forward(x),
            Layer::MaxPool2d(l) => l.forward(x),
            Layer::AvgPool2d(l) => l.forward(x),
            Layer::Dropout(l) => l.forward(x, key),
            Layer::Relu => x.relu(),
            Layer::Gelu => x.gelu(),
            Layer::Tanh => x.tanh(),
            Layer::Sigmoid => x.sigmoid(),
            Layer::Flatten if x.rank() == 0 => super::bad_input("Flatten", "rank ≥ 1".into(), x.shape()),
            Layer::Flatten => x.reshape(&[x.shape()[0] as isize, -1]),
        }
    }
}

impl QuantizedTree for Layer {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        match self {
            Layer::QuantizedLinear(l) => l.code_formats(),
            Layer::QuantizedConv2d(l) => l.code_formats(),
            _ => Vec::new(),
        }
    }
}

impl QuantizedTree for Sequential {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        codes_under("layers", &self.layers)
    }
}

/// Layers applied in order. Its leaves are named `layers.<i>.<param>`.
#[derive(Tree, Clone, Debug)]
pub struct Sequential {
    /// The layers, applied first to last.
    pub layers: Vec<Layer>,
}

impl Sequential {
    /// A model of `layers`, applied in order.
    pub fn new(layers: Vec<Layer>) -> Sequential {
        Sequential { layers }
    }

    /// Evaluation mode: dropout is the identity. A layer's error names
    /// its path (`Linear at `layers.0`: ...`).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.run(x, None)
    }

    /// Every layer in order; layer `i` draws with `key.fold_in(i)`.
    fn run(&self, x: &Tensor, key: Option<Key>) -> Result<Tensor> {
        let mut h = x.clone();
        for (i, l) in self.layers.iter().enumerate() {
            let key = key.map(|k| k.fold_in(i as u32));
            h = l.forward(&h, key).map_err(|e| e.within(&format!("layers.{i}")))?;
        }
        Ok(h)
    }

    /// This model for inference with integer weights in `format`: the same
    /// layers in the same order, each `Linear` and `Conv2d` whose rows of
    /// weights fill whole words quantized (biases stay f32). A layer whose
    /// rows do not, such as a first convolution over one channel (25
    /// weights per output), stays float, as quantizers commonly keep the
    /// first layer; [`Layer::is_quantized`] tells which.
    pub fn quantize(&self, format: QuantFormat) -> Result<Sequential> {
        format.check_bits("Sequential::quantize")?;
        let layers = self.layers.iter().map(|l| {
            Ok(match l {
                Layer::Linear(l) if format.packs(l.inputs()) => Layer::QuantizedLinear(l.quantize(format)?),
                Layer::Conv2d(l)
                    if l.weight.numel().checked_div(l.weight.shape()[0]).is_some_and(|k| format.packs(k)) =>
                {
                    Layer::QuantizedConv2d(l.quantize(format)?)
                }
                other => other.clone(),
            })
        });
        Ok(Sequential { layers: layers.collect::<Result<_>>()? })
    }

    /// This quantized model with its int8 layers' inputs quantized to int8
    /// too (W8A8, [`Tensor::quant_matmul_w8a8`]); float layers stay float.
    /// An error names a quantized layer in another format.
    pub fn with_int8_activations(&self) -> Result<Sequential> {
        let layers = self.layers.iter().enumerate().map(|(i, l)| {
            let mut layer = l.clone();
            let (format, flag) = match &mut layer {
                Layer::QuantizedLinear(q) => (q.format, &mut q.int8_activations),
                Layer::QuantizedConv2d(q) => (q.format, &mut q.int8_activations),
                _ => return Ok(layer),
            };
            if format != QuantFormat::INT8 {
                return Err(KilnError::Invalid {
                    op: "Sequential::with_int8_activations",
                    detail: format!("layer {i} holds {format} weights; int8 activations pair with int8 weights"),
                });
            }
            *flag = true;
            Ok(layer)
        });
        Ok(Sequential { layers: layers.collect::<Result<_>>()? })
    }

    /// Training mode: layer `i` draws with `key.fold_in(i)`.
    pub fn forward_train(&self, x: &Tensor, key: Key) -> Result<Tensor> {
        self.run(x, Some(key))
    }
}

/// A multilayer perceptron `sizes[0] → … → sizes[last]`: Linear layers
/// (He-uniform, keys split from `key`) with `activation` between them,
/// none after the last.
pub fn mlp(dev: &Device, key: Key, sizes: &[usize], activation: Layer) -> Result<Sequential> {
    if sizes.len() < 2 {
        return Err(KilnError::Invalid { op: "mlp", detail: format!("needs at least two sizes, got {sizes:?}") });
    }
    let keys = key.split(sizes.len() - 1);
    let mut layers = Vec::new();
    for (i, w) in sizes.windows(2).enumerate() {
        if i > 0 {
            layers.push(activation.clone());
        }
        layers.push(Layer::Linear(Linear::new(dev, keys[i], w[0], w[1])?));
    }
    Ok(Sequential { layers })
}
