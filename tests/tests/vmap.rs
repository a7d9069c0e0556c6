//! `vmap` against a loop: for functions that together use every primitive,
//! `vmap(f)(xs)` equals stacking `f(x_i)` over the batch, on the CPU
//! reference and on every adapter; it composes with `grad` (both ways),
//! `jit` and itself; it fuses as the hand-batched graph does; and bad axes
//! are errors naming the leaf and its shape.

use kiln::core::codegen::Caps;
use kiln::core::schedule_for;
use kiln::prelude::*;

type F = fn(&Vec<Tensor>) -> Result<Vec<Tensor>>;

/// `xs[i]` for example `i` of a batch along `axes` (None: the whole leaf).
fn example(xs: &[Tensor], axes: &[Option<isize>], i: usize) -> Vec<Tensor> {
    xs.iter()
        .zip(axes)
        .map(|(x, a)| match a {
            Some(a) => x.narrow(*a, i, 1).unwrap().squeeze(*a).unwrap(),
            None => x.clone(),
        })
        .collect()
}

/// `f` applied example by example, each output stacked along `out_axis`.
fn looped(f: F, xs: &[Tensor], axes: &[Option<isize>], b: usize, out_axis: isize) -> Vec<Tensor> {
    let per: Vec<Vec<Tensor>> = (0..b).map(|i| f(&example(xs, axes, i)).unwrap()).collect();
    (0..per[0].len())
        .map(|k| Tensor::stack(&per.iter().map(|o| &o[k]).collect::<Vec<_>>(), out_axis).unwrap())
        .collect()
}

fn values(t: &Tensor) -> Vec<f32> {
    kiln::block_on(t.cast(DType::F32).unwrap().to_vec::<f32>()).unwrap()
}

fn assert_close(label: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{label}: shapes");
    for (i, (g, w)) in values(got).iter().zip(values(want)).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{label}: element {i} is {g}, the loop's {w}");
    }
}

/// One case: a function, its inputs' shapes, their batch axes and the output's.
struct Case {
    name: &'static str,
    f: F,
    shapes: &'static [&'static [usize]],
    in_axes: &'static [Option<isize>],
    out_axis: isize,
}

fn cases() -> Vec<Case> {
    let case = |name, f, shapes, in_axes, out_axis| Case { name, f, shapes, in_axes, out_axis };
    vec![
        case("unary, cast", |x| Ok(vec![x[0].exp()?.neg()?.cast(DType::F16)?]), &[&[5, 3, 4]], &[Some(0)], 0),
        case(
            "binary with a shared operand",
            |x| Ok(vec![x[0].mul(&x[1])?.add(&x[0])?]),
            &[&[5, 6], &[6]],
            &[Some(0), None],
            0,
        ),
        case(
            "where",
            |x| Ok(vec![Tensor::where_cond(&x[0].gt(&x[1])?, &x[0], &x[1])?]),
            &[&[4, 7], &[4, 7]],
            &[Some(0), Some(0)],
            0,
        ),
        case("reductions", |x| Ok(vec![x[0].sum(&[0], false)?, x[0].max(&[-1], true)?]), &[&[5, 3, 4]], &[Some(0)], 0),
        case("argmax", |x| Ok(vec![x[0].argmax(Some(-1), false)?]), &[&[5, 3, 4]], &[Some(0)], 0),
        case("reshape, permute", |x| Ok(vec![x[0].reshape(&[4, 3])?.transpose(0, 1)?]), &[&[6, 3, 4]], &[Some(0)], 0),
        case("slice", |x| Ok(vec![x[0].narrow(1, 1, 2)?]), &[&[4, 3, 5]], &[Some(0)], 0),
        case("expand", |x| Ok(vec![x[0].broadcast_to(&[2, 3, 4])?]), &[&[5, 3, 1]], &[Some(0)], 0),
        case(
            "matmul, shared right operand",
            |x| Ok(vec![x[0].matmul(&x[1])?]),
            &[&[6, 3, 4], &[4, 5]],
            &[Some(0), None],
            0,
        ),
        case(
            "matmul, vector times weights",
            |x| Ok(vec![x[0].unsqueeze(0)?.matmul(&x[1])?.squeeze(0)?]),
            &[&[6, 4], &[4, 5]],
            &[Some(0), None],
            0,
        ),
        case(
            "matmul, both batched",
            |x| Ok(vec![x[0].matmul(&x[1])?]),
            &[&[6, 3, 4], &[6, 4, 2]],
            &[Some(0), Some(0)],
            0,
        ),
        case(
            "matmul, shared left operand",
            |x| Ok(vec![x[0].matmul(&x[1])?]),
            &[&[3, 4], &[6, 4, 2]],
            &[None, Some(0)],
            0,
        ),
        case(
            "concat with a shared part",
            |x| Ok(vec![Tensor::concat(&[&x[0], &x[1]], 0)?]),
            &[&[5, 2, 3], &[4, 3]],
            &[Some(0), None],
            0,
        ),
        case(
            "gather by a batched index",
            |x| Ok(vec![x[0].index_select(0, &x[1].mul_scalar(3.0)?.cast(DType::I32)?)?]),
            &[&[5, 4], &[5, 3]],
            &[None, Some(0)],
            0,
        ),
        case(
            "constants inside",
            |x| Ok(vec![x[0].add(&Tensor::arange(x[0].device(), 0.0, 4.0, 1.0, DType::F32)?)?.mul_scalar(2.0)?]),
            &[&[3, 4]],
            &[Some(0)],
            0,
        ),
        case(
            "batch axis last, output axis 1",
            |x| Ok(vec![x[0].exp()?.sum(&[0], true)?]),
            &[&[2, 3, 5]],
            &[Some(-1)],
            1,
        ),
        case(
            "batch axis 1, output axis last (negative)",
            |x| Ok(vec![x[0].tanh()?.matmul(&x[1])?]),
            &[&[3, 4, 2], &[2, 5]],
            &[Some(1), None],
            -1,
        ),
    ]
}

