//! The GPT page's first training losses (bits/char), computed natively by
//! the same code (`kiln-gpt`) on SwiftShader's Vulkan driver (the browser's
//! adapter in the e2e test), with the e2e test's small config; also saves
//! that run's checkpoint and the text it generates for a prompt and seed,
//! which the e2e test loads into the page and compares.
//!
//! `cargo run --release -p kiln-web --example native_gpt -- OUT_DIR`
//! writes OUT_DIR/native-gpt.json and OUT_DIR/native-gpt.safetensors.

use kiln::{Device, DeviceOptions, Key};
use kiln_gpt::{Corpus, GptConfig, GptTrainer, Sampling, TrainConfig, generate};
use std::path::PathBuf;
use std::sync::Arc;

/// The e2e test's run (its page URL passes the same numbers).
const STEPS: usize = 20;
const PROMPT: &str = "And the";
const GENERATED: usize = 60;
const SAMPLE_SEED: u64 = 11;

fn main() -> Result<(), String> {
    let out = PathBuf::from(std::env::args().nth(1).ok_or("usage: native_gpt OUT_DIR")?);
    // Absolute: the e2e test reads the checkpoint from its own folder.
    let out = std::fs::canonicalize(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    kiln_conformance::validation::env_for_adapters();
    let options = DeviceOptions { adapter: Some("swiftshader".into()), backends: kiln::core::wgpu::Backends::VULKAN };
    let device = kiln::block_on(Device::with_options(options)).map_err(|e| e.to_string())?;
    let corpus = Corpus::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/kjv/genesis-ruth.txt"))
        .map_err(|e| e.to_string())?;
    let vocab = corpus.vocab.clone();
    let d = TrainConfig::demo(vocab.len());
    let model = GptConfig { context: 32, width: 32, heads: 2, layers: 2, ..d.model };
    let config = TrainConfig { model, batch: 8, steps: 200, seed: 3, ..d };
    let mut trainer = GptTrainer::new(&device, Arc::new(corpus), config).map_err(|e| e.to_string())?;
    let nats = kiln::block_on(trainer.run(STEPS)).map_err(|e| e.to_string())?;
    let bits: Vec<String> = nats.iter().map(|l| (l / std::f32::consts::LN_2).to_string()).collect();
    let checkpoint = out.join("native-gpt.safetensors");
    kiln::block_on(trainer.checkpoint()).and_then(|ck| ck.save(&checkpoint)).map_err(|e| e.to_string())?;
    let sampling = Sampling { temperature: 0.8, top_k: Some(10), key: Key::new(SAMPLE_SEED), cached: true };
    let model = trainer.model().map_err(|e| e.to_string())?;
    let text = kiln::block_on(generate(&model, &vocab, PROMPT, GENERATED, sampling)).map_err(|e| e.to_string())?;
    let json = format!(
        "{{\"adapter\":{:?},\"losses\":[{}],\"checkpoint\":{:?},\"prompt\":{PROMPT:?},\"tokens\":{GENERATED},\"seed\":{SAMPLE_SEED},\"generated\":{}}}\n",
        device.info().name,
        bits.join(","),
        checkpoint.display().to_string(),
        serde_json::Value::from(text)
    );
    std::fs::write(out.join("native-gpt.json"), json).map_err(|e| e.to_string())
}
