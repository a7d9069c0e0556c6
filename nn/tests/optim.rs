//! Optimizers against independent f64 computations in this file, on the
//! CPU reference and every GPU adapter; one fused kernel per leaf update;
//! the step count read from the state under `jit`.

mod common;

use common::{assert_close, devices, read};
use kiln::prelude::*;
use kiln_nn::optim::*;

/// A small parameter tree: a matrix and a vector.
#[derive(Tree, Clone)]
struct Params {
    w: Tensor,
    b: Tensor,
}

const W0: [f64; 6] = [0.5, -1.0, 0.25, 2.0, -0.75, 1.5];
const B0: [f64; 2] = [0.1, -0.2];

fn params(dev: &Device) -> Params {
    let f = |v: &[f64], shape: &[usize]| Tensor::from_f64(dev, v, shape, DType::F32).unwrap();
    Params { w: f(&W0, &[2, 3]), b: f(&B0, &[2]) }
}

/// The gradients of step `k` (0-based), flattened w then b: fixed values
/// that change sign and size between steps.
fn grads_ref(k: usize) -> Vec<f64> {
    (0..8).map(|i| ((i as f64 + 1.0) * 0.3 - 1.1) * (1.0 + k as f64) * if k % 2 == 1 { -0.5 } else { 1.0 }).collect()
}

fn grads(dev: &Device, k: usize) -> Params {
    let g = grads_ref(k);
    Params {
        w: Tensor::from_f64(dev, &g[..6], &[2, 3], DType::F32).unwrap(),
        b: Tensor::from_f64(dev, &g[6..], &[2], DType::F32).unwrap(),
    }
}

fn flat(p: &Params) -> Vec<f64> {
    [read(&p.w), read(&p.b)].concat()
}

/// Run `steps` steps of `opt` on every device and compare the parameters
/// with `reference` (initial parameters and per-step gradients → final).
fn check<T: Transform<Params>>(what: &str, opt: &T, steps: usize, want: &[f64]) {
    for (label, dev, tol) in devices() {
        let mut p = params(&dev);
        let mut state = opt.init(&p).unwrap();
        for k in 0..steps {
            let (u, s) = opt.update(&grads(&dev, k), &state, Some(&p)).unwrap();
            p = apply_updates(&p, &u).unwrap();
            state = s;
        }
        assert_close(&format!("{what} on {label}"), &flat(&p), want, tol);
    }
}

fn initial() -> Vec<f64> {
    [W0.as_slice(), B0.as_slice()].concat()
}

/// Adam/AdamW in f64, one scalar at a time.
fn adamw_ref(lr: f64, b1: f64, b2: f64, eps: f64, wd: f64, steps: usize, grads: fn(usize) -> Vec<f64>) -> Vec<f64> {
    let mut p = initial();
    let (mut m, mut v) = (vec![0.0; 8], vec![0.0; 8]);
    for k in 0..steps {
        let g = grads(k);
        let t = (k + 1) as i32;
        for i in 0..8 {
            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
            let (mh, vh) = (m[i] / (1.0 - b1.powi(t)), v[i] / (1.0 - b2.powi(t)));
            p[i] -= lr * (mh / (vh.sqrt() + eps) + wd * p[i]);
        }
    }
    p
}

#[test]
fn adam_and_adamw_after_three_steps_match_f64() {
    check("adam", &adam(0.1, 0.9, 0.999, 1e-8), 3, &adamw_ref(0.1, 0.9, 0.999, 1e-8, 0.0, 3, grads_ref));
    check("adamw", &adamw(0.05, 0.8, 0.99, 1e-6, 0.1), 3, &adamw_ref(0.05, 0.8, 0.99, 1e-6, 0.1, 3, grads_ref));
}

