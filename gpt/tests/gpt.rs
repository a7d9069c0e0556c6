//! The GPT end to end on every adapter, with a tiny model: it learns, the
//! KV cache gives what re-reading the window gives, a resumed run
//! continues bit for bit, and bad inputs are errors.

use kiln::prelude::*;
use kiln_conformance::adapters;
use kiln_gpt::{Corpus, Gpt, GptConfig, GptTrainer, Sampling, TrainConfig, Vocab, generate, load_model};
use kiln_nn::QuantizedTree;
use kiln_nn::checkpoint::Checkpoint;
use std::sync::Arc;

fn corpus() -> Arc<Corpus> {
    let verse = "In the beginning God created the heaven and the earth.\nAnd the earth was without form.\n";
    Arc::new(Corpus::from_text(&verse.repeat(60), 0.1).unwrap())
}

fn tiny(vocab: usize) -> TrainConfig {
    let model = GptConfig { vocab, context: 16, width: 16, heads: 2, layers: 2, alibi: true };
    TrainConfig { model, batch: 8, steps: 60, lr: 1e-2, weight_decay: 0.1, seed: 3 }
}

#[test]
fn vocab_round_trips_and_names_what_it_cannot_encode() {
    let v = Vocab::of("hello, world\n");
    assert_eq!(v.as_string(), "\n ,dehlorw");
    let ids = v.encode("world, hello").unwrap();
    assert_eq!(v.decode(&ids).unwrap(), "world, hello");
    assert_eq!(Vocab::from_chars(&v.as_string()).unwrap(), v);
    let err = v.encode("hello!").unwrap_err().to_string();
    assert!(err.contains("'!'") && err.contains("at 5"), "{err}");
    assert!(v.decode(&[10]).unwrap_err().to_string().contains("id 10"));
    assert!(Vocab::from_chars("ba").is_err());
}

#[test]
fn a_tiny_gpt_learns_a_repeated_text_on_every_adapter() {
    let corpus = corpus();
    for (label, dev) in adapters::shared().iter() {
        let mut t = GptTrainer::new(dev, corpus.clone(), tiny(corpus.vocab.len())).unwrap();
        let before = kiln::block_on(t.evaluate()).unwrap();
        let losses = kiln::block_on(t.run(60)).unwrap();
        let after = kiln::block_on(t.evaluate()).unwrap();
        let (first, last) = (losses[0], losses[55..].iter().sum::<f32>() / 5.0);
        eprintln!("{label}: training loss {first:.3} → {last:.3} nats, validation {before:.3} → {after:.3} bits/char");
        assert!(last < 0.6 * first, "{label}: training loss {first} → {last}");
        assert!(after < 0.6 * before, "{label}: validation {before} → {after} bits/char");
        assert_eq!(t.captures(), 1, "{label}: the step is captured once and replayed");
        // A replayed step is one submit; reading its loss is the next.
        let idle = dev.stats();
        let loss = kiln::block_on(t.step()).unwrap();
        let stepped = dev.stats();
        kiln::block_on(loss.item::<f32>()).unwrap();
        let read = dev.stats();
        assert_eq!(stepped.submits - idle.submits, 1, "{label}: a training step is one submit");
        assert_eq!(read.submits - stepped.submits, 1, "{label}: reading the loss is one more");
    }
}

/// A text of 40 characters outgrows the context of 16 twice, so the
/// window jumps (and the cache is refilled) on the way.
#[test]
fn the_kv_cache_gives_the_text_that_rereading_the_window_gives() {
    let corpus = corpus();
    let mut texts = Vec::new();
    for (label, dev) in adapters::shared().iter() {
        let model = Gpt::new(dev, Key::new(4), tiny(corpus.vocab.len()).model).unwrap();
        let sample = |cached, seed| {
            let sampling = Sampling { temperature: 1.0, top_k: Some(8), key: Key::new(seed), cached };
            kiln::block_on(generate(&model, &corpus.vocab, "And the ", 40, sampling)).unwrap()
        };
        let cached = sample(true, 1);
        assert_eq!(cached.chars().count(), 40);
        assert_eq!(cached, sample(false, 1), "{label}: with and without the cache");
        assert_eq!(cached, sample(true, 1), "{label}: the same key");
        assert_ne!(cached, sample(true, 2), "{label}: another key");
        texts.push((label.clone(), cached));
    }
    for (label, text) in &texts[1..] {
        assert_eq!(text, &texts[0].1, "{label} and {} from the same key", texts[0].0);
    }
}

