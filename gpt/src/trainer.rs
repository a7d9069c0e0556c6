//! The training loop: AdamW (decay on matrices only) after clipping the
//! global gradient norm to 1, a warmup + cosine schedule, one jit-captured
//! step per batch (one submit). Batches are random windows of the training
//! split drawn from the seed and the step number, so a run is repeatable
//! and a resumed run continues the same curve.

use crate::corpus::{Corpus, Vocab};
use crate::model::{Gpt, GptConfig};
use kiln::prelude::*;
use kiln::{Jit, Key, KilnError};
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::optim::{
    AddDecayedWeights, Chain, ClipByGlobalNorm, ScaleByAdam, ScaleByLearningRate, StepOutput, adamw,
    add_decayed_weights, chain, clip_by_global_norm, matrices_only, training_step, warmup_cosine_decay,
};
use std::sync::Arc;

type Optimizer = Chain<(ClipByGlobalNorm, Chain<(ScaleByAdam, AddDecayedWeights, ScaleByLearningRate)>)>;
type OptState = <Optimizer as Transform<Gpt>>::State;
/// A batch: ids and next-character targets, `[batch, context]` each.
type Batch = (Tensor, Tensor);
/// One training step over (model, state, batch), as `kiln::jit` captures it.
type StepFn = Box<dyn Fn(&(Gpt, OptState, Batch)) -> Result<StepOutput<Gpt, OptState>>>;
/// The validation loss of (model, batch).
type EvalFn = Box<dyn Fn(&(Gpt, Batch)) -> Result<Tensor>>;

/// Validation windows read by `evaluate`, spread evenly over the split.
const EVAL_WINDOWS: usize = 64;

/// Everything that decides a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrainConfig {
    /// The model's sizes: vocabulary, context, width, heads, layers.
    pub model: GptConfig,
    /// Sequences of `model.context` characters per step.
    pub batch: usize,
    /// Optimizer steps in the run: warmup over a tenth of them (1 to 100),
    /// then cosine decay to the last.
    pub steps: u64,
    /// Peak learning rate, reached after the warmup and decayed to a tenth.
    pub lr: f64,
    /// AdamW's decoupled weight decay, applied to matrices only.
    pub weight_decay: f64,
    /// Seeds the initial weights and the batch draws.
    pub seed: u64,
}

impl TrainConfig {
    /// The demo's run: the small model, 16 sequences of 128 characters a
    /// step for 450 steps (2.15 bits/char on the KJV corpus in 8 minutes
    /// on lavapipe).
    pub fn demo(vocab: usize) -> TrainConfig {
        TrainConfig { model: GptConfig::small(vocab), batch: 16, steps: 450, lr: 3e-3, weight_decay: 0.1, seed: 0 }
    }

    /// Errors unless the model config is valid, `batch` and `steps` are
    /// positive, `lr` is finite and positive and `weight_decay` finite and ≥ 0.
    pub fn check(&self) -> Result<()> {
        self.model.check()?;
        let rates_valid =
            self.lr.is_finite() && self.lr > 0.0 && self.weight_decay.is_finite() && self.weight_decay >= 0.0;
        if self.batch == 0 || self.steps == 0 || !rates_valid {
            return Err(KilnError::Invalid { op: "TrainConfig", detail: format!("{self:?} cannot train") });
        }
        Ok(())
    }

    /// Characters trained on per step: `batch · model.context`.
    pub fn tokens_per_step(&self) -> usize {
        self.batch * self.model.context
    }

    fn warmup(&self) -> u64 {
        (self.steps / 10).clamp(1, 100)
    }

    fn optimizer(&self) -> Optimizer {
        let schedule = warmup_cosine_decay(0.0, self.lr, self.warmup(), self.steps, self.lr / 10.0);
        let decay = add_decayed_weights(self.weight_decay).masked(matrices_only);
        chain((clip_by_global_norm(1.0), adamw(schedule, 0.9, 0.99, 1e-8, decay)))
    }
}

/// A training run over a corpus: the model, its optimizer state, and the
/// jit-captured training step and validation loss.
pub struct GptTrainer {
    device: Device,
    config: TrainConfig,
    corpus: Arc<Corpus>,
    model: Gpt,
    state: OptState,
    step_fn: Jit<StepFn, StepOutput<Gpt, OptState>>,
    eval_fn: Jit<EvalFn, Tensor>,
    steps: u64,
}