fn momentum_ref(lr: f64, mu: f64, nesterov: bool, steps: usize) -> Vec<f64> {
    let mut p = initial();
    let mut buf = [0.0; 8];
    for k in 0..steps {
        let g = grads_ref(k);
        for i in 0..8 {
            buf[i] = g[i] + mu * buf[i];
            let step = if nesterov { g[i] + mu * buf[i] } else { buf[i] };
            p[i] -= lr * step;
        }
    }
    p
}

#[test]
fn sgd_momentum_and_nesterov_match_f64() {
    check("sgd", &sgd(0.3), 3, &momentum_ref(0.3, 0.0, false, 3));
    check("momentum", &sgd_momentum(0.1, 0.9, false), 3, &momentum_ref(0.1, 0.9, false, 3));
    check("nesterov", &nesterov(0.1, 0.9), 3, &momentum_ref(0.1, 0.9, true, 3));
}

#[test]
fn rmsprop_matches_f64() {
    let (lr, decay, eps) = (0.01, 0.9, 1e-7);
    let mut p = initial();
    let mut v = [0.0; 8];
    for k in 0..3 {
        let g = grads_ref(k);
        for i in 0..8 {
            v[i] = decay * v[i] + (1.0 - decay) * g[i] * g[i];
            p[i] -= lr * g[i] / (v[i].sqrt() + eps);
        }
    }
    check("rmsprop", &rmsprop(lr, decay, eps), 3, &p);
}

#[test]
fn clip_by_global_norm_scales_the_whole_tree() {
    let g = grads_ref(2);
    let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
    for max in [norm / 3.0, norm * 2.0] {
        let want: Vec<f64> = g.iter().map(|x| x * (max / norm).min(1.0)).collect();
        for (label, dev, tol) in devices() {
            let clip = clip_by_global_norm(max);
            let p = params(&dev);
            let (u, ()) = clip.update(&grads(&dev, 2), &clip.init(&p).unwrap(), None).unwrap();
            assert_close(&format!("clip to {max} on {label}"), &flat(&u), &want, tol);
            let n = read(&global_norm(&u).unwrap())[0];
            assert_close(&format!("norm after clipping on {label}"), &[n], &[norm.min(max)], tol * 10.0);
        }
    }
}

/// optax's warmup_cosine_decay_schedule written out in f64.
fn warmup_cosine_ref(init: f64, peak: f64, warmup: u64, decay: u64, end: f64, t: u64) -> f64 {
    if t < warmup {
        return init + (peak - init) * t as f64 / warmup as f64;
    }
    let n = (decay - warmup) as f64;
    let s = ((t - warmup) as f64).min(n);
    end + (peak - end) * 0.5 * (1.0 + (std::f64::consts::PI * s / n).cos())
}

#[test]
fn schedules_read_the_count_from_the_state() {
    let (init, peak, warmup, decay, end) = (0.01, 1.0, 4, 12, 0.1);
    let want: Vec<f64> = (0..16).map(|t| warmup_cosine_ref(init, peak, warmup, decay, end, t)).collect();
    for (label, dev, _) in devices() {
        // SGD with unit gradients moves each parameter by -lr(t) at step t.
        let opt = sgd(warmup_cosine_decay(init, peak, warmup, decay, end));
        let mut p = Tensor::zeros(&dev, &[1], DType::F32).unwrap();
        let mut state = opt.init(&p).unwrap();
        let mut got = Vec::new();
        for _ in 0..16 {
            let (u, s) = opt.update(&Tensor::ones(&dev, &[1], DType::F32).unwrap(), &state, None).unwrap();
            got.push(-read(&u)[0]);
            p = apply_updates(&p, &u).unwrap();
            state = s;
        }
        // SwiftShader's cos is accurate to about 2^-11 (docs/SHARP_EDGES.md).
        let tol = if label == "cpu" { 1e-9 } else { 1e-3 };
        assert_close(&format!("warmup+cosine on {label}"), &got, &want, tol);
        assert_eq!(read(&state.0.count), [16.0], "{label}");
        let sum: f64 = want.iter().sum();
        assert_close(&format!("sum of steps on {label}"), &read(&p), &[-sum], tol * 16.0);
    }
    // The pieces on their own, on the CPU reference.
    let cpu = Device::cpu();
    let at = |s: &dyn Schedule, t: i32| read(&s.at(&Tensor::from_slice(&cpu, &[t], &[]).unwrap()).unwrap())[0];
    assert_close("linear", &[at(&linear(1.0, 3.0, 4), 1), at(&linear(1.0, 3.0, 4), 9)], &[1.5, 3.0], 1e-12);
    let c = cosine_decay(2.0, 10, 0.25);
    let want_c = 2.0 * (0.75 * 0.5 * (1.0 + (std::f64::consts::PI * 0.3).cos()) + 0.25);
    assert_close("cosine", &[at(&c, 3), at(&c, 50)], &[want_c, 0.5], 1e-12);
    assert_close("constant", &[at(&constant(0.7), 5), at(&0.7, 9)], &[0.7, 0.7], 1e-12);
}

