//! The training loop: Adam with a warmup + cosine schedule over the model's
//! parameter tree, one jit-captured step per batch (one submit), batches in
//! an order drawn from the seed for each epoch, evaluation, prediction and
//! checkpoints. Everything that decides a step (batch order, initial
//! weights, schedule) follows from the `Config`, so a run is repeatable and
//! a resumed run continues the same curve.

use crate::model::{Config, ModelKind};
use kiln::prelude::*;
use kiln::{Jit, Key, KilnError};
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::data::{Dataset, ImageLayout, Mnist};
use kiln_nn::optim::{
    AdamState, Chain, CountState, DynamicLossScale, LossScaleConfig, LossScaleState, ScaleByAdam, ScaleByLearningRate,
    StepOutput, adam, dynamic_loss_scale, training_step, warmup_cosine_decay,
};
use kiln_nn::{Layer, Sequential};
use std::sync::Arc;

/// Adam under a loss scale, enabled for f16 runs only (the others keep the
/// same state tree, unscaled).
pub(crate) type Optimizer = DynamicLossScale<Chain<(ScaleByAdam, ScaleByLearningRate)>>;
pub(crate) type OptState = LossScaleState<(AdamState<Sequential>, CountState)>;
/// One step over (model, state, (images, labels)), as `kiln::jit` captures it.
type Step = Box<dyn Fn(&(Sequential, OptState, (Tensor, Tensor))) -> Result<StepOutput<Sequential, OptState>>>;

/// Test images per forward pass when evaluating.
const EVAL_CHUNK: usize = 500;

pub struct Trainer {
    device: Device,
    config: Config,
    data: Arc<Mnist>,
    model: Sequential,
    state: OptState,
    step_fn: Jit<Step, StepOutput<Sequential, OptState>>,
    steps: u64,
    batches: Batches,
}

/// A run's training batches: epoch `e` visits the training set in the
/// order `Key(seed).fold_in(e).shuffled_indices(n)`, each batch's images
/// shifted by a key of its own.
pub(crate) struct Batches {
    data: Arc<Mnist>,
    seed: u64,
    batch_size: usize,
    /// The current epoch and its order of training images (drawn once per epoch).
    order: Option<(u64, Vec<usize>)>,
}

impl Batches {
    pub(crate) fn new(data: Arc<Mnist>, config: &Config) -> Batches {
        Batches { data, seed: config.seed, batch_size: config.batch_size, order: None }
    }

    pub(crate) fn steps_per_epoch(&self) -> u64 {
        (self.data.train.len() / self.batch_size) as u64
    }

    /// The pixels (augmented) and labels of step `step`'s batch.
    pub(crate) fn host(&mut self, step: u64) -> (Vec<f32>, Vec<i32>) {
        let (epoch, at) = (step / self.steps_per_epoch(), (step % self.steps_per_epoch()) as usize);
        let key = Key::new(self.seed).fold_in(epoch as u32);
        if self.order.as_ref().is_none_or(|(e, _)| *e != epoch) {
            self.order = Some((epoch, key.shuffled_indices(self.data.train.len())));
        }
        let (bs, train) = (self.batch_size, &self.data.train);
        let order = &self.order.as_ref().expect("drawn above").1;
        let (mut pixels, labels) = gather(train, &order[at * bs..(at + 1) * bs]);
        crate::augment::shift_images(&mut pixels, train.rows, train.cols, key.fold_in(1 + at as u32));
        (pixels, labels)
    }
}

/// `model` applied to `x`, computing in `precision`: the weights and the
/// input cast to it, the logits back in f32 (what the loss and the
/// accuracy read).
pub(crate) fn forward(model: &Sequential, x: &Tensor, precision: DType) -> Result<Tensor> {
    if precision == DType::F32 {
        return model.forward(x);
    }
    let low = model.map_leaves(|_, w| w.cast(precision))?;
    low.forward(&x.cast(precision)?)?.cast(DType::F32)
}

/// Mean cross-entropy of `logits` against integer labels, and the number
/// of correct argmax predictions.
fn loss_and_hits(logits: &Tensor, labels: &Tensor) -> Result<(Tensor, Tensor)> {
    let loss = kiln_nn::loss::cross_entropy(logits, labels)?;
    let hits = logits.argmax(Some(-1), false)?.eq(labels)?.cast(DType::F32)?.sum(&[], false)?;
    Ok((loss, hits))
}

