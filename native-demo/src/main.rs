//! kiln's desktop demo: trains an MLP or a CNN on MNIST, or a small
//! character-level GPT on the King James Bible, on the best adapter found
//! (or `--adapter`), with a progress bar, evaluations, a plot and a
//! checkpoint; `--generate` samples text from a GPT checkpoint; `--hf`
//! generates from a Hugging Face GPT-2 or Llama folder, and fine-tunes it
//! with LoRA (`--finetune`).

mod finetune;
mod gpt;
mod hf;
mod notice;
mod plot;
mod progress;
mod split;
mod training;

use clap::Parser;
use kiln::prelude::*;
use kiln_mnist::{Config, ModelKind, Trainer};
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::data::Mnist;
use progress::Progress;
use split::{Phase, Split};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use training::Training;

#[derive(Parser, Debug)]
#[command(version, about = "Train MNIST or a small GPT with kiln on any GPU (or a software adapter)")]
struct Args {
    /// Model to train: MNIST's MLP or CNN, or the character-level GPT.
    #[arg(long, default_value = "mlp", value_parser = ["mlp", "cnn", "gpt"])]
    model: String,
    /// Epochs (default: the model's, 12 for the MLP, 4 for the CNN).
    #[arg(long)]
    epochs: Option<usize>,
    /// Images per step (default 64), or the GPT's sequences per step (default 16).
    #[arg(long)]
    batch_size: Option<usize>,
    /// The GPT's run length in steps (default 450); its learning-rate schedule spans them.
    #[arg(long)]
    total_steps: Option<u64>,
    /// The GPT's training text (UTF-8; the last 10% is held out for validation).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/kjv/genesis-ruth.txt"))]
    corpus: PathBuf,
    /// Sample text from this GPT checkpoint instead of training.
    #[arg(long, conflicts_with_all = ["resume", "eval_only"])]
    generate: Option<PathBuf>,
    /// Generate from this Hugging Face model folder (GPT-2 or Llama:
    /// config.json, the safetensors, the tokenizer) after --prompt.
    #[arg(long, conflicts_with_all = ["resume", "eval_only", "generate"])]
    hf: Option<PathBuf>,
    /// With --hf: fine-tune LoRA adapters on this text (UTF-8; the last
    /// 10% held out), print the validation loss as it falls, and save the
    /// adapters in PEFT's layout to --out/lora.
    #[arg(long, requires = "hf")]
    finetune: Option<PathBuf>,
    /// With --finetune: the adapters' rank (alpha is the rank: scale 1).
    #[arg(long, default_value_t = 8, requires = "finetune")]
    lora_rank: usize,
    /// With --finetune: tokens per training window (default 64, at most
    /// the model's positions).
    #[arg(long, requires = "finetune")]
    context: Option<usize>,
    /// With --hf: generate with the LoRA adapters in this PEFT folder
    /// (adapter_config.json, adapter_model.safetensors).
    #[arg(long, requires = "hf", conflicts_with = "finetune")]
    lora: Option<PathBuf>,
    /// The text that generation continues.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Characters to generate.
    #[arg(long, default_value_t = 500)]
    tokens: usize,
    /// Sampling temperature (0: always the most likely character).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample among the k most likely characters only.
    #[arg(long)]
    top_k: Option<usize>,
    /// With --hf: sample among the fewest most likely tokens whose
    /// probabilities reach p.
    #[arg(long, requires = "hf")]
    top_p: Option<f64>,
    /// Generate without the KV cache (re-reading the whole window per character).
    #[arg(long)]
    no_cache: bool,
    /// Peak learning rate of Adam's warmup + cosine schedule.
    #[arg(long)]
    lr: Option<f64>,
    /// What MNIST's forward and backward passes compute in: f16 and bf16
    /// keep f32 master weights (f16 with dynamic loss scaling).
    #[arg(long, default_value = "f32", value_parser = float_dtype)]
    precision: DType,
    /// Seed of the initial weights and of the batch order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A backend (vulkan, gl, metal, dx12, cuda), `lavapipe`, or part of an adapter's name.
    #[arg(long)]
    adapter: Option<String>,
    /// Directory of MNIST IDX files (the bundled subset or the full set).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k"))]
    data: PathBuf,
    /// Where the plot and the checkpoint go.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Continue the run saved in this checkpoint (its config included).
    #[arg(long, conflicts_with = "eval_only")]
    resume: Option<PathBuf>,
    /// Only evaluate this checkpoint on the test set (a run's, or quantized weights saved by --quantize).
    #[arg(long)]
    eval_only: Option<PathBuf>,
    /// With --eval-only, also evaluate the weights quantized: int8 (one
    /// scale per output channel), int4 (groups of 32) or int4/G (groups of
    /// G), and save them in --out as MODEL-FORMAT.safetensors (codes as
    /// bytes; --eval-only evaluates that file too). With --generate, sample
    /// from the GPT with its blocks' projections quantized.
    #[arg(long, value_parser = quant_format)]
    quantize: Option<QuantFormat>,
    /// With --eval-only and --quantize int8, quantize each layer's input to
    /// int8 too (W8A8: the products summed by dot4I8Packed).
    #[arg(long, requires = "quantize", requires = "eval_only", conflicts_with = "generate")]
    int8_activations: bool,
    /// Stop after this many steps (before the run's end).
    #[arg(long)]
    steps: Option<u64>,
    /// Write every step's training loss to this file as a JSON array.
    #[arg(long)]
    losses: Option<PathBuf>,
    /// Print the buffer pool's bytes in use and held after each epoch.
    #[arg(long)]
    verbose: bool,
    /// Split each batch across the ranks of an MPI job (`mpirun -n 2 ...`):
    /// one device per rank; rank 0 prints, plots and saves. With --resume,
    /// every rank reads the checkpoint.
    #[cfg(feature = "mpi")]
    #[arg(long, conflicts_with = "eval_only")]
    data_parallel: bool,
}

