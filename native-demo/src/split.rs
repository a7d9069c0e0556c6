//! Where a run's time goes: tuning matmuls, training, evaluating. The
//! device counts its own tuning time, which can fall inside either of the
//! others; it is taken out of them here.

use kiln::prelude::*;
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
pub enum Phase {
    Train,
    Evaluate,
}

#[derive(Default)]
pub struct Split {
    train: Duration,
    evaluate: Duration,
    tuning: Duration,
}

impl Split {
    /// Await `work`, adding its wall time to `phase` less the device's
    /// tuning time meanwhile, which goes to tuning.
    pub async fn time<T>(&mut self, dev: &Device, phase: Phase, work: impl Future<Output = T>) -> T {
        let (start, tuned_before) = (Instant::now(), dev.stats().tuning.time);
        let out = work.await;
        let tuning = dev.stats().tuning.time.saturating_sub(tuned_before);
        let rest = start.elapsed().saturating_sub(tuning);
        self.tuning += tuning;
        match phase {
            Phase::Train => self.train += rest,
            Phase::Evaluate => self.evaluate += rest,
        }
        out
    }

    /// Seconds spent training (tuning taken out).
    pub fn train_seconds(&self) -> f64 {
        self.train.as_secs_f64()
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |d: Duration| d.as_secs_f64();
        write!(
            f,
            "time: training {:.1} s, evaluating {:.1} s, tuning matmuls {:.1} s",
            s(self.train),
            s(self.evaluate),
            s(self.tuning)
        )
    }
}
