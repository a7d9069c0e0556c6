//! Dynamic loss scaling on the CPU reference and every GPU adapter: finite
//! steps match the wrapped optimizer and grow the scale, an overflowing step
//! is skipped and counted, the scale never halves below its floor, bad
//! configs are errors, and in f16 a loss too small for f16 gradients trains
//! only when scaled (disabled, the transformation passes it through).

mod common;

use common::{assert_close, devices, read};
use kiln::prelude::*;
use kiln_nn::optim::*;

#[derive(Tree, Clone)]
struct Params {
    w: Tensor,
    b: Tensor,
}

fn params(dev: &Device) -> Params {
    let f = |v: &[f64], shape: &[usize]| Tensor::from_f64(dev, v, shape, DType::F32).unwrap();
    Params { w: f(&[0.5, -1.0, 0.25, 2.0], &[2, 2]), b: f(&[0.1, -0.2], &[2]) }
}

/// Step `k`'s gradients, times `scale` (as `training_step` would produce
/// them), with `b`'s second entry replaced by `poison` when given.
fn grads(dev: &Device, k: usize, scale: f64, poison: Option<f64>) -> Params {
    let g = |i: usize| ((i as f64 + 1.0) * 0.3 - 0.7) * (1.0 + k as f64) * scale;
    let w: Vec<f64> = (0..4).map(g).collect();
    let b = [g(4), poison.unwrap_or(g(5))];
    Params {
        w: Tensor::from_f64(dev, &w, &[2, 2], DType::F32).unwrap(),
        b: Tensor::from_f64(dev, &b, &[2], DType::F32).unwrap(),
    }
}

fn flat(p: &Params) -> Vec<f64> {
    [read(&p.w), read(&p.b)].concat()
}

fn scalar(t: &Tensor) -> f64 {
    read(t)[0]
}

fn config(initial: f64, growth_interval: u32, min_scale: f64) -> LossScaleConfig {
    LossScaleConfig { enabled: true, initial, growth_interval, min_scale }
}

#[test]
fn finite_steps_match_the_wrapped_optimizer_and_grow_the_scale() {
    for (label, dev, tol) in devices() {
        let scaled = dynamic_loss_scale(adam(0.1, 0.9, 0.999, 1e-8), config(8.0, 2, 1.0));
        let plain = adam(0.1, 0.9, 0.999, 1e-8);
        let (mut p, mut q) = (params(&dev), params(&dev));
        let (mut s, mut t) = (scaled.init(&p).unwrap(), plain.init(&q).unwrap());
        let mut seen = Vec::new();
        for k in 0..3 {
            let scale = scalar(&s.scale);
            seen.push((scale, scalar(&s.good_steps)));
            let (u, next) = scaled.update(&grads(&dev, k, scale, None), &s, Some(&p)).unwrap();
            (p, s) = (apply_updates(&p, &u).unwrap(), next);
            let (u, next) = plain.update(&grads(&dev, k, 1.0, None), &t, Some(&q)).unwrap();
            (q, t) = (apply_updates(&q, &u).unwrap(), next);
        }
        assert_close(&format!("scaled adam on {label}"), &flat(&p), &flat(&q), tol);
        assert_eq!(seen, [(8.0, 0.0), (8.0, 1.0), (16.0, 0.0)], "{label}: (scale, good steps) before each step");
        assert_eq!(scalar(&s.skipped), 0.0, "{label}");
    }
}

#[test]
fn an_overflowing_step_is_skipped_and_counted() {
    for (label, dev, _) in devices() {
        let opt = dynamic_loss_scale(adam(0.1, 0.9, 0.999, 1e-8), config(4.0, 100, 2.0));
        let p = params(&dev);
        let s = opt.init(&p).unwrap();
        let (_, s) = opt.update(&grads(&dev, 0, 4.0, None), &s, Some(&p)).unwrap();
        type State = LossScaleState<(AdamState<Params>, CountState)>;
        let counts = |s: &State| (scalar(&s.inner.0.count), scalar(&s.inner.1.count));
        let before = (flat(&s.inner.0.mu), flat(&s.inner.0.nu), counts(&s));
        let mut state = s;
        // inf, then NaN: each skipped; the second halving stops at the floor.
        for (poison, scale_after) in [(f64::INFINITY, 2.0), (f64::NAN, 2.0)] {
            let (u, next) = opt.update(&grads(&dev, 1, scalar(&state.scale), Some(poison)), &state, Some(&p)).unwrap();
            assert!(flat(&u).iter().all(|&v| v == 0.0), "{label}: a skipped step's updates are zeros");
            assert_eq!(scalar(&next.scale), scale_after, "{label}: scale after {poison}");
            assert_eq!(scalar(&next.good_steps), 0.0, "{label}");
            state = next;
        }
        assert_eq!(scalar(&state.skipped), 2.0, "{label}: skipped steps");
        let after = (flat(&state.inner.0.mu), flat(&state.inner.0.nu), counts(&state));
        assert_eq!(before, after, "{label}: Adam's state is untouched by skipped steps");
        // And a finite step after them updates again.
        let (u, _) = opt.update(&grads(&dev, 2, 2.0, None), &state, Some(&p)).unwrap();
        assert!(flat(&u).iter().all(|&v| v != 0.0 && v.is_finite()), "{label}");
    }
}

