//! kiln-nn end to end: a training step of the MNIST-shaped MLP and small
//! CNN inside `kiln::jit` on every adapter (loss against the CPU
//! reference, kernel counts), gradients in the model's own type, and
//! every layer's errors for bad inputs.

use kiln::prelude::*;
use kiln_conformance::cases::input;
use kiln_nn::{
    AvgPool2d, CausalSelfAttention, Conv2d, Conv2dConfig, Dropout, Embedding, KvCache, Layer, LayerNorm, Linear,
    MaxPool2d, QuantizedConv2d, Sequential,
};
use kiln_nn::{loss, metrics, mlp};

fn adapters() -> Vec<(String, Device)> {
    kiln_conformance::validation::env_for_adapters();
    let (found, skipped) = kiln::block_on(kiln_conformance::adapters::discover());
    for s in skipped {
        eprintln!("skipped: {s}");
    }
    assert!(!found.is_empty(), "no adapter found");
    found.into_iter().map(|f| (f.label, f.device)).collect()
}

/// The demo's CNN: conv 5×5 (8) → relu → maxpool 2 → conv 5×5 (16) → relu
/// → maxpool 2 → flatten → linear 256 → 10, on [N, 1, 28, 28].
fn cnn(dev: &Device, key: Key) -> Result<Sequential> {
    let k = key.split(3);
    let c = Conv2dConfig::default();
    Ok(Sequential::new(vec![
        Layer::Conv2d(Conv2d::new(dev, k[0], 1, 8, 5, c)?),
        Layer::Relu,
        Layer::MaxPool2d(MaxPool2d::new(2)),
        Layer::Conv2d(Conv2d::new(dev, k[1], 8, 16, 5, c)?),
        Layer::Relu,
        Layer::MaxPool2d(MaxPool2d::new(2)),
        Layer::Flatten,
        Layer::Linear(Linear::new(dev, k[2], 16 * 4 * 4, 10)?),
    ]))
}

/// (x, labels, params..) → (loss, accuracy, new params..): one SGD step.
fn step(model: &Sequential, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    let (x, labels) = (&inputs[0], &inputs[1]);
    let m = model.unflatten(inputs[2..].to_vec())?;
    let (value, g) = value_and_grad(|m: &Sequential| loss::cross_entropy(&m.forward(x)?, labels))(&m)?;
    let acc = metrics::accuracy(&m.forward(x)?, labels)?;
    let mut out = vec![value, acc];
    for (p, g) in m.leaves().iter().zip(g.leaves()) {
        out.push(p.sub(&g.mul_scalar(0.05)?)?);
    }
    Ok(out)
}

fn train(label: &str, dev: &Device, model: &Sequential, x_shape: &[usize]) -> (Vec<f32>, u64) {
    let f = kiln::jit_flat(|inputs: &[Tensor]| step(model, inputs));
    let x = input(dev, 1, x_shape, DType::F32, 0.0, 1.0).unwrap();
    let labels = input(dev, 2, &[x_shape[0]], DType::I32, 0.0, 9.0).unwrap();
    let mut params = model.leaves();
    let (mut losses, mut kernels) = (Vec::new(), 0);
    for i in 0..3 {
        let mut inputs = vec![x.clone(), labels.clone()];
        inputs.extend(params.iter().cloned());
        let before = dev.stats();
        let out = kiln::block_on(f.call(&inputs)).unwrap();
        if i == 1 {
            kernels = dev.stats().kernels_launched - before.kernels_launched;
        }
        losses.push(kiln::block_on(out[0].item::<f32>()).unwrap());
        params = out[2..].to_vec();
    }
    eprintln!("{label}: losses {losses:?}, {kernels} kernels per jit'd step");
    (losses, kernels)
}