/// The cached step's logits at each position equal the full forward's.
#[test]
fn cached_steps_compute_the_full_forward_one_position_at_a_time() {
    let corpus = corpus();
    let dev = &adapters::shared()[0].1;
    let model = Gpt::new(dev, Key::new(5), tiny(corpus.vocab.len()).model).unwrap();
    let ids: Vec<i32> = corpus.train[..12].iter().map(|&c| c as i32).collect();
    let full = model.forward(&Tensor::from_slice(dev, &ids, &[1, 12]).unwrap()).unwrap();
    let full = kiln::block_on(full.to_vec::<f32>()).unwrap();
    let mut caches = model.caches(1).unwrap();
    let vocab = corpus.vocab.len();
    for (pos, &id) in ids.iter().enumerate() {
        let id = Tensor::from_slice(dev, &[id], &[1, 1]).unwrap();
        let at = Tensor::scalar(dev, pos as f64, DType::I32).unwrap();
        let (logits, next) = model.step(&id, &caches, &at).unwrap();
        caches = next;
        let got = kiln::block_on(logits.to_vec::<f32>()).unwrap();
        for (g, w) in got.iter().zip(&full[pos * vocab..(pos + 1) * vocab]) {
            assert!((g - w).abs() <= 1e-4 + 1e-4 * w.abs(), "position {pos}: {g} against {w}");
        }
    }
}

#[test]
fn a_resumed_run_continues_bit_for_bit() {
    let corpus = corpus();
    let dev = &adapters::shared()[0].1;
    let config = tiny(corpus.vocab.len());
    let mut whole = GptTrainer::new(dev, corpus.clone(), config).unwrap();
    let want = kiln::block_on(whole.run(6)).unwrap();
    let mut first = GptTrainer::new(dev, corpus.clone(), config).unwrap();
    let mut got = kiln::block_on(first.run(3)).unwrap();
    let bytes = kiln::block_on(first.checkpoint()).unwrap().to_bytes().unwrap();
    let ck = Checkpoint::from_bytes(&bytes, "memory").unwrap();
    let mut resumed = GptTrainer::restore(dev, corpus.clone(), &ck).unwrap();
    assert_eq!(resumed.steps(), 3);
    got.extend(kiln::block_on(resumed.run(3)).unwrap());
    assert_eq!(got, want);
    let (model, vocab) = load_model(dev, &ck).unwrap();
    assert_eq!(vocab, corpus.vocab);
    assert_eq!(model.config(), config.model);
}

#[test]
fn bad_inputs_are_errors_that_name_them() {
    let corpus = corpus();
    let dev = Device::cpu();
    let config = tiny(corpus.vocab.len());
    let model = Gpt::new(&dev, Key::new(1), config.model).unwrap();
    let sampling = Sampling { temperature: 1.0, top_k: None, key: Key::new(1), cached: true };
    let err = kiln::block_on(generate(&model, &corpus.vocab, "And #", 5, sampling)).unwrap_err().to_string();
    assert!(err.contains("'#'"), "{err}");
    let cold = Sampling { temperature: -1.0, ..sampling };
    let err = kiln::block_on(generate(&model, &corpus.vocab, "And", 5, cold)).unwrap_err().to_string();
    assert!(err.contains("temperature -1"), "{err}");
    let long = Tensor::zeros(&dev, &[1, 17], DType::I32).unwrap();
    let err = model.forward(&long).unwrap_err().to_string();
    assert!(err.contains("Gpt") && err.contains("[1, 17]") && err.contains("≤ 16"), "{err}");
    let floats = Tensor::zeros(&dev, &[1, 4], DType::F32).unwrap();
    assert!(model.forward(&floats).unwrap_err().to_string().contains("f32"));
    let err = GptTrainer::new(&dev, corpus.clone(), TrainConfig { batch: 0, ..config }).err().unwrap().to_string();
    assert!(err.contains("TrainConfig"), "{err}");
    for bad in [GptConfig { heads: 3, ..config.model }, GptConfig { width: 0, ..config.model }] {
        assert!(Gpt::new(&dev, Key::new(1), bad).err().unwrap().to_string().contains("GptConfig"), "{bad:?}");
    }
    let short = Arc::new(Corpus::from_text(&"abc ".repeat(40), 0.1).unwrap());
    let err = GptTrainer::new(&dev, short, TrainConfig { model: GptConfig { vocab: 4, ..config.model }, ..config })
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("validation split has 16 characters"), "{err}");
    let mut mnist = Checkpoint::new();
    mnist.set_metadata("model", "mlp").unwrap();
    assert!(load_model(&dev, &mnist).err().unwrap().to_string().contains("mlp model, not a GPT"));
}

