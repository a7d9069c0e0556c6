//! LoRA adapters against Hugging Face's `peft`: the adapters PEFT saved
//! for the gpt2 and llama fixtures (`scripts/make-hf-fixtures.py lora`)
//! give PEFT's logits on the CPU reference and every adapter, save back as
//! PEFT wrote them, have the reference's gradients, and train: a
//! fine-tune on the KJV corpus lowers the validation loss of the frozen
//! model, float, int8 or int4 (QLoRA).

use kiln::prelude::*;
use kiln_models::{Adapters, FineTune, FineTuneConfig, LoraConfig, Model, Tokenizer};
use safetensors::SafeTensors;
use std::collections::BTreeSet;
use std::path::PathBuf;

fn dir(fixture: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(fixture)
}

/// PEFT's ids `[2, T]` and the adapted model's logits for them.
fn expected(fixture: &str) -> (Vec<i32>, Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(dir(fixture).join("expected.safetensors")).unwrap();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let ids = file.tensor("input_ids").unwrap();
    let logits = bytemuck::pod_collect_to_vec::<u8, f32>(file.tensor("logits").unwrap().data());
    (bytemuck::pod_collect_to_vec::<u8, i32>(ids.data()), ids.shape().to_vec(), logits)
}

/// Largest |a - b| over the largest |b|.
fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    got.iter().zip(want).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale
}

fn devices() -> Vec<(String, Device)> {
    let adapters = kiln_conformance::adapters::shared();
    std::iter::once(("cpu".to_string(), Device::cpu()))
        .chain(adapters.iter().map(|(l, d)| (l.clone(), d.clone())))
        .collect()
}

#[test]
fn peft_adapters_give_peft_logits_on_every_adapter() {
    for (fixture, base, projections) in [("gpt2-lora", "gpt2", 8), ("llama-lora", "llama", 14)] {
        let (ids, shape, want) = expected(fixture);
        for (label, dev) in devices() {
            let model = Model::load(dir(base), &dev).unwrap();
            let adapters = Adapters::load(dir(fixture), &model).unwrap();
            assert_eq!(adapters.loras.len(), projections, "{fixture}: adapters read");
            assert_eq!((adapters.config().rank, adapters.config().alpha), (4, 8.0), "{fixture}: r and alpha");
            let tuned = model.with_lora(&adapters).unwrap();
            let x = Tensor::from_slice(&dev, &ids, &shape).unwrap();
            let got = kiln::block_on(tuned.forward(&x).unwrap().to_vec::<f32>()).unwrap();
            let error = relative_error(&got, &want);
            assert!(error <= 1e-4, "{fixture} on {label}: logits {error:e} from PEFT's");
            let merged = tuned.merge_lora().unwrap();
            assert_eq!(merged.leaves().len(), model.leaves().len(), "{fixture}: merged, no adapter leaves");
            let folded = kiln::block_on(merged.forward(&x).unwrap().to_vec::<f32>()).unwrap();
            let apart = relative_error(&folded, &got);
            assert!(apart <= 1e-5, "{fixture} on {label}: merged logits {apart:e} from the adapted model's");
            let plain = kiln::block_on(model.forward(&x).unwrap().to_vec::<f32>()).unwrap();
            let moved = relative_error(&plain, &want);
            assert!(
                moved > 100.0 * error.max(1e-6),
                "{fixture} on {label}: the adapters change the logits ({moved:e})"
            );
            eprintln!(
                "{fixture} on {label}: logits within {error:.1e} of PEFT's (the base model's are {moved:.1e} away; \
                 merged, {apart:.1e} from the adapted)"
            );
        }
    }
}

#[test]
fn saved_adapters_are_the_files_peft_wrote() {
    let dev = Device::cpu();
    for (fixture, base) in [("gpt2-lora", "gpt2"), ("llama-lora", "llama")] {
        let model = Model::load(dir(base), &dev).unwrap();
        let adapters = Adapters::load(dir(fixture), &model).unwrap();
        let out = std::env::temp_dir().join(format!("kiln-lora-{}-{fixture}", std::process::id()));
        kiln::block_on(adapters.save(&out)).unwrap();
        let tensors = |folder: &PathBuf| {
            let bytes = std::fs::read(folder.join("adapter_model.safetensors")).unwrap();
            let file = SafeTensors::deserialize(&bytes).unwrap();
            let mut all: Vec<(String, Vec<usize>, Vec<u8>)> =
                file.tensors().into_iter().map(|(n, t)| (n, t.shape().to_vec(), t.data().to_vec())).collect();
            all.sort();
            all
        };
        assert!(tensors(&out) == tensors(&dir(fixture)), "{fixture}: the same names, shapes and bytes as PEFT's");
        let config = |folder: &PathBuf| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(folder.join("adapter_config.json")).unwrap()).unwrap()
        };
        let (ours, peft) = (config(&out), config(&dir(fixture)));
        for key in ["peft_type", "r", "fan_in_fan_out"] {
            assert_eq!(ours[key], peft[key], "{fixture}: adapter_config.json's {key}");
        }
        assert_eq!(ours["lora_alpha"].as_f64(), peft["lora_alpha"].as_f64(), "{fixture}: lora_alpha");
        let modules = |c: &serde_json::Value| -> BTreeSet<String> {
            c["target_modules"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().to_string()).collect()
        };
        assert_eq!(modules(&ours), modules(&peft), "{fixture}: target_modules");
        std::fs::remove_dir_all(&out).unwrap();
    }
}

