//! 2-D convolution (NCHW). Each kernel offset is a strided view of the
//! zero-padded input, and the views are stacked into patches
//! `[N, C, KH, KW, OH, OW]`. Two ways on from there ([`ConvAlgorithm`]):
//! im2col materializes the patches as `[N, C·KH·KW, OH·OW]` and multiplies
//! by the weight `[O, C·KH·KW]` (one matmul); direct leaves them lazy and
//! multiplies them by the weight broadcast, summed over `(C, KH, KW)`, which
//! the scheduler fuses into one reduction that reads the input in place.
//! im2col is the default: it measured faster on every adapter
//! (docs/BENCHMARKS.md, `conv2d` rows).

use super::{bad_input, out_len, weight_dims};
use crate::init;
use kiln::prelude::*;

/// Settings of a 2-D convolution. The default: stride 1, no padding,
/// dilation 1, one group, a bias, im2col.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// Step between output positions, in input pixels.
    pub stride: usize,
    /// Zeros added on each side of both spatial axes.
    pub padding: usize,
    /// Spacing between kernel taps (1: adjacent).
    pub dilation: usize,
    /// Channel groups: each output channel sees `in / groups` input channels.
    pub groups: usize,
    /// Whether `Conv2d::new` adds a bias.
    pub bias: bool,
    /// How the convolution is computed.
    pub algorithm: ConvAlgorithm,
}

/// How [`Conv2d`] computes; both give the same values and gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ConvAlgorithm {
    /// Patches in a buffer, then one matmul.
    #[default]
    Im2col,
    /// One fused reduction over the lazy patches times the weight.
    Direct,
}

impl Default for Conv2dConfig {
    fn default() -> Self {
        Conv2dConfig { stride: 1, padding: 0, dilation: 1, groups: 1, bias: true, algorithm: ConvAlgorithm::Im2col }
    }
}

impl Conv2dConfig {
    /// Checks a convolution of `inputs` → `outputs` channels by a `kernel`
    /// (KH, KW) under this config: positive channel counts that `groups`
    /// divides, and positive kernel, stride and dilation.
    pub fn check(&self, layer: &'static str, inputs: usize, outputs: usize, kernel: [usize; 2]) -> Result<()> {
        let g = self.groups;
        let fine = g > 0
            && inputs > 0
            && outputs > 0
            && inputs.is_multiple_of(g)
            && outputs.is_multiple_of(g)
            && kernel.iter().all(|&k| k > 0)
            && self.stride > 0
            && self.dilation > 0;
        if fine {
            return Ok(());
        }
        Err(KilnError::Invalid {
            op: layer,
            detail: format!(
                "{inputs} → {outputs} channels, kernel {}×{}, {self:?}: channel counts must be positive and divided by groups; kernel, stride and dilation must be positive",
                kernel[0], kernel[1]
            ),
        })
    }
}

/// `weight` is `[out, in / groups, KH, KW]`, `bias` `[out]`.
#[derive(Tree, Clone, Debug)]
pub struct Conv2d {
    /// `[out, in / groups, KH, KW]`.
    pub weight: Tensor,
    /// `[out]`, or none.
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation, groups and algorithm.
    #[tree(skip)]
    pub config: Conv2dConfig,
}

/// Zeros around the last two axes.
pub(crate) fn pad2d(x: &Tensor, pad: usize) -> Result<Tensor> {
    if pad == 0 {
        return Ok(x.clone());
    }
    let mut out = x.clone();
    for axis in [2usize, 3] {
        let mut shape = out.shape().to_vec();
        shape[axis] = pad;
        let z = Tensor::zeros(x.device(), &shape, x.dtype())?;
        out = Tensor::concat(&[&z, &out, &z], axis as isize)?;
    }
    Ok(out)
}

/// The `[N, C, OH, OW]` view of the (padded) input under each kernel
/// offset `(i, j)`, row-major over the kernel.
pub(crate) fn windows(
    x: &Tensor,
    k: [usize; 2],
    out: [usize; 2],
    stride: usize,
    dilation: usize,
) -> Result<Vec<Tensor>> {
    let mut views = Vec::with_capacity(k[0] * k[1]);
    for i in 0..k[0] {
        for j in 0..k[1] {
            let (r, c) = ((i * dilation) as isize, (j * dilation) as isize);
            let s = stride as isize;
            let rows = x.slice(2, Some(r), Some(r + (out[0] as isize - 1) * s + 1), s)?;
            views.push(rows.slice(3, Some(c), Some(c + (out[1] as isize - 1) * s + 1), s)?);
        }
    }
    Ok(views)
}