#[test]
fn all_finite_sees_every_leaf() {
    let dev = Device::cpu();
    assert!(kiln::block_on(all_finite(&grads(&dev, 0, 1.0, None)).unwrap().item::<bool>()).unwrap());
    for poison in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
        let t = all_finite(&grads(&dev, 0, 1.0, Some(poison))).unwrap();
        assert!(!kiln::block_on(t.item::<bool>()).unwrap(), "{poison}");
    }
    let half = Tensor::from_f64(&dev, &[1.0, 70000.0], &[2], DType::F16).unwrap();
    assert!(!kiln::block_on(all_finite(&vec![half]).unwrap().item::<bool>()).unwrap(), "f16 overflow is inf");
}

#[test]
fn bad_configs_are_errors_naming_the_values() {
    let p = params(&Device::cpu());
    for (c, want) in [
        (config(3.0, 10, 1.0), "initial 3 and min_scale 1 must be powers of two"),
        (config(8.0, 10, 0.0), "initial 8 and min_scale 0 must be powers of two"),
        (config(2.0, 10, 4.0), "min_scale 4 exceeds initial 2"),
        (config(8.0, 0, 1.0), "growth_interval 0 is not in 1..=2^31 - 1"),
    ] {
        let err = dynamic_loss_scale(sgd(0.1), c).init(&p).err().unwrap().to_string();
        assert!(err.contains("dynamic_loss_scale") && err.contains(want), "{err}");
    }
}

/// `(x, params..) → (loss, params.., state..)` of a loss whose f16
/// gradients (at most about 6e-9) round to zero unless scaled.
fn tiny_loss(p: &Params, x: &Tensor) -> Result<Tensor> {
    let half = |t: &Tensor| t.cast(DType::F16);
    let y = half(x)?.matmul(&half(&p.w)?)?.add(&half(&p.b)?)?.cast(DType::F32)?;
    y.sub(&y.scalar_like(1.0)?)?.mul(&y)?.sum(&[], false)?.mul_scalar(1e-9)
}

#[test]
fn f16_gradients_of_a_tiny_loss_train_only_when_scaled() {
    for (label, dev, _) in devices() {
        let x = Tensor::from_f64(&dev, &[1.0, -0.5, 0.25, 2.0], &[2, 2], DType::F32).unwrap();
        // How far one step of scaled (or unscaled) Adam moves each parameter.
        let moved = |scaling: LossScaleConfig| -> Vec<f64> {
            let p = params(&dev);
            let opt = dynamic_loss_scale(adam(0.1, 0.9, 0.999, 1e-20), scaling);
            let s = opt.init(&p).unwrap();
            let step = training_step(opt, tiny_loss);
            let (loss, q, _) = step(&(p.clone(), s, x.clone())).unwrap();
            let loss = scalar(&loss);
            assert!(loss.abs() < 1e-6 && loss != 0.0, "{label}: the loss comes back unscaled: {loss}");
            flat(&q).iter().zip(flat(&p)).map(|(a, b)| a - b).collect()
        };
        let off = LossScaleConfig::disabled();
        assert!(moved(off).iter().all(|&d| d == 0.0), "{label}: unscaled f16 gradients are zeros");
        let m = moved(LossScaleConfig::default());
        assert!(m.iter().all(|&d| (d.abs() - 0.1).abs() < 1e-3), "{label}: Adam's first step is ±lr: {m:?}");
    }
}

/// Labels of a fixed rule: which of the first four inputs is largest.
fn data(dev: &Device) -> (Tensor, Tensor) {
    let x = kiln::random::uniform(dev, Key::new(7), &[32, 8], DType::F32, -1.0, 1.0).unwrap();
    let labels = x.narrow(1, 0, 4).unwrap().argmax(Some(-1), false).unwrap().cast(DType::I32).unwrap();
    (x, labels)
}

#[test]
fn a_jit_captured_mixed_precision_mlp_trains_with_f32_masters() {
    use kiln_nn::{Layer, Sequential, loss, mlp};
    for (label, dev, _) in devices() {
        for half in [DType::F16, DType::BF16] {
            let model = mlp(&dev, Key::new(1), &[8, 32, 4], Layer::Relu).unwrap();
            let opt = dynamic_loss_scale(adam(3e-2, 0.9, 0.999, 1e-8), LossScaleConfig::default());
            let state = opt.init(&model).unwrap();
            let step = kiln::jit(training_step(opt, move |m: &Sequential, (x, labels): &(Tensor, Tensor)| {
                let low = m.map_leaves(|_, w| w.cast(half))?;
                loss::cross_entropy(&low.forward(&x.cast(half)?)?.cast(DType::F32)?, labels)
            }));
            let batch = data(&dev);
            let (mut model, mut state) = (model, state);
            let mut losses = Vec::new();
            for _ in 0..25 {
                let loss;
                (loss, model, state) = kiln::block_on(step.call(&(model, state, batch.clone()))).unwrap();
                losses.push(scalar(&loss));
            }
            assert!(model.leaves().iter().all(|w| w.dtype() == DType::F32), "{label} {half}: masters stay f32");
            let (first, last) = (losses[0], losses[losses.len() - 1]);
            assert!(last < 0.5 * first, "{label} {half}: loss {first} → {last}");
        }
    }
}
