//! The training loop across a mesh: each step's batch (the one `Trainer`
//! takes at that step) is split along its rows, every rank differentiates
//! its block against its copy of the parameters, one all-reduce sums the
//! loss and the gradients in rank order, and every rank applies the same
//! Adam update to its copy.
//!
//! Each rank's half of a step is jit-captured: the previous step's update,
//! then the forward and backward pass, replayed as one submit, followed by
//! the read of the rank's part. The update of the last step waits until
//! the parameters are asked for.

use crate::model::Config;
use crate::model::ModelKind;
use crate::trainer::{Batches, OptState, Optimizer, SavedRun, checkpoint, evaluate, optimizer};
use kiln::core::PendingRead;
use kiln::core::interp::HostArray;
use kiln::prelude::*;
use kiln::{FlatJit, Key};
use kiln_nn::Sequential;
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::data::{ImageLayout, Mnist};
use kiln_nn::loss::cross_entropy;
use kiln_nn::optim::apply_updates;
use kiln_shard::{Mesh, Sharded, Sharding, ravel, unravel};

/// A rank's half of a step over flat leaves.
type StepFn = Box<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>>;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

pub struct DataParallelTrainer {
    mesh: Mesh,
    config: Config,
    data: Arc<Mnist>,
    batches: Batches,
    layout: ImageLayout,
    /// Per local rank: the parameters' leaves, then the optimizer state's.
    leaves: Vec<Vec<Tensor>>,
    /// The last step's all-reduced `[loss, gradient..]` on each local
    /// device, not yet applied to `leaves`.
    pending: Option<Vec<Tensor>>,
    /// `(x, labels, params..)` → this rank's `[loss, gradient..]`.
    first: FlatJit<StepFn>,
    /// `(x, labels, params.., state.., pending)` → the rank's part, then
    /// the updated parameters and state.
    steady: FlatJit<StepFn>,
    apply: Arc<Update>,
    steps: u64,
    /// Seconds each step of this trainer spent in its all-reduce.
    all_reduces: Vec<f64>,
}

/// The Adam step of one rank from an all-reduced `[loss, gradient..]`.
struct Update {
    opt: Optimizer,
    model: Sequential,
    state: OptState,
}

impl Update {
    /// `(params.., state..)` updated by `total`.
    fn apply(&self, leaves: &[Tensor], total: &Tensor) -> Result<Vec<Tensor>> {
        let n = self.model.leaves().len();
        let p = self.model.unflatten(leaves[..n].to_vec())?;
        let s = self.state.unflatten(leaves[n..].to_vec())?;
        let grads = p.unflatten(unravel(total, 1, &p.leaves())?)?;
        let (updates, s) = self.opt.update(&grads, &s, Some(&p))?;
        Ok([apply_updates(&p, &updates)?.leaves(), s.leaves()].concat())
    }
}

/// This rank's part of the global mean loss and of its gradient, as one
/// flat `[loss, gradient..]`: its mean weighted by its share of the batch.
fn partial(model: &Sequential, x: &Tensor, labels: &Tensor, params: &[Tensor], batch: usize) -> Result<Tensor> {
    let p = model.unflatten(params.to_vec())?;
    let weight = x.shape()[0] as f64 / batch as f64;
    let loss = |p: &Sequential| cross_entropy(&p.forward(x)?, labels)?.mul_scalar(weight);
    let (value, grads) = value_and_grad(loss)(&p)?;
    ravel(&[vec![value], grads.leaves()].concat())
}