/// The strided views `x[.., i·d.., j·d..]` of every kernel offset, stacked
/// to `[N, C, KH, KW, OH, OW]` in two passes (rows, then columns): KH + KW
/// one-axis slices rather than KH·KW two-axis ones, which keeps the
/// backward (one scatter per sliced axis) small.
fn patches(x: &Tensor, k: [usize; 2], out: [usize; 2], stride: usize, dilation: usize) -> Result<Tensor> {
    let s = stride as isize;
    let shifted = |t: &Tensor, axis: isize, i: usize, n: usize| {
        let start = (i * dilation) as isize;
        t.slice(axis, Some(start), Some(start + (n as isize - 1) * s + 1), s)
    };
    let rows = (0..k[0]).map(|i| shifted(x, 2, i, out[0])).collect::<Result<Vec<_>>>()?;
    let rows = Tensor::stack(&rows.iter().collect::<Vec<_>>(), 2)?;
    let cols = (0..k[1]).map(|j| shifted(&rows, 4, j, out[1])).collect::<Result<Vec<_>>>()?;
    Tensor::stack(&cols.iter().collect::<Vec<_>>(), 3)
}

impl Conv2d {
    /// He-uniform weight (fan_in = in / groups · KH · KW), zero bias.
    pub fn new(
        dev: &Device,
        key: Key,
        inputs: usize,
        outputs: usize,
        kernel: usize,
        config: Conv2dConfig,
    ) -> Result<Conv2d> {
        config.check("Conv2d", inputs, outputs, [kernel, kernel])?;
        let g = config.groups;
        let shape = [outputs, inputs / g, kernel, kernel];
        let weight = init::kaiming_uniform(dev, key, &shape, inputs / g * kernel * kernel)?;
        let bias = if config.bias { Some(init::zeros(dev, &[outputs])?) } else { None };
        Ok(Conv2d { weight, bias, config })
    }

    /// `x` `[N, in, H, W]` → `[N, out, OH, OW]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let algorithm = self.config.algorithm;
        let w = weight_dims("Conv2d", &self.weight)?;
        convolve("Conv2d", x, w, &self.config, self.bias.as_ref(), |g, patches| {
            let [n, cg, kh, kw, oh, ow] = patches.shape()[..] else { unreachable!("patches have rank 6") };
            let og = w[0] / self.config.groups;
            let wg = if self.config.groups == 1 { self.weight.clone() } else { self.weight.narrow(0, g * og, og)? };
            match algorithm {
                ConvAlgorithm::Im2col => {
                    // [N, C, KH, KW, OH, OW] → [N, C·KH·KW, OH·OW], the weight's order.
                    let p = patches.reshape(&[n as isize, (cg * kh * kw) as isize, (oh * ow) as isize])?;
                    wg.reshape(&[og as isize, (cg * kh * kw) as isize])?.matmul(&p)
                }
                ConvAlgorithm::Direct => {
                    // [N, 1, C, KH, KW, OH, OW] · [1, O, C, KH, KW, 1, 1], summed over (C, KH, KW).
                    let w = wg.reshape(&[1, og as isize, cg as isize, kh as isize, kw as isize, 1, 1])?;
                    patches.unsqueeze(1)?.mul(&w)?.sum(&[2, 3, 4], false)
                }
            }
        })
    }
}

/// A convolution of `x` by a weight of `shape` `[out, in / groups, KH, KW]`
/// (`layer` names it in errors): each group's patches
/// `[N, C, KH, KW, OH, OW]` go to `product(group, patches)`, which returns
/// that group's `[N, out / groups, ..]` (any trailing shape of OH·OW
/// elements); the groups are joined and the bias added.
pub(crate) fn convolve(
    layer: &'static str,
    x: &Tensor,
    shape: [usize; 4],
    config: &Conv2dConfig,
    bias: Option<&Tensor>,
    product: impl Fn(usize, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let Conv2dConfig { stride, padding, dilation, groups, .. } = *config;
    let [o, cg, kh, kw] = shape;
    // (With no groups, the per-group count stands for the input's.)
    config.check(layer, cg * groups.max(1), o, [kh, kw])?;
    let expects =
        || format!("[N, {}, H, W] where a {kh}×{kw} kernel (padding {padding}, dilation {dilation}) fits", cg * groups);
    if x.rank() != 4 || x.shape()[1] != cg * groups {
        return bad_input(layer, expects(), x.shape());
    }
    let (n, h, wd) = (x.shape()[0], x.shape()[2], x.shape()[3]);
    let (Some(oh), Some(ow)) = (out_len(h, padding, kh, stride, dilation), out_len(wd, padding, kw, stride, dilation))
    else {
        return bad_input(layer, expects(), x.shape());
    };
    let xp = pad2d(x, padding)?;
    let mut outs = Vec::with_capacity(groups);
    for g in 0..groups {
        let xg = if groups == 1 { xp.clone() } else { xp.narrow(1, g * cg, cg)? };
        outs.push(product(g, &patches(&xg, [kh, kw], [oh, ow], stride, dilation)?)?);
    }
    let y =
        if groups == 1 { outs.pop().expect("one group") } else { Tensor::concat(&outs.iter().collect::<Vec<_>>(), 1)? };
    let y = y.reshape(&[n as isize, o as isize, oh as isize, ow as isize])?;
    match bias {
        Some(b) => y.add(&b.reshape(&[o as isize, 1, 1])?),
        None => Ok(y),
    }
}
