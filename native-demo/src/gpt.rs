//! `--model gpt`: trains the character-level GPT with validation in bits
//! per character, samples as it learns, a plot and a checkpoint; and
//! `--generate CKPT`: text from a trained checkpoint.

use crate::progress::Progress;
use crate::{Args, file_error, plot};
use kiln::prelude::*;
use kiln::{Key, KilnError};
use kiln_gpt::{Corpus, GptTrainer, Sampling, TrainConfig, generate, load_model};
use kiln_nn::checkpoint::Checkpoint;
use std::sync::Arc;
use std::time::Instant;

/// Steps between validation passes.
const EVAL_EVERY: u64 = 100;
/// Steps between samples.
const SAMPLE_EVERY: u64 = 300;
/// Characters of each sample printed while training.
const SAMPLE_LEN: usize = 200;

pub async fn run(args: &Args) -> Result<()> {
    #[cfg(feature = "mpi")]
    if args.data_parallel {
        return Err(KilnError::Invalid {
            op: "native-demo",
            detail: "--data-parallel trains the MNIST models only".into(),
        });
    }
    let options = DeviceOptions { adapter: args.adapter.clone(), ..DeviceOptions::default() };
    let dev = Device::with_options(options).await?;
    let info = dev.info();
    println!("adapter: {} ({}, {})", info.name, info.backend, info.device_type);
    if let Some(path) = &args.generate {
        return sample_checkpoint(&dev, path, args).await;
    }
    let corpus = Arc::new(Corpus::load(&args.corpus)?);
    println!(
        "corpus: {} ({} characters, {} distinct; {} for training, {} for validation)",
        args.corpus.display(),
        corpus.train.len() + corpus.valid.len(),
        corpus.vocab.len(),
        corpus.train.len(),
        corpus.valid.len()
    );
    let mut trainer = match &args.resume {
        Some(path) => {
            let t = GptTrainer::restore(&dev, corpus, &Checkpoint::load(path)?)?;
            println!("resuming {} at step {}", path.display(), t.steps());
            t
        }
        None => {
            let d = TrainConfig::demo(corpus.vocab.len());
            let config = TrainConfig {
                batch: args.batch_size.unwrap_or(d.batch),
                steps: args.total_steps.unwrap_or(d.steps),
                lr: args.lr.unwrap_or(d.lr),
                seed: args.seed,
                ..d
            };
            GptTrainer::new(&dev, corpus, config)?
        }
    };
    let c = *trainer.config();
    let m = c.model;
    println!(
        "model: {} parameters ({} layers, width {}, {} heads, context {}), {} sequences a step",
        trainer.model()?.parameters(),
        m.layers,
        m.width,
        m.heads,
        m.context,
        c.batch
    );
    train(&mut trainer, args).await
}

async fn train(trainer: &mut GptTrainer, args: &Args) -> Result<()> {
    let c = *trainer.config();
    let total = args.steps.map_or(c.steps, |s| (trainer.steps() + s).min(c.steps));
    std::fs::create_dir_all(&args.out).map_err(|e| file_error(&args.out, e))?;
    let mut progress = Progress::new(total, trainer.steps());
    let (mut losses, mut validation) = (Vec::new(), Vec::new());
    let (started, first_step) = (Instant::now(), trainer.steps());
    while trainer.steps() < total {
        let n = (EVAL_EVERY - trainer.steps() % EVAL_EVERY).min(10).min(total - trainer.steps()) as usize;
        let nats = trainer.run(n).await?;
        losses.extend(nats.iter().map(|l| l / std::f32::consts::LN_2));
        let tokens = (trainer.steps() - first_step) as f64 * c.tokens_per_step() as f64;
        let status = format!(
            "loss {:.2} bits/char, {:.0} tokens/s",
            losses.last().copied().unwrap_or(f32::NAN),
            tokens / started.elapsed().as_secs_f64()
        );
        progress.status(trainer.steps(), &status);
        let step = trainer.steps();
        if step.is_multiple_of(EVAL_EVERY) || step == total {
            let bits = trainer.evaluate().await?;
            validation.push((losses.len() as u64, bits));
            progress.line(&format!("step {step}: validation {bits:.2} bits/char"));
        }
        if step.is_multiple_of(SAMPLE_EVERY) && step < total {
            let text = sample(trainer, step, SAMPLE_LEN).await?;
            progress.line(&format!("sample at step {step}:\n{text}\n"));
        }
    }
    progress.finish();
    let wall = started.elapsed().as_secs_f64();
    let tokens = losses.len() as f64 * c.tokens_per_step() as f64;
    println!("trained {} steps in {wall:.1} s ({:.0} tokens/s)", losses.len(), tokens / wall);
    if let Some(path) = &args.losses {
        let json = format!("[{}]\n", losses.iter().map(|l| format!("{l:?}")).collect::<Vec<_>>().join(", "));
        std::fs::write(path, json).map_err(|e| file_error(path, e))?;
        println!("losses: {}", path.display());
    }
    let checkpoint = args.out.join("gpt.safetensors");
    trainer.checkpoint().await?.save(&checkpoint)?;
    println!("checkpoint: {}", checkpoint.display());
    let png = args.out.join("gpt-training.png");
    let checks = plot::Checks { title: "validation loss", y_desc: "bits/char", points: &validation, accuracy: false };
    plot::write(&png, &format!("GPT on {}", trainer.device().info().name), &losses, "bits/char", checks)
        .map_err(|e| KilnError::Invalid { op: "plot", detail: format!("{}: {e}", png.display()) })?;
    println!("plot: {}", png.display());
    println!("sample:\n{}\n", sample(trainer, trainer.steps(), SAMPLE_LEN).await?);
    if let Some(&(_, bits)) = validation.last() {
        println!("final validation loss: {bits:.2} bits/char");
    }
    Ok(())
}

/// A sample from the trainer's current weights, from a key of the step.
async fn sample(trainer: &GptTrainer, step: u64, tokens: usize) -> Result<String> {
    let key = Key::new(trainer.config().seed).fold_in(1 << 20).fold_in(step as u32);
    let sampling = Sampling { temperature: 0.8, top_k: None, key, cached: true };
    generate(&trainer.model()?, trainer.vocab(), "\n", tokens, sampling).await
}

async fn sample_checkpoint(dev: &Device, path: &std::path::Path, args: &Args) -> Result<()> {
    let (model, vocab) = load_model(dev, &Checkpoint::load(path)?)?;
    let model = match args.quantize {
        Some(format) => {
            eprintln!("blocks' projections quantized to {format}");
            model.quantize(format)?
        }
        None => model,
    };
    let sampling =
        Sampling { temperature: args.temperature, top_k: args.top_k, key: Key::new(args.seed), cached: !args.no_cache };
    let started = Instant::now();
    let text = generate(&model, &vocab, &args.prompt, args.tokens, sampling).await?;
    let wall = started.elapsed().as_secs_f64();
    println!("{}{text}", args.prompt);
    eprintln!(
        "{} characters in {wall:.1} s ({:.0} characters/s, {})",
        args.tokens,
        args.tokens as f64 / wall,
        if sampling.cached { "KV cache" } else { "no cache" }
    );
    Ok(())
}