fn float_dtype(name: &str) -> std::result::Result<DType, String> {
    DType::from_name(name).filter(|d| d.is_float()).ok_or_else(|| format!("`{name}` is not f32, f16 or bf16"))
}

fn quant_format(name: &str) -> std::result::Result<QuantFormat, String> {
    // `int4` alone means groups of 32; otherwise `QuantFormat::spec`'s
    // syntax, limited to what the demo's layers quantize.
    let format = if name == "int4" { Some(QuantFormat::int4(32)) } else { QuantFormat::from_spec(name) };
    let offered = |f: &QuantFormat| match f.group {
        None => f.bits == 8,
        Some(g) => f.bits == 4 && g.is_multiple_of(8),
    };
    format
        .filter(offered)
        .ok_or_else(|| format!("`{name}` is not int8, int4 or int4/G (G a group size, a multiple of 8)"))
}

fn main() {
    let args = Args::parse();
    notice::print_first_tuning_line();
    if let Err(e) = kiln::block_on(run(args)) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

async fn run(args: Args) -> Result<()> {
    if let Some(dir) = &args.hf {
        return hf::run(&args, dir).await;
    }
    if args.quantize.is_some() && args.eval_only.is_none() && args.generate.is_none() {
        return Err(kiln::KilnError::Invalid {
            op: "native-demo",
            detail: "--quantize goes with --eval-only CKPT (MNIST), --generate CKPT (GPT) or --hf DIR".into(),
        });
    }
    if args.model == "gpt" || args.generate.is_some() {
        return gpt::run(&args).await;
    }
    let model: ModelKind = args.model.parse()?;
    #[cfg(feature = "mpi")]
    {
        let world = args.data_parallel.then(kiln_shard::MpiWorld::init).transpose()?.map(Arc::new);
        let result = mnist(&args, model, world.clone()).await;
        if let (Err(e), Some(world)) = (&result, world) {
            world.abort(e);
        }
        result
    }
    #[cfg(not(feature = "mpi"))]
    mnist(&args, model).await
}

/// The MNIST model's run: evaluate a checkpoint, or train (on the ranks of
/// `world` with `--data-parallel`).
async fn mnist(
    args: &Args,
    model: ModelKind,
    #[cfg(feature = "mpi")] world: Option<Arc<kiln_shard::MpiWorld>>,
) -> Result<()> {
    let options = DeviceOptions { adapter: args.adapter.clone(), ..DeviceOptions::default() };
    #[cfg(feature = "mpi")]
    let root = world.as_ref().is_none_or(|w| w.rank() == 0);
    #[cfg(not(feature = "mpi"))]
    let root = true;
    let dev = Device::with_options(options).await?;
    let info = dev.info();
    let data = Arc::new(Mnist::load(&args.data)?);
    if root {
        println!("adapter: {} ({}, {}; {})", info.name, info.backend, info.device_type, info.f16_path());
        println!("data: {} ({} train, {} test images)", args.data.display(), data.train.len(), data.test.len());
    }

    if let Some(path) = &args.eval_only {
        // A run's checkpoint or a quantized one (what --quantize saves).
        let ck = Checkpoint::load(path)?;
        let (loss, accuracy) = kiln_mnist::evaluate_checkpoint(&dev, &data, &ck).await?;
        println!("{}: test loss {loss:.4}, accuracy {:.2}%", path.display(), accuracy * 100.0);
        if let Some(format) = args.quantize {
            let trainer = Trainer::restore(&dev, data, &ck, Some(model))?;
            let q = trainer.evaluate_quantized(format, args.int8_activations).await?;
            let inputs = if args.int8_activations { ", int8 activations" } else { "" };
            println!(
                "quantized to {format}{inputs} ({} of {} weight layers): test loss {:.4}, accuracy {:.2}%, weights {:.2} MiB → {:.2} MiB ({:.1}× smaller)",
                q.quantized_layers,
                q.weight_layers,
                q.loss,
                q.accuracy * 100.0,
                mib(q.float_bytes),
                mib(q.quantized_bytes),
                q.float_bytes as f64 / q.quantized_bytes as f64,
            );
            std::fs::create_dir_all(&args.out).map_err(|e| file_error(&args.out, e))?;
            let saved = args.out.join(format!("{model}-{}.safetensors", format.spec().replace('/', "-")));
            trainer.quantized_checkpoint(format).await?.save(&saved)?;
            let bytes = std::fs::metadata(&saved).map_err(|e| file_error(&saved, e))?.len();
            println!("saved {} ({:.2} MiB; --eval-only evaluates it)", saved.display(), mib(bytes));
        }
        return Ok(());
    }
    let config = || {
        let d = model.default_config();
        Config {
            model,
            epochs: args.epochs.unwrap_or(d.epochs),
            batch_size: args.batch_size.unwrap_or(d.batch_size),
            lr: args.lr.unwrap_or(d.lr),
            seed: args.seed,
            precision: args.precision,
        }
    };
    #[cfg(feature = "mpi")]
    if let Some(world) = world {
        println!("rank {} of {} on {}", world.rank(), kiln_shard::Collective::world_size(&world), info.name);
        let mesh = kiln_shard::Mesh::over(vec![dev], Box::new(world))?;
        let mut trainer = match &args.resume {
            Some(path) => {
                let ck = Checkpoint::load(path)?;
                kiln_mnist::DataParallelTrainer::restore(&mesh, data, &ck, Some(model)).await?
            }
            None => kiln_mnist::DataParallelTrainer::new(&mesh, data, config()).await?,
        };
        // A rank stopping early would leave the others at the deadline.
        mesh.collective().agree("the steps to take (--steps)", args.steps.unwrap_or(u64::MAX))?;
        return train(&mut trainer, args).await;
    }
    let mut trainer = match &args.resume {
        Some(path) => {
            let t = Trainer::restore(&dev, data, &Checkpoint::load(path)?, Some(model))?;
            println!("resuming {} at step {} ({:?})", path.display(), t.steps(), t.config());
            t
        }
        None => Trainer::new(&dev, data, config())?,
    };
    train(&mut trainer, args).await
}

async fn train(trainer: &mut impl Training, args: &Args) -> Result<()> {
    let c = *trainer.config();
    let total = args.steps.map_or(trainer.total_steps(), |s| (trainer.steps() + s).min(trainer.total_steps()));
    if !trainer.is_root() {
        // Other ranks take the steps with rank 0 and leave the rest to it.
        trainer.run((total - trainer.steps()) as usize).await?;
        return Ok(());
    }
    std::fs::create_dir_all(&args.out).map_err(|e| file_error(&args.out, e))?;
    let per_epoch = trainer.steps_per_epoch();
    let mut progress = Progress::new(total, trainer.steps());
    let (mut losses, mut accuracy) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let first_step = trainer.steps();
    let mut split = Split::default();
    while trainer.steps() < total {
        // Ten steps at a time, up to the epoch's end; losses read back together.
        let to_epoch_end = per_epoch - trainer.steps() % per_epoch;
        let n = to_epoch_end.min(10).min(total - trainer.steps()) as usize;
        let dev = trainer.device().clone();
        losses.extend(split.time(&dev, Phase::Train, trainer.run(n)).await?);
        let done = (trainer.steps() - first_step) as f64 * c.batch_size as f64;
        let status = format!(
            "epoch {} loss {:.4} {:.0} samples/s",
            (trainer.steps() - 1) / per_epoch + 1,
            losses.last().copied().unwrap_or(f32::NAN),
            done / started.elapsed().as_secs_f64()
        );
        progress.status(trainer.steps(), &status);
        if trainer.steps().is_multiple_of(per_epoch) {
            let (test_loss, acc) = split.time(trainer.device(), Phase::Evaluate, trainer.evaluate()).await?;
            accuracy.push((losses.len() as u64, acc));
            progress.line(&format!(
                "epoch {}: train loss {:.4}, test loss {test_loss:.4}, test accuracy {:.2}%",
                trainer.steps() / per_epoch,
                losses.last().copied().unwrap_or(f32::NAN),
                acc * 100.0
            ));
            if args.verbose {
                let stats = trainer.device().stats();
                let pool = stats.pool;
                progress.line(&format!(
                    "  buffers: {:.1} MiB in use, {:.1} MiB held free, {} created; {} launches in {} submits, {} as CUDA graphs",
                    mib(pool.bytes_in_use),
                    mib(pool.bytes_free),
                    pool.buffers_created,
                    stats.kernels_launched,
                    stats.submits,
                    stats.graphs_launched
                ));
            }
        }
    }
    progress.finish();
    let wall = started.elapsed().as_secs_f64();
    let samples = losses.len() as f64 * c.batch_size as f64;
    println!("trained {} steps in {wall:.1} s ({:.0} samples/s)", losses.len(), samples / wall);
    println!("{split}");
    let mut all_reduces = trainer.all_reduce_seconds().to_vec();
    if !all_reduces.is_empty() {
        // The step's time beside its exchange: a data-parallel run's scaling.
        all_reduces.sort_by(f64::total_cmp);
        let median = all_reduces[all_reduces.len() / 2];
        println!(
            "all-reduce: {:.1} s of the training over {} steps, median {:.2} ms a step ({:.2} ms a whole step)",
            all_reduces.iter().sum::<f64>(),
            all_reduces.len(),
            median * 1e3,
            split.train_seconds() * 1e3 / losses.len().max(1) as f64
        );
    }
    if let Some((scale, skipped)) = trainer.loss_scale().await? {
        println!("{} loss scale {scale} at the end, {skipped} steps skipped for overflow", c.precision);
    }
    if let Some(path) = &args.losses {
        let json = format!("[{}]\n", losses.iter().map(|l| format!("{l:?}")).collect::<Vec<_>>().join(", "));
        std::fs::write(path, json).map_err(|e| file_error(path, e))?;
        println!("losses: {}", path.display());
    }
    let checkpoint = args.out.join(format!("{}.safetensors", c.model));
    trainer.checkpoint().await?.save(&checkpoint)?;
    println!("checkpoint: {}", checkpoint.display());
    let png = args.out.join(format!("{}-training.png", c.model));
    let checks =
        plot::Checks { title: "test accuracy after each epoch", y_desc: "accuracy", points: &accuracy, accuracy: true };
    plot::write(&png, &format!("{} on {}", c.model, trainer.device().info().name), &losses, "loss", checks)
        .map_err(|e| kiln::KilnError::Invalid { op: "plot", detail: format!("{}: {e}", png.display()) })?;
    println!("plot: {}", png.display());
    if let Some(&(_, acc)) = accuracy.last() {
        println!("final test accuracy: {:.2}%", acc * 100.0);
    }
    Ok(())
}

fn file_error(path: &std::path::Path, e: std::io::Error) -> kiln::KilnError {
    kiln::KilnError::Invalid { op: "native-demo", detail: format!("{}: {e}", path.display()) }
}
