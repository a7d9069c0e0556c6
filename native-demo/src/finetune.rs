//! `--hf DIR --finetune CORPUS`: LoRA adapters trained on a text with the
//! model frozen, the validation loss printed as it falls, the adapters
//! saved in PEFT's layout to `--out/lora`.

use crate::Args;
use kiln::prelude::*;
use kiln_models::{FineTune, FineTuneConfig, Model, Tokenizer};
use std::path::Path;
use std::time::Instant;

/// Steps when `--steps` is not given.
const DEFAULT_STEPS: u64 = 200;
/// Validation passes over the run (and one before it).
const EVALUATIONS: u64 = 4;

/// Trains adapters on `corpus`, saves them, and returns the model with them.
pub async fn run(args: &Args, model: &Model, tokenizer: &Tokenizer, corpus: &Path) -> Result<Model> {
    let text = std::fs::read_to_string(corpus).map_err(|e| KilnError::File {
        op: "native-demo --finetune",
        path: corpus.display().to_string(),
        detail: format!("cannot read: {e}"),
    })?;
    let tokens = tokenizer.encode(&text)?;
    let mut config = FineTuneConfig::new(args.lora_rank);
    config.batch = args.batch_size.unwrap_or(config.batch);
    config.context = args.context.unwrap_or(config.context);
    config.lr = args.lr.unwrap_or(config.lr);
    config.seed = args.seed;
    let mut run = FineTune::new(model, &tokens, config.clone())?;
    let frozen: usize = model.leaves().iter().map(|t| t.numel()).sum();
    println!(
        "fine-tuning: LoRA r={} on {} projections ({} parameters; the model's {:.1}M frozen), {} tokens of {}, \
         {} windows of {} a step",
        config.lora.rank,
        run.adapters().loras.len(),
        run.adapters().parameters(),
        frozen as f64 / 1e6,
        tokens.len(),
        corpus.display(),
        config.batch,
        config.context
    );
    let steps = args.steps.unwrap_or(DEFAULT_STEPS).max(1);
    println!("step 0: validation loss {:.3} nats/token", run.validation_loss().await?);
    let start = Instant::now();
    let mut losses = Vec::new();
    while run.steps() < steps {
        losses.push(run.step().await?);
        let at = run.steps();
        if at % steps.div_ceil(EVALUATIONS) == 0 || at == steps {
            let trained = Tensor::stack(&losses.iter().collect::<Vec<_>>(), 0)?.mean(&[], false)?.item::<f32>().await?;
            losses.clear();
            let valid = run.validation_loss().await?;
            let rate = at as f64 / start.elapsed().as_secs_f64();
            println!(
                "step {at}: training loss {trained:.3}, validation loss {valid:.3} nats/token ({rate:.1} steps/s, evaluations included)"
            );
        }
    }
    let out = args.out.join("lora");
    run.adapters().save(&out).await?;
    println!("adapters: saved to {} (PEFT's adapter_config.json and adapter_model.safetensors)", out.display());
    model.with_lora(run.adapters())
}