#[test]
fn parameter_ema_matches_f64() {
    let decay = 0.9;
    let mut ema = initial();
    let mut p = initial();
    for k in 0..3 {
        for (pi, g) in p.iter_mut().zip(grads_ref(k)) {
            *pi -= 0.1 * g;
        }
        for (e, pi) in ema.iter_mut().zip(&p) {
            *e = decay * *e + (1.0 - decay) * pi;
        }
    }
    for (label, dev, tol) in devices() {
        let (opt, avg) = (sgd(0.1), ParamEma::new(decay));
        let mut p = params(&dev);
        let (mut state, mut e) = (opt.init(&p).unwrap(), avg.init(&p).unwrap());
        for k in 0..3 {
            let (u, s) = opt.update(&grads(&dev, k), &state, None).unwrap();
            (p, state) = (apply_updates(&p, &u).unwrap(), s);
            e = avg.update(&e, &p).unwrap();
        }
        assert_close(&format!("ema on {label}"), &flat(&e), &ema, tol);
    }
}

#[test]
fn one_adam_update_of_one_tensor_is_one_kernel() {
    for (label, dev, _) in devices().into_iter().skip(1) {
        let opt = adamw(1e-3, 0.9, 0.999, 1e-8, 0.01);
        let p = Tensor::full(&dev, &[64, 300], 0.5, DType::F32).unwrap();
        let g = Tensor::full(&dev, &[64, 300], 0.25, DType::F32).unwrap();
        let state = opt.init(&p).unwrap();
        let roots = [&p, &g, &state.0.count, &state.0.mu, &state.0.nu, &state.2.count];
        kiln::block_on(Tensor::realize_all(&roots)).unwrap();
        let (u, s) = opt.update(&g, &state, Some(&p)).unwrap();
        let new_p = apply_updates(&p, &u).unwrap();
        let before = dev.stats().kernels_launched;
        kiln::block_on(Tensor::realize_all(&[&new_p, &s.0.mu, &s.0.nu])).unwrap();
        let kernels = dev.stats().kernels_launched - before;
        assert_eq!(kernels, 1, "{label}: new param, mu and nu in one kernel");
        // Both step counts are rank 0: one more kernel for the whole step.
        let before = dev.stats().kernels_launched;
        kiln::block_on(Tensor::realize_all(&[&s.0.count, &s.2.count])).unwrap();
        assert_eq!(dev.stats().kernels_launched - before, 1, "{label}: counts");
    }
}

/// (p, g, count, mu, nu) → (p', count', mu', nu') through `adam`.
fn adam_step(inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let [p, g, count, mu, nu, lr_count] = inputs else { panic!("six inputs") };
    let opt = adam(0.1, 0.9, 0.999, 1e-8);
    let state =
        (AdamState { count: count.clone(), mu: mu.clone(), nu: nu.clone() }, CountState { count: lr_count.clone() });
    let (u, (a, l)) = opt.update(g, &state, None)?;
    Ok(vec![apply_updates(p, &u)?, g.clone(), a.count, a.mu, a.nu, l.count])
}

