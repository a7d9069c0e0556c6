//! A schedule rendered with no device names the same kernels that the
//! device compiles when it runs the graph: what `kernels_for` shows (and
//! the golden fusion kernels check) is what runs.

use kiln::core::kernels_for;
use kiln::prelude::*;
use std::collections::BTreeSet;

/// `n` values in [-1, 1), a fixed pattern.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37 + seed * 11) % 23) as f32 / 11.5 - 1.0).collect()
}

fn tensor(dev: &Device, shape: &[usize], seed: usize) -> Tensor {
    Tensor::from_slice(dev, &values(shape.iter().product(), seed), shape).unwrap()
}

/// A dense layer's training step, a long softmax and a sum long enough
/// to take several passes: matmuls with epilogues, row kernels and
/// reductions, forward and backward.
fn program(dev: &Device) -> Result<Vec<Tensor>> {
    let (x, w1, b1, w2) =
        (tensor(dev, &[32, 40], 1), tensor(dev, &[40, 64], 2), tensor(dev, &[64], 3), tensor(dev, &[64, 12], 4));
    let labels = Tensor::from_slice(dev, &(0..32i32).map(|i| i * 5 % 12).collect::<Vec<_>>(), &[32])?;
    let loss = |p: &Vec<Tensor>| {
        let hidden = x.matmul(&p[0])?.add(&p[1])?.relu()?;
        let picked = hidden.matmul(&p[2])?.log_softmax(-1)?.mul(&labels.one_hot(12, DType::F32)?)?;
        picked.sum(&[-1], false)?.mean(&[], false)?.neg()
    };
    let (value, grads) = kiln::value_and_grad(loss)(&vec![w1, b1, w2])?;
    let softmax = tensor(dev, &[4, 3000], 5).softmax(-1)?;
    let sum = tensor(dev, &[300_001], 6).sum(&[], false)?;
    Ok([value, softmax, sum].into_iter().chain(grads).collect())
}

#[test]
fn a_rendered_schedule_is_what_the_device_compiles() {
    kiln_conformance::validation::env_for_adapters();
    let (found, skipped) = kiln::block_on(kiln_conformance::adapters::discover());
    for s in &skipped {
        eprintln!("skipped adapter: {s}");
    }
    for f in &found {
        let dev = &f.device;
        dev.set_matmul_tuning(Some(false));
        let outputs = program(dev).unwrap();
        let roots: Vec<_> = outputs.iter().map(|t| t.node().clone()).collect();
        let rendered: BTreeSet<String> =
            kernels_for(&dev.info().caps, &roots).unwrap().iter().map(|k| k.wgsl()).collect();
        kiln::block_on(dev.realize(&roots)).unwrap();
        let compiled: BTreeSet<String> = dev.compiled_sources().into_iter().collect();
        assert!(rendered.len() >= 8, "{}: {} kernels rendered", f.label, rendered.len());
        assert_eq!(rendered, compiled, "{}: rendered and compiled kernels differ", f.label);
        eprintln!("{}: {} kernels rendered, the same compiled", f.label, rendered.len());
    }
}
