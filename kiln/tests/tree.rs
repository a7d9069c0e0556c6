//! Parameter trees: paths, rebuild, the derive, and gradients coming back
//! in the parameters' structure.

use kiln::prelude::*;
use std::collections::BTreeMap;

fn t(dev: &Device, v: f64, shape: &[usize]) -> Tensor {
    Tensor::full(dev, shape, v, DType::F32).unwrap()
}

#[derive(Tree)]
struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

#[derive(Tree)]
struct Model {
    layers: Vec<Linear>,
    norms: BTreeMap<String, Tensor>,
    pair: (Tensor, [Tensor; 2]),
    #[tree(skip)]
    name: String,
}

#[derive(Tree)]
struct Wrapper<T>(T, #[tree(skip)] usize);

fn model(dev: &Device) -> Model {
    Model {
        layers: vec![
            Linear { weight: t(dev, 1.0, &[2, 3]), bias: Some(t(dev, 2.0, &[3])) },
            Linear { weight: t(dev, 3.0, &[3, 1]), bias: None },
        ],
        norms: BTreeMap::from([("scale".to_string(), t(dev, 4.0, &[1]))]),
        pair: (t(dev, 5.0, &[]), [t(dev, 6.0, &[2]), t(dev, 7.0, &[2])]),
        name: "mlp".into(),
    }
}

#[test]
fn leaves_are_named_by_path() {
    let dev = Device::cpu();
    let paths: Vec<String> = model(&dev).named_leaves().into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        ["layers.0.weight", "layers.0.bias", "layers.1.weight", "norms.scale", "pair.0", "pair.1.0", "pair.1.1"]
    );
    let w = Wrapper(vec![t(&dev, 1.0, &[1])], 7);
    assert_eq!(w.named_leaves()[0].0, "0.0");
    assert_eq!(t(&dev, 1.0, &[1]).named_leaves()[0].0, "<root>");
}

#[test]
fn unflatten_rebuilds_the_structure_and_copies_skipped_fields() {
    let dev = Device::cpu();
    let m = model(&dev);
    let doubled = m.map_leaves(|_, x| x.mul_scalar(2.0)).unwrap();
    assert_eq!(doubled.name, "mlp");
    assert!(doubled.layers[1].bias.is_none());
    let v: Vec<f32> = kiln::block_on(doubled.pair.1[1].to_vec()).unwrap();
    assert_eq!(v, [14.0, 14.0]);
    let err = m.unflatten(m.leaves()[..3].to_vec()).err().unwrap().to_string();
    assert!(err.contains("ran out of leaves at `norms.scale`"), "{err}");
    let mut extra = m.leaves();
    extra.push(t(&dev, 0.0, &[1]));
    assert!(m.unflatten(extra).err().unwrap().to_string().contains("left over"));
}

#[test]
fn gradients_come_back_in_the_parameters_structure() {
    let dev = Device::cpu();
    let m = model(&dev);
    let loss = |m: &Model| -> Result<Tensor> {
        let x = Tensor::ones(m.layers[0].weight.device(), &[4, 2], DType::F32)?;
        let h = x.matmul(&m.layers[0].weight)?.add(m.layers[0].bias.as_ref().unwrap())?;
        let y = h.matmul(&m.layers[1].weight)?.mul(&m.norms["scale"])?;
        y.sum(&[], false)?.add(&m.pair.0)
    };
    let g = grad(loss)(&m).unwrap();
    assert_eq!(
        g.structure().0.iter().map(|l| &l.path).collect::<Vec<_>>(),
        m.structure().0.iter().map(|l| &l.path).collect::<Vec<_>>()
    );
    let gw: Vec<f32> = kiln::block_on(g.layers[1].weight.to_vec()).unwrap();
    // d/dW2 of sum(h @ W2 · 4) = 4 · column sums of h = 4 · 4 · (2·1 + 2).
    assert_eq!(gw, [64.0, 64.0, 64.0]);
    let unused: Vec<f32> = kiln::block_on(g.pair.1[0].to_vec()).unwrap();
    assert_eq!(unused, [0.0, 0.0]);
}
