//! `native-demo --hf DIR`: the GPT-2 fixture's greedy continuation, as the
//! CPU reference's decoder gives it in this process, on every adapter the
//! suite expects (int8 too), with its rates and peak memory printed; and
//! the errors of a missing prompt and a folder that is not a model.

use kiln::prelude::*;
use kiln_models::{Decoder, Model, Tokenizer};
use std::path::PathBuf;
use std::process::Command;

const DEMO: &str = env!("CARGO_BIN_EXE_native-demo");
const PROMPT: &str = "In the beginning";

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/tests/fixtures/gpt2")
}

fn demo(adapter: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["--hf".to_string(), fixture().display().to_string(), "--adapter".into(), adapter.into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    Command::new(DEMO).args(&args).env("KILN_TUNE", "off").output().unwrap()
}

/// The text greedy decoding gives after `PROMPT` on the CPU reference.
fn reference_text(tokens: usize, quantize: Option<QuantFormat>) -> String {
    let dev = Device::cpu();
    let mut model = Model::load(fixture(), &dev).unwrap();
    if let Some(format) = quantize {
        model = model.quantize(format).unwrap();
    }
    let tokenizer = Tokenizer::from_folder(&fixture()).unwrap();
    let prompt = tokenizer.encode(PROMPT).unwrap();
    let decoded = kiln::block_on(Decoder::new(model).greedy(&prompt, tokens)).unwrap();
    format!("{PROMPT}{}", tokenizer.decode(&decoded.tokens).unwrap())
}

#[test]
fn the_demo_continues_a_prompt_as_the_reference_does_on_every_adapter() {
    kiln_conformance::validation::env_for_adapters();
    for (quantize, name) in [(None, "f32"), (Some(QuantFormat::INT8), "int8")] {
        let want = reference_text(12, quantize);
        for adapter in ["lavapipe", "swiftshader", "gl"] {
            let mut extra = vec!["--prompt", PROMPT, "--tokens", "12", "--temperature", "0"];
            if quantize.is_some() {
                extra.extend(["--quantize", "int8"]);
            }
            let out = demo(adapter, &extra);
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{adapter} {name}: {stderr}");
            // The text may hold newlines: it runs from the line after
            // `model:` to the `prefill:` line.
            let start = stdout.find("model:").and_then(|i| stdout[i..].find('\n').map(|j| i + j + 1));
            let end = stdout.find("\nprefill: ");
            let text = start.zip(end).map(|(a, b)| &stdout[a..b]);
            assert_eq!(text, Some(want.as_str()), "{adapter} {name}: {stdout}");
            for line in ["prefill: ", "decode: 12 tokens", "device memory: peak"] {
                assert!(stdout.contains(line), "{adapter} {name}: no `{line}` in {stdout}");
            }
            eprintln!("{adapter} {name}: the reference's greedy text");
        }
    }
}

#[test]
fn a_missing_prompt_or_model_is_an_error() {
    let out = demo("gl", &[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hf needs a --prompt to continue or a --finetune corpus"));
    let out = Command::new(DEMO).args(["--hf", "/nonexistent", "--prompt", "x", "--adapter", "gl"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("/nonexistent/model.safetensors"), "{stderr}");
}

/// The losses printed on `step N:` lines, in order.
fn validation_losses(stdout: &str) -> Vec<f32> {
    let after = |line: &str| line.split("validation loss ").nth(1)?.split(' ').next()?.parse().ok();
    stdout.lines().filter(|l| l.starts_with("step ")).filter_map(after).collect()
}

#[test]
fn the_demo_fine_tunes_lora_adapters_that_lower_the_validation_loss_and_load_back() {
    kiln_conformance::validation::env_for_adapters();
    let out_dir = std::env::temp_dir().join(format!("kiln-demo-lora-{}", std::process::id()));
    let out = out_dir.display().to_string();
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/kjv/genesis-ruth.txt");
    let generate = ["--prompt", PROMPT, "--tokens", "12", "--temperature", "0"];
    let mut tune = vec!["--finetune", corpus, "--lora-rank", "4", "--steps", "40", "--lr", "1e-2", "--out", &out];
    tune.extend(generate);
    let run = demo("lavapipe", &tune);
    let stdout = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let losses = validation_losses(&stdout);
    assert_eq!(losses.len(), 5, "before and at 4 points: {stdout}");
    assert!(losses[4] < losses[0] - 0.05, "the validation loss falls: {losses:?}");
    assert!(stdout.contains("fine-tuning: LoRA r=4 on 8 projections (4096 parameters"), "{stdout}");
    let text = |s: &str| s.lines().find(|l| l.starts_with(PROMPT)).map(str::to_string);
    let tuned = text(&stdout).expect("the tuned model's text");
    assert_ne!(Some(tuned.as_str()), reference_text(12, None).lines().next(), "the adapters change the text");
    // The saved adapters, loaded by --lora, give the same text.
    let lora = format!("{out}/lora");
    let mut again = vec!["--lora", lora.as_str()];
    again.extend(generate);
    let run = demo("lavapipe", &again);
    let stdout = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("(LoRA r=4 on 8 projections)"), "{stdout}");
    assert_eq!(text(&stdout), Some(tuned.clone()), "{stdout}");
    eprintln!("lavapipe: LoRA fine-tune, validation loss {losses:?}; reloaded adapters give {tuned:?}");
    std::fs::remove_dir_all(&out_dir).unwrap();
}