/// Every case on `dev`: vmap against the loop.
fn check_cases(label: &str, dev: &Device) {
    for (k, c) in cases().iter().enumerate() {
        let xs: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| kiln_conformance::rng::tensor(dev, s, (10 * k + i) as u64, 0.0, 1.0))
            .collect();
        let b = c
            .shapes
            .iter()
            .zip(c.in_axes)
            .find_map(|(s, a)| a.map(|a| s[a.rem_euclid(s.len() as isize) as usize]))
            .unwrap();
        let mapped = kiln::vmap(c.f, c.in_axes.to_vec(), vec![c.out_axis])(&xs).unwrap();
        let want = looped(c.f, &xs, c.in_axes, b, c.out_axis);
        for (got, want) in mapped.iter().zip(&want) {
            assert_close(&format!("{label}: {}", c.name), got, want);
        }
    }
}

#[test]
fn vmap_equals_the_loop_on_the_cpu_reference() {
    check_cases("cpu", &Device::cpu());
}

#[test]
fn vmap_equals_the_loop_on_every_adapter() {
    let adapters = kiln_conformance::adapters::shared();
    for (label, dev) in adapters.iter() {
        check_cases(label, dev);
    }
}

fn loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let d = x.unsqueeze(0)?.matmul(&p[0])?.add(&p[1])?.tanh()?.squeeze(0)?.sub(y)?;
    d.mul(&d)?.sum(&[], false)
}