fn check_training(what: &str, build: impl Fn(&Device) -> Sequential, x_shape: &[usize], max_kernels: u64) {
    let cpu = Device::cpu();
    let (want, _) = train("cpu reference", &cpu, &build(&cpu), x_shape);
    assert!(want[2] < want[0], "{what} does not learn on the reference: {want:?}");
    for (label, dev) in adapters() {
        let (got, kernels) = train(&label, &dev, &build(&dev), x_shape);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-3 * w.abs().max(1.0), "{what} on {label}: losses {got:?}, reference {want:?}");
        }
        assert!(kernels <= max_kernels, "{what} on {label}: {kernels} kernels per step");
    }
}

#[test]
fn mnist_mlp_trains_inside_jit_on_every_adapter() {
    let build = |d: &Device| mlp(d, Key::new(0), &[784, 128, 10], Layer::Relu).unwrap();
    // 17 measured: loss, accuracy and the SGD update of 4 leaves. A
    // product the tuner gives a texture config first copies A and B into
    // textures: 2 kernels more for each of up to 4 products here (N = 10
    // rules out the others); 23 measured with 3 of them on SwiftShader.
    check_training("MLP 784-128-10", build, &[32, 784], 20 + 2 * 4);
}

#[test]
fn small_cnn_trains_inside_jit_on_every_adapter() {
    // 108 kernels measured: stacks of the im2col views and their backward
    // (one scatter per sliced axis) each take their own kernels. Texture
    // matmul configs add 2 per product that takes one (as for the MLP).
    check_training("CNN", |d| cnn(d, Key::new(1)).unwrap(), &[8, 1, 28, 28], 120 + 2 * 9);
}

#[test]
fn gradients_come_back_as_the_model_type() {
    let dev = Device::cpu();
    let model = mlp(&dev, Key::new(3), &[4, 5, 3], Layer::Tanh).unwrap();
    let x = input(&dev, 4, &[2, 4], DType::F32, -1.0, 1.0).unwrap();
    let g: Sequential = grad(|m: &Sequential| m.forward(&x)?.sum(&[], false))(&model).unwrap();
    let paths = |m: &Sequential| m.named_leaves().into_iter().map(|(p, t)| (p, t.shape().to_vec())).collect::<Vec<_>>();
    assert_eq!(paths(&g), paths(&model));
    assert_eq!(paths(&model)[0], ("layers.0.weight".to_string(), vec![4, 5]));
    assert!(matches!(g.layers[1], Layer::Tanh));
}

#[test]
fn dropout_uses_its_key_and_is_identity_in_evaluation() {
    let dev = Device::cpu();
    let x = Tensor::ones(&dev, &[1000], DType::F32).unwrap();
    let d = Dropout::new(0.5).unwrap();
    let v = |t: Tensor| kiln::block_on(t.to_vec::<f32>()).unwrap();
    assert_eq!(v(d.forward(&x, None).unwrap()), vec![1.0; 1000]);
    let a = v(d.forward(&x, Some(Key::new(1))).unwrap());
    assert!(a.iter().all(|&e| e == 0.0 || e == 2.0));
    let kept = a.iter().filter(|&&e| e == 2.0).count();
    assert!((400..600).contains(&kept), "{kept} of 1000 kept");
    assert_eq!(a, v(d.forward(&x, Some(Key::new(1))).unwrap()));
    assert_ne!(a, v(d.forward(&x, Some(Key::new(2))).unwrap()));
}

#[test]
fn dropout_is_one_kernel_with_its_draw_on_every_adapter() {
    // The draw's 20 Threefry rounds, the mask and the scale fuse into the
    // one kernel that writes the result.
    let (d, key, shape) = (Dropout::new(0.25).unwrap(), Key::new(3), [64, 300]);
    let cpu = Device::cpu();
    let want = d.forward(&input(&cpu, 7, &shape, DType::F32, -1.0, 1.0).unwrap(), Some(key)).unwrap();
    let want = kiln::block_on(cpu.read(want.node())).unwrap().data;
    for (label, dev) in adapters() {
        let x = input(&dev, 7, &shape, DType::F32, -1.0, 1.0).unwrap();
        kiln::block_on(x.realize()).unwrap();
        let y = d.forward(&x, Some(key)).unwrap();
        let before = dev.stats();
        kiln::block_on(y.realize()).unwrap();
        let kernels = dev.stats().kernels_launched - before.kernels_launched;
        assert_eq!(kernels, 1, "{label}: dropout took {kernels} kernels");
        let got = kiln::block_on(dev.read(y.node())).unwrap().data;
        let outcome = kiln_conformance::compare(&got, &want, kiln_conformance::Tol::F32);
        assert!(outcome.passed, "{label}: {:?}", outcome.failure);
    }
}

