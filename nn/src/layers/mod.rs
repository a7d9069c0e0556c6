//! Layers. Each is a parameter tree with a `forward` that checks its
//! input's shape and names itself and the shapes in the error.

mod attention;
mod conv;
mod dense;
mod dropout;
mod lora;
mod norm;
mod pool;
mod quantized;
mod sequential;
mod transformer;

pub use attention::{CausalSelfAttention, KvCache, attention_at, causal_attention, causal_attention_flops};
pub use conv::{Conv2d, Conv2dConfig, ConvAlgorithm};
pub use dense::{Embedding, Linear};
pub use dropout::Dropout;
pub use lora::{Adapted, Lora};
pub use norm::{LayerNorm, RmsNorm};
pub use pool::{AvgPool2d, MaxPool2d};
pub use quantized::{Dense, QuantizedConv2d, QuantizedLinear, QuantizedTree, codes_under};
pub use sequential::{Layer, Sequential, mlp};
pub use transformer::{Block, GeluMlp};

use kiln::{KilnError, Result, Tensor};

/// The error of a layer given an input it cannot take.
pub(crate) fn bad_input<T>(layer: &'static str, expects: String, got: &[usize]) -> Result<T> {
    Err(KilnError::Shape { op: layer, detail: format!("expects input {expects}, got shape {got:?}") })
}

/// A weight's dims, or an error naming the layer where it is not of rank
/// `N` (the layers' fields are public, so a layer built by hand may hold any).
pub(crate) fn weight_dims<const N: usize>(layer: &'static str, weight: &Tensor) -> Result<[usize; N]> {
    weight.shape().try_into().map_err(|_| KilnError::Shape {
        op: layer,
        detail: format!("its weight must have rank {N}, got shape {:?}", weight.shape()),
    })
}

/// Output length of a windowed axis (conv, pool), or `None` when the
/// window does not fit.
pub(crate) fn out_len(len: usize, pad: usize, kernel: usize, stride: usize, dilation: usize) -> Option<usize> {
    let span = dilation * (kernel - 1) + 1;
    let padded = len + 2 * pad;
    (padded >= span && stride > 0).then(|| (padded - span) / stride + 1)
}