#[test]
fn per_example_gradients_compose_with_grad_jit_and_vmap() {
    let dev = Device::cpu();
    let rng = |s: &[usize], seed| kiln_conformance::rng::tensor(&dev, s, seed, -1.0, 1.0);
    let (w, bias, xs, ys) = (rng(&[4, 3], 1), rng(&[3], 2), rng(&[8, 4], 3), rng(&[8, 3], 4));
    // vmap(grad): the gradient of each example's loss.
    let per_example = |inputs: &Vec<Tensor>| {
        let (params, x, y) = (inputs[..2].to_vec(), &inputs[2], &inputs[3]);
        kiln::grad(|p: &Vec<Tensor>| loss(p, x, y))(&params)
    };
    let inputs = vec![w.clone(), bias.clone(), xs.clone(), ys.clone()];
    let grads = kiln::vmap(per_example, vec![None, None, Some(0), Some(0)], vec![0])(&inputs).unwrap();
    for i in 0..8 {
        let (x, y) = (xs.narrow(0, i, 1).unwrap().squeeze(0).unwrap(), ys.narrow(0, i, 1).unwrap().squeeze(0).unwrap());
        let want = kiln::grad(|p: &Vec<Tensor>| loss(p, &x, &y))(&vec![w.clone(), bias.clone()]).unwrap();
        for (g, want) in grads.iter().zip(&want) {
            assert_close(&format!("vmap(grad) example {i}"), &g.narrow(0, i, 1).unwrap().squeeze(0).unwrap(), want);
        }
    }
    // grad(vmap): the gradient of the summed per-example losses is the batched gradient.
    let total = |p: &Vec<Tensor>| {
        let each = |d: &Vec<Tensor>| Ok(vec![loss(p, &d[0], &d[1])?]);
        kiln::vmap(each, vec![Some(0)], vec![0])(&vec![xs.clone(), ys.clone()])?[0].sum(&[], false)
    };
    let params = vec![w.clone(), bias.clone()];
    let g = kiln::grad(total)(&params).unwrap();
    for (k, summed) in g.iter().enumerate() {
        assert_close(&format!("grad(vmap) leaf {k}"), summed, &grads[k].sum(&[0], false).unwrap());
    }
    // vmap of vmap: a function of one scalar over a [3, 5] grid.
    let inner = |x: &Vec<Tensor>| Ok(vec![x[0].mul(&x[0])?.add_scalar(1.0)?]);
    let grid = rng(&[3, 5], 5);
    let outer = |x: &Vec<Tensor>| kiln::vmap(inner, vec![Some(0)], vec![0])(x);
    let twice = kiln::vmap(outer, vec![Some(1)], vec![1])(&vec![grid.clone()]).unwrap();
    assert_close("vmap(vmap)", &twice[0], &grid.mul(&grid).unwrap().add_scalar(1.0).unwrap());
    // vmap of vmap through a matmul with a shared operand and a reduction.
    let (rows, shared) = (rng(&[3, 5, 4], 6), rng(&[4, 2], 7));
    let inner = |x: &Vec<Tensor>| Ok(vec![x[0].unsqueeze(0)?.matmul(&x[1])?.sum(&[], false)?]);
    let outer = |x: &Vec<Tensor>| kiln::vmap(inner, vec![Some(0), None], vec![0])(x);
    let twice = kiln::vmap(outer, vec![Some(0), None], vec![0])(&vec![rows.clone(), shared.clone()]).unwrap();
    assert_close("vmap(vmap) of matmul and sum", &twice[0], &rows.matmul(&shared).unwrap().sum(&[2], false).unwrap());
}

#[test]
fn a_jitted_vmap_captures_once_on_every_adapter() {
    let adapters = kiln_conformance::adapters::shared();
    for (label, dev) in adapters.iter() {
        let f = |x: &Vec<Tensor>| Ok(vec![x[0].exp()?.sum(&[-1], false)?]);
        let step = kiln::jit(move |xs: &[Tensor]| kiln::vmap(f, vec![Some(0)], vec![0])(&xs.to_vec()));
        for seed in 0..3 {
            let x = kiln_conformance::rng::tensor(dev, &[16, 32], seed, 0.0, 1.0);
            let out = kiln::block_on(step.call(std::slice::from_ref(&x))).unwrap();
            assert_close(label, &out[0], &x.exp().unwrap().sum(&[-1], false).unwrap());
        }
        assert_eq!(step.captures(), 1, "{label}");
    }
}