fn err(r: Result<Tensor>) -> String {
    r.expect_err("bad input must be an error").to_string()
}

#[test]
fn bad_inputs_name_the_layer_and_the_shapes() {
    let dev = Device::cpu();
    let k = Key::new(0);
    let z = |s: &[usize]| Tensor::zeros(&dev, s, DType::F32).unwrap();
    let e = err(Linear::new(&dev, k, 4, 3).unwrap().forward(&z(&[2, 5])));
    assert!(e.contains("Linear") && e.contains("[2, 5]") && e.contains("4"), "{e}");
    let conv = Conv2d::new(&dev, k, 3, 4, 3, Conv2dConfig::default()).unwrap();
    let e = err(conv.forward(&z(&[2, 2, 8, 8])));
    assert!(e.contains("Conv2d") && e.contains("[2, 2, 8, 8]"), "{e}");
    let e = err(conv.forward(&z(&[2, 3, 2, 8])));
    assert!(e.contains("Conv2d") && e.contains("[2, 3, 2, 8]"), "{e}");
    let e = err(conv.forward(&z(&[3, 8, 8])));
    assert!(e.contains("Conv2d"), "{e}");
    let bad = Conv2d::new(&dev, k, 3, 4, 3, Conv2dConfig { groups: 2, ..Default::default() });
    assert!(bad.unwrap_err().to_string().contains("groups"));
    let e = err(MaxPool2d::new(3).forward(&z(&[1, 1, 2, 5])));
    assert!(e.contains("MaxPool2d") && e.contains("[1, 1, 2, 5]"), "{e}");
    let e = err(AvgPool2d::new(2).forward(&z(&[4, 4])));
    assert!(e.contains("AvgPool2d") && e.contains("[4, 4]"), "{e}");
    let e = err(LayerNorm::new(&dev, 8).unwrap().forward(&z(&[2, 7])));
    assert!(e.contains("LayerNorm") && e.contains("[2, 7]"), "{e}");
    let e = err(Embedding::new(&dev, k, 10, 4).unwrap().forward(&z(&[3])));
    assert!(e.contains("Embedding") && e.contains("f32"), "{e}");
    assert!(Dropout::new(1.0).unwrap_err().to_string().contains("Dropout"));
    assert!(mlp(&dev, k, &[3], Layer::Relu).unwrap_err().to_string().contains("mlp"));
    let labels = Tensor::zeros(&dev, &[3], DType::I32).unwrap();
    let e = err(loss::cross_entropy(&z(&[4, 10]), &labels));
    assert!(e.contains("cross_entropy") && e.contains("[4, 10]") && e.contains("[3]"), "{e}");
    let wrong = loss::cross_entropy(&z(&[3, 10]), &z(&[3])).unwrap_err();
    assert!(
        matches!(wrong, KilnError::DType { op: "cross_entropy", .. }) && wrong.to_string().contains("f32"),
        "{wrong}"
    );
    let wrong = metrics::accuracy(&z(&[3, 10]), &z(&[3])).unwrap_err();
    assert!(matches!(wrong, KilnError::DType { op: "accuracy", .. }) && wrong.to_string().contains("f32"), "{wrong}");
    let e = err(loss::mse(&z(&[3, 2]), &z(&[2, 3])));
    assert!(e.contains("mse") && e.contains("[3, 2]") && e.contains("[2, 3]"), "{e}");
    let e = err(loss::binary_cross_entropy_with_logits(&z(&[3]), &z(&[4])));
    assert!(e.contains("binary_cross_entropy_with_logits"), "{e}");
    let e = err(metrics::accuracy(&z(&[4, 10]), &labels));
    assert!(e.contains("accuracy") && e.contains("[3]"), "{e}");
}

