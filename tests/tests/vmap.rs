//! `vmap`'s errors, its fusion against the hand-batched graph, and values
//! realized inside a mapped function. `vmap` against a loop and its
//! compositions with `grad`, `jit` and itself are conformance checks
//! (`kiln_conformance::vmap_checks`), run on every adapter by the
//! conformance test and in the browser.

use kiln::core::codegen::Caps;
use kiln::core::schedule_for;
use kiln::prelude::*;

fn values(t: &Tensor) -> Vec<f32> {
    kiln::block_on(t.cast(DType::F32).unwrap().to_vec::<f32>()).unwrap()
}

fn assert_close(label: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{label}: shapes");
    for (i, (g, w)) in values(got).iter().zip(values(want)).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{label}: element {i} is {g}, the loop's {w}");
    }
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
/// realized (it stays lazy: its values exist only batched), but reading or
/// capturing it is an error naming the value, not a panic.
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
        let captures = |x: &Vec<Tensor>| {
            let y = x[0].exp()?;
            y.device().capture(&[], &[y.node().clone()])?;
            Ok(vec![y])
        };
        let e = kiln::vmap(captures, vec![Some(0)], vec![0])(&vec![x.clone()]).unwrap_err().to_string();
        assert!(e.starts_with("jit: an output of f32 [3] is computed from a vmap input"), "{label}: {e}");
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