fn fingerprint(value: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// This program's executable, hashed: every rank must run the same build
/// (the same kiln and the same model code), not merely the same version
/// number, which every commit shares.
fn program_fingerprint() -> Result<u64> {
    let exe = std::env::current_exe()
        .map_err(|e| KilnError::Invalid { op: "data parallel", detail: format!("finding this program: {e}") })?;
    let bytes = std::fs::read(&exe).map_err(|e| KilnError::File {
        op: "data parallel",
        path: exe.display().to_string(),
        detail: e.to_string(),
    })?;
    Ok(fingerprint(bytes))
}

impl DataParallelTrainer {
    /// A fresh run over `mesh`: the weights `Trainer::new` would draw from
    /// `config.seed`, copied to every rank. Every process must pass the
    /// same config and data and run the same kiln; otherwise an error
    /// names what differs.
    pub async fn new(mesh: &Mesh, data: Arc<Mnist>, config: Config) -> Result<DataParallelTrainer> {
        config.check()?;
        let model = config.model.build(&mesh.devices()[0], Key::new(config.seed))?;
        DataParallelTrainer::start(mesh, data, config, model, None, 0).await
    }

    /// The run saved in `ck` (by this trainer or by `Trainer`), continued
    /// over `mesh`: every process reads the same file (a shared one, or a
    /// copy), and they must agree on it as `new` requires, and on its step.
    pub async fn restore(
        mesh: &Mesh,
        data: Arc<Mnist>,
        ck: &Checkpoint,
        expect: Option<ModelKind>,
    ) -> Result<DataParallelTrainer> {
        let run = SavedRun::read(&mesh.devices()[0], &data, ck, expect)?;
        DataParallelTrainer::start(mesh, data, run.config, run.model, Some(run.state), run.steps).await
    }

    /// The run from `model` and the optimizer's `state` (`None`: a fresh
    /// one) at step `steps`, replicated on every rank.
    async fn start(
        mesh: &Mesh,
        data: Arc<Mnist>,
        config: Config,
        model: Sequential,
        state: Option<OptState>,
        steps: u64,
    ) -> Result<DataParallelTrainer> {
        let collective = mesh.collective();
        collective.agree("the program (its executable's bytes)", program_fingerprint()?)?;
        collective.agree("the model", fingerprint(config.model.name()))?;
        collective.agree("the seed", config.seed)?;
        collective.agree("the batch size", config.batch_size as u64)?;
        collective.agree("the epochs", config.epochs as u64)?;
        collective.agree("the learning rate", config.lr.to_bits())?;
        collective.agree("the precision", fingerprint(config.precision.name()))?;
        let mut images = DefaultHasher::new();
        data.train.images.iter().for_each(|v| v.to_bits().hash(&mut images));
        collective.agree("the training set", fingerprint((images.finish(), &data.train.labels)))?;
        collective.agree("the step", steps)?;
        // Each rank's gradient is unscaled, so only f32 steps split.
        if config.precision != DType::F32 {
            return Err(KilnError::Invalid {
                op: "data parallel",
                detail: format!("trains in f32 only, not {} (mixed precision runs on one device)", config.precision),
            });
        }
        if config.batch_size < mesh.world_size() {
            return Err(KilnError::Invalid {
                op: "data parallel",
                detail: format!("batch size {} is smaller than the {} ranks", config.batch_size, mesh.world_size()),
            });
        }
        let params = kiln_shard::Replicas::new(mesh, &model).await?;
        let opt = optimizer(&config, data.train.len());
        let apply = Arc::new(Update { state: opt.init(&model)?, opt, model: model.clone() });
        let states = match &state {
            Some(s) => kiln_shard::Replicas::new(mesh, s).await?.trees().to_vec(),
            None => params.trees().iter().map(|p| apply.opt.init(p)).collect::<Result<_>>()?,
        };
        let leaves = params.trees().iter().zip(&states).map(|(p, s)| [p.leaves(), s.leaves()].concat()).collect();
        let (n, batch) = (model.leaves().len(), config.batch_size);
        let template = model.clone();
        let first: StepFn = Box::new(move |i: &[Tensor]| Ok(vec![partial(&template, &i[0], &i[1], &i[2..], batch)?]));
        let (template, update) = (model, apply.clone());
        let steady: StepFn = Box::new(move |i: &[Tensor]| {
            let (total, leaves) = i[2..].split_last().expect("inputs end with the pending total");
            let updated = update.apply(leaves, total)?;
            let part = partial(&template, &i[0], &i[1], &updated[..n], batch)?;
            Ok([vec![part], updated].concat())
        });
        Ok(DataParallelTrainer {
            mesh: mesh.clone(),
            batches: Batches::new(data.clone(), &config),
            layout: config.model.layout(),
            data,
            config,
            leaves,
            pending: None,
            first: kiln::jit_flat(first),
            steady: kiln::jit_flat(steady),
            apply,
            steps,
            all_reduces: Vec::new(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Seconds each step taken by this trainer spent in its all-reduce:
    /// the exchange between ranks (through MPI across processes), the sum
    /// in rank order and the upload of the result to each local device.
    pub fn all_reduce_seconds(&self) -> &[f64] {
        &self.all_reduces
    }

    /// How many times the step has been captured (the first step's and the
    /// steady one's, once per device and input signature).
    pub fn captures(&self) -> usize {
        self.first.captures() + self.steady.captures()
    }

    pub fn steps_per_epoch(&self) -> u64 {
        self.batches.steps_per_epoch()
    }

    pub fn total_steps(&self) -> u64 {
        self.steps_per_epoch() * self.config.epochs as u64
    }

    /// This process's first device (rank 0's on the root).
    pub fn device(&self) -> &Device {
        &self.mesh.devices()[0]
    }

    /// This process's first copy of the parameters and optimizer state,
    /// with the last step's update applied.
    fn current(&self) -> Result<(Sequential, OptState)> {
        let leaves = match &self.pending {
            Some(total) => self.apply.apply(&self.leaves[0], &total[0])?,
            None => self.leaves[0].clone(),
        };
        let n = self.apply.model.leaves().len();
        Ok((self.apply.model.unflatten(leaves[..n].to_vec())?, self.apply.state.unflatten(leaves[n..].to_vec())?))
    }

    /// This process's copy of the current parameters.
    pub fn model(&self) -> Result<Sequential> {
        Ok(self.current()?.0)
    }

    /// One step over the global batch: on each device one submit for the
    /// captured step and one for reading its part, then the all-reduce.
    /// Returns the loss, the mean over the whole batch.
    pub async fn step(&mut self) -> Result<f32> {
        let (pixels, labels) = self.batches.host(self.steps);
        let n = labels.len();
        let shape = match self.layout {
            ImageLayout::Flat => vec![n, pixels.len() / n],
            ImageLayout::Nchw => vec![n, 1, 28, 28],
        };
        let images = HostArray::new(DType::F32, shape, pixels.iter().map(|&v| f64::from(v)).collect());
        let x = Sharded::from_host(&self.mesh, &images, Sharding::Split(0))?;
        let y = Sharded::from_slice(&self.mesh, &labels, &[n], Sharding::Split(0))?;
        // Each rank's part is copied for reading in its step's own submit.
        let mut parts = Vec::with_capacity(self.leaves.len());
        let params = self.apply.model.leaves().len();
        for (i, leaves) in self.leaves.iter_mut().enumerate() {
            let head = vec![x.shards()[i].clone(), y.shards()[i].clone()];
            match &self.pending {
                None => parts.push(self.first.call_reading(&[head, leaves[..params].to_vec()].concat(), 0).await?.1),
                Some(total) => {
                    let inputs = [head, leaves.clone(), vec![total[i].clone()]].concat();
                    let (mut out, part) = self.steady.call_reading(&inputs, 0).await?;
                    *leaves = out.split_off(1);
                    parts.push(part);
                }
            }
        }
        let read = |p: PendingRead| async move {
            Ok::<_, KilnError>(p.wait().await?.data.iter().map(|&v| v as f32).collect())
        };
        let local: Vec<Vec<f32>> = futures_util::future::try_join_all(parts.into_iter().map(read)).await?;
        let started = kiln::core::clock::now();
        let total = self.mesh.all_reduce_sum(local)?;
        let copies =
            self.mesh.devices().iter().map(|d| Tensor::from_slice(d, &total, &[total.len()])).collect::<Result<_>>()?;
        self.all_reduces.push(kiln::core::clock::now() - started);
        self.pending = Some(copies);
        self.steps += 1;
        Ok(total[0])
    }

    /// `n` steps (at most to the end of the run); their losses.
    pub async fn run(&mut self, n: usize) -> Result<Vec<f32>> {
        let n = n.min((self.total_steps() - self.steps) as usize);
        let mut losses = Vec::with_capacity(n);
        for _ in 0..n {
            losses.push(self.step().await?);
        }
        Ok(losses)
    }

    /// Mean loss and accuracy of this process's copy over the test set.
    /// `None`: data-parallel runs train in f32, with no loss scale.
    pub async fn loss_scale(&self) -> Result<Option<(f32, i32)>> {
        Ok(None)
    }

    pub async fn evaluate(&self) -> Result<(f32, f32)> {
        evaluate(self.device(), &self.model()?, &self.data, &self.config).await
    }

    /// The run as `Trainer::checkpoint` saves it (this process's copies):
    /// `Trainer::restore` continues it on one device.
    pub async fn checkpoint(&self) -> Result<Checkpoint> {
        let (model, state) = self.current()?;
        checkpoint(&self.config, self.steps, &model, &state).await
    }
}
