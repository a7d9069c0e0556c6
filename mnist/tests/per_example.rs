//! Per-example gradients of the demo's MLP by vmap(grad) against a loop of
//! grad calls, and their clipping, on the CPU reference; ghost clipping
//! against clipping the per-example gradients, there and on every adapter.

use kiln::prelude::*;
use kiln_mnist::ModelKind;
use kiln_mnist::per_example::{clipped_mean, ghost_clipped_mean, norms, per_example_grads};
use kiln_nn::loss::cross_entropy;
use kiln_nn::{Layer, Sequential};

fn values(t: &Tensor) -> Vec<f32> {
    kiln::block_on(t.to_vec::<f32>()).unwrap()
}

#[test]
fn per_example_gradients_match_a_loop_and_clip_to_the_bound() {
    let dev = Device::cpu();
    let model = ModelKind::Mlp.build(&dev, Key::new(3)).unwrap();
    let b = 3;
    let x = kiln_conformance::rng::tensor(&dev, &[b, 784], 9, 0.0, 1.0);
    let y = Tensor::from_slice(&dev, &[3i32, 7, 1], &[b]).unwrap();
    let grads = per_example_grads(&model, &x, &y).unwrap();
    for i in 0..b {
        let xi = x.narrow(0, i, 1).unwrap();
        let yi = y.narrow(0, i, 1).unwrap();
        let want = kiln::grad(|m: &Sequential| cross_entropy(&m.forward(&xi)?, &yi))(&model).unwrap();
        for (g, w) in grads.leaves().iter().zip(want.leaves()) {
            let got = values(&g.narrow(0, i, 1).unwrap().squeeze(0).unwrap());
            for (a, e) in got.iter().zip(values(&w)) {
                assert!((a - e).abs() <= 1e-5 * (1.0 + e.abs()), "example {i}: {a} against the loop's {e}");
            }
        }
    }
    let before = values(&norms(&grads).unwrap());
    let clip = 0.5 * before.iter().cloned().fold(f32::MAX, f32::min);
    let (mean, after) = clipped_mean(&grads, clip as f64).unwrap();
    assert_eq!(values(&after), before, "the norms returned are the ones before clipping");
    // Every example was scaled to norm `clip`, so their mean has norm at most `clip`.
    let mean_norm: f32 = mean.leaves().iter().map(|g| values(g).iter().map(|v| v * v).sum::<f32>()).sum::<f32>().sqrt();
    assert!(mean_norm <= clip * 1.0001, "clipped mean norm {mean_norm} over {clip}");
    assert!(mean_norm > 0.0);
}

/// `ghost_clipped_mean` of a 3-layer MLP gives `clipped_mean` of the
/// per-example gradients (norms and mean), with a clip that scales some
/// examples and not others.
#[test]
fn ghost_clipping_equals_clipping_the_per_example_gradients() {
    let check = |label: &str, dev: &Device| {
        let model = kiln_nn::mlp(dev, Key::new(5), &[20, 16, 12, 5], Layer::Tanh).unwrap();
        let b = 6;
        let x = kiln_conformance::rng::tensor(dev, &[b, 20], 4, -1.0, 1.0);
        let y = Tensor::from_slice(dev, &[0i32, 4, 2, 1, 3, 2], &[b]).unwrap();
        let (want, want_norms) = {
            let grads = per_example_grads(&model, &x, &y).unwrap();
            let n = values(&norms(&grads).unwrap());
            let mut sorted = n.clone();
            sorted.sort_by(f32::total_cmp);
            let clip = sorted[b / 2] as f64;
            (clipped_mean(&grads, clip).unwrap().0, (n, clip))
        };
        let (got, got_norms) = ghost_clipped_mean(&model, &x, &y, want_norms.1).unwrap();
        for (g, w) in values(&got_norms).iter().zip(&want_norms.0) {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{label}: norm {g} against {w}");
        }
        for (g, w) in got.leaves().iter().zip(want.leaves()) {
            assert_eq!(g.shape(), w.shape());
            for (a, e) in values(g).iter().zip(values(&w)) {
                assert!((a - e).abs() <= 1e-5 * (1.0 + e.abs()), "{label}: mean {a} against {e}");
            }
        }
    };
    check("CPU reference", &Device::cpu());
    for (label, dev) in kiln_conformance::adapters::shared().iter() {
        check(label, dev);
    }
}

#[test]
fn ghost_clipping_names_a_layer_it_cannot_take() {
    let dev = Device::cpu();
    let model = Sequential::new(vec![Layer::LayerNorm(kiln_nn::LayerNorm::new(&dev, 4).unwrap())]);
    let x = Tensor::zeros(&dev, &[2, 4], DType::F32).unwrap();
    let y = Tensor::from_slice(&dev, &[0i32, 1], &[2]).unwrap();
    let e = ghost_clipped_mean(&model, &x, &y, 1.0).unwrap_err().to_string();
    assert!(e.contains("ghost_clipped_mean") && e.contains("layer 0") && e.contains("LayerNorm"), "{e}");
}

/// The showcase's DP-SGD step (per-example gradients, clipped mean, SGD
/// update) is one submit on every adapter, and `jit` of it captures once
/// and replays as one submit with the same values: `jit(vmap(grad))`.
#[test]
fn a_dp_sgd_step_is_one_submit_and_replays_under_jit() {
    for (label, dev) in kiln_conformance::adapters::shared().iter() {
        let model = ModelKind::Mlp.build(dev, Key::new(7)).unwrap();
        let template = model.clone();
        let step = move |inputs: &[Tensor]| -> Result<Vec<Tensor>> {
            let (params, data) = inputs.split_at(inputs.len() - 2);
            let model = template.unflatten(params.to_vec())?;
            let (mean, norms) = clipped_mean(&per_example_grads(&model, &data[0], &data[1])?, 1.0)?;
            let updated: Vec<Tensor> =
                params.iter().zip(mean.leaves()).map(|(p, g)| p.sub(&g.mul_scalar(0.1)?)).collect::<Result<_>>()?;
            Ok([updated, vec![norms]].concat())
        };
        let b = 8;
        let x = kiln_conformance::rng::tensor(dev, &[b, 784], 9, 0.0, 1.0);
        let y = Tensor::from_slice(dev, &[3i32, 7, 1, 0, 9, 4, 4, 2], &[b]).unwrap();
        let inputs: Vec<Tensor> = model.leaves().into_iter().chain([x, y]).collect();
        kiln::block_on(Tensor::realize_all(&inputs.iter().collect::<Vec<_>>())).unwrap();
        let submits = || dev.stats().submits;
        let before = submits();
        let eager = step(&inputs).unwrap();
        kiln::block_on(Tensor::realize_all(&eager.iter().collect::<Vec<_>>())).unwrap();
        assert_eq!(submits() - before, 1, "{label}: submits of one DP-SGD step");
        let jitted = kiln::jit_flat(step);
        kiln::block_on(jitted.call(&inputs)).unwrap();
        let before = submits();
        let replayed = kiln::block_on(jitted.call(&inputs)).unwrap();
        assert_eq!(submits() - before, 1, "{label}: submits of a replayed step");
        assert_eq!(jitted.captures(), 1, "{label}: captures");
        for (r, e) in replayed.iter().zip(&eager) {
            assert_eq!(values(r), values(e), "{label}: a replay against the eager step");
        }
    }
}
