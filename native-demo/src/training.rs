//! What the training loop needs of a trainer: one device's `Trainer`, or
//! `DataParallelTrainer` with its batch split across MPI ranks.

use kiln::prelude::*;
use kiln_mnist::{Config, Trainer};
use kiln_nn::checkpoint::Checkpoint;

pub trait Training {
    fn config(&self) -> &Config;
    fn device(&self) -> &Device;
    fn steps(&self) -> u64;
    fn steps_per_epoch(&self) -> u64;
    fn total_steps(&self) -> u64;
    async fn run(&mut self, n: usize) -> Result<Vec<f32>>;
    async fn evaluate(&self) -> Result<(f32, f32)>;
    /// The loss scale and the steps skipped, where the run scales its loss.
    async fn loss_scale(&self) -> Result<Option<(f32, i32)>>;
    async fn checkpoint(&self) -> Result<Checkpoint>;
    /// Whether this process prints, plots and saves (rank 0 of a mesh).
    fn is_root(&self) -> bool;
    /// Seconds each step spent in the all-reduce (none on one device).
    fn all_reduce_seconds(&self) -> &[f64];
}

/// The methods both trainers have under the same names.
macro_rules! delegate {
    ($t:ty, $root:expr, $all_reduces:expr) => {
        impl Training for $t {
            fn config(&self) -> &Config {
                <$t>::config(self)
            }
            fn device(&self) -> &Device {
                <$t>::device(self)
            }
            fn steps(&self) -> u64 {
                <$t>::steps(self)
            }
            fn steps_per_epoch(&self) -> u64 {
                <$t>::steps_per_epoch(self)
            }
            fn total_steps(&self) -> u64 {
                <$t>::total_steps(self)
            }
            async fn run(&mut self, n: usize) -> Result<Vec<f32>> {
                <$t>::run(self, n).await
            }
            async fn evaluate(&self) -> Result<(f32, f32)> {
                <$t>::evaluate(self).await
            }
            async fn loss_scale(&self) -> Result<Option<(f32, i32)>> {
                <$t>::loss_scale(self).await
            }
            async fn checkpoint(&self) -> Result<Checkpoint> {
                <$t>::checkpoint(self).await
            }
            fn is_root(&self) -> bool {
                let root: fn(&$t) -> bool = $root;
                root(self)
            }
            fn all_reduce_seconds(&self) -> &[f64] {
                let all_reduces: fn(&$t) -> &[f64] = $all_reduces;
                all_reduces(self)
            }
        }
    };
}

delegate!(Trainer, |_| true, |_| &[]);
#[cfg(feature = "mpi")]
delegate!(kiln_mnist::DataParallelTrainer, |t| t.mesh().is_root(), |t| t.all_reduce_seconds());