impl GptTrainer {
    /// A fresh run: weights from `config.seed`.
    pub fn new(device: &Device, corpus: Arc<Corpus>, config: TrainConfig) -> Result<GptTrainer> {
        config.check()?;
        let model = Gpt::new(device, Key::new(config.seed), config.model)?;
        GptTrainer::with_params(device, corpus, config, model, None, 0)
    }

    fn with_params(
        device: &Device,
        corpus: Arc<Corpus>,
        config: TrainConfig,
        model: Gpt,
        state: Option<OptState>,
        steps: u64,
    ) -> Result<GptTrainer> {
        let context = config.model.context;
        for (split, ids) in [("training", &corpus.train), ("validation", &corpus.valid)] {
            if ids.len() <= context {
                return Err(KilnError::Invalid {
                    op: "GptTrainer",
                    detail: format!(
                        "the {split} split has {} characters, fewer than a window of {}",
                        ids.len(),
                        context + 1
                    ),
                });
            }
        }
        if corpus.vocab.len() != config.model.vocab {
            return Err(KilnError::Invalid {
                op: "GptTrainer",
                detail: format!("the corpus has {} characters, the model {}", corpus.vocab.len(), config.model.vocab),
            });
        }
        let opt = config.optimizer();
        let state = match state {
            Some(s) => s,
            None => opt.init(&model)?,
        };
        let step: StepFn = Box::new(training_step(opt, |p: &Gpt, (ids, targets): &Batch| p.loss(ids, targets)));
        let eval: EvalFn = Box::new(|(p, (ids, targets)): &(Gpt, Batch)| p.loss(ids, targets));
        Ok(GptTrainer {
            device: device.clone(),
            config,
            corpus,
            model,
            state,
            step_fn: kiln::jit(step),
            eval_fn: kiln::jit(eval),
            steps,
        })
    }

    /// The run's settings.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The device the run computes on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The corpus's character vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.corpus.vocab
    }

    /// Steps taken so far (including before a resume).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Programs the training step captured (one per batch shape).
    pub fn captures(&self) -> usize {
        self.step_fn.captures()
    }

    /// The current parameters as a model.
    pub fn model(&self) -> Result<Gpt> {
        Ok(self.model.clone())
    }

    /// `windows` (start offsets into `ids`) as ids and next-character
    /// targets, `[windows, context]` each.
    fn windows(&self, ids: &[u32], starts: &[usize]) -> Result<(Tensor, Tensor)> {
        let t = self.config.model.context;
        let take = |shift: usize| -> Vec<i32> {
            starts.iter().flat_map(|&s| ids[s + shift..s + shift + t].iter().map(|&c| c as i32)).collect()
        };
        let shape = [starts.len(), t];
        Ok((Tensor::from_slice(&self.device, &take(0), &shape)?, Tensor::from_slice(&self.device, &take(1), &shape)?))
    }

    /// The start offsets of step `step`'s batch: uniform over the
    /// training split, from the seed and the step number.
    pub fn batch_starts(&self, step: u64) -> Vec<usize> {
        let span = (self.corpus.train.len() - self.config.model.context) as u64;
        let key = Key::new(self.config.seed).fold_in(step as u32);
        key.random_bits_host(self.config.batch).iter().map(|&b| (u64::from(b) % span) as usize).collect()
    }

    /// One training step (one submit); returns its loss (computed, not read).
    pub async fn step(&mut self) -> Result<Tensor> {
        let (ids, targets) = self.windows(&self.corpus.train, &self.batch_starts(self.steps))?;
        let loss;
        (loss, self.model, self.state) =
            self.step_fn.call(&(self.model.clone(), self.state.clone(), (ids, targets))).await?;
        self.steps += 1;
        Ok(loss)
    }

    /// `n` steps (at most to the end of the run); their losses in nats,
    /// read back together.
    pub async fn run(&mut self, n: usize) -> Result<Vec<f32>> {
        let n = n.min(self.config.steps.saturating_sub(self.steps) as usize);
        let mut losses = Vec::with_capacity(n);
        for _ in 0..n {
            losses.push(self.step().await?);
        }
        if losses.is_empty() {
            return Ok(Vec::new());
        }
        Tensor::stack(&losses.iter().collect::<Vec<_>>(), 0)?.to_vec::<f32>().await
    }

    /// Validation loss in bits per character: the mean over
    /// `EVAL_WINDOWS` windows spread evenly over the validation split,
    /// `batch` windows per (captured) forward pass.
    pub async fn evaluate(&self) -> Result<f32> {
        let valid = &self.corpus.valid;
        let last = valid.len() - self.config.model.context - 1;
        let starts: Vec<usize> = (0..EVAL_WINDOWS).map(|i| i * last / (EVAL_WINDOWS - 1)).collect();
        let mut losses = Vec::new();
        for chunk in starts.chunks(self.config.batch) {
            let batch = self.windows(valid, chunk)?;
            losses.push((self.eval_fn.call(&(self.model.clone(), batch)).await?, chunk.len()));
        }
        let mut total = 0.0;
        for (loss, windows) in losses {
            total += f64::from(loss.item::<f32>().await?) * windows as f64;
        }
        Ok((total / EVAL_WINDOWS as f64 / std::f64::consts::LN_2) as f32)
    }

    /// The parameters, the optimizer state, the vocabulary and the config.
    pub async fn checkpoint(&self) -> Result<Checkpoint> {
        let mut ck = Checkpoint::new();
        ck.add("params", &self.model).await?;
        ck.add("opt", &self.state).await?;
        let c = &self.config;
        let m = &c.model;
        for (k, v) in [
            ("model", "gpt".to_string()),
            ("vocab", self.corpus.vocab.as_string()),
            ("context", m.context.to_string()),
            ("width", m.width.to_string()),
            ("heads", m.heads.to_string()),
            ("layers", m.layers.to_string()),
            ("alibi", m.alibi.to_string()),
            ("batch", c.batch.to_string()),
            ("steps", c.steps.to_string()),
            ("lr", format!("{:e}", c.lr)),
            ("weight_decay", format!("{:e}", c.weight_decay)),
            ("seed", c.seed.to_string()),
            ("step", self.steps.to_string()),
        ] {
            ck.set_metadata(k, &v)?;
        }
        Ok(ck)
    }

    /// A trainer continuing the run saved in `ck` (its config included).
    pub fn restore(device: &Device, corpus: Arc<Corpus>, ck: &Checkpoint) -> Result<GptTrainer> {
        let (config, vocab) = config_of(ck)?;
        if vocab != corpus.vocab {
            return Err(KilnError::Invalid {
                op: "checkpoint",
                detail: format!(
                    "its vocabulary {:?} is not the corpus's {:?}",
                    vocab.as_string(),
                    corpus.vocab.as_string()
                ),
            });
        }
        let fresh = Gpt::new(device, Key::new(config.seed), config.model)?;
        let model = ck.tree("params", &fresh, device)?;
        let state = ck.tree("opt", &config.optimizer().init(&fresh)?, device)?;
        GptTrainer::with_params(device, corpus, config, model, Some(state), meta(ck, "step")?)
    }
}

