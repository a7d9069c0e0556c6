//! Layers whose public fields were filled by hand with weights of the wrong
//! rank give errors naming the layer, not panics.

use kiln::prelude::*;
use kiln_nn::{Conv2d, Conv2dConfig, Embedding, Layer, LayerNorm, Linear, RmsNorm, mlp};

#[test]
fn a_weight_of_the_wrong_rank_is_an_error_naming_the_layer() {
    let dev = Device::cpu();
    let t = |shape: &[usize]| Tensor::zeros(&dev, shape, DType::F32).unwrap();
    let x = t(&[2, 3]);
    let flat = t(&[3]);
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    let linear = Linear { weight: flat.clone(), bias: None };
    assert_eq!(err(linear.forward(&x)), "Linear: its weight must have rank 2, got shape [3]");
    let table = Embedding { weight: flat.clone() };
    let ids = Tensor::zeros(&dev, &[2], DType::I32).unwrap();
    assert_eq!(err(table.forward(&ids)), "Embedding: its weight must have rank 2, got shape [3]");
    assert_eq!(err(table.attend(&x)), "Embedding::attend: its weight must have rank 2, got shape [3]");
    let norm = LayerNorm { weight: t(&[3, 1]), bias: flat.clone(), eps: 1e-5 };
    assert_eq!(err(norm.forward(&x)), "LayerNorm: its weight must have rank 1, got shape [3, 1]");
    let rms = RmsNorm { weight: t(&[3, 1]), eps: 1e-6 };
    assert_eq!(err(rms.forward(&x)), "RmsNorm: its weight must have rank 1, got shape [3, 1]");
    let conv = Conv2d { weight: t(&[8, 3]), bias: None, config: Conv2dConfig::default() };
    assert_eq!(err(conv.forward(&t(&[1, 3, 5, 5]))), "Conv2d: its weight must have rank 4, got shape [8, 3]");
}

/// A layer's error from inside a model names the layer's path in the tree.
#[test]
fn a_layers_shape_error_names_its_path() {
    let dev = Device::cpu();
    let model = mlp(&dev, Key::new(0), &[2, 4, 3], Layer::Relu).unwrap();
    let x = Tensor::zeros(&dev, &[5, 3], DType::F32).unwrap();
    let e = model.forward(&x).unwrap_err();
    assert_eq!(e.to_string(), "Linear at `layers.0`: expects input [.., 2], got shape [5, 3]");
    assert!(matches!(e.innermost(), KilnError::Shape { op: "Linear", .. }), "{e:?}");
    let wide = Tensor::zeros(&dev, &[5, 2], DType::F32).unwrap();
    let mut broken = model.clone();
    broken.layers[2] = Layer::Linear(Linear { weight: Tensor::zeros(&dev, &[5, 3], DType::F32).unwrap(), bias: None });
    let e = broken.forward(&wide).unwrap_err().to_string();
    assert_eq!(e, "Linear at `layers.2`: expects input [.., 5], got shape [5, 4]");
}

/// A LoRA adapter computes `scale · x aᵀ bᵀ` beside its projection, starts
/// as no change, and one that does not fit its projection is an error.
#[test]
fn a_lora_adapter_adds_its_low_rank_update_and_must_fit() {
    use kiln_nn::{Dense, Lora};
    let dev = Device::cpu();
    let linear = Linear::new(&dev, Key::new(0), 3, 2).unwrap();
    let x = Tensor::from_slice(&dev, &[1.0f32, -2.0, 0.5], &[1, 3]).unwrap();
    let fresh = Lora::new(&dev, Key::new(1), 3, 2, 2, 4.0).unwrap();
    let base = Dense::Float(linear.clone());
    let plain = kiln::block_on(base.forward(&x).unwrap().to_vec::<f32>()).unwrap();
    let adapted = base.adapted(fresh.clone()).unwrap();
    assert_eq!(kiln::block_on(adapted.forward(&x).unwrap().to_vec::<f32>()).unwrap(), plain, "b starts at zero");
    // a = [[1, 0, 0], [0, 1, 0]], b = [[1, 0], [0, 1]], scale 2: the update
    // is 2 · (x₀, x₁) = (2, -4).
    let a = Tensor::from_slice(&dev, &[1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0], &[2, 3]).unwrap();
    let b = Tensor::from_slice(&dev, &[1.0f32, 0.0, 0.0, 1.0], &[2, 2]).unwrap();
    let lora = Lora { a, b, scale: 2.0 };
    let got = kiln::block_on(base.adapted(lora.clone()).unwrap().forward(&x).unwrap().to_vec::<f32>()).unwrap();
    let want = [plain[0] + 2.0, plain[1] - 4.0];
    assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-5), "{got:?} against {want:?}");
    assert_eq!(adapted.leaves().len(), 4, "weight, bias, a and b");
    let err = |r: Result<Dense>| r.map(|_| ()).unwrap_err().to_string();
    let wide = Dense::Float(Linear::new(&dev, Key::new(0), 4, 2).unwrap());
    assert_eq!(
        err(wide.adapted(lora.clone())),
        "Dense::adapted: a LoRA of a [2, 3] and b [2, 2] does not fit a projection [4] → [2]"
    );
    let e = lora.forward(&Tensor::zeros(&dev, &[1, 4], DType::F32).unwrap()).unwrap_err().to_string();
    assert_eq!(e, "Lora: expects input [.., 3], got shape [1, 4]");
    let e = Lora::new(&dev, Key::new(0), 3, 2, 3, 1.0).map(|_| ()).unwrap_err().to_string();
    assert_eq!(e, "Lora: rank 3 and alpha 1 for a projection [3] → [2]");
}
