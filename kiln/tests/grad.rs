//! grad, value_and_grad, vjp and stop_gradient on the CPU reference:
//! higher order, realized intermediates, conventions at kinks and ties.

use kiln::prelude::*;

/// One CPU device per test thread: tensors of two devices do not mix.
fn cpu_tensor(values: &[f64], shape: &[usize]) -> Tensor {
    thread_local!(static CPU: Device = Device::cpu());
    CPU.with(|d| Tensor::from_f64(d, values, shape, DType::F32).unwrap())
}

fn host(t: &Tensor) -> Vec<f64> {
    kiln::block_on(t.to_host()).unwrap().data
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "element {i}: got {g}, want {w}");
    }
}

#[test]
fn grad_of_square_sum() {
    let x = cpu_tensor(&[1.0, -2.0, 3.5], &[3]);
    let g = grad(|x: &Tensor| x.mul(x)?.sum(&[], false))(&x).unwrap();
    close(&host(&g), &[2.0, -4.0, 7.0], 1e-12);
}

#[test]
fn second_derivative_of_tanh() {
    let xs = [-2.0, -0.5, 0.0, 0.3, 1.7];
    let x = cpu_tensor(&xs, &[5]);
    let d1 = |x: &Tensor| grad(|x: &Tensor| x.tanh()?.sum(&[], false))(x);
    let d2 = grad(move |x: &Tensor| d1(x)?.sum(&[], false))(&x).unwrap();
    let want: Vec<f64> = xs.iter().map(|&v: &f64| -2.0 * v.tanh() * (1.0 - v.tanh() * v.tanh())).collect();
    close(&host(&d2), &want, 1e-12);
    // And a third derivative, through the same rules.
    let d3 = grad(|x: &Tensor| {
        grad(|x: &Tensor| grad(|x: &Tensor| x.tanh()?.sum(&[], false))(x)?.sum(&[], false))(x)?.sum(&[], false)
    })(&x)
    .unwrap();
    let want: Vec<f64> = xs
        .iter()
        .map(|&v: &f64| {
            let t = v.tanh();
            -2.0 * (1.0 - t * t) * (1.0 - 3.0 * t * t)
        })
        .collect();
    close(&host(&d3), &want, 1e-12);
}

/// A small MLP loss over a (w1, b1, w2) tree with fixed data.
fn mlp_loss(p: &(Tensor, Tensor, Tensor)) -> Result<Tensor> {
    let x = cpu_tensor(&(0..12).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>(), &[4, 3]);
    let h = x.matmul(&p.0)?.add(&p.1)?.tanh()?;
    let out = h.matmul(&p.2)?;
    out.mul(&out)?.mean(&[], false)
}

fn mlp_params(shift: f64) -> (Tensor, Tensor, Tensor) {
    let v = |n: usize, seed: f64| (0..n).map(|i| ((i as f64 + seed) * 1.3).cos() * 0.5 + shift).collect::<Vec<_>>();
    (cpu_tensor(&v(15, 0.0), &[3, 5]), cpu_tensor(&v(5, 1.0), &[5]), cpu_tensor(&v(10, 2.0), &[5, 2]))
}

#[test]
fn hessian_vector_product_matches_finite_differences() {
    let p = mlp_params(0.0);
    let v = mlp_params(0.3);
    let dot = |a: &(Tensor, Tensor, Tensor), b: &(Tensor, Tensor, Tensor)| -> Result<Tensor> {
        let terms =
            a.leaves().iter().zip(b.leaves()).map(|(x, y)| x.mul(&y)?.sum(&[], false)).collect::<Result<Vec<_>>>()?;
        terms[1..].iter().try_fold(terms[0].clone(), |acc, t| acc.add(t))
    };
    let hvp = grad(|p: &(Tensor, Tensor, Tensor)| dot(&grad(mlp_loss)(p)?, &v))(&p).unwrap();
    // Central differences of the gradient along v.
    let eps = 1e-5;
    let shifted = |s: f64| {
        let leaves: Vec<Tensor> =
            p.leaves().iter().zip(v.leaves()).map(|(a, d)| a.add(&d.mul_scalar(s).unwrap()).unwrap()).collect();
        p.unflatten(leaves)
    };
    let (gp, gm) = (grad(mlp_loss)(&shifted(eps).unwrap()).unwrap(), grad(mlp_loss)(&shifted(-eps).unwrap()).unwrap());
    for ((h, a), b) in hvp.leaves().iter().zip(gp.leaves()).zip(gm.leaves()) {
        let fd: Vec<f64> = host(&a).iter().zip(host(&b)).map(|(x, y)| (x - y) / (2.0 * eps)).collect();
        close(&host(h), &fd, 1e-6);
    }
}