/// `jit(f).vmap(..)`, JAX's `vmap(jit(f))`: the batched function is
/// captured once and replayed, and equals `jit(f)` called on each example,
/// stacked; on every adapter.
#[test]
fn a_vmapped_jit_captures_once_and_equals_the_jit_per_example() {
    let adapters = kiln_conformance::adapters::shared();
    let f = |x: &[Tensor]| Ok(vec![x[0].matmul(&x[1])?.tanh()?.sum(&[-1], false)?]);
    for (label, dev) in adapters.iter() {
        let (per_example, batched) = (kiln::jit(f), kiln::jit(f).vmap(vec![Some(0), None], vec![0]));
        let w = kiln_conformance::rng::tensor(dev, &[8, 6], 7, -1.0, 1.0);
        for seed in 0..3 {
            let xs = kiln_conformance::rng::tensor(dev, &[5, 3, 8], seed, -1.0, 1.0);
            let out = kiln::block_on(batched.call(&[xs.clone(), w.clone()])).unwrap();
            let each: Vec<Tensor> = (0..5)
                .map(|i| {
                    let x = xs.narrow(0, i, 1).unwrap().squeeze(0).unwrap();
                    kiln::block_on(per_example.call(&[x, w.clone()])).unwrap().remove(0)
                })
                .collect();
            assert_close(label, &out[0], &Tensor::stack(&each.iter().collect::<Vec<_>>(), 0).unwrap());
        }
        assert_eq!(batched.captures(), 1, "{label}: the batched function is captured once");
    }
}

#[test]
fn a_jitted_function_maps_through_its_trace() {
    let dev = Device::cpu();
    let jitted = kiln::jit(|x: &[Tensor]| Ok(vec![x[0].exp()?.mul(&x[1])?]));
    let (xs, w) = (
        kiln_conformance::rng::tensor(&dev, &[6, 4], 1, 0.0, 1.0),
        kiln_conformance::rng::tensor(&dev, &[4], 2, 0.0, 1.0),
    );
    let mapped =
        kiln::vmap(|x: &Vec<Tensor>| jitted.trace(x), vec![Some(0), None], vec![0])(&vec![xs.clone(), w.clone()])
            .unwrap();
    assert_close("vmap(jit.trace)", &mapped[0], &xs.exp().unwrap().mul(&w).unwrap());
    assert_eq!(jitted.captures(), 0, "tracing captures nothing");
}

#[test]
fn a_vmapped_layer_fuses_as_the_hand_batched_one() {
    let dev = Device::cpu();
    let rng = |s: &[usize], seed| kiln_conformance::rng::tensor(&dev, s, seed, -1.0, 1.0);
    let (xs, w, b) = (rng(&[64, 784], 1), rng(&[784, 256], 2), rng(&[256], 3));
    let layer = |p: &Vec<Tensor>| Ok(vec![p[0].unsqueeze(0)?.matmul(&p[1])?.squeeze(0)?.add(&p[2])?.relu()?]);
    let mapped =
        kiln::vmap(layer, vec![Some(0), None, None], vec![0])(&vec![xs.clone(), w.clone(), b.clone()]).unwrap();
    let by_hand = xs.matmul(&w).unwrap().add(&b).unwrap().relu().unwrap();
    let items = |t: &Tensor| schedule_for(&Caps::webgpu(), &[t.node().clone()]).unwrap().items.len();
    assert_eq!(items(&mapped[0]), items(&by_hand));
    assert_eq!(items(&by_hand), 1, "one matmul with its epilogue");

    // The MLP's loss written for one example (a row vector through both
    // layers, squeezed at the end), mapped, against the hand-batched loss.
    let (w2, b2) = (rng(&[256, 10], 4), rng(&[10], 5));
    let labels = Tensor::from_slice(&dev, &(0..64).map(|i| i % 10).collect::<Vec<i32>>(), &[64]).unwrap();
    let logits = |x: &Tensor, p: &[Tensor]| x.matmul(&p[0])?.add(&p[1])?.relu()?.matmul(&p[2])?.add(&p[3]);
    let params = vec![w.clone(), b.clone(), w2.clone(), b2.clone()];
    let one = |i: &Vec<Tensor>| {
        let l = logits(&i[0].unsqueeze(0)?, &i[2..])?.log_softmax(-1)?;
        Ok(vec![l.squeeze(0)?.gather(0, &i[1].unsqueeze(0)?)?.neg()?.squeeze(0)?])
    };
    let args = [vec![xs.clone(), labels.clone()], params.clone()].concat();
    let in_axes = vec![Some(0), Some(0), None, None, None, None];
    let mapped = kiln::vmap(one, in_axes, vec![0])(&args).unwrap()[0].mean(&[], false).unwrap();
    let by_hand = logits(&xs, &params).unwrap().log_softmax(-1).unwrap();
    let picked = by_hand.gather(1, &labels.unsqueeze(1).unwrap()).unwrap().squeeze(1).unwrap();
    let by_hand = picked.neg().unwrap().mean(&[], false).unwrap();
    assert_eq!(items(&mapped), items(&by_hand), "kernels of the MLP's loss");
    assert_eq!(items(&by_hand), 5, "two matmuls with their epilogues, log-softmax, the pick, the mean");
    // And its gradient with respect to the first layer's weight.
    let grad_w = |loss: &dyn Fn(&Tensor) -> Result<Tensor>| kiln::grad(|w: &Tensor| loss(w))(&w).unwrap();
    let mapped = grad_w(&|w: &Tensor| {
        let args = [vec![xs.clone(), labels.clone(), w.clone()], params[1..].to_vec()].concat();
        kiln::vmap(one, vec![Some(0), Some(0), None, None, None, None], vec![0])(&args)?[0].mean(&[], false)
    });
    let by_hand = grad_w(&|w: &Tensor| {
        let p = [vec![w.clone()], params[1..].to_vec()].concat();
        let l = logits(&xs, &p)?.log_softmax(-1)?;
        l.gather(1, &labels.unsqueeze(1)?)?.squeeze(1)?.neg()?.mean(&[], false)
    });
    assert_eq!(items(&mapped), items(&by_hand), "kernels of the gradient of the MLP's loss");
}

