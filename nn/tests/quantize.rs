//! `Sequential::quantize`: which layers it quantizes, what it keeps, the
//! errors of layers whose weights do not pack, int8 activations (int8
//! weights only), and quantized checkpoints (codes as I8 and U8 bytes, read
//! back by kiln and by Python).

mod common;

use kiln::prelude::*;
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::{Conv2d, Conv2dConfig, Layer, Linear, MaxPool2d, QuantizedConv2d, QuantizedLinear, Sequential};

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

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-quant-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The file's dtype and shape of tensor `name` (as another tool sees them).
fn file_entry(bytes: &[u8], name: &str) -> (safetensors::Dtype, Vec<usize>) {
    let file = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let t = file.tensor(name).unwrap();
    (t.dtype(), t.shape().to_vec())
}

#[test]
fn quantized_checkpoints_store_codes_as_bytes_and_load_back_exactly() -> Result<()> {
    let dev = Device::cpu();
    let d = temp_dir("ckpt");
    let model = cnn(&dev)?;
    for (format, file_dtype, bytes_per_row) in
        [(QuantFormat::INT8, safetensors::Dtype::I8, 784), (QuantFormat::int4(32), safetensors::Dtype::U8, 392)]
    {
        let q = model.quantize(format)?;
        let mut ck = Checkpoint::new();
        kiln::block_on(ck.add_quantized("params", &q))?;
        let path = d.join(format!("{}.safetensors", format.bits));
        ck.save(&path)?;
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(file_entry(&bytes, "params.layers.5.codes"), (file_dtype, vec![10, bytes_per_row]), "{format}");
        assert_eq!(file_entry(&bytes, "params.layers.0.weight").0, safetensors::Dtype::F32, "the float conv stays f32");

        let back = Checkpoint::load(&path)?;
        let like = cnn(&Device::cpu())?.quantize(format)?;
        let loaded = back.quantized_tree("params", &like, &dev)?;
        // As stored: the CPU device holds f64, the file f32.
        let stored = |t: &Tensor| -> Result<Vec<f64>> {
            let h = kiln::block_on(t.to_host())?;
            Ok(h.data.iter().map(|&v| if h.dtype == DType::F32 { v as f32 as f64 } else { v }).collect())
        };
        for ((name, a), b) in q.named_leaves().iter().zip(loaded.leaves()) {
            assert_eq!((a.dtype(), a.shape()), (b.dtype(), b.shape()), "{format}: {name}");
            assert_eq!(stored(a)?, stored(&b)?, "{format}: {name}");
        }

        // The codes' format is checked, and plain `tree` does not take codes.
        let other = if format.bits == 8 { QuantFormat::int4(32) } else { QuantFormat::INT8 };
        let err = back.quantized_tree("params", &model.quantize(other)?, &dev).unwrap_err().to_string();
        assert!(err.contains(&format!("`params.layers.5.codes` is {} codes", format.spec())), "{err}");
        let err = back.tree("params", &like, &dev).unwrap_err().to_string();
        assert!(err.contains("codes") && err.contains("u32"), "{err}");
    }
    let err = Checkpoint::new().set_metadata("kiln.quant.x", "int8").unwrap_err().to_string();
    assert!(err.contains("reserved"), "{err}");
    std::fs::remove_dir_all(d).unwrap();
    Ok(())
}

/// Python's safetensors and numpy read the codes as documented, checked
/// against the weights kiln dequantizes (`nn/tests/python/read_quantized.py`).
/// Skipped by name without them, unless the run requires `py-tools`
/// (`KILN_REQUIRE`: scripts/test installs them and requires them).
#[test]
fn python_reads_the_quantized_layout() -> Result<()> {
    let dev = Device::cpu();
    let d = temp_dir("python");
    let model = cnn(&dev)?;
    let mut runs = Vec::new();
    for format in [QuantFormat::INT8, QuantFormat::int4(32), QuantFormat::int4(64)] {
        let q = model.quantize(format)?;
        let mut ck = Checkpoint::new();
        kiln::block_on(ck.add_quantized("params", &q))?;
        let quantized = d.join(format!("{}.safetensors", format.spec().replace('/', "-")));
        ck.save(&quantized)?;
        let mut reference = std::collections::BTreeMap::new();
        for (i, l) in q.layers.iter().enumerate() {
            if let Layer::QuantizedLinear(QuantizedLinear { codes, scales, format, .. })
            | Layer::QuantizedConv2d(QuantizedConv2d { codes, scales, format, .. }) = l
            {
                reference.insert(format!("params.layers.{i}.codes"), Tensor::dequantize(codes, scales, *format)?);
            }
        }
        let mut want = Checkpoint::new();
        kiln::block_on(want.add("", &reference))?;
        let reference = d.join(format!("{}-f32.safetensors", format.spec().replace('/', "-")));
        want.save(&reference)?;
        runs.push((format, quantized, reference));
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/read_quantized.py");
    for (format, quantized, reference) in runs {
        let Some((ok, said)) = common::python("python_reads_the_quantized_layout", script, &[&quantized, &reference])
        else {
            break;
        };
        assert!(ok && said.contains("2 code tensors read"), "{format}: {said}");
    }
    std::fs::remove_dir_all(d).unwrap();
    Ok(())
}

#[test]
fn int8_activations_pair_only_with_int8_weights() -> Result<()> {
    let dev = Device::cpu();
    let model = Sequential::new(vec![Layer::Linear(Linear::new(&dev, Key::new(4), 64, 3)?)]);
    let err = model.quantize(QuantFormat::int4(32))?.with_int8_activations().unwrap_err().to_string();
    assert!(err.contains("with_int8_activations") && err.contains("layer 0") && err.contains("int4"), "{err}");
    let w8a8 = model.quantize(QuantFormat::INT8)?.with_int8_activations()?;
    assert!(matches!(&w8a8.layers[0], Layer::QuantizedLinear(q) if q.int8_activations));
    // The flag set by hand on an int4 layer is refused by the layer.
    let Layer::Linear(linear) = &model.layers[0] else { unreachable!("built above") };
    let int4 = QuantizedLinear { int8_activations: true, ..linear.quantize(QuantFormat::int4(32))? };
    let err = int4.forward(&Tensor::zeros(&dev, &[2, 64], DType::F32)?).unwrap_err().to_string();
    assert!(err.contains("QuantizedLinear") && err.contains("int4"), "{err}");
    Ok(())
}