/// The model and vocabulary saved in a checkpoint, for sampling.
pub fn load_model(device: &Device, ck: &Checkpoint) -> Result<(Gpt, Vocab)> {
    let (config, vocab) = config_of(ck)?;
    let fresh = Gpt::new(device, Key::new(config.seed), config.model)?;
    Ok((ck.tree("params", &fresh, device)?, vocab))
}

fn meta<T: std::str::FromStr>(ck: &Checkpoint, key: &str) -> Result<T> {
    let bad = |detail: String| KilnError::Invalid { op: "checkpoint", detail };
    let v = ck.metadata().get(key).ok_or_else(|| bad(format!("no `{key}` in its metadata (not a GPT checkpoint)")))?;
    v.parse().map_err(|_| bad(format!("metadata `{key}` = `{v}` is malformed")))
}

fn config_of(ck: &Checkpoint) -> Result<(TrainConfig, Vocab)> {
    let model: String = meta(ck, "model")?;
    if model != "gpt" {
        return Err(KilnError::Invalid { op: "checkpoint", detail: format!("it holds a {model} model, not a GPT") });
    }
    let vocab = Vocab::from_chars(&meta::<String>(ck, "vocab")?)?;
    let config = TrainConfig {
        model: GptConfig {
            vocab: vocab.len(),
            context: meta(ck, "context")?,
            width: meta(ck, "width")?,
            heads: meta(ck, "heads")?,
            layers: meta(ck, "layers")?,
            alibi: meta(ck, "alibi")?,
        },
        batch: meta(ck, "batch")?,
        steps: meta(ck, "steps")?,
        lr: meta(ck, "lr")?,
        weight_decay: meta(ck, "weight_decay")?,
        seed: meta(ck, "seed")?,
    };
    config.check()?;
    Ok((config, vocab))
}