#[test]
fn reading_a_value_inside_f_keeps_the_gradient() {
    let x = cpu_tensor(&[0.5, 1.5], &[2]);
    let g = grad(|x: &Tensor| {
        let y = x.exp()?;
        // Reading realizes y; its history must survive for the backward pass.
        let first: Vec<f32> = kiln::block_on(y.to_vec())?;
        assert!(first[0] > 0.0);
        y.mul(x)?.sum(&[], false)
    })(&x)
    .unwrap();
    let want: Vec<f64> = [0.5f64, 1.5].iter().map(|v| v.exp() * (1.0 + v)).collect();
    close(&host(&g), &want, 1e-12);
}

#[test]
fn realized_results_forget_their_inputs_after_the_trace() {
    let x = cpu_tensor(&[0.5, 1.5], &[2]);
    let (loss, g) = value_and_grad(|x: &Tensor| x.exp()?.sum(&[], false))(&x).unwrap();
    kiln::block_on(Tensor::realize_all(&[&loss, &g])).unwrap();
    assert!(loss.node().inputs().is_empty());
    assert!(g.node().inputs().is_empty());
}

#[test]
fn stop_gradient_blocks_the_gradient() {
    let x = cpu_tensor(&[2.0, 3.0], &[2]);
    let g = grad(|x: &Tensor| x.mul(&stop_gradient(x)?)?.sum(&[], false))(&x).unwrap();
    close(&host(&g), &[2.0, 3.0], 1e-12);
}

#[test]
fn vjp_over_tuple_outputs() {
    let x = cpu_tensor(&[1.0, 2.0], &[2]);
    let (out, pb) = vjp(|x: &Tensor| Ok((x.mul_scalar(3.0)?, x.sin()?)), &x).unwrap();
    close(&host(&out.0), &[3.0, 6.0], 1e-12);
    let ct = (cpu_tensor(&[1.0, 1.0], &[2]), cpu_tensor(&[2.0, 0.0], &[2]));
    let g = pb.pullback(&ct).unwrap();
    close(&host(&g), &[3.0 + 2.0 * 1f64.cos(), 3.0], 1e-12);
}

#[test]
fn conventions_at_kinks_and_ties() {
    let x = cpu_tensor(&[0.0, -1.0, 2.0], &[3]);
    let relu = grad(|x: &Tensor| x.relu()?.sum(&[], false))(&x).unwrap();
    close(&host(&relu), &[0.0, 0.0, 1.0], 0.0);
    let abs = grad(|x: &Tensor| x.abs()?.sum(&[], false))(&x).unwrap();
    close(&host(&abs), &[0.0, -1.0, 1.0], 0.0);
    // maximum: a tie sends half to each side.
    let y = cpu_tensor(&[0.0, 0.0, 0.0], &[3]);
    let (ga, gb) = grad(|p: &(Tensor, Tensor)| p.0.maximum(&p.1)?.sum(&[], false))(&(x.clone(), y)).unwrap();
    close(&host(&ga), &[0.5, 0.0, 1.0], 0.0);
    close(&host(&gb), &[0.5, 1.0, 0.0], 0.0);
    // max reduction: tied maxima share the gradient evenly.
    let t = cpu_tensor(&[1.0, 3.0, 3.0, 3.0, 2.0, 0.0], &[2, 3]);
    let g = grad(|t: &Tensor| t.max(&[-1], false)?.sum(&[], false))(&t).unwrap();
    close(&host(&g), &[0.0, 0.5, 0.5, 1.0, 0.0, 0.0], 1e-15);
    // prod with a zero: only the zero's entry is non-zero.
    let t = cpu_tensor(&[2.0, 0.0, 5.0, 0.0, 0.0, 1.0], &[2, 3]);
    let g = grad(|t: &Tensor| t.prod(&[-1], false)?.sum(&[], false))(&t).unwrap();
    close(&host(&g), &[0.0, 10.0, 0.0, 0.0, 0.0, 0.0], 0.0);
}

#[test]
fn unused_leaves_get_zeros_and_integer_paths_are_constant() {
    let x = cpu_tensor(&[1.0, 2.0], &[2]);
    let (gx, gy) = grad(|p: &(Tensor, Tensor)| {
        let k = p.0.cast(DType::I32)?.cast(DType::F32)?;
        p.0.mul(&k)?.sum(&[], false)
    })(&(x.clone(), x.clone()))
    .unwrap();
    close(&host(&gx), &[1.0, 2.0], 0.0);
    close(&host(&gy), &[0.0, 0.0], 0.0);
}