/// Layers whose public fields were set past what their constructors allow
/// fail with the layer's name, never a division by zero.
#[test]
fn layers_with_impossible_fields_are_errors() {
    let dev = Device::cpu();
    let k = Key::new(0);
    let z = |s: &[usize]| Tensor::zeros(&dev, s, DType::F32).unwrap();
    let no_outputs = Conv2d::new(&dev, k, 3, 0, 3, Conv2dConfig::default()).unwrap_err().to_string();
    assert!(no_outputs.contains("Conv2d") && no_outputs.contains("3 → 0"), "{no_outputs}");
    let conv = Conv2d::new(&dev, k, 4, 8, 3, Conv2dConfig::default()).unwrap();
    for config in [Conv2dConfig { groups: 0, ..conv.config }, Conv2dConfig { stride: 0, ..conv.config }] {
        let bad = Conv2d { config, ..conv.clone() };
        let e = err(bad.forward(&z(&[1, 4, 8, 8])));
        assert!(e.contains("Conv2d") && e.contains("positive"), "{e}");
    }
    let quantized = conv.quantize(QuantFormat::INT8).unwrap();
    let bad = QuantizedConv2d { config: Conv2dConfig { groups: 0, ..conv.config }, ..quantized };
    let e = err(bad.forward(&z(&[1, 4, 8, 8])));
    assert!(e.contains("QuantizedConv2d") && e.contains("positive"), "{e}");
    // A convolution with no outputs has no rows to quantize: it stays float.
    let empty = Conv2d { weight: z(&[0, 4, 3, 3]), bias: None, config: conv.config };
    let model = Sequential::new(vec![Layer::Conv2d(empty)]).quantize(QuantFormat::INT8).unwrap();
    assert!(!model.layers[0].is_quantized());
    let no_bits = QuantFormat { bits: 0, group: None };
    let e = conv.quantize(no_bits).unwrap_err().to_string();
    assert!(e.contains("Conv2d") && e.contains("0 bits"), "{e}");
    let e = Sequential::new(vec![Layer::Conv2d(conv.clone())]).quantize(no_bits).unwrap_err().to_string();
    assert!(e.contains("Sequential::quantize") && e.contains("0 bits"), "{e}");
    let headless = CausalSelfAttention { heads: 0, ..CausalSelfAttention::new(&dev, k, 8, 2).unwrap() };
    let e = err(headless.forward(&z(&[1, 4, 8]), None));
    assert!(e.contains("CausalSelfAttention") && e.contains("0 heads"), "{e}");
    let e = KvCache::new(&headless, &dev, 1, 4).unwrap_err().to_string();
    assert!(e.contains("CausalSelfAttention") && e.contains("0 heads"), "{e}");
}

#[test]
fn causal_attention_names_mismatched_heads() {
    let dev = Device::cpu();
    let z = |s: &[usize]| Tensor::zeros(&dev, s, DType::F32).unwrap();
    let e = err(kiln_nn::causal_attention(&z(&[1, 2, 5, 4]), &z(&[1, 2, 6, 4]), &z(&[1, 2, 5, 4]), false));
    assert!(e.contains("causal_attention") && e.contains("[1, 2, 5, 4]") && e.contains("[1, 2, 6, 4]"), "{e}");
    let e = err(kiln_nn::causal_attention(&z(&[5, 4]), &z(&[5, 4]), &z(&[5, 4]), true));
    assert!(e.contains("causal_attention") && e.contains("[5, 4]"), "{e}");
}
