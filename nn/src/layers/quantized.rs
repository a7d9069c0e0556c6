//! Inference layers with integer weights ([`QuantFormat`]): a [`Linear`]
//! or [`Conv2d`] whose weight is held as packed codes and scales, applied
//! with `quant_matmul` (codes unpacked in registers). Made by `quantize`
//! on the float layer; their outputs are f32.

use super::conv::convolve;
use super::{Adapted, Conv2d, Conv2dConfig, Linear, Lora, bad_input};
use kiln::prelude::*;
use kiln::tree::{Leaves, Path};

/// A parameter tree some of whose leaves are quantized weight codes: u32
/// words `[n, k / per_word]` of a [`QuantFormat`]. Checkpoints store those
/// leaves as bytes (`Checkpoint::add_quantized`).
pub trait QuantizedTree: Tree {
    /// Each code leaf's path (as [`Tree::named_leaves`] names it) and format.
    fn code_formats(&self) -> Vec<(String, QuantFormat)>;
}

/// `inner`'s code leaves, their paths under field `field` (for a
/// [`QuantizedTree`] holding quantized parts).
pub fn codes_under(field: &str, inner: &impl QuantizedTree) -> Vec<(String, QuantFormat)> {
    inner.code_formats().into_iter().map(|(p, f)| (format!("{field}.{p}"), f)).collect()
}

/// A list's code leaves, under each element's index (as [`Tree`] names them).
impl<T: QuantizedTree> QuantizedTree for Vec<T> {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        self.iter().enumerate().flat_map(|(i, t)| codes_under(&i.to_string(), t)).collect()
    }
}

impl QuantizedTree for QuantizedLinear {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        vec![("codes".into(), self.format)]
    }
}

impl QuantizedTree for QuantizedConv2d {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        vec![("codes".into(), self.format)]
    }
}

/// The codes and scales of a weight `[n, k]` in `format`, checking that k
/// packs into whole words (`layer` names it in errors).
fn quantize_rows(layer: &'static str, w: &Tensor, format: QuantFormat) -> Result<(Tensor, Tensor)> {
    let k = w.shape()[1];
    format.check_bits(layer)?;
    if !format.packs(k) {
        return Err(KilnError::Shape {
            op: layer,
            detail: format!(
                "{format} packs {} weights per word; this layer's {k} inputs per output (weight {:?}) do not fill whole words",
                format.per_word(),
                w.shape()
            ),
        });
    }
    w.quantize(format)
}

/// `x @ wᵀ` for `layer`'s codes and scales, with x quantized to int8 too
/// when `int8_activations` (int8 weights only).
fn product(
    layer: &'static str,
    x: &Tensor,
    (codes, scales, format): (&Tensor, &Tensor, QuantFormat),
    int8_activations: bool,
) -> Result<Tensor> {
    match (int8_activations, format) {
        (false, _) => x.quant_matmul(codes, scales, format),
        (true, QuantFormat::INT8) => x.quant_matmul_w8a8(codes, scales),
        (true, _) => Err(KilnError::Invalid {
            op: layer,
            detail: format!("int8 activations pair with int8 weights; this layer holds {format} weights"),
        }),
    }
}

/// `y = x @ w + bias` with `w` (`[in, out]` in [`Linear`]) held as
/// `codes` `[out, in / per_word]` and `scales` `[out, ⌈in / group⌉]`.
#[derive(Tree, Clone, Debug)]
pub struct QuantizedLinear {
    /// u32 words `[out, in / per_word]`.
    pub codes: Tensor,
    /// f16 scales `[out, ⌈in / group⌉]`.
    pub scales: Tensor,
    /// `[out]`, kept in float, or none.
    pub bias: Option<Tensor>,
    /// The codes' format.
    #[tree(skip)]
    pub format: QuantFormat,
    /// x quantized to int8 as well ([`Tensor::quant_matmul_w8a8`]; int8
    /// weights only): set by [`Sequential::with_int8_activations`](crate::Sequential::with_int8_activations).
    #[tree(skip)]
    pub int8_activations: bool,
}

