//! The Hugging Face models' figures, opt-in (`--only hf`; a full run
//! leaves them out, and `--from-json` renders them as the page's `hf`
//! section): GPT-2 small and TinyLlama's 1.1B shape with random weights
//! (the folders `--write-hf` writes, kept under target/hf), stored in f32
//! and f16 and with int8 and int4 projections. Prefill of 128 tokens is
//! timed against the FMA ceiling (2 flops per weight and token); decoding
//! against the memory-bound one: the bytes of the weights a token reads,
//! over the copy rate measured beside it.

use crate::hf::{self, HfShape};
use crate::measure::Record;
use crate::suites::{Ctx, wait};
use kiln::prelude::*;
use kiln_models::{Decoder, Model};
use std::path::PathBuf;

/// The prompt's length for the prefill figures.
const PREFILL: usize = 128;

/// Whether `--only` asks for these figures.
pub fn wanted(cx: &Ctx) -> bool {
    cx.only.is_some_and(|o| o.split('|').any(|part| part.starts_with("hf")))
}

/// The folder of `shape` stored as `dtype`, written once.
fn folder(shape: HfShape, dtype: &str) -> Result<PathBuf> {
    let dir = PathBuf::from(format!("target/hf/{}-{dtype}", shape.name()));
    if !dir.join("model.safetensors").exists() {
        println!("  writing {} ({dtype}) to {}", shape.name(), dir.display());
        hf::write(shape, dtype, &dir).map_err(|e| KilnError::Invalid { op: "kiln-bench hf", detail: e.to_string() })?;
    }
    Ok(dir)
}

/// Bytes of the weights one token's pass reads: all but the token table
/// (one row of it) where the head is a table of its own, and GPT-2's
/// position table (one row).
fn bytes_per_token(model: &Model) -> f64 {
    let bytes = |t: &Tensor| t.dtype().storage_bytes(t.numel()) as f64;
    let rows_read_once = match model {
        Model::Gpt2(m) => bytes(&m.wpe.weight),
        Model::Llama(m) if m.lm_head.is_some() => bytes(&m.embed_tokens.weight),
        Model::Llama(_) => 0.0,
    };
    model.weight_bytes() as f64 - rows_read_once
}

/// Multiply-adds per token of a float model: each matrix's elements once
/// (the head's included), the lookup tables' not.
fn macs_per_token(model: &Model) -> f64 {
    let tables = match model {
        Model::Gpt2(m) => m.wpe.weight.numel(),
        Model::Llama(m) if m.lm_head.is_some() => m.embed_tokens.weight.numel(),
        Model::Llama(_) => 0,
    };
    let matrices: usize = model.leaves().iter().filter(|t| t.rank() == 2).map(|t| t.numel()).sum();
    (matrices - tables) as f64
}

pub fn rows(cx: &Ctx, out: &mut dyn FnMut(Record)) -> Result<()> {
    for (shape, new_tokens) in [(HfShape::Gpt2Small, 16), (HfShape::TinyLlama, 4)] {
        let figure = |precision: &str, what: &str| format!("hf {} {precision} {what}", shape.name());
        let precisions = ["f32", "f16", "int8", "int4"];
        if !precisions.iter().any(|p| cx.wants(&figure(p, "prefill")) || cx.wants(&figure(p, "decode"))) {
            continue;
        }
        let float = Model::load(folder(shape, "f32")?, cx.dev)?;
        let macs = macs_per_token(&float);
        for precision in precisions {
            let (prefill, decode) = (figure(precision, &format!("prefill {PREFILL}")), figure(precision, "decode"));
            if !cx.wants(&prefill) && !cx.wants(&decode) {
                continue;
            }
            let model = match precision {
                "f32" => float.clone(),
                "f16" => Model::load(folder(shape, "f16")?, cx.dev)?,
                "int8" => float.quantize(QuantFormat::INT8)?,
                _ => float.quantize(QuantFormat::int4(32))?,
            };
            kiln::block_on(Tensor::realize_all(&model.leaves().iter().collect::<Vec<_>>()))?;
            let weights = format!("{:.0} MiB of weights", model.weight_bytes() as f64 / (1 << 20) as f64);
            if cx.wants(&prefill) {
                let ids: Vec<i32> = (0..PREFILL as i32).map(|i| (i * 7919) % 1000).collect();
                let ids = Tensor::from_slice(cx.dev, &ids, &[1, PREFILL])?;
                let run = || wait(&model.forward(&ids)?.narrow(1, PREFILL - 1, 1)?);
                run()?; // tunes this shape class's products
                let p = cx.against_fma(run)?;
                let flops = 2.0 * macs * PREFILL as f64;
                out(Record::rate(&prefill, cx.adapter, p.timing, PREFILL as f64, "tokens/s")
                    .fraction(p.fraction(flops, cx.ceilings.fma_flops))
                    .page_note(format!("{weights}; 2 flops per weight and token against the FMA ceiling")));
            }
            if cx.wants(&decode) {
                let decoder = Decoder::new(model.clone());
                let run = || kiln::block_on(decoder.greedy(&[1], new_tokens)).map(|_| ());
                let p = cx.against_copy(run)?;
                let bytes = bytes_per_token(&model);
                let ceiling = cx.ceilings.copy_bytes / p.ceiling.median / bytes;
                out(Record::rate(&decode, cx.adapter, p.timing, new_tokens as f64, "tokens/s")
                    .fraction(p.fraction(new_tokens as f64 * bytes, cx.ceilings.copy_bytes))
                    .page_note(format!(
                        "{weights}; {new_tokens} tokens after a 1-token prompt (its pass included) through the KV cache; \
                         the copy rate alongside allows {ceiling:.1} tokens/s at {:.0} MiB read per token",
                        bytes / (1 << 20) as f64
                    )));
            }
        }
    }
    Ok(())
}
