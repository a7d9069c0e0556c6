//! A mesh across processes through MPI (Open MPI): one rank, one device per
//! process. Every exchange waits at most a deadline: a rank that died or
//! hung makes the others abort the job with a message saying so, instead
//! of waiting forever.

use crate::collective::{Collective, expect_local_parts};
use kiln::{KilnError, Result};
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::ops::Range;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an exchange may wait for the other ranks, unless
/// `KILN_MPI_TIMEOUT` (seconds) says otherwise: long enough for a first
/// step that compiles and tunes its kernels on a slow adapter.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// This process's place in the MPI world (`MPI_COMM_WORLD`).
pub struct MpiWorld {
    comm: Mutex<Comm>,
    rank: usize,
    size: usize,
    timeout: Duration,
}

struct Comm {
    world: SimpleCommunicator,
    // Finalizes MPI when dropped, so it lives as long as the world.
    _universe: Universe,
}

// SAFETY: MPI is initialized with `Threading::Serialized` and every call
// goes through the mutex, so no two threads call MPI at once.
unsafe impl Send for Comm {}

impl MpiWorld {
    /// Initialize MPI; an error when it already was, or when it cannot
    /// give serialized calls from several threads.
    pub fn init() -> Result<MpiWorld> {
        let unavailable = |detail: String| KilnError::Unavailable { what: "MPI", detail };
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or_else(|| unavailable("MPI was already initialized in this process".into()))?;
        if threading < mpi::Threading::Serialized {
            return Err(unavailable(format!("the MPI library offers only {threading:?} threading")));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        let timeout = match std::env::var("KILN_MPI_TIMEOUT") {
            Ok(s) => s.parse().ok().and_then(|secs| Duration::try_from_secs_f64(secs).ok()).ok_or_else(|| {
                KilnError::Invalid { op: "KILN_MPI_TIMEOUT", detail: format!("`{s}` is not a number of seconds") }
            })?,
            Err(_) => DEFAULT_TIMEOUT,
        };
        Ok(MpiWorld { comm: Mutex::new(Comm { world, _universe: universe }), rank, size, timeout })
    }

    /// This process's rank in the job (0 for the first).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Stop every rank of the job now (`MPI_Abort`), after printing why on
    /// this one. A rank that fails on its own (no adapter, no data) must
    /// not leave the others waiting for it until the exchange deadline;
    /// and finalizing MPI, as returning would, can itself wait for them.
    pub fn abort(&self, why: &dyn std::fmt::Display) -> ! {
        eprintln!("error: rank {} of {}: {why}", self.rank, self.size);
        let comm = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        comm.world.abort(1)
    }

    /// Wait for a non-blocking exchange, or abort the whole job once the
    /// deadline passes: a collective cannot be cancelled, and a rank that
    /// died or hung would otherwise keep this one waiting.
    fn wait<'a, D: ?Sized, S: Scope<'a>>(&self, what: &str, comm: &SimpleCommunicator, mut req: Request<'a, D, S>) {
        let started = Instant::now();
        let mut pause = Duration::from_micros(10);
        loop {
            match req.test() {
                Ok(_) => return,
                Err(pending) => req = pending,
            }
            if started.elapsed() > self.timeout {
                eprintln!(
                    "kiln: rank {} of {}: {what} waited {:.0} s for the other ranks (one died, hung or is \
                     running a different program); aborting the job (KILN_MPI_TIMEOUT sets the limit)",
                    self.rank,
                    self.size,
                    self.timeout.as_secs_f64()
                );
                comm.abort(70);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Every rank's `values`, in rank order.
    fn gather<T: Equivalence + Copy + Default>(&self, what: &str, values: &[T]) -> Result<Vec<Vec<T>>> {
        // MPI counts in i32; a part past that is sent as -1, so that every
        // rank stops with the error rather than waiting for this one.
        let count = [i32::try_from(values.len()).unwrap_or(-1)];
        let comm = self.comm.lock().unwrap_or_else(|e| e.into_inner());
        let world = &comm.world;
        let mut counts = vec![0i32; self.size];
        mpi::request::scope(|scope| {
            self.wait(what, world, world.immediate_all_gather_into(scope, &count[..], &mut counts[..]));
        });
        if let Some(rank) = counts.iter().position(|&c| c < 0) {
            return Err(KilnError::Invalid {
                op: "mpi",
                detail: format!("{what}: rank {rank}'s part is over MPI's 2^31 - 1 values in one exchange"),
            });
        }
        let mut displs = Vec::with_capacity(self.size);
        let mut at = 0i32;
        for &c in &counts {
            displs.push(at);
            at = at.checked_add(c).ok_or_else(|| KilnError::Invalid {
                op: "mpi",
                detail: format!("{what}: the ranks' parts add up to over MPI's 2^31 - 1 values"),
            })?;
        }
        let mut all = vec![T::default(); counts.iter().map(|&c| c as usize).sum()];
        {
            let mut parts = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            mpi::request::scope(|scope| {
                self.wait(what, world, world.immediate_all_gather_varcount_into(scope, values, &mut parts));
            });
        }
        let mut at = 0;
        Ok(counts
            .iter()
            .map(|&c| {
                let part = all[at..at + c as usize].to_vec();
                at += c as usize;
                part
            })
            .collect())
    }
}

impl Collective for MpiWorld {
    fn world_size(&self) -> usize {
        self.size
    }

    fn local_ranks(&self) -> Range<usize> {
        self.rank..self.rank + 1
    }

    fn all_gather(&self, local: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        expect_local_parts(self, local.len())?;
        self.gather("all_gather", &local[0])
    }

    fn agree(&self, what: &str, value: u64) -> Result<()> {
        // Every rank sends one value; `first` spares an index should one not.
        let all: Vec<Option<u64>> = self.gather(what, &[value])?.into_iter().map(|v| v.first().copied()).collect();
        let differ: Vec<usize> = (0..all.len()).filter(|&r| all[r] != all[0]).collect();
        if differ.is_empty() {
            return Ok(());
        }
        Err(KilnError::Invalid {
            op: "mpi",
            detail: format!("{what} differs between rank 0 and rank(s) {differ:?}: every rank must run the same job"),
        })
    }
}
