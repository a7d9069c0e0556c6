//! The training loop across a mesh: each step's batch (the one `Trainer`
//! takes at that step) is split along its rows, every rank differentiates
//! its block against its copy of the parameters, one all-reduce sums the
//! loss and the gradients in rank order, and every rank applies the same
//! Adam update to its copy: lazily, so that it runs in the next step's
//! submit (one submit per device per step).

use crate::model::Config;
use crate::trainer::{Batches, OptState, Optimizer, checkpoint, evaluate, optimizer};
use kiln::Key;
use kiln::core::interp::HostArray;
use kiln::prelude::*;
use kiln_nn::Sequential;
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::data::{ImageLayout, Mnist};
use kiln_nn::optim::{Transform, apply_updates};
use kiln_shard::{Mesh, Replicas, Sharded, Sharding};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

pub struct DataParallelTrainer {
    mesh: Mesh,
    config: Config,
    data: Arc<Mnist>,
    batches: Batches,
    opt: Optimizer,
    params: Replicas<Sequential>,
    state: Replicas<OptState>,
    steps: u64,
    layout: ImageLayout,
}

fn fingerprint(value: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

impl DataParallelTrainer {
    /// A fresh run over `mesh`: the weights `Trainer::new` would draw from
    /// `config.seed`, copied to every rank. Every process must pass the
    /// same config and data and run the same kiln; otherwise an error
    /// names what differs.
    pub async fn new(mesh: &Mesh, data: Arc<Mnist>, config: Config) -> Result<DataParallelTrainer> {
        config.check()?;
        let collective = mesh.collective();
        collective.agree("kiln's version", fingerprint(env!("CARGO_PKG_VERSION")))?;
        collective.agree("the model", fingerprint(config.model.name()))?;
        collective.agree("the seed", config.seed)?;
        collective.agree("the batch size", config.batch_size as u64)?;
        collective.agree("the epochs", config.epochs as u64)?;
        collective.agree("the learning rate", config.lr.to_bits())?;
        collective.agree("the training set", fingerprint((data.train.len(), &data.train.labels)))?;
        if config.batch_size < mesh.world_size() {
            return Err(KilnError::Invalid {
                op: "data parallel",
                detail: format!("batch size {} is smaller than the {} ranks", config.batch_size, mesh.world_size()),
            });
        }
        let model = config.model.build(&mesh.devices()[0], Key::new(config.seed))?;
        let params = Replicas::new(mesh, &model).await?;
        let opt = optimizer(&config, data.train.len());
        let state = params.map(|p| opt.init(p))?;
        Ok(DataParallelTrainer {
            mesh: mesh.clone(),
            batches: Batches::new(data.clone(), &config),
            data,
            layout: config.model.layout(),
            config,
            opt,
            params,
            state,
            steps: 0,
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

    /// `n` steps (at most to the end of the run); their losses, read back
    /// together.
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

    /// Mean loss and accuracy of this process's copy over the test set.
    pub async fn evaluate(&self) -> Result<(f32, f32)> {
        evaluate(self.device(), self.model(), &self.data, self.layout).await
    }

    /// The run as `Trainer::checkpoint` saves it (this process's copies):
    /// `Trainer::restore` continues it on one device.
    pub async fn checkpoint(&self) -> Result<Checkpoint> {
        checkpoint(&self.config, self.steps, self.model(), self.state.local()).await
    }

    /// This process's copy of the current parameters.
    pub fn model(&self) -> &Sequential {
        self.params.local()
    }

    /// One step over the global batch (one submit per device); its loss,
    /// the mean over the whole batch, on this process's first device (not
    /// read: reading is a submit of its own).
    pub async fn step(&mut self) -> Result<Tensor> {
        let (pixels, labels) = self.batches.host(self.steps);
        let n = labels.len();
        let shape = match self.layout {
            ImageLayout::Flat => vec![n, pixels.len() / n],
            ImageLayout::Nchw => vec![n, 1, 28, 28],
        };
        let images = HostArray::new(DType::F32, shape, pixels.iter().map(|&v| f64::from(v)).collect());
        let x = Sharded::from_host(&self.mesh, &images, Sharding::Split(0))?;
        let y = Sharded::from_slice(&self.mesh, &labels, &[n], Sharding::Split(0))?;
        // The last step's update (lazy until now) runs in this step's submit.
        let state: Vec<Vec<Tensor>> = self.state.trees().iter().map(Tree::leaves).collect();
        let (loss, grads) = kiln_shard::value_and_grad_keeping(&self.params, &state, |p| {
            x.map_with(p, "forward", |m, x| m.forward(x))?.cross_entropy(&y)
        })
        .await?;
        let (opt, params, state) = (&self.opt, &self.params, &self.state);
        let updated = params.zip_map(&grads.zip_map(state, |g, s| Ok((g.clone(), s.clone())))?, |p, (g, s)| {
            let (updates, s) = opt.update(g, s, Some(p))?;
            Ok((apply_updates(p, &updates)?, s))
        })?;
        self.params = updated.map(|(p, _)| Ok(p.clone()))?;
        self.state = updated.map(|(_, s)| Ok(s.clone()))?;
        self.steps += 1;
        Ok(loss.shards()[0].clone())
    }
}
