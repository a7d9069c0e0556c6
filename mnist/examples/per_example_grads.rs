//! Per-example gradients of the demo's MLP for a batch of 64 by
//! `vmap(grad)`, each clipped to a norm of at most 1 and averaged (the core
//! of DP-SGD), then one SGD step: one batched graph, realized in one submit.
//! Then the same clipped mean by ghost clipping, which never forms the
//! per-example gradients.
//!
//! `cargo run --release -p kiln-mnist --example per_example_grads`

use kiln::prelude::*;
use kiln_mnist::ModelKind;
use kiln_mnist::per_example::{clipped_mean, ghost_clipped_mean, per_example_grads};
use kiln_nn::data::Mnist;

fn main() -> Result<()> {
    let dev = kiln::block_on(Device::gpu())?;
    println!("adapter: {} ({})", dev.info().name, dev.info().backend);
    let data = Mnist::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k"))?;
    let model = ModelKind::Mlp.build(&dev, Key::new(7))?;
    let batch = 64;
    let x = Tensor::from_slice(&dev, &data.train.images[..batch * 784], &[batch, 784])?;
    let y = Tensor::from_slice(&dev, &data.train.labels[..batch], &[batch])?;
    let leaves = model.leaves();
    Tensor::realize_all(&leaves.iter().chain([&x, &y]).collect::<Vec<_>>()).block()?;

    let before = dev.stats().submits;
    let grads = per_example_grads(&model, &x, &y)?;
    let (mean, norms) = clipped_mean(&grads, 1.0)?;
    let updated: Vec<Tensor> =
        leaves.iter().zip(mean.leaves()).map(|(p, g)| p.sub(&g.mul_scalar(0.1)?)).collect::<Result<_>>()?;
    Tensor::realize_all(&updated.iter().chain([&norms]).collect::<Vec<_>>()).block()?;
    let submits = dev.stats().submits - before;

    let norms = kiln::block_on(norms.to_vec::<f32>())?;
    let clipped = norms.iter().filter(|&&n| n > 1.0).count();
    let (lo, hi) = norms.iter().fold((f32::MAX, 0f32), |(lo, hi), &n| (lo.min(n), hi.max(n)));
    println!("per-example gradient norms of {batch} examples: {lo:.3} to {hi:.3}; {clipped} clipped to 1");
    println!("clipped mean gradient and an SGD step of {} parameters: {submits} submit(s)", updated.len());

    let (ghost, _) = ghost_clipped_mean(&model, &x, &y, 1.0)?;
    let mut worst = 0f32;
    for (g, m) in ghost.leaves().iter().zip(mean.leaves()) {
        let (g, m) = (kiln::block_on(g.to_vec::<f32>())?, kiln::block_on(m.to_vec::<f32>())?);
        worst = g.iter().zip(&m).fold(worst, |w, (a, b)| w.max((a - b).abs()));
    }
    println!("ghost clipping's clipped mean differs from it by at most {worst:.1e}");
    Ok(())
}

/// Blocking on a realization (the example runs natively).
trait Block {
    fn block(self) -> Result<()>;
}

impl<F: std::future::Future<Output = Result<()>>> Block for F {
    fn block(self) -> Result<()> {
        kiln::block_on(self)
    }
}
