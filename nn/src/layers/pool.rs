//! Max and average pooling over square windows (NCHW, no padding): the
//! maximum or mean of the strided views under each kernel offset.

use super::conv::windows;
use super::{bad_input, out_len};
use kiln::prelude::*;

fn pooled(layer: &'static str, x: &Tensor, kernel: usize, stride: usize) -> Result<Vec<Tensor>> {
    let fits = |len: usize| out_len(len, 0, kernel, stride, 1);
    if x.rank() != 4 || kernel == 0 {
        return bad_input(layer, format!("[N, C, H, W] with H, W ≥ {kernel}"), x.shape());
    }
    let (Some(oh), Some(ow)) = (fits(x.shape()[2]), fits(x.shape()[3])) else {
        return bad_input(layer, format!("[N, C, H, W] with H, W ≥ {kernel}"), x.shape());
    };
    windows(x, [kernel, kernel], [oh, ow], stride, 1)
}

/// `stride` defaults to `kernel` in [`MaxPool2d::new`].
#[derive(Tree, Clone, Debug)]
pub struct MaxPool2d {
    /// Window side.
    #[tree(skip)]
    pub kernel: usize,
    /// Step between windows.
    #[tree(skip)]
    pub stride: usize,
}

impl MaxPool2d {
    /// Windows of `kernel × kernel`, stride `kernel`.
    pub fn new(kernel: usize) -> MaxPool2d {
        MaxPool2d { kernel, stride: kernel }
    }

    /// `x` `[N, C, H, W]` → `[N, C, OH, OW]`: each window's maximum.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let views = pooled("MaxPool2d", x, self.kernel, self.stride)?;
        views[1..].iter().try_fold(views[0].clone(), |m, v| m.maximum(v))
    }
}

/// Average pooling; `stride` defaults to `kernel` in `AvgPool2d::new`.
#[derive(Tree, Clone, Debug)]
pub struct AvgPool2d {
    /// Window side.
    #[tree(skip)]
    pub kernel: usize,
    /// Step between windows.
    #[tree(skip)]
    pub stride: usize,
}

impl AvgPool2d {
    /// Windows of `kernel × kernel`, stride `kernel`.
    pub fn new(kernel: usize) -> AvgPool2d {
        AvgPool2d { kernel, stride: kernel }
    }

    /// `x` `[N, C, H, W]` → `[N, C, OH, OW]`: each window's mean.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let views = pooled("AvgPool2d", x, self.kernel, self.stride)?;
        let sum = views[1..].iter().try_fold(views[0].clone(), |s, v| s.add(v))?;
        sum.div_scalar(views.len() as f64)
    }
}