#[test]
fn a_jit_captured_adam_step_keeps_counting_on_replay() {
    for (label, dev, _) in devices().into_iter().skip(1) {
        let step = kiln::jit_flat(adam_step);
        let p = Tensor::from_f64(&dev, &W0, &[6], DType::F32).unwrap();
        let g = Tensor::from_f64(&dev, &grads_ref(0)[..6], &[6], DType::F32).unwrap();
        let s = adam(0.1, 0.9, 0.999, 1e-8).init(&p).unwrap();
        let mut eager = vec![p, g, s.0.count, s.0.mu, s.0.nu, s.1.count];
        let mut jitted = eager.clone();
        for k in 0..3 {
            eager = adam_step(&eager).unwrap();
            jitted = kiln::block_on(step.call(&jitted)).unwrap();
            for (e, j) in eager.iter().zip(&jitted) {
                assert_eq!(read(e), read(j), "{label}: step {k}");
            }
        }
        assert_eq!(step.captures(), 1, "{label}");
        assert_eq!(read(&jitted[2]), [3.0], "{label}: count");
        // The same gradient every step: the reference with step 0's gradients.
        let want = adamw_ref(0.1, 0.9, 0.999, 1e-8, 0.0, 3, |_| grads_ref(0));
        assert_close(&format!("jit adam on {label}"), &read(&jitted[0]), &want[..6], 5e-5);
    }
}

#[test]
fn f16_parameters_get_f16_updates_and_f32_moments() {
    for (label, dev, _) in devices() {
        let p = Tensor::from_f64(&dev, &[1.0, -2.0], &[2], DType::F16).unwrap();
        let g = Tensor::from_f64(&dev, &[0.5, -3.0], &[2], DType::F16).unwrap();
        let opt = adam(0.125, 0.9, 0.999, 1e-8);
        let state = opt.init(&p).unwrap();
        let (u, state) = opt.update(&g, &state, None).unwrap();
        assert_eq!((u.dtype(), state.0.mu.dtype(), state.0.nu.dtype()), (DType::F16, DType::F32, DType::F32));
        // Adam's first step is lr · sign(g), up to eps and f16 rounding.
        let p = apply_updates(&p, &u).unwrap();
        assert_eq!(p.dtype(), DType::F16);
        assert_close(&format!("f16 adam on {label}"), &read(&p), &[0.875, -1.875], 1e-3);
    }
}

#[test]
fn bad_inputs_are_errors_naming_the_leaf() {
    let dev = Device::cpu();
    let opt = adam(0.1, 0.9, 0.999, 1e-8);
    let p = params(&dev);
    let state = opt.init(&p).unwrap();
    let other = Params { w: Tensor::zeros(&dev, &[3, 2], DType::F32).unwrap(), b: p.b.clone() };
    let err = opt.update(&other, &state, None).err().unwrap().to_string();
    assert!(err.contains("scale_by_adam") && err.contains("mu leaf `w` [2, 3]") && err.contains("[3, 2]"), "{err}");
    let ints = Params { w: Tensor::zeros(&dev, &[2, 3], DType::I32).unwrap(), b: p.b.clone() };
    let err = opt.init(&ints).err().unwrap().to_string();
    assert!(err.contains("leaf `w` is i32"), "{err}");
    let err = adamw(0.1, 0.9, 0.999, 1e-8, 0.1).update(&p, &adamw(0.1, 0.9, 0.999, 1e-8, 0.1).init(&p).unwrap(), None);
    assert!(err.err().unwrap().to_string().contains("add_decayed_weights: needs the parameters"));
    let err = opt.init(&Vec::<Tensor>::new()).err().unwrap().to_string();
    assert!(err.contains("no leaves"), "{err}");
}