/// Device memory stays flat over 1,100 steps: once the step, a
/// validation pass and a generation have each run and the step has run
/// again after them (by step 600: the pool's last two buffers come then),
/// no buffer is created and the bytes in use and held do not grow,
/// sampled every 100 steps, through another validation pass and sample
/// (at 1,000; every 500, as the demo makes them).
#[test]
fn device_memory_stays_flat_over_a_thousand_steps() {
    let corpus = corpus();
    let dev = &adapters::shared()[0].1;
    let config = TrainConfig { steps: 1100, ..tiny(corpus.vocab.len()) };
    let mut t = GptTrainer::new(dev, corpus.clone(), config).unwrap();
    let mut settled = None;
    for at in (100..=1100).step_by(100) {
        kiln::block_on(t.run(100)).unwrap();
        if at % 500 == 0 {
            kiln::block_on(t.evaluate()).unwrap();
            let sampling = Sampling { temperature: 1.0, top_k: None, key: Key::new(at), cached: true };
            kiln::block_on(generate(&t.model().unwrap(), &corpus.vocab, "And", 20, sampling)).unwrap();
        }
        let pool = dev.stats().pool;
        let Some(first) = settled else {
            settled = (at == 600).then_some(pool);
            continue;
        };
        let sampled = format!("after {at} steps: {pool:?}; after 600: {first:?}");
        assert_eq!(pool.buffers_created, first.buffers_created, "{sampled}");
        assert!(pool.bytes_in_use + pool.bytes_free <= first.bytes_in_use + first.bytes_free, "{sampled}");
    }
    assert_eq!(t.steps(), 1100);
    assert_eq!(t.captures(), 1);
}

/// The blocks' projections in int8 and int4: near the float logits, the
/// cached step agrees with the full forward, the codes are named for
/// checkpoints, and a quantized model saves and loads back.
#[test]
fn a_quantized_gpt_keeps_its_logits_and_its_cache() {
    let dev = Device::cpu();
    let config = GptConfig { vocab: 12, context: 8, width: 16, heads: 2, layers: 2, alibi: true };
    let model = Gpt::new(&dev, Key::new(9), config).unwrap();
    let ids = Tensor::from_slice(&dev, &[1i32, 5, 3, 7, 0, 11], &[1, 6]).unwrap();
    let read = |t: &Tensor| kiln::block_on(t.to_vec::<f32>()).unwrap();
    let float = read(&model.forward(&ids).unwrap());
    let scale = float.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (format, tolerance) in [(QuantFormat::INT8, 0.02), (QuantFormat::int4(16), 0.2)] {
        let q = model.quantize(format).unwrap();
        let codes: Vec<String> = q.code_formats().into_iter().map(|(p, f)| format!("{p} {}", f.spec())).collect();
        assert_eq!(codes.len(), 8, "{codes:?}");
        assert!(codes[0].starts_with("blocks.0.attention.qkv.codes int"), "{codes:?}");
        let logits = read(&q.forward(&ids).unwrap());
        let worst = logits.iter().zip(&float).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= tolerance * scale, "{format}: logits off by {worst} of {scale}");

        let mut caches = q.caches(1).unwrap();
        let mut last = Vec::new();
        for (pos, &id) in [1i32, 5, 3, 7, 0, 11].iter().enumerate() {
            let id = Tensor::from_slice(&dev, &[id], &[1, 1]).unwrap();
            let pos = Tensor::scalar(&dev, pos as f64, DType::I32).unwrap();
            let (l, c) = q.step(&id, &caches, &pos).unwrap();
            (last, caches) = (read(&l), c);
        }
        let full_last = &logits[logits.len() - config.vocab..];
        let off = last.iter().zip(full_last).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(off <= 1e-4 * scale, "{format}: the cached step is off the full forward by {off}");

        let mut ck = Checkpoint::new();
        kiln::block_on(ck.add_quantized("params", &q)).unwrap();
        let back = Checkpoint::from_bytes(&ck.to_bytes().unwrap(), "memory").unwrap();
        let loaded = back.quantized_tree("params", &model.quantize(format).unwrap(), &dev).unwrap();
        // The CPU device holds the scales in f64, the file in f32.
        let again = read(&loaded.forward(&ids).unwrap());
        let off = again.iter().zip(&logits).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(off <= 1e-5 * scale, "{format}: loaded back, off by {off}");
    }
}
