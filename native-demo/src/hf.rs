//! `--hf DIR`: text from a Hugging Face GPT-2 or Llama folder, generated
//! through the KV cache with sampling on the device, then the prefill and
//! decode rates and the device memory it took; with LoRA adapters loaded
//! (`--lora`) or fine-tuned first (`--finetune`).

use crate::{Args, mib};
use kiln::prelude::*;
use kiln_models::{Adapters, Decoder, Model, Sampling, Tokenizer};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

pub async fn run(args: &Args, dir: &Path) -> Result<()> {
    if args.prompt.is_empty() && args.finetune.is_none() {
        let detail = "--hf needs a --prompt to continue or a --finetune corpus".into();
        return Err(KilnError::Invalid { op: "native-demo", detail });
    }
    let options = DeviceOptions { adapter: args.adapter.clone(), ..DeviceOptions::default() };
    let dev = Device::with_options(options).await?;
    let info = dev.info();
    println!("adapter: {} ({}, {})", info.name, info.backend, info.device_type);
    let start = Instant::now();
    let mut model = Model::load(dir, &dev)?;
    let stored = model.weight_bytes();
    if let Some(format) = args.quantize {
        model = model.quantize(format)?;
    }
    Tensor::realize_all(&model.leaves().iter().collect::<Vec<_>>()).await?;
    let tokenizer = Tokenizer::from_folder(dir)?;
    let parameters: usize = model.leaves().iter().map(|t| t.numel()).sum();
    let held = match args.quantize {
        Some(format) => format!(", {:.0} MiB as {format}", mib(model.weight_bytes())),
        None => String::new(),
    };
    println!(
        "model: {} ({:.1}M parameters, {:.0} MiB of weights{held}; loaded in {:.1} s)",
        dir.display(),
        parameters as f64 / 1e6,
        mib(stored),
        start.elapsed().as_secs_f64()
    );
    if let Some(corpus) = &args.finetune {
        model = crate::finetune::run(args, &model, &tokenizer, corpus).await?;
    } else if let Some(lora) = &args.lora {
        let adapters = Adapters::load(lora, &model)?;
        println!(
            "adapters: {} (LoRA r={} on {} projections)",
            lora.display(),
            adapters.config().rank,
            adapters.loras.len()
        );
        model = model.with_lora(&adapters)?;
    }
    if args.prompt.is_empty() {
        return Ok(());
    }
    let prompt = tokenizer.encode(&args.prompt)?;
    let sampling =
        Sampling { temperature: args.temperature, top_k: args.top_k, top_p: args.top_p, key: Key::new(args.seed) };
    let decoded = Decoder::new(model).sample(&prompt, args.tokens, &sampling).await?;
    println!("{}{}", args.prompt, tokenizer.decode(&decoded.tokens)?);
    std::io::stdout().flush().ok();
    println!(
        "prefill: {} tokens in {:.2} s ({:.1} tokens/s, compiling its kernels on a first run)",
        prompt.len(),
        decoded.prefill_seconds,
        prompt.len() as f64 / decoded.prefill_seconds
    );
    println!(
        "decode: {} tokens, {:.1} tokens/s after the first step ({:.2} s, capturing it)",
        decoded.tokens.len(),
        decoded.decode_rate(),
        decoded.first_step_seconds
    );
    println!("device memory: peak {:.0} MiB in use", mib(dev.stats().pool.peak_bytes_in_use));
    Ok(())
}