#[test]
fn a_decay_mask_keeps_vectors_from_decaying() {
    let decayed = adamw_ref(0.05, 0.8, 0.99, 1e-6, 0.1, 3, grads_ref);
    let plain = adamw_ref(0.05, 0.8, 0.99, 1e-6, 0.0, 3, grads_ref);
    // Entries are independent: the matrix w decays, the vector b does not.
    let want = [&decayed[..6], &plain[6..]].concat();
    let opt = adamw(0.05, 0.8, 0.99, 1e-6, add_decayed_weights(0.1).masked(matrices_only));
    check("adamw masked to matrices", &opt, 3, &want);
}

/// The mean of micro-batch gradients `3k..3k + 3`.
fn mean_of_three(k: usize) -> Vec<f64> {
    let g: Vec<Vec<f64>> = (3 * k..3 * k + 3).map(grads_ref).collect();
    (0..8).map(|i| g.iter().map(|g| g[i]).sum::<f64>() / 3.0).collect()
}

#[test]
fn multi_steps_applies_the_mean_of_every_k_gradients() {
    let opt = multi_steps(adam(0.1, 0.9, 0.999, 1e-8), 3);
    check(
        "multi_steps(adam, 3) after 6 micro-steps",
        &opt,
        6,
        &adamw_ref(0.1, 0.9, 0.999, 1e-8, 0.0, 2, mean_of_three),
    );
    check(
        "multi_steps(adam, 3) after 5 micro-steps",
        &opt,
        5,
        &adamw_ref(0.1, 0.9, 0.999, 1e-8, 0.0, 1, mean_of_three),
    );
    let dev = Device::cpu();
    let err = multi_steps(adam(0.1, 0.9, 0.999, 1e-8), 0).init(&params(&dev)).err().unwrap().to_string();
    assert!(err.contains("multi_steps") && err.contains("0 micro-batches"), "{err}");
}

/// Gradient accumulation inside one jit-captured step: the micro-batch
/// counter and the sum are state, so six replays with fresh gradients
/// apply the inner Adam twice, as the eager run does.
#[test]
fn multi_steps_accumulates_across_replays_of_a_jit_step() {
    let opt = multi_steps(adam(0.1, 0.9, 0.999, 1e-8), 3);
    for (label, dev, tol) in devices().into_iter().skip(1) {
        let p = params(&dev);
        let state = opt.init(&p).unwrap();
        let (n_params, n_state) = (p.leaves().len(), state.leaves().len());
        let step = kiln::jit_flat(|inputs: &[Tensor]| {
            let (p_leaves, rest) = inputs.split_at(n_params);
            let (g_leaves, s_leaves) = rest.split_at(n_params);
            let (p, g) = (p.unflatten(p_leaves.to_vec())?, p.unflatten(g_leaves.to_vec())?);
            let (u, s) = opt.update(&g, &state.unflatten(s_leaves.to_vec())?, Some(&p))?;
            Ok([apply_updates(&p, &u)?.leaves(), s.leaves()].concat())
        });
        let mut carried = [p.leaves(), state.leaves()].concat();
        for k in 0..6 {
            let (p_leaves, s_leaves) = carried.split_at(n_params);
            let inputs = [p_leaves, &grads(&dev, k).leaves(), s_leaves].concat();
            carried = kiln::block_on(step.call(&inputs)).unwrap();
            assert_eq!(carried.len(), n_params + n_state);
        }
        assert_eq!(step.captures(), 1, "{label}");
        let want = adamw_ref(0.1, 0.9, 0.999, 1e-8, 0.0, 2, mean_of_three);
        assert_close(
            &format!("jit multi_steps(adam, 3) on {label}"),
            &flat(&p.unflatten(carried[..n_params].to_vec()).unwrap()),
            &want,
            tol,
        );
    }
}
