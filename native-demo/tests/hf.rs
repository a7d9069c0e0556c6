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
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hf needs a --prompt"));
    let out = Command::new(DEMO).args(["--hf", "/nonexistent", "--prompt", "x", "--adapter", "gl"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("/nonexistent/model.safetensors"), "{stderr}");
}
