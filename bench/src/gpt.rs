//! The character-level GPT: its training step (characters per second and
//! kernels per step), a causal attention layer and its core alone at three
//! context lengths against the FMA ceiling, and generation with and without
//! the KV cache.

use crate::measure::{Record, Reps, time};
use crate::suites::{Ctx, wait};
use kiln::prelude::*;
use kiln_gpt::{Corpus, Gpt, GptTrainer, Sampling, TrainConfig, generate};
use kiln_nn::{CausalSelfAttention, causal_attention, causal_attention_flops};
use std::sync::Arc;

/// Characters generated per timed run.
const GENERATED: usize = 64;

pub fn corpus_path() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../data/kjv/genesis-ruth.txt").to_string()
}

pub fn gpt(cx: &Ctx, out: &mut dyn FnMut(Record)) -> Result<()> {
    let corpus = Arc::new(Corpus::load(corpus_path())?);
    let config = TrainConfig::demo(corpus.vocab.len());
    // A second or more per step here: three timed steps are enough.
    let reps = Reps(cx.reps.0.min(3));
    let bench = "gpt train step (16×128 characters)";
    if cx.wants(bench) {
        let mut trainer = GptTrainer::new(cx.dev, corpus.clone(), config)?;
        wait(&kiln::block_on(trainer.step())?)?; // captures the step
        let before = cx.dev.stats();
        wait(&kiln::block_on(trainer.step())?)?;
        let after = cx.dev.stats();
        let t = time(reps, || wait(&kiln::block_on(trainer.step())?))?;
        let note = format!(
            "{} kernels and {} submits per step (with the loss's readback)",
            after.kernels_launched - before.kernels_launched,
            after.submits - before.submits
        );
        out(Record::rate(bench, cx.adapter, t, config.tokens_per_step() as f64, "characters/s").page_note(note));
    }
    for context in [128, 512, 2048] {
        let bench = format!("causal attention T={context} (width 128, 4 heads)");
        if cx.wants(&bench) {
            out(attention(cx, &bench, context)?);
        }
        let bench = format!("causal attention kernel T={context} (4 heads of 32)");
        if cx.wants(&bench) {
            out(attention_kernel(cx, &bench, context)?);
        }
    }
    let model = Gpt::new(cx.dev, Key::new(0), config.model)?;
    for cached in [true, false] {
        let bench = format!("gpt generation ({})", if cached { "KV cache" } else { "no cache" });
        if cx.wants(&bench) {
            let sampling = Sampling { temperature: 0.8, top_k: None, key: Key::new(1), cached };
            let run = || kiln::block_on(generate(&model, &corpus.vocab, "And ", GENERATED, sampling)).map(drop);
            let t = time(Reps(cx.reps.0.min(3)), run)?;
            out(Record::rate(&bench, cx.adapter, t, GENERATED as f64, "characters/s")
                .note(format!("{GENERATED} characters after a 4-character prompt, batch 1")));
        }
    }
    Ok(())
}

/// The attention alone ([`causal_attention`] with ALiBi) over queries,
/// keys and values `[1, 4, context, 32]`.
fn attention_kernel(cx: &Ctx, bench: &str, context: usize) -> Result<Record> {
    let head = |seed| kiln::random::normal(cx.dev, Key::new(seed), &[1, 4, context, 32], DType::F32, 0.0, 1.0);
    let (q, k, v) = (head(5)?, head(6)?, head(7)?);
    kiln::block_on(Tensor::realize_all(&[&q, &k, &v]))?;
    let f = || causal_attention(&q, &k, &v, true);
    let y = f()?;
    let before = cx.dev.stats().kernels_launched;
    kiln::block_on(y.realize())?;
    let kernels = cx.dev.stats().kernels_launched - before;
    let note = format!("{kernels} kernel(s); scores and weighted sum, counting the masked half");
    against_fma(cx, bench, causal_attention_flops(q.shape()), note, &|| wait(&f()?))
}

/// One attention layer's forward over `[1, context, 128]`: its FLOPs
/// ([`CausalSelfAttention::forward_flops`]).
fn attention(cx: &Ctx, bench: &str, context: usize) -> Result<Record> {
    let width = 128;
    let layer = CausalSelfAttention { alibi: true, ..CausalSelfAttention::new(cx.dev, Key::new(3), width, 4)? };
    let x = kiln::random::normal(cx.dev, Key::new(4), &[1, context, width], DType::F32, 0.0, 1.0)?;
    kiln::block_on(Tensor::realize_all(&layer.leaves().iter().chain([&x]).collect::<Vec<_>>()))?;
    let note =
        "qkv and output projections plus scores and weighted sum, counting the masked half (which one kernel skips)";
    against_fma(cx, bench, layer.forward_flops(context), note.into(), &|| wait(&layer.forward(&x, None)?))
}

/// `run`'s rate of `flops` against the FMA ceiling timed beside it, after
/// a warm-up run.
fn against_fma(cx: &Ctx, bench: &str, flops: f64, note: String, run: &dyn Fn() -> Result<()>) -> Result<Record> {
    run()?;
    let p =
        crate::measure::time_paired(Reps(cx.reps.0.min(3)), || (cx.ceilings.fma_run)().map_err(KilnError::Gpu), run)?;
    Ok(Record::rate(bench, cx.adapter, p.timing, flops / 1e9, "GFLOP/s")
        .fraction(p.fraction(flops, cx.ceilings.fma_flops))
        .page_note(note))
}
