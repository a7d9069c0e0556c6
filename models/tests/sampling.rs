//! Sampling on the device: the cut-offs keep what they promise (k = 1 and a
//! tiny p are greedy decoding; every token drawn with k = 5 is among the
//! five most likely), and a key gives the same tokens on every adapter as
//! on the CPU reference.

use kiln::prelude::*;
use kiln_models::{Decoder, Model, Sampling};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

const PROMPT: [u32; 5] = [5, 17, 42, 99, 3];

fn sampling(top_k: Option<usize>, top_p: Option<f64>) -> Sampling {
    Sampling { temperature: 0.8, top_k, top_p, key: Key::new(7) }
}

fn tokens(dev: &Device, name: &str, s: &Sampling) -> Vec<u32> {
    let decoder = Decoder::new(Model::load(fixture(name), dev).unwrap());
    kiln::block_on(decoder.sample(&PROMPT, 12, s)).unwrap().tokens
}

#[test]
fn the_cut_offs_keep_what_they_promise_on_every_device() {
    let adapters = kiln_conformance::adapters::shared();
    let cpu = [("cpu".to_string(), Device::cpu())];
    for name in ["gpt2", "llama"] {
        let reference = tokens(&Device::cpu(), name, &sampling(Some(20), Some(0.9)));
        for (label, dev) in cpu.iter().chain(adapters.iter()) {
            let greedy = tokens(dev, name, &Sampling::greedy());
            assert_eq!(tokens(dev, name, &sampling(Some(1), None)), greedy, "{name} on {label}: k = 1 is greedy");
            assert_eq!(tokens(dev, name, &sampling(None, Some(1e-6))), greedy, "{name} on {label}: a tiny p is greedy");
            let drawn = tokens(dev, name, &sampling(Some(20), Some(0.9)));
            assert_eq!(drawn, reference, "{name} on {label}: the CPU reference's tokens for the same key");
            assert_ne!(drawn, greedy, "{name} on {label}: a draw at temperature 0.8 is not the greedy text");
            eprintln!("{name} on {label}: k = 1 and p = 1e-6 are greedy; key 7 draws the CPU reference's tokens");
        }
    }
}

#[test]
fn every_token_drawn_with_k_5_is_among_the_five_most_likely() {
    let dev = Device::cpu();
    let model = Model::load(fixture("llama"), &dev).unwrap();
    let drawn = tokens(&dev, "llama", &Sampling { temperature: 2.0, ..sampling(Some(5), None) });
    let mut ids = PROMPT.to_vec();
    for &t in &drawn {
        let x = Tensor::from_slice(&dev, &ids, &[1, ids.len()]).unwrap();
        let logits = model.forward(&x).unwrap().narrow(1, ids.len() - 1, 1).unwrap();
        let logits = kiln::block_on(logits.to_vec::<f32>()).unwrap();
        let above = logits.iter().filter(|&&l| l > logits[t as usize]).count();
        assert!(above < 5, "token {t} has {above} more likely ones");
        ids.push(t);
    }
}

#[test]
fn bad_cut_offs_are_an_error() {
    let decoder = Decoder::new(Model::load(fixture("gpt2"), &Device::cpu()).unwrap());
    let bad = Sampling { temperature: -1.0, ..sampling(Some(0), Some(1.5)) };
    let e = kiln::block_on(decoder.sample(&PROMPT, 4, &bad)).unwrap_err().to_string();
    assert_eq!(
        e,
        "sample: temperature -1, top-k Some(0) and top-p Some(1.5): need temperature ≥ 0, k ≥ 1 and 0 < p ≤ 1"
    );
}