/// The loss of the first fixture row under `adapters` on `model`.
fn loss_of(model: &Model, adapters: &Adapters) -> Result<Tensor> {
    let (ids, shape, _) = expected("gpt2-lora");
    let all = Tensor::from_slice(&model.device(), &ids, &shape)?.narrow(0, 0, 1)?;
    let (x, y) = (all.narrow(1, 0, shape[1] - 1)?, all.narrow(1, 1, shape[1] - 1)?);
    model.with_lora(adapters)?.loss(&x, &y)
}

#[test]
fn adapter_gradients_match_the_reference_and_finite_differences() {
    let cpu = Device::cpu();
    let model = Model::load(dir("gpt2"), &cpu).unwrap();
    let adapters = Adapters::load(dir("gpt2-lora"), &model).unwrap();
    let grad = kiln::value_and_grad(|a: &Adapters| loss_of(&model, a));
    let (_, reference) = grad(&adapters).unwrap();
    let flat = |g: &Adapters| -> Vec<f32> {
        g.leaves().iter().flat_map(|t| kiln::block_on(t.to_vec::<f32>()).unwrap()).collect()
    };
    let want = flat(&reference);
    // Central differences in b of the first adapter, in the reference's f64.
    let (path, first) = adapters.loras.iter().next().unwrap();
    let b = kiln::block_on(first.b.to_vec::<f32>()).unwrap();
    let analytic = kiln::block_on(reference.loras[path].b.to_vec::<f32>()).unwrap();
    for i in [0, b.len() / 2, b.len() - 1] {
        let at = |delta: f32| {
            let mut moved = b.clone();
            moved[i] += delta;
            let mut a = adapters.clone();
            a.loras.get_mut(path).unwrap().b = Tensor::from_slice(&cpu, &moved, first.b.shape()).unwrap();
            f64::from(kiln::block_on(loss_of(&model, &a).unwrap().item::<f32>()).unwrap())
        };
        let numeric = (at(1e-2) - at(-1e-2)) / 2e-2;
        let close = (numeric - f64::from(analytic[i])).abs() <= 1e-3 + 1e-2 * numeric.abs();
        assert!(close, "{path}.b[{i}]: gradient {} against finite differences {numeric}", analytic[i]);
    }
    for (label, dev) in devices().into_iter().skip(1) {
        let model = Model::load(dir("gpt2"), &dev).unwrap();
        let adapters = Adapters::load(dir("gpt2-lora"), &model).unwrap();
        let (_, grads) = kiln::value_and_grad(|a: &Adapters| loss_of(&model, a))(&adapters).unwrap();
        let error = relative_error(&flat(&grads), &want);
        assert!(error <= 1e-4, "on {label}: adapter gradients {error:e} from the reference's");
        eprintln!("gpt2-lora on {label}: adapter gradients within {error:.1e} of the reference's");
    }
}

/// The first `n` bytes' worth of whole lines of the KJV corpus, tokenized
/// with the fixture's tokenizer.
fn kjv_tokens(n: usize) -> Vec<u32> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/kjv/genesis-ruth.txt");
    let text = std::fs::read_to_string(path).unwrap();
    let cut = text[..n].rfind('\n').unwrap();
    Tokenizer::from_folder(&dir("gpt2")).unwrap().encode(&text[..cut]).unwrap()
}

