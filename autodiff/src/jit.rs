//! `jit(f)` over trees, as JAX's: `f` takes any [`Tree`] (a model, a tuple
//! of a model, an optimizer state and a batch) and returns any tree. Each
//! call flattens its input to leaves, replays the program captured for
//! their paths, shapes, dtypes and layouts (capturing it on the first call
//! with them), and rebuilds the outputs in `f`'s output structure.
//!
//! The flat form underneath is [`kiln_ops::jit`]. As there, `f` runs only
//! at capture: anything it reads besides its input's leaves is frozen at
//! its capture-time value, and so are the input's non-tensor parts (a
//! layer's activation, a dropout rate), which are not part of the key.

use crate::tree::Tree;
use crate::vmap::vmap;
use kiln_core::{PendingRead, Result};
use kiln_ops::{Captures, Ran, Tensor};
use std::sync::Arc;

/// A function of a tree, captured and replayed: see [`jit`].
pub struct Jit<F, O> {
    f: F,
    /// Each program with its output's structure (leaves are placeholders).
    captures: Captures<Arc<O>>,
}

/// Wrap `f` (a pure function of its input tree) for capture and replay.
///
/// ```
/// use kiln_autodiff::jit;
/// use kiln_ops::{Device, Tensor};
/// # fn main() -> kiln_core::Result<()> {
/// let dev = Device::cpu();
/// let product_and_sum = jit(|(x, w): &(Tensor, Tensor)| Ok((x.mul(w)?, x.sum(&[], false)?)));
/// let x = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2])?;
/// let (y, s) = pollster::block_on(product_and_sum.call(&(x.clone(), x)))?;
/// assert_eq!(pollster::block_on(y.to_vec::<f32>())?, [1.0, 4.0]);
/// assert_eq!(pollster::block_on(s.item::<f32>())?, 3.0);
/// # Ok(()) }
/// ```
pub fn jit<I: Tree, O: Tree, F: Fn(&I) -> Result<O>>(f: F) -> Jit<F, O> {
    Jit { f, captures: Captures::default() }
}

impl<F, O: Tree> Jit<F, O> {
    /// `f(input)` as a lazy graph: neither captured nor realized, to look
    /// at what a call computes (its schedule, its picture).
    pub fn trace<I: Tree>(&self, input: &I) -> Result<O>
    where
        F: Fn(&I) -> Result<O>,
    {
        (self.f)(input)
    }

    /// `f(input)`: captured on the first call with this input's leaf paths
    /// and signature, replayed on later ones. The output's leaves are
    /// realized.
    pub async fn call<I: Tree>(&self, input: &I) -> Result<O>
    where
        F: Fn(&I) -> Result<O>,
    {
        let ran = self.run(input, None).await?;
        ran.kept.unflatten(ran.outputs)
    }

    /// `call`, with the output's leaf `read` (in flatten order) on its way
    /// to the host: a replay copies it for reading in its own submit (one
    /// submit for the step and its result), which [`PendingRead::wait`]
    /// then maps.
    pub async fn call_reading<I: Tree>(&self, input: &I, read: usize) -> Result<(O, PendingRead)>
    where
        F: Fn(&I) -> Result<O>,
    {
        let (outputs, pending, template) = self.run(input, Some(read)).await?.reading(read)?;
        Ok((template.unflatten(outputs)?, pending))
    }

    async fn run<I: Tree>(&self, input: &I, read: Option<usize>) -> Result<Ran<Arc<O>>>
    where
        F: Fn(&I) -> Result<O>,
    {
        let (paths, leaves): (Vec<String>, Vec<Tensor>) = input.named_leaves().into_iter().unzip();
        self.captures
            .run(&leaves, paths, read, |leaves| {
                let out = (self.f)(&input.unflatten(leaves.to_vec())?)?;
                let outputs = out.leaves();
                Ok((outputs.clone(), Arc::new(placeholders(&out, &outputs)?)))
            })
            .await
    }

    /// How many times `f` has been captured (once per input signature).
    pub fn captures(&self) -> usize {
        self.captures.count()
    }

    /// The batched function, jit'd: JAX's `vmap(jit(f))`. The batched graph
    /// is traced (through `f`'s trace), batched and captured once per input
    /// signature, then replayed with one submit. Axes as for
    /// [`vmap`](fn@crate::vmap).
    pub fn vmap<I: Tree>(self, in_axes: Vec<Option<isize>>, out_axes: Vec<isize>) -> Jit<impl Fn(&I) -> Result<O>, O>
    where
        F: Fn(&I) -> Result<O>,
    {
        let batched = vmap(move |x: &I| self.trace(x), in_axes, out_axes);
        jit(batched)
    }
}

/// `out`'s structure with each leaf replaced by one shared empty tensor, so
/// that what a capture keeps to rebuild later outputs holds no device
/// memory of the first call's.
fn placeholders<O: Tree>(out: &O, leaves: &[Tensor]) -> Result<O> {
    let Some(first) = leaves.first() else { return out.unflatten(Vec::new()) };
    let empty = Tensor::zeros(first.device(), &[0], first.dtype())?;
    out.unflatten(vec![empty; leaves.len()])
}