impl Linear {
    /// This layer with its weight quantized to `format` (the bias stays f32).
    pub fn quantize(&self, format: QuantFormat) -> Result<QuantizedLinear> {
        let (codes, scales) = quantize_rows("Linear::quantize", &self.weight.t()?, format)?;
        Ok(QuantizedLinear { codes, scales, bias: self.bias.clone(), format, int8_activations: false })
    }
}

impl QuantizedLinear {
    /// Input features `in`.
    pub fn inputs(&self) -> usize {
        self.codes.shape().get(1).map_or(0, |words| words * self.format.per_word())
    }

    /// `x` `[.., in]` (cast to f32) → `[.., out]` f32.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.inputs();
        if x.rank() == 0 || x.shape()[x.rank() - 1] != n {
            return bad_input("QuantizedLinear", format!("[.., {n}]"), x.shape());
        }
        let weight = (&self.codes, &self.scales, self.format);
        let y = product("QuantizedLinear", &x.cast(DType::F32)?, weight, self.int8_activations)?;
        match &self.bias {
            Some(b) => y.add(&b.cast(DType::F32)?),
            None => Ok(y),
        }
    }
}

/// [`Conv2d`] with its weight `[out, in / groups, KH, KW]` held as codes
/// and scales over rows of `in / groups · KH · KW`.
#[derive(Tree, Clone, Debug)]
pub struct QuantizedConv2d {
    /// u32 words `[out, row / per_word]`, a row being `in / groups · KH · KW`.
    pub codes: Tensor,
    /// f16 scales `[out, ⌈row / group⌉]`.
    pub scales: Tensor,
    /// `[out]`, kept in float, or none.
    pub bias: Option<Tensor>,
    /// The codes' format.
    #[tree(skip)]
    pub format: QuantFormat,
    /// The float weight's shape.
    #[tree(skip)]
    pub shape: [usize; 4],
    /// The float layer's stride, padding, dilation and groups.
    #[tree(skip)]
    pub config: Conv2dConfig,
    /// Patches quantized to int8 as well, as [`QuantizedLinear::int8_activations`].
    #[tree(skip)]
    pub int8_activations: bool,
}

impl Conv2d {
    /// This layer with its weight quantized to `format` (the bias stays f32).
    pub fn quantize(&self, format: QuantFormat) -> Result<QuantizedConv2d> {
        let w = self.weight.shape();
        let shape = [w[0], w[1], w[2], w[3]];
        let rows = self.weight.reshape(&[w[0] as isize, -1])?;
        let (codes, scales) = quantize_rows("Conv2d::quantize", &rows, format)?;
        Ok(QuantizedConv2d {
            codes,
            scales,
            bias: self.bias.clone(),
            format,
            shape,
            config: self.config,
            int8_activations: false,
        })
    }
}

impl QuantizedConv2d {
    /// `x` `[N, in, H, W]` (cast to f32) → `[N, out, OH, OW]` f32.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.cast(DType::F32)?;
        convolve("QuantizedConv2d", &x, self.shape, &self.config, self.bias.as_ref(), |g, patches| {
            let og = self.shape[0] / self.config.groups;
            let [n, cg, kh, kw, oh, ow] = patches.shape()[..] else { unreachable!("patches have rank 6") };
            // [N, C, KH, KW, OH, OW] → [N, OH·OW, C·KH·KW]: one row per output pixel.
            let rows = patches.reshape(&[n as isize, (cg * kh * kw) as isize, (oh * ow) as isize])?.transpose(1, 2)?;
            let own = |t: &Tensor| if self.config.groups == 1 { Ok(t.clone()) } else { t.narrow(0, g * og, og) };
            let weight = (&own(&self.codes)?, &own(&self.scales)?, self.format);
            let y = product("QuantizedConv2d", &rows, weight, self.int8_activations)?;
            y.transpose(1, 2)
        })
    }
}

/// A linear layer with float or integer weights: the transformer's
/// projections, which quantize in place ([`Dense::quantize`]). Its leaves
/// are the inner layer's (`weight`, `bias`; or `codes`, `scales`, `bias`),
/// and an adapted one's under `base` and `lora`.
#[derive(Clone, Debug)]
pub enum Dense {
    /// Float weights.
    Float(Linear),
    /// Integer weights.
    Quantized(QuantizedLinear),
    /// A projection with a low-rank update beside it ([`Dense::adapted`]).
    Adapted(Box<Adapted<Dense>>),
}

