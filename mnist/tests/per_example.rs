//! Per-example gradients of the demo's MLP by vmap(grad) against a loop of
//! grad calls, and their clipping, on the CPU reference.

use kiln::prelude::*;
use kiln_mnist::ModelKind;
use kiln_mnist::per_example::{clipped_mean, norms, per_example_grads};
use kiln_nn::Sequential;
use kiln_nn::loss::cross_entropy;

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
