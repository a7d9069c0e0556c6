//! `Sequential::quantize`: which layers it quantizes, what it keeps, and
//! the errors of layers whose weights do not pack.

use kiln::prelude::*;
use kiln_nn::{Conv2d, Conv2dConfig, Layer, Linear, MaxPool2d, Sequential};

fn cnn(dev: &Device) -> Result<Sequential> {
    let keys = Key::new(0).split(3);
    Ok(Sequential::new(vec![
        Layer::Conv2d(Conv2d::new(dev, keys[0], 1, 8, 5, Conv2dConfig::default())?),
        Layer::Relu,
        Layer::MaxPool2d(MaxPool2d::new(2)),
        Layer::Conv2d(Conv2d::new(dev, keys[1], 8, 16, 3, Conv2dConfig::default())?),
        Layer::Flatten,
        Layer::Linear(Linear::new(dev, keys[2], 16 * 7 * 7, 10)?),
    ]))
}

/// The float model `q` stands for: each quantized layer's weight
/// dequantized, in the float layer's layout.
fn dequantized(q: &Sequential) -> Result<Sequential> {
    let layers = q.layers.iter().map(|l| {
        Ok(match l {
            Layer::QuantizedLinear(l) => {
                let weight = Tensor::dequantize(&l.codes, &l.scales, l.format)?.t()?;
                Layer::Linear(Linear { weight, bias: l.bias.clone() })
            }
            Layer::QuantizedConv2d(l) => {
                let shape: Vec<isize> = l.shape.iter().map(|&s| s as isize).collect();
                let weight = Tensor::dequantize(&l.codes, &l.scales, l.format)?.reshape(&shape)?;
                Layer::Conv2d(Conv2d { weight, bias: l.bias.clone(), config: l.config })
            }
            other => other.clone(),
        })
    });
    Ok(Sequential::new(layers.collect::<Result<_>>()?))
}

#[test]
fn layers_whose_rows_fill_words_are_quantized_and_the_rest_kept() -> Result<()> {
    let dev = Device::cpu();
    let model = cnn(&dev)?;
    let pixels: Vec<f32> = (0..2 * 22 * 22).map(|i| (i * 7 % 13) as f32 / 13.0).collect();
    let x = Tensor::from_slice(&dev, &pixels, &[2, 1, 22, 22])?;
    for format in [QuantFormat::INT8, QuantFormat::int4(32)] {
        let q = model.quantize(format)?;
        let kinds: Vec<bool> = q.layers.iter().map(Layer::is_quantized).collect();
        // The first conv has 25 weights per output: not whole words.
        assert_eq!(kinds, [false, false, false, true, false, true], "{format}");
        let want = kiln::block_on(dequantized(&q)?.forward(&x)?.to_vec::<f32>())?;
        let got = kiln::block_on(q.forward(&x)?.to_vec::<f32>())?;
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-5 * scale, "{format}: off the dequantized model by {worst} of {scale}");
    }
    Ok(())
}

#[test]
fn weights_that_do_not_fill_words_are_errors_naming_the_layer() -> Result<()> {
    let dev = Device::cpu();
    let linear = Linear::new(&dev, Key::new(1), 12, 3)?;
    let err = linear.quantize(QuantFormat::int4(32)).unwrap_err().to_string();
    assert!(err.contains("Linear::quantize") && err.contains("12"), "{err}");
    let conv = Conv2d::new(&dev, Key::new(2), 1, 4, 3, Conv2dConfig::default())?;
    let err = conv.quantize(QuantFormat::INT8).unwrap_err().to_string();
    assert!(err.contains("Conv2d::quantize") && err.contains("9"), "{err}");
    let q = Linear::new(&dev, Key::new(3), 16, 3)?.quantize(QuantFormat::INT8)?;
    let err = q.forward(&Tensor::zeros(&dev, &[2, 15], DType::F32)?).unwrap_err().to_string();
    assert!(err.contains("QuantizedLinear") && err.contains("[2, 15]"), "{err}");
    Ok(())
}
