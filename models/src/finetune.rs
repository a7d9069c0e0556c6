//! LoRA fine-tuning on a token stream: Adam (after clipping the gradient
//! norm to 1) on the adapters alone, one jit-captured step per batch of
//! random windows drawn from the seed and the step number, and the
//! validation loss over fixed windows of a held-out tail.

use crate::{Adapters, LoraConfig, Model};
use kiln::prelude::*;
use kiln::{Jit, Key};
use kiln_nn::optim::{
    Chain, ClipByGlobalNorm, ScaleByAdam, ScaleByLearningRate, StepOutput, adam, chain, clip_by_global_norm,
    training_step,
};

type Optimizer = Chain<(ClipByGlobalNorm, Chain<(ScaleByAdam, ScaleByLearningRate)>)>;
type OptState = <Optimizer as Transform<Adapters>>::State;
/// The frozen model and a batch: ids and next-token targets `[batch, context]`.
type Batch = (Model, Tensor, Tensor);
type StepFn = Box<dyn Fn(&(Adapters, OptState, Batch)) -> Result<StepOutput<Adapters, OptState>>>;
type EvalFn = Box<dyn Fn(&(Adapters, Batch)) -> Result<Tensor>>;

/// Validation windows, spread evenly over the held-out tail.
const EVAL_WINDOWS: usize = 32;

/// Everything that decides a fine-tuning run.
#[derive(Clone, Debug, PartialEq)]
pub struct FineTuneConfig {
    /// The adapters' rank, scale and targets.
    pub lora: LoraConfig,
    /// Windows per step.
    pub batch: usize,
    /// Tokens per window (at most the model's positions).
    pub context: usize,
    /// Adam's learning rate (constant).
    pub lr: f64,
    /// The share of the tokens, at the end, held out for validation.
    pub held_out: f64,
    /// Seeds the adapters and the batch draws.
    pub seed: u64,
}

impl FineTuneConfig {
    /// Rank `rank` on every block projection, 8 windows of 64 tokens a
    /// step, learning rate 1e-3, the last tenth held out.
    pub fn new(rank: usize) -> FineTuneConfig {
        FineTuneConfig { lora: LoraConfig::new(rank), batch: 8, context: 64, lr: 1e-3, held_out: 0.1, seed: 0 }
    }

    fn optimizer(&self) -> Optimizer {
        chain((clip_by_global_norm(1.0), adam(self.lr, 0.9, 0.999, 1e-8)))
    }
}

/// A fine-tuning run: the frozen model, its adapters, their optimizer
/// state, and the captured step and validation loss.
pub struct FineTune {
    model: Model,
    adapters: Adapters,
    state: OptState,
    config: FineTuneConfig,
    train: Vec<u32>,
    valid: Vec<u32>,
    step_fn: Jit<StepFn, StepOutput<Adapters, OptState>>,
    eval_fn: Jit<EvalFn, Tensor>,
    steps: u64,
}

impl FineTune {
    /// A run over `tokens` (a tokenizer's ids of the corpus), with fresh
    /// adapters on `model`. Errors if either split is shorter than a
    /// window, the window is longer than the model takes, or the config
    /// cannot train.
    pub fn new(model: &Model, tokens: &[u32], config: FineTuneConfig) -> Result<FineTune> {
        let rates_valid = config.lr.is_finite() && config.lr > 0.0 && (0.0..1.0).contains(&config.held_out);
        if config.batch == 0 || config.context == 0 || !rates_valid {
            return Err(KilnError::Invalid { op: "FineTune", detail: format!("{config:?} cannot train") });
        }
        let cut = tokens.len() - (tokens.len() as f64 * config.held_out) as usize;
        let (train, valid) = tokens.split_at(cut);
        for (split, ids) in [("training", train), ("validation", valid)] {
            if ids.len() <= config.context {
                return Err(KilnError::Invalid {
                    op: "FineTune",
                    detail: format!(
                        "the {split} split has {} tokens, fewer than a window of {}",
                        ids.len(),
                        config.context + 1
                    ),
                });
            }
        }
        let probe = Tensor::zeros(&model.device(), &[1, config.context], DType::I32)?;
        model.forward(&probe).map_err(|e| e.within("FineTune"))?;
        let adapters = Adapters::new(model, config.lora.clone(), Key::new(config.seed))?;
        let opt = config.optimizer();
        let state = opt.init(&adapters)?;
        let loss = |a: &Adapters, (model, ids, targets): &Batch| model.with_lora(a)?.loss(ids, targets);
        let step: StepFn = Box::new(training_step(opt, loss));
        let eval: EvalFn = Box::new(move |(a, batch): &(Adapters, Batch)| loss(a, batch));
        Ok(FineTune {
            model: model.clone(),
            adapters,
            state,
            config,
            train: train.to_vec(),
            valid: valid.to_vec(),
            step_fn: kiln::jit(step),
            eval_fn: kiln::jit(eval),
            steps: 0,
        })
    }

    /// The adapters as trained so far.
    pub fn adapters(&self) -> &Adapters {
        &self.adapters
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Windows starting at `starts` in `ids`, with their next tokens.
    fn windows(&self, ids: &[u32], starts: &[usize]) -> Result<Batch> {
        let t = self.config.context;
        let take = |shift: usize| -> Vec<i32> {
            starts.iter().flat_map(|&s| ids[s + shift..s + shift + t].iter().map(|&c| c as i32)).collect()
        };
        let (dev, shape) = (self.model.device(), [starts.len(), t]);
        Ok((
            self.model.clone(),
            Tensor::from_slice(&dev, &take(0), &shape)?,
            Tensor::from_slice(&dev, &take(1), &shape)?,
        ))
    }

    /// One step (one submit); its loss in nats, not read back.
    pub async fn step(&mut self) -> Result<Tensor> {
        let span = (self.train.len() - self.config.context) as u64;
        let key = Key::new(self.config.seed).fold_in(self.steps as u32);
        let starts: Vec<usize> =
            key.random_bits_host(self.config.batch).iter().map(|&b| (u64::from(b) % span) as usize).collect();
        let batch = self.windows(&self.train, &starts)?;
        let loss;
        (loss, self.adapters, self.state) =
            self.step_fn.call(&(self.adapters.clone(), self.state.clone(), batch)).await?;
        self.steps += 1;
        Ok(loss)
    }

    /// The mean loss (nats per token) over `EVAL_WINDOWS` windows spread
    /// evenly over the held-out tokens.
    pub async fn validation_loss(&self) -> Result<f32> {
        let last = self.valid.len() - self.config.context - 1;
        let starts: Vec<usize> = (0..EVAL_WINDOWS).map(|i| i * last / (EVAL_WINDOWS - 1)).collect();
        let mut losses = Vec::new();
        for chunk in starts.chunks(self.config.batch) {
            let batch = self.windows(&self.valid, chunk)?;
            losses.push((self.eval_fn.call(&(self.adapters.clone(), batch)).await?, chunk.len()));
        }
        let mut total = 0.0;
        for (loss, windows) in losses {
            total += f64::from(loss.item::<f32>().await?) * windows as f64;
        }
        Ok((total / EVAL_WINDOWS as f64) as f32)
    }
}
