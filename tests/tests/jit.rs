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
        let step = kiln::jit_flat(|inputs: &[Tensor]| {
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
    let f = kiln::jit_flat(|x: &[Tensor]| Ok(vec![x[0].exp()?]));
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
        let step = kiln::jit_flat(sgd_step);
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
        let step = kiln::jit_flat(f);
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

#[derive(Tree, Clone)]
struct Mlp {
    hidden: kiln_nn::Linear,
    out: kiln_nn::Linear,
}

fn mlp_loss(m: &Mlp, (x, labels): &(Tensor, Tensor)) -> Result<Tensor> {
    let logits = m.out.forward(&m.hidden.forward(x)?.relu()?)?;
    kiln_nn::loss::cross_entropy(&logits, labels)
}

/// `kiln::jit` over trees: a training step over (model, Adam state, batch)
/// takes and returns the user's own types, replays with one submit, and
/// gives, step by step, the values of the same step run eagerly.
#[test]
fn a_jit_over_trees_replays_a_training_step_equal_to_the_eager_one() {
    use kiln_nn::optim::{Transform, adam, training_step};
    let adapters = kiln_conformance::adapters::shared();
    let cpu = [("cpu".to_string(), Device::cpu())];
    for (label, dev) in cpu.iter().chain(adapters.iter()) {
        let key = Key::new(3);
        let model = Mlp {
            hidden: kiln_nn::Linear::new(dev, key.fold_in(0), 16, 32).unwrap(),
            out: kiln_nn::Linear::new(dev, key.fold_in(1), 32, 4).unwrap(),
        };
        let opt = adam(1e-2, 0.9, 0.999, 1e-8);
        let state = opt.init(&model).unwrap();
        let batch = (random(dev, &[8, 16], 7), Tensor::from_slice(dev, &[0i32, 1, 2, 3, 0, 1, 2, 3], &[8]).unwrap());
        let eager = training_step(adam(1e-2, 0.9, 0.999, 1e-8), mlp_loss);
        let step = kiln::jit(training_step(opt, mlp_loss));
        let (mut jitted, mut reference) = ((model.clone(), state.clone()), (model, state));
        for i in 0..3 {
            let before = dev.stats().submits;
            let (loss, model, state) = kiln::block_on(step.call(&(jitted.0, jitted.1, batch.clone()))).unwrap();
            if !dev.is_cpu() && i > 0 {
                assert_eq!(dev.stats().submits - before, 1, "{label}: replay {i} is one submit");
            }
            let (want_loss, want_model, want_state) = eager(&(reference.0, reference.1, batch.clone())).unwrap();
            let read = |t: &Tensor| kiln::block_on(t.to_vec::<f32>()).unwrap();
            assert_eq!(read(&loss), read(&want_loss), "{label}: loss of step {i}");
            for ((path, got), want) in model.named_leaves().iter().zip(want_model.leaves()) {
                let (got, want) = (read(got), read(&want));
                let close = got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-5 * (1.0 + w.abs()));
                assert!(close, "{label}: `{path}` after step {i}");
            }
            assert_eq!(read(&state.1.count.cast(DType::F32).unwrap()), [i as f32 + 1.0], "{label}: the count");
            (jitted, reference) = ((model, state), (want_model, want_state));
        }
        assert_eq!(step.captures(), usize::from(!dev.is_cpu()), "{label}: one capture");
    }
}

/// The key holds the input's leaf paths: two trees whose leaves have the
/// same shapes but other paths are two captures, each rebuilding outputs
/// in the structure its own trace returned.
#[test]
fn a_jit_over_trees_captures_per_structure() {
    let dev = &kiln_conformance::adapters::shared()[0].1;
    let f = kiln::jit(|t: &std::collections::BTreeMap<String, Tensor>| {
        t.iter().map(|(k, v)| Ok((k.clone() + "!", v.exp()?))).collect::<Result<std::collections::BTreeMap<_, _>>>()
    });
    let leaf = random(dev, &[4], 1);
    let tree = |name: &str| [(name.to_string(), leaf.clone())].into_iter().collect();
    let a = kiln::block_on(f.call(&tree("a"))).unwrap();
    let b = kiln::block_on(f.call(&tree("b"))).unwrap();
    let again = kiln::block_on(f.call(&tree("a"))).unwrap();
    assert_eq!(f.captures(), 2);
    assert_eq!(a.keys().collect::<Vec<_>>(), ["a!"]);
    assert_eq!(b.keys().collect::<Vec<_>>(), ["b!"]);
    let read = |t: &Tensor| kiln::block_on(t.to_vec::<f32>()).unwrap();
    assert_eq!(read(&again["a!"]), read(&a["a!"]));
}
