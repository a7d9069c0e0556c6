//! jit: a captured function replays with one submit and no graph building,
//! gives the results of the uncaptured run, and captures anew when an input
//! shape changes.

use kiln::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};

fn random(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    kiln_conformance::rng::tensor(dev, shape, seed, -1.0, 1.0)
}

/// A small MLP forward pass and its mean cross-entropy with a softmax.
fn mlp(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let [x, w1, b1, w2] = inputs else { panic!("four inputs") };
    let h = x.matmul(w1)?.add(b1)?.relu()?;
    let logits = h.matmul(w2)?;
    let loss = logits.log_softmax(-1)?.mean(&[], false)?.neg()?;
    Ok(vec![logits.softmax(-1)?, loss])
}

#[test]
fn a_captured_function_replays_with_one_submit_and_equal_results() {
    kiln_conformance::validation::env_for_adapters();
    let (found, skipped) = kiln::block_on(kiln_conformance::adapters::discover());
    for s in skipped {
        eprintln!("skipped: {s}");
    }
    for f in found {
        let dev = &f.device;
        let calls = AtomicUsize::new(0);
        let step = kiln::jit(|inputs: &[Tensor]| {
            calls.fetch_add(1, Ordering::Relaxed);
            mlp(inputs)
        });
        let params = [random(dev, &[16, 32], 2), random(dev, &[32], 3), random(dev, &[32, 10], 4)];
        for (batch, seed) in [(8, 10), (8, 11), (8, 12), (24, 13), (24, 14)] {
            let mut inputs = vec![random(dev, &[batch, 16], seed)];
            inputs.extend(params.iter().cloned());
            let want: Vec<Vec<f32>> =
                mlp(&inputs).unwrap().iter().map(|t| kiln::block_on(t.to_vec::<f32>()).unwrap()).collect();
            let before = dev.stats();
            let out = kiln::block_on(step.call(&inputs)).unwrap();
            let after = dev.stats();
            assert_eq!(after.submits - before.submits, 1, "{}: one submit per call", f.label);
            for (o, w) in out.iter().zip(&want) {
                assert_eq!(&kiln::block_on(o.to_vec::<f32>()).unwrap(), w, "{}: batch {batch}", f.label);
            }
        }
        assert_eq!(step.captures(), 2, "{}: one capture per input shape", f.label);
        assert_eq!(calls.load(Ordering::Relaxed), 2, "{}: f runs only when capturing", f.label);
    }
}

#[test]
fn jit_on_the_cpu_reference_just_runs_the_function() {
    let dev = Device::cpu();
    let f = kiln::jit(|x: &[Tensor]| Ok(vec![x[0].exp()?]));
    let x = Tensor::from_slice(&dev, &[0.0f32, 1.0], &[2]).unwrap();
    let out = kiln::block_on(f.call(&[x])).unwrap();
    assert_eq!(kiln::block_on(out[0].to_vec::<f32>()).unwrap(), vec![1.0, std::f32::consts::E]);
}

/// One SGD step of a 784-256-10 MLP on a batch: (x, one-hot labels, params..)
/// → (loss, new params..).
fn sgd_step(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, y) = (&inputs[0], &inputs[1]);
    let params: Vec<Tensor> = inputs[2..].to_vec();
    let loss = |p: &Vec<Tensor>| {
        let h = x.matmul(&p[0])?.add(&p[1])?.relu()?;
        let logits = h.matmul(&p[2])?.add(&p[3])?;
        logits.log_softmax(-1)?.mul(y)?.sum(&[-1], false)?.mean(&[], false)?.neg()
    };
    let (value, grads) = kiln::value_and_grad(loss)(&params)?;
    let mut out = vec![value];
    for (p, g) in params.iter().zip(&grads) {
        out.push(p.sub(&g.mul_scalar(0.1)?)?);
    }
    Ok(out)
}

#[test]
fn a_captured_training_step_is_one_submit_and_learns() {
    kiln_conformance::validation::env_for_adapters();
    let (found, _) = kiln::block_on(kiln_conformance::adapters::discover());
    for f in found {
        let dev = &f.device;
        let step = kiln::jit(sgd_step);
        let x = random(dev, &[32, 784], 20);
        let labels: Vec<i32> = (0..32).map(|i| i % 10).collect();
        let y = Tensor::from_slice(dev, &labels, &[32]).unwrap().one_hot(10, DType::F32).unwrap();
        let mut params = vec![
            random(dev, &[784, 256], 21).mul_scalar(0.05).unwrap(),
            Tensor::zeros(dev, &[256], DType::F32).unwrap(),
            random(dev, &[256, 10], 22).mul_scalar(0.1).unwrap(),
            Tensor::zeros(dev, &[10], DType::F32).unwrap(),
        ];
        let all: Vec<&Tensor> = params.iter().chain([&x, &y]).collect();
        kiln::block_on(Tensor::realize_all(&all)).unwrap();
        let mut losses = Vec::new();
        for i in 0..8 {
            let mut inputs = vec![x.clone(), y.clone()];
            inputs.extend(params.iter().cloned());
            let before = dev.stats();
            let out = kiln::block_on(step.call(&inputs)).unwrap();
            let after = dev.stats();
            assert_eq!(after.submits - before.submits, 1, "{}: step {i} is one submit", f.label);
            if i == 1 {
                eprintln!(
                    "{}: a replayed step launches {} kernels",
                    f.label,
                    after.kernels_launched - before.kernels_launched
                );
            }
            losses.push(kiln::block_on(out[0].item::<f32>()).unwrap());
            params = out[1..].to_vec();
        }
        assert_eq!(step.captures(), 1);
        assert!(losses[7] < losses[0] * 0.8, "{}: loss {losses:?}", f.label);
    }
}

/// `call_reading` gives the output's values with the replay's own submit
/// where the output is a contiguous run of words (every output the replay
/// computes), and by a read of its own otherwise (views of an input: a
/// transpose, f16 from an odd offset); a missing output is an error naming
/// the count. On the CPU reference it reads as `to_host`.
#[test]
fn a_replay_reading_an_output_is_one_submit_and_gives_its_values() {
    let f = |x: &[Tensor]| -> Result<Vec<Tensor>> {
        Ok(vec![x[0].exp()?.sum(&[1], false)?, x[0].t()?, x[1].narrow(0, 1, 5)?])
    };
    let adapters = kiln_conformance::adapters::shared();
    let cpu = [("cpu".to_string(), Device::cpu())];
    for (label, dev) in cpu.iter().chain(adapters.iter()) {
        let step = kiln::jit(f);
        let inputs = [random(dev, &[3, 4], 5), random(dev, &[12], 6).cast(DType::F16).unwrap()];
        let want: Vec<kiln::core::HostArray> =
            f(&inputs).unwrap().iter().map(|t| kiln::block_on(t.to_host()).unwrap()).collect();
        kiln::block_on(step.call(&inputs)).unwrap();
        for (k, want) in want.iter().enumerate() {
            let before = dev.stats().submits;
            let (_, pending) = kiln::block_on(step.call_reading(&inputs, k)).unwrap();
            let got = kiln::block_on(pending.wait()).unwrap();
            let submits = dev.stats().submits - before;
            assert_eq!((&got.shape, &got.data), (&want.shape, &want.data), "{label}: output {k}");
            if !dev.is_cpu() {
                assert_eq!(submits, if k == 0 { 1 } else { 2 }, "{label}: submits reading output {k}");
            }
        }
        let e = kiln::block_on(step.call_reading(&inputs, 3)).err().unwrap().to_string();
        assert!(e.contains("output 3") && e.contains("3 outputs"), "{label}: {e}");
    }
}