#[test]
fn fine_tuning_lowers_the_validation_loss_of_a_frozen_float_int8_or_int4_model() {
    let tokens = kjv_tokens(60_000);
    let adapters = kiln_conformance::adapters::shared();
    for (n, (label, dev)) in adapters.iter().enumerate() {
        let float = Model::load(dir("gpt2"), dev).unwrap();
        // QLoRA's int8 and int4 bases on the first adapter (the same
        // kernels as f32's elsewhere; the conformance suite covers the
        // integer products).
        let mut bases = vec![("f32", float.clone())];
        if n == 0 {
            bases.push(("int8", float.quantize(QuantFormat::INT8).unwrap()));
            bases.push(("int4", float.quantize(QuantFormat::int4(32)).unwrap()));
        }
        for (how, model) in bases {
            kiln::block_on(Tensor::realize_all(&model.leaves().iter().collect::<Vec<_>>())).unwrap();
            let read = |m: &Model| -> Vec<Vec<f32>> {
                m.leaves()
                    .iter()
                    .map(|t| kiln::block_on(t.cast(DType::F32).unwrap().to_vec::<f32>()).unwrap())
                    .collect()
            };
            let before = read(&model);
            let config = FineTuneConfig { lr: 1e-2, context: 32, ..FineTuneConfig::new(8) };
            let mut run = FineTune::new(&model, &tokens, config).unwrap();
            let start = kiln::block_on(run.validation_loss()).unwrap();
            for _ in 0..40 {
                kiln::block_on(run.step()).unwrap();
            }
            let end = kiln::block_on(run.validation_loss()).unwrap();
            // The fixture's head is its frozen token table (std 0.02, width
            // 32), which bounds its logits to about ±0.6: the loss cannot
            // fall far below ln 300 = 5.70 (it levels at 5.62), but it must fall.
            assert!(end < start - 0.05, "{how} on {label}: validation loss {start} → {end}");
            assert!(read(&model) == before, "{how} on {label}: the base weights stay as they were");
            let per_block = 32 + 96 + 32 + 32 + 32 + 128 + 128 + 32;
            assert_eq!(run.adapters().parameters(), 2 * 8 * per_block, "{how}: r·(in+out) each");
            eprintln!("{how} gpt2 on {label}: LoRA r=8, 40 steps: validation loss {start:.3} → {end:.3} nats/token");
        }
    }
}

#[test]
fn bad_adapters_are_errors_naming_what_is_wrong() {
    let dev = Device::cpu();
    let gpt2 = Model::load(dir("gpt2"), &dev).unwrap();
    let llama = Model::load(dir("llama"), &dev).unwrap();
    let err = |r: kiln::Result<Adapters>| r.map(|_| ()).unwrap_err().to_string();
    let e = err(Adapters::new(&gpt2, LoraConfig::new(4).targeting(&["q_proj"]), Key::new(0)));
    assert!(e.contains("q_proj") && e.contains("c_attn"), "{e}");
    let e = err(Adapters::new(&gpt2, LoraConfig::new(0), Key::new(0)));
    assert!(e.contains("rank 0") && e.contains("transformer.h.0"), "{e}");
    let e = err(Adapters::new(&gpt2, LoraConfig::new(33), Key::new(0)));
    assert!(e.contains("rank 33"), "{e}");
    // GPT-2's adapters on Llama: no tensor of the file belongs to it.
    let e = err(Adapters::load(dir("gpt2-lora"), &llama));
    assert!(e.contains("adapter_model.safetensors") && e.contains("transformer.h.0"), "{e}");
    let e = err(Adapters::load(dir("gpt2"), &gpt2));
    assert!(e.contains("adapter_config.json"), "{e}");
    let config = std::fs::read_to_string(dir("gpt2-lora").join("adapter_config.json")).unwrap();
    let weights = std::fs::read(dir("gpt2-lora").join("adapter_model.safetensors")).unwrap();
    let dora = config.replace("\"use_dora\": false", "\"use_dora\": true");
    let e = err(Adapters::from_bytes(&dora, weights.clone(), &gpt2));
    assert!(e.contains("use_dora"), "{e}");
    let rank = config.replace("\"r\": 4", "\"r\": 2");
    let e = err(Adapters::from_bytes(&rank, weights.clone(), &gpt2));
    assert!(e.contains("lora_A.weight") && e.contains("[4, 32]") && e.contains("[2, 32]"), "{e}");
    let e = err(Adapters::from_bytes(&config, weights[..weights.len() / 2].to_vec(), &gpt2));
    assert!(e.contains("truncated"), "{e}");
    // An adapter set for another model.
    let theirs = Adapters::new(&llama, LoraConfig::new(2), Key::new(0)).unwrap();
    let e = gpt2.with_lora(&theirs).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("model.layers.0"), "{e}");
    let tokens: Vec<u32> = (0..40).collect();
    let e = FineTune::new(&gpt2, &tokens, FineTuneConfig::new(4)).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("fewer than a window of 65"), "{e}");
}
