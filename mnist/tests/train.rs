//! The demo's training loop on the bundled MNIST subset: the loss falls (in
//! f32 and in mixed precision) and int8 weights keep the accuracy, a run repeats bit for bit, adapters agree,
//! a resumed run continues the same curve, memory stays flat, and bad
//! checkpoints are errors.

use kiln::prelude::*;
use kiln_conformance::adapters::SharedDevices;
use kiln_mnist::{Config, ModelKind, Trainer};
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::data::Mnist;
use std::sync::{Arc, OnceLock};

fn data() -> Arc<Mnist> {
    static DATA: OnceLock<Arc<Mnist>> = OnceLock::new();
    DATA.get_or_init(|| Arc::new(Mnist::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k")).unwrap()))
        .clone()
}

fn config(model: ModelKind) -> Config {
    Config { model, epochs: 2, batch_size: 32, lr: 2e-3, seed: 5, precision: DType::F32 }
}

/// Losses of the next `n` steps, each read back.
fn losses(t: &mut Trainer, n: usize) -> Vec<f32> {
    (0..n).map(|_| kiln::block_on(async { t.step().await?.item::<f32>().await }).unwrap()).collect()
}

/// The shared adapters, locked for the whole test: tests run in parallel
/// threads, and another test's trainer on the same device would share its
/// buffer pool (and its figures).
fn lock_adapters() -> SharedDevices {
    kiln_conformance::adapters::shared()
}

fn first_gpu(adapters: &SharedDevices) -> (String, Device) {
    adapters.first().cloned().expect("an adapter")
}

#[test]
fn the_loss_falls_over_a_few_dozen_steps() {
    let adapters = lock_adapters();
    let (label, dev) = first_gpu(&adapters);
    for model in [ModelKind::Mlp, ModelKind::Cnn] {
        let mut t = Trainer::new(&dev, data(), config(model)).unwrap();
        let l = losses(&mut t, 40);
        let (first, last) = (l[..5].iter().sum::<f32>() / 5.0, l[35..].iter().sum::<f32>() / 5.0);
        assert!(last < 0.6 * first, "{model} on {label}: {l:?}");
        // The MLP's trained weights in int8: near the float accuracy, and
        // smaller (which of the CNN's layers quantize: kiln-nn's tests).
        if model == ModelKind::Mlp {
            let (_, float) = kiln::block_on(t.evaluate()).unwrap();
            let q = kiln::block_on(t.evaluate_quantized(QuantFormat::INT8, false)).unwrap();
            assert!((q.accuracy - float).abs() < 0.02, "int8 on {label}: {} against {float}", q.accuracy);
            assert_eq!((q.quantized_layers, q.weight_layers), (2, 2));
            assert!(q.float_bytes as f64 > 3.9 * q.quantized_bytes as f64, "{q:?}");
            // Saved with the codes as bytes and loaded back: the same figures.
            let bytes = kiln::block_on(t.quantized_checkpoint(QuantFormat::INT8)).unwrap().to_bytes().unwrap();
            let ck = Checkpoint::from_bytes(&bytes, "memory").unwrap();
            let (loss, accuracy) = kiln::block_on(kiln_mnist::evaluate_checkpoint(&dev, &data(), &ck)).unwrap();
            assert_eq!((loss, accuracy), (q.loss, q.accuracy), "int8 checkpoint on {label}");
            let err = Trainer::restore(&dev, data(), &ck, None).err().unwrap().to_string();
            assert!(err.contains("int8 weights for inference only"), "{err}");
        }
    }
}

#[test]
fn mixed_precision_runs_learn_keep_f32_masters_and_resume() {
    let adapters = lock_adapters();
    let (label, dev) = first_gpu(&adapters);
    for precision in [DType::F16, DType::BF16] {
        let mut t = Trainer::new(&dev, data(), Config { precision, ..config(ModelKind::Mlp) }).unwrap();
        let l = losses(&mut t, 40);
        let (first, last) = (l[..5].iter().sum::<f32>() / 5.0, l[35..].iter().sum::<f32>() / 5.0);
        assert!(last < 0.6 * first, "{precision} on {label}: {l:?}");
        assert!(t.model().unwrap().leaves().iter().all(|w| w.dtype() == DType::F32), "{precision}: f32 masters");
        let scale = kiln::block_on(t.loss_scale()).unwrap();
        // f16 starts at 2^16 and halves on overflow; bf16 is not scaled.
        match precision {
            DType::F16 => assert!(scale.is_some_and(|(s, _)| s > 0.0 && s <= 65536.0), "{scale:?}"),
            _ => assert_eq!(scale, None),
        }
        let ck = kiln::block_on(t.checkpoint()).unwrap();
        assert_eq!(ck.metadata().get("precision").map(String::as_str), Some(precision.name()));
        let mut resumed = Trainer::restore(&dev, data(), &ck, None).unwrap();
        assert_eq!(resumed.config().precision, precision);
        assert_eq!(losses(&mut resumed, 3), losses(&mut t, 3), "{precision} on {label}: resumed run");
    }
}

#[test]
fn a_run_repeats_bit_for_bit_and_a_resumed_run_continues_the_same_curve() {
    let adapters = lock_adapters();
    let (label, dev) = first_gpu(&adapters);
    let mut a = Trainer::new(&dev, data(), config(ModelKind::Mlp)).unwrap();
    let mut b = Trainer::new(&dev, data(), config(ModelKind::Mlp)).unwrap();
    let head = losses(&mut a, 12);
    assert_eq!(head, losses(&mut b, 12), "{label}: same seed, same adapter");
    let bytes = kiln::block_on(a.checkpoint()).unwrap().to_bytes().unwrap();
    let tail = losses(&mut a, 8);
    let ck = Checkpoint::from_bytes(&bytes, "memory").unwrap();
    let mut resumed = Trainer::restore(&dev, data(), &ck, Some(ModelKind::Mlp)).unwrap();
    assert_eq!(resumed.steps(), 12);
    assert_eq!(losses(&mut resumed, 8), tail, "{label}: resumed run");
    // Crossing into the next epoch reshuffles from the seed alike.
    let per_epoch = a.steps_per_epoch() as usize;
    assert!(per_epoch > 20);

    let err = Trainer::restore(&dev, data(), &ck, Some(ModelKind::Cnn)).err().unwrap().to_string();
    assert!(err.contains("holds a mlp model, not cnn"), "{err}");
    let mut other = Checkpoint::new();
    other.set_metadata("model", "mlp").unwrap();
    let err = Trainer::restore(&dev, data(), &other, None).err().unwrap().to_string();
    assert!(err.contains("no `epochs`"), "{err}");
}

#[test]
fn adapters_agree_over_the_first_hundred_steps() {
    let devices = lock_adapters();
    let runs: Vec<(String, Vec<f32>)> = devices
        .iter()
        .map(|(label, dev)| {
            (label.clone(), losses(&mut Trainer::new(dev, data(), config(ModelKind::Mlp)).unwrap(), 100))
        })
        .collect();
    let (base_label, base) = &runs[0];
    for (label, l) in &runs[1..] {
        let worst = l.iter().zip(base).map(|(x, y)| (x - y).abs() / y.abs().max(1e-6)).fold(0.0f32, f32::max);
        eprintln!("{label} vs {base_label}: largest relative loss difference over 100 steps {worst:e}");
        let tol = 1e-3;
        assert!(worst <= tol, "{label} vs {base_label}: {worst:e} relative (limit {tol:e})");
    }
}

#[test]
fn memory_stays_flat_over_hundreds_of_steps() {
    let adapters = lock_adapters();
    let (label, dev) = first_gpu(&adapters);
    let mut t = Trainer::new(&dev, data(), Config { epochs: 3, ..config(ModelKind::Mlp) }).unwrap();
    let mut seen = Vec::new();
    for step in 0..200 {
        kiln::block_on(t.step()).unwrap();
        if step % 50 == 49 {
            kiln::block_on(t.evaluate()).unwrap();
        }
        let pool = dev.stats().pool;
        seen.push((pool.bytes_in_use, pool.bytes_in_use + pool.bytes_free));
    }
    let settled = seen[60];
    for (i, &(in_use, held)) in seen.iter().enumerate().skip(60) {
        assert!(
            in_use <= settled.1 && held <= settled.1,
            "{label}: step {i} holds {held} bytes, step 60 held {}",
            settled.1
        );
    }
}

#[test]
fn bad_configs_are_errors() {
    let dev = Device::cpu();
    for bad in [
        Config { batch_size: 0, ..config(ModelKind::Mlp) },
        Config { lr: -1.0, ..config(ModelKind::Mlp) },
        Config { epochs: 0, ..config(ModelKind::Mlp) },
    ] {
        assert!(Trainer::new(&dev, data(), bad).is_err(), "{bad:?}");
    }
    let err = Trainer::new(&dev, data(), Config { precision: DType::I32, ..config(ModelKind::Mlp) }).err().unwrap();
    assert!(err.to_string().contains("precision i32 is not a float dtype"), "{err}");
    assert!("resnet".parse::<ModelKind>().is_err());
}

#[test]
fn predict_gives_probabilities_and_rejects_a_wrong_size() {
    let t = Trainer::new(&Device::cpu(), data(), config(ModelKind::Mlp)).unwrap();
    let p = kiln::block_on(t.predict(&[0.5; 784])).unwrap();
    assert_eq!(p.len(), 10);
    assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{p:?}");
    let e = kiln::block_on(t.predict(&[0.5; 100])).unwrap_err().to_string();
    assert!(e.contains("100 pixels, expected 784"), "{e}");
}

/// The demo's training loop through the CUDA runtime, its kernels run on
/// the host (`Device::cuda_on_host`): the same losses as a GPU adapter,
/// no allocation once the first steps have filled the pool, and the steps
/// replayed as CUDA graphs.
#[test]
fn the_cuda_runtime_trains_as_the_adapters_do() {
    let (_, gpu) = first_gpu(&lock_adapters());
    let cuda = Device::cuda_on_host();
    let mut t = Trainer::new(&cuda, data(), config(ModelKind::Mlp)).unwrap();
    let first = losses(&mut t, 3);
    let created = cuda.stats().pool.buffers_created;
    let rest = losses(&mut t, 7);
    assert_eq!(cuda.stats().pool.buffers_created, created, "steps 4 to 10 allocated");
    // The step's buffers recur, so its replays run as CUDA graphs.
    let graphs = cuda.stats().graphs_launched;
    assert!(graphs >= 3, "10 training steps launched {graphs} CUDA graphs");
    let want = losses(&mut Trainer::new(&gpu, data(), config(ModelKind::Mlp)).unwrap(), 10);
    let got = [first, rest].concat();
    let worst = got.iter().zip(&want).map(|(x, y)| (x - y).abs() / y.abs().max(1e-6)).fold(0.0f32, f32::max);
    eprintln!(
        "CUDA runtime (host) vs {}: largest relative loss difference over 10 steps {worst:e}; {graphs} CUDA graphs",
        gpu.info().name
    );
    assert!(worst <= 1e-3, "{got:?} vs {want:?}");
}