#[test]
fn bad_axes_are_errors_naming_the_leaf_and_its_shape() {
    let dev = Device::cpu();
    let (a, b) = (Tensor::zeros(&dev, &[4, 3], DType::F32).unwrap(), Tensor::zeros(&dev, &[5, 3], DType::F32).unwrap());
    let f = |x: &Vec<Tensor>| Ok(vec![x[0].add(&x[1])?]);
    let err = |in_axes: Vec<Option<isize>>, out: isize| {
        kiln::vmap(f, in_axes, vec![out])(&vec![a.clone(), b.clone()]).unwrap_err().to_string()
    };
    let e = err(vec![Some(0)], 0);
    assert!(e.contains("vmap") && e.contains("[4, 3]") && e.contains("[5, 3]") && e.contains("disagree"), "{e}");
    let e = err(vec![Some(2), None], 0);
    assert!(e.contains("in_axes 2") && e.contains("[4, 3]"), "{e}");
    let e = err(vec![Some(-3), None], 0);
    assert!(e.contains("in_axes -3") && e.contains("[4, 3]"), "{e}");
    let e = err(vec![None, None], 0);
    assert!(e.contains("no input leaf is batched"), "{e}");
    let e = err(vec![Some(0), None, None], 0);
    assert!(e.contains("3 in_axes for 2 leaves"), "{e}");
    let e = kiln::vmap(f, vec![Some(1)], vec![0])(&vec![a.clone(), a.clone()]);
    assert!(e.is_ok(), "batch along axis 1 of both");
    let e = kiln::vmap(f, vec![Some(0)], vec![5])(&vec![a.clone(), a.clone()]).unwrap_err().to_string();
    assert!(e.contains("out_axes 5") && e.contains("[4, 3]"), "{e}");
    let e = kiln::vmap(f, vec![Some(0)], vec![-4])(&vec![a.clone(), a.clone()]).unwrap_err().to_string();
    assert!(e.contains("out_axes -4") && e.contains("[4, 3]"), "{e}");
}