impl Trainer {
    /// A fresh run: weights from `config.seed`.
    pub fn new(device: &Device, data: Arc<Mnist>, config: Config) -> Result<Trainer> {
        config.check()?;
        let model = config.model.build(device, Key::new(config.seed))?;
        Trainer::with_params(device, data, config, model, None, 0)
    }

    fn with_params(
        device: &Device,
        data: Arc<Mnist>,
        config: Config,
        model: Sequential,
        state: Option<OptState>,
        steps: u64,
    ) -> Result<Trainer> {
        if data.train.len() < config.batch_size {
            return Err(KilnError::Invalid {
                op: "trainer",
                detail: format!("batch size {} exceeds the {} training images", config.batch_size, data.train.len()),
            });
        }
        let opt = optimizer(&config, data.train.len());
        let state = match state {
            Some(s) => s,
            None => opt.init(&model)?,
        };
        let precision = config.precision;
        let step: Step = Box::new(training_step(opt, move |p: &Sequential, (x, labels): &(Tensor, Tensor)| {
            kiln_nn::loss::cross_entropy(&forward(p, x, precision)?, labels)
        }));
        let batches = Batches::new(data.clone(), &config);
        Ok(Trainer { device: device.clone(), config, data, model, state, step_fn: kiln::jit(step), steps, batches })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Steps taken so far (over all epochs, including before a resume).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn steps_per_epoch(&self) -> u64 {
        self.batches.steps_per_epoch()
    }

    pub fn total_steps(&self) -> u64 {
        self.steps_per_epoch() * self.config.epochs as u64
    }

    /// The epoch the next step belongs to (0-based).
    pub fn epoch(&self) -> u64 {
        self.steps / self.steps_per_epoch()
    }

    /// The current parameters as a model.
    pub fn model(&self) -> Result<Sequential> {
        Ok(self.model.clone())
    }

    fn batch(&mut self, step: u64) -> Result<(Tensor, Tensor)> {
        let (pixels, labels) = self.batches.host(step);
        to_device(&self.device, &self.data.train, pixels, labels, self.config.model.layout())
    }

    /// One training step (one submit); returns its loss (computed, not read).
    pub async fn step(&mut self) -> Result<Tensor> {
        let (x, labels) = self.batch(self.steps)?;
        let loss;
        (loss, self.model, self.state) =
            self.step_fn.call(&(self.model.clone(), self.state.clone(), (x, labels))).await?;
        self.steps += 1;
        Ok(loss)
    }

    /// The next step's outputs (loss, model, state) as a lazy graph over
    /// its realized inputs, as a call would capture it, but not run: to
    /// look at its schedule. The trainer does not advance.
    pub async fn traced_step(&mut self) -> Result<StepOutput<Sequential, OptState>> {
        let (x, labels) = self.batch(self.steps)?;
        let input = (self.model.clone(), self.state.clone(), (x, labels));
        Tensor::realize_all(&input.leaves().iter().collect::<Vec<_>>()).await?;
        self.step_fn.trace(&input)
    }

    /// `n` steps (at most to the end of the run); their losses, read back
    /// together so the device is not drained after every step.
    pub async fn run(&mut self, n: usize) -> Result<Vec<f32>> {
        let n = n.min((self.total_steps() - self.steps) as usize);
        let mut losses = Vec::with_capacity(n);
        for _ in 0..n {
            losses.push(self.step().await?);
        }
        if losses.is_empty() {
            return Ok(Vec::new());
        }
        Tensor::stack(&losses.iter().collect::<Vec<_>>(), 0)?.to_vec::<f32>().await
    }

    /// Mean loss and accuracy over the test set (computed in the run's
    /// precision).
    pub async fn evaluate(&self) -> Result<(f32, f32)> {
        evaluate(&self.device, &self.model()?, &self.data, &self.config).await
    }

    /// Test loss and accuracy with the weights quantized to `format`
    /// ([`Sequential::quantize`]; computed in f32 whatever the run's
    /// precision), with `int8_activations` the int8 layers' inputs
    /// quantized too ([`Sequential::with_int8_activations`]), and the
    /// weights' bytes before and after.
    pub async fn evaluate_quantized(&self, format: QuantFormat, int8_activations: bool) -> Result<QuantizedEval> {
        let model = self.model()?;
        let quantized = model.quantize(format)?;
        let quantized = if int8_activations { quantized.with_int8_activations()? } else { quantized };
        let config = Config { precision: DType::F32, ..self.config };
        let (loss, accuracy) = evaluate(&self.device, &quantized, &self.data, &config).await?;
        let weight_layers = quantized
            .layers
            .iter()
            .filter(|l| l.is_quantized() || matches!(l, Layer::Linear(_) | Layer::Conv2d(_)))
            .count();
        Ok(QuantizedEval {
            loss,
            accuracy,
            quantized_layers: quantized.layers.iter().filter(|l| l.is_quantized()).count(),
            weight_layers,
            float_bytes: tree_bytes(&model),
            quantized_bytes: tree_bytes(&quantized),
        })
    }

    /// The loss scale and the steps skipped for overflowing, where the run
    /// scales its loss (f16); `None` otherwise.
    pub async fn loss_scale(&self) -> Result<Option<(f32, i32)>> {
        loss_scale(&self.config, &self.state).await
    }

    /// Class probabilities for one 28×28 image (values in [0, 1], row-major).
    pub async fn predict(&self, pixels: &[f32]) -> Result<Vec<f32>> {
        let shape = match self.config.model.layout() {
            ImageLayout::Flat => vec![1, pixels.len()],
            ImageLayout::Nchw => vec![1, 1, 28, 28],
        };
        if pixels.len() != 784 {
            return Err(KilnError::Invalid { op: "predict", detail: format!("{} pixels, expected 784", pixels.len()) });
        }
        let x = Tensor::from_slice(&self.device, pixels, &shape)?;
        forward(&self.model()?, &x, self.config.precision)?.softmax(-1)?.to_vec::<f32>().await
    }

    /// The parameters, the optimizer state and the run's config.
    pub async fn checkpoint(&self) -> Result<Checkpoint> {
        checkpoint(&self.config, self.steps, &self.model, &self.state).await
    }

    /// The weights quantized to `format`, for inference: a checkpoint with
    /// the codes stored as bytes ([`Checkpoint::add_quantized`]), the run's
    /// config and its format (`quantized`), but no optimizer state. Read it
    /// with [`evaluate_checkpoint`].
    pub async fn quantized_checkpoint(&self, format: QuantFormat) -> Result<Checkpoint> {
        let mut ck = Checkpoint::new();
        ck.add_quantized("params", &self.model()?.quantize(format)?).await?;
        set_config(&mut ck, &self.config, self.steps)?;
        ck.set_metadata(QUANTIZED_KEY, &format.spec())?;
        Ok(ck)
    }

    /// A trainer continuing the run saved in `ck` (its config included).
    /// `expect`: the model the caller asked for; another model is an error.
    pub fn restore(device: &Device, data: Arc<Mnist>, ck: &Checkpoint, expect: Option<ModelKind>) -> Result<Trainer> {
        let run = SavedRun::read(device, &data, ck, expect)?;
        Trainer::with_params(device, data, run.config, run.model, Some(run.state), run.steps)
    }
}

/// A run as a checkpoint holds it, on one device: what a trainer continues.
pub(crate) struct SavedRun {
    pub config: Config,
    pub model: Sequential,
    pub state: OptState,
    pub steps: u64,
}

impl SavedRun {
    /// The run in `ck`, on `device`. `expect`: the model the caller asked
    /// for; another model, or quantized weights, are errors.
    pub fn read(device: &Device, data: &Mnist, ck: &Checkpoint, expect: Option<ModelKind>) -> Result<SavedRun> {
        if let Some(format) = ck.metadata().get(QUANTIZED_KEY) {
            return Err(KilnError::Invalid {
                op: "checkpoint",
                detail: format!("it holds {format} weights for inference only, not a run to continue or train"),
            });
        }
        let config = config_of(ck)?;
        if let Some(want) = expect.filter(|&m| m != config.model) {
            return Err(KilnError::Invalid {
                op: "checkpoint",
                detail: format!("the checkpoint holds a {} model, not {want}", config.model),
            });
        }
        let fresh = config.model.build(device, Key::new(config.seed))?;
        let model = ck.tree("params", &fresh, device)?;
        let state = ck.tree("opt", &optimizer(&config, data.train.len()).init(&fresh)?, device)?;
        Ok(SavedRun { config, model, state, steps: meta(ck, "step")? })
    }
}

/// The metadata key of a quantized checkpoint's format.
const QUANTIZED_KEY: &str = "quantized";

/// Test loss and accuracy of the weights in `ck`, a run's checkpoint or a
/// quantized one ([`Trainer::quantized_checkpoint`]); quantized weights
/// compute in f32, others in the run's precision.
pub async fn evaluate_checkpoint(device: &Device, data: &Mnist, ck: &Checkpoint) -> Result<(f32, f32)> {
    let config = config_of(ck)?;
    let fresh = config.model.build(device, Key::new(config.seed))?;
    let Some(spec) = ck.metadata().get(QUANTIZED_KEY) else {
        return evaluate(device, &ck.tree("params", &fresh, device)?, data, &config).await;
    };
    let format = QuantFormat::from_spec(spec).ok_or_else(|| KilnError::Invalid {
        op: "checkpoint",
        detail: format!("metadata `{QUANTIZED_KEY}` = `{spec}` is not a weight format"),
    })?;
    let model = ck.quantized_tree("params", &fresh.quantize(format)?, device)?;
    evaluate(device, &model, data, &Config { precision: DType::F32, ..config }).await
}

/// A quantized model's test figures ([`Trainer::evaluate_quantized`]).
#[derive(Debug, Clone, Copy)]
pub struct QuantizedEval {
    pub loss: f32,
    pub accuracy: f32,
    /// Layers with integer weights, of the layers with weights.
    pub quantized_layers: usize,
    pub weight_layers: usize,
    /// Bytes of every parameter, before and after quantizing.
    pub float_bytes: u64,
    pub quantized_bytes: u64,
}

/// Bytes a parameter tree's leaves take on a device.
fn tree_bytes(tree: &impl Tree) -> u64 {
    tree.leaves().iter().map(|l| l.dtype().storage_bytes(l.numel())).sum()
}

/// Mean loss and accuracy of `model` over the test set, computed as `config`
/// trains it.
pub(crate) async fn evaluate(device: &Device, model: &Sequential, data: &Mnist, config: &Config) -> Result<(f32, f32)> {
    let layout = config.model.layout();
    let test = &data.test;
    let (mut loss, mut hits) = (Vec::new(), Vec::new());
    for start in (0..test.len()).step_by(EVAL_CHUNK) {
        let idx: Vec<usize> = (start..(start + EVAL_CHUNK).min(test.len())).collect();
        let (x, labels) = images_and_labels(device, test, &idx, layout)?;
        let (l, h) = loss_and_hits(&forward(model, &x, config.precision)?, &labels)?;
        loss.push(l.mul_scalar(idx.len() as f64)?);
        hits.push(h);
    }
    let total = |parts: Vec<Tensor>| -> Result<Tensor> {
        Tensor::stack(&parts.iter().collect::<Vec<_>>(), 0)?.sum(&[], false)?.div_scalar(test.len() as f64)
    };
    let (loss, accuracy) = (total(loss)?, total(hits)?);
    Tensor::realize_all(&[&loss, &accuracy]).await?;
    Ok((loss.item::<f32>().await?, accuracy.item::<f32>().await?))
}

/// A run's checkpoint: parameters, optimizer state, and the config and step
/// as metadata (what `Trainer::restore` reads).
pub(crate) async fn checkpoint(
    config: &Config,
    steps: u64,
    model: &Sequential,
    state: &OptState,
) -> Result<Checkpoint> {
    let mut ck = Checkpoint::new();
    ck.add("params", model).await?;
    ck.add("opt", state).await?;
    set_config(&mut ck, config, steps)?;
    Ok(ck)
}

/// The run's config and step count as checkpoint metadata ([`config_of`]
/// reads them back).
fn set_config(ck: &mut Checkpoint, config: &Config, steps: u64) -> Result<()> {
    for (k, v) in [
        ("model", config.model.name().to_string()),
        ("step", steps.to_string()),
        ("seed", config.seed.to_string()),
        ("epochs", config.epochs.to_string()),
        ("batch_size", config.batch_size.to_string()),
        ("lr", format!("{:e}", config.lr)),
        ("precision", config.precision.name().to_string()),
    ] {
        ck.set_metadata(k, &v)?;
    }
    Ok(())
}

/// Adam, warmup over the first 5% of steps (at most 100) to `lr`, then a
/// cosine decay to lr/100 at the end of the last epoch; under a dynamic
/// loss scale in f16 (bf16 has f32's range and needs none).
pub(crate) fn optimizer(config: &Config, train_len: usize) -> Optimizer {
    let total = (train_len / config.batch_size * config.epochs) as u64;
    let warmup = (total / 20).clamp(1, 100);
    let adam = adam(warmup_cosine_decay(0.0, config.lr, warmup, total, config.lr / 100.0), 0.9, 0.999, 1e-8);
    let scaling = if config.precision == DType::F16 { LossScaleConfig::default() } else { LossScaleConfig::disabled() };
    dynamic_loss_scale(adam, scaling)
}

/// `state`'s loss scale and skipped steps, where `config` scales the loss.
pub(crate) async fn loss_scale(config: &Config, state: &OptState) -> Result<Option<(f32, i32)>> {
    if config.precision != DType::F16 {
        return Ok(None);
    }
    Tensor::realize_all(&[&state.scale, &state.skipped]).await?;
    Ok(Some((state.scale.item::<f32>().await?, state.skipped.item::<i32>().await?)))
}

fn meta<T: std::str::FromStr>(ck: &Checkpoint, key: &str) -> Result<T> {
    let bad = |detail: String| KilnError::Invalid { op: "checkpoint", detail };
    let v = ck.metadata().get(key).ok_or_else(|| bad(format!("no `{key}` in its metadata (not a demo checkpoint)")))?;
    v.parse().map_err(|_| bad(format!("metadata `{key}` = `{v}` is malformed")))
}

fn config_of(ck: &Checkpoint) -> Result<Config> {
    let config = Config {
        model: meta::<String>(ck, "model")?.parse()?,
        epochs: meta(ck, "epochs")?,
        batch_size: meta(ck, "batch_size")?,
        lr: meta(ck, "lr")?,
        seed: meta(ck, "seed")?,
        precision: {
            let name: String = meta(ck, "precision")?;
            DType::from_name(&name).ok_or_else(|| KilnError::Invalid {
                op: "checkpoint",
                detail: format!("metadata `precision` = `{name}` is not a dtype"),
            })?
        },
    };
    config.check()?;
    Ok(config)
}

/// The pixels and labels of images `idx` of `data`.
fn gather(data: &Dataset, idx: &[usize]) -> (Vec<f32>, Vec<i32>) {
    let mut pixels = Vec::with_capacity(idx.len() * data.pixels());
    idx.iter().for_each(|&i| pixels.extend_from_slice(data.image(i)));
    (pixels, idx.iter().map(|&i| data.labels[i]).collect())
}

/// Images (of `data`'s size) as a tensor in `layout`, and their i32 labels.
fn to_device(
    dev: &Device,
    data: &Dataset,
    pixels: Vec<f32>,
    labels: Vec<i32>,
    layout: ImageLayout,
) -> Result<(Tensor, Tensor)> {
    let n = labels.len();
    let shape = match layout {
        ImageLayout::Flat => vec![n, data.pixels()],
        ImageLayout::Nchw => vec![n, 1, data.rows, data.cols],
    };
    Ok((Tensor::from_slice(dev, &pixels, &shape)?, Tensor::from_slice(dev, &labels, &[n])?))
}

/// Images `idx` of `data` as a tensor in `layout` and their i32 labels.
fn images_and_labels(dev: &Device, data: &Dataset, idx: &[usize], layout: ImageLayout) -> Result<(Tensor, Tensor)> {
    let (pixels, labels) = gather(data, idx);
    to_device(dev, data, pixels, labels, layout)
}