impl From<Linear> for Dense {
    fn from(l: Linear) -> Dense {
        Dense::Float(l)
    }
}

impl Tree for Dense {
    fn visit<'a>(&'a self, path: &mut Path, f: &mut dyn FnMut(&Path, &'a Tensor)) {
        match self {
            Dense::Float(l) => l.visit(path, f),
            Dense::Quantized(l) => l.visit(path, f),
            Dense::Adapted(a) => a.visit(path, f),
        }
    }

    fn rebuild(&self, path: &mut Path, leaves: &mut Leaves) -> Result<Self> {
        Ok(match self {
            Dense::Float(l) => Dense::Float(l.rebuild(path, leaves)?),
            Dense::Quantized(l) => Dense::Quantized(l.rebuild(path, leaves)?),
            Dense::Adapted(a) => Dense::Adapted(a.rebuild(path, leaves)?),
        })
    }
}

impl QuantizedTree for Dense {
    fn code_formats(&self) -> Vec<(String, QuantFormat)> {
        match self {
            Dense::Float(_) => Vec::new(),
            Dense::Quantized(l) => l.code_formats(),
            Dense::Adapted(a) => {
                a.base.code_formats().into_iter().map(|(name, format)| (format!("base.{name}"), format)).collect()
            }
        }
    }
}

impl Dense {
    /// `x` `[.., in]` → `[.., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Dense::Float(l) => l.forward(x),
            Dense::Quantized(l) => l.forward(x),
            Dense::Adapted(a) => a.base.forward(x)?.add(&a.lora.forward(x)?),
        }
    }

    /// Outputs per input row.
    pub fn outputs(&self) -> usize {
        match self {
            Dense::Float(l) => l.weight.shape()[1],
            Dense::Quantized(l) => l.codes.shape()[0],
            Dense::Adapted(a) => a.base.outputs(),
        }
    }

    /// Inputs per row.
    pub fn inputs(&self) -> usize {
        match self {
            Dense::Float(l) => l.inputs(),
            Dense::Quantized(l) => l.inputs(),
            Dense::Adapted(a) => a.base.inputs(),
        }
    }

    /// This layer (its weights frozen by whoever trains only `lora`) with
    /// `lora`'s update added to its output. Errors unless the adapter's
    /// sides are this layer's.
    pub fn adapted(&self, lora: Lora) -> Result<Dense> {
        lora.check_fits("Dense::adapted", self.inputs(), self.outputs())?;
        Ok(Dense::Adapted(Box::new(Adapted { base: self.clone(), lora })))
    }

    /// An adapted layer with its update added into float weights
    /// (`w + scale · aᵀ bᵀ`, stored in `w`'s dtype), as PEFT's
    /// `merge_and_unload`: the same outputs (to rounding) for two fewer
    /// products. Other layers, and adapters over integer weights, as they are.
    pub fn merged(&self) -> Result<Dense> {
        match self {
            Dense::Adapted(a) => match &a.base {
                Dense::Float(l) => {
                    let delta = a.lora.a.t()?.matmul(&a.lora.b.t()?)?.mul_scalar(a.lora.scale)?;
                    let weight = l.weight.cast(DType::F32)?.add(&delta)?.cast(l.weight.dtype())?;
                    Ok(Dense::Float(Linear { weight, bias: l.bias.clone() }))
                }
                _ => Ok(self.clone()),
            },
            other => Ok(other.clone()),
        }
    }

    /// This layer with integer weights in `format` where its rows fill
    /// whole words (otherwise, or already quantized, unchanged).
    pub fn quantize(&self, format: QuantFormat) -> Result<Dense> {
        Ok(match self {
            Dense::Float(l) if format.packs(l.inputs()) => Dense::Quantized(l.quantize(format)?),
            Dense::Adapted(a) => {
                Dense::Adapted(Box::new(Adapted { base: a.base.quantize(format)?, lora: a.lora.clone() }))
            }
            other => other.clone(),
        })
    }
}