/// Inside the mapped function a value computed from its inputs may be
/// realized (it stays lazy: its values exist only batched), but reading it
/// is an error naming the value, not a panic.
#[test]
fn inside_vmap_realizing_is_allowed_and_reading_is_an_error() {
    let adapters = kiln_conformance::adapters::shared();
    let cpu = [("cpu".to_string(), Device::cpu())];
    for (label, dev) in cpu.iter().chain(adapters.iter()) {
        let x = kiln_conformance::rng::tensor(dev, &[4, 3], 9, -1.0, 1.0);
        let realizes = |x: &Vec<Tensor>| {
            let y = x[0].exp()?;
            kiln::block_on(y.realize())?;
            Ok(vec![y.mul(&x[0])?])
        };
        let got = kiln::vmap(realizes, vec![Some(0)], vec![0])(&vec![x.clone()]).unwrap();
        assert_close(&format!("{label}: realized inside vmap"), &got[0], &x.exp().unwrap().mul(&x).unwrap());
        let reads = |x: &Vec<Tensor>| {
            let host = kiln::block_on(x[0].exp()?.to_host())?;
            Ok(vec![x[0].add_scalar(host.data[0])?])
        };
        let e = kiln::vmap(reads, vec![Some(0)], vec![0])(&vec![x.clone()]).unwrap_err().to_string();
        assert!(e.contains("read") && e.contains("[3]") && e.contains("vmap input"), "{label}: {e}");
    }
}

/// A key tensor gives the numbers its `Key` gives, and `vmap` over a
/// tensor of keys draws each example from its own key (JAX's
/// `vmap(random.normal)`), bit for bit, in one batched graph.
fn check_batched_keys(label: &str, dev: &Device) {
    use kiln::random;
    let keys = Key::new(42).split(5);
    let draw = |key: &Tensor| -> Result<Vec<Tensor>> {
        let dev = key.device();
        let z = random::normal(dev, key, &[3, 4], DType::F32, 0.0, 1.0)?;
        let u = random::uniform(dev, key, &[7], DType::F32, -1.0, 1.0)?;
        let n = random::randint(dev, key, &[6], -3, 9)?.cast(DType::F32)?;
        Ok(vec![z, u, n])
    };
    let mapped =
        kiln::vmap(|k: &Vec<Tensor>| draw(&k[0]), vec![Some(0)], vec![0])(&vec![random::keys(dev, &keys).unwrap()])
            .unwrap();
    assert_eq!(mapped[0].shape(), [5, 3, 4], "{label}: the batch axis leads");
    let bits = |t: &Tensor| values(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for (i, key) in keys.iter().enumerate() {
        let from_key = [
            random::normal(dev, *key, &[3, 4], DType::F32, 0.0, 1.0).unwrap(),
            random::uniform(dev, *key, &[7], DType::F32, -1.0, 1.0).unwrap(),
            random::randint(dev, *key, &[6], -3, 9).unwrap().cast(DType::F32).unwrap(),
        ];
        let from_tensor = draw(&key.to_tensor(dev).unwrap()).unwrap();
        for (k, want) in from_key.iter().enumerate() {
            assert_eq!(bits(&from_tensor[k]), bits(want), "{label}: draw {k} from key {i} as a tensor");
            let got = mapped[k].narrow(0, i, 1).unwrap().squeeze(0).unwrap();
            assert_eq!(bits(&got), bits(want), "{label}: draw {k} of example {i} under vmap");
        }
    }
    assert_ne!(bits(&mapped[0].narrow(0, 0, 1).unwrap()), bits(&mapped[0].narrow(0, 1, 1).unwrap()));
}

#[test]
fn vmap_over_keys_draws_each_example_from_its_own_key() {
    check_batched_keys("cpu", &Device::cpu());
    let adapters = kiln_conformance::adapters::shared();
    for (label, dev) in adapters.iter() {
        check_batched_keys(label, dev);
    }
}

#[test]
fn a_key_tensor_of_the_wrong_shape_is_an_error_naming_the_op() {
    let dev = Device::cpu();
    let bad = Tensor::from_slice(&dev, &[1u32, 2, 3], &[3]).unwrap();
    let e = kiln::random::normal(&dev, &bad, &[4], DType::F32, 0.0, 1.0).unwrap_err().to_string();
    assert!(e.contains("normal") && e.contains("[3]"), "{e}");
    let floats = Tensor::from_slice(&dev, &[1.0f32, 2.0], &[2]).unwrap();
    let e = kiln::random::uniform(&dev, &floats, &[4], DType::F32, 0.0, 1.0).unwrap_err().to_string();
    assert!(e.contains("uniform") && e.contains("f32"), "{e}");
}
