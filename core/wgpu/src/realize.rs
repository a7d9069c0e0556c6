//! Running a schedule on wgpu: each slot of a [`Schedule`] gets a buffer
//! from the pool, each item is recorded as its launches (the variant
//! chosen, the pipeline fetched, the buffers bound), and the recording is
//! submitted once. The schedule itself comes from `kiln_sched::walk`,
//! which knows no device.

use super::launch::Recording;
use super::pool::PooledBuffer;
use super::{Gpu, GpuArray};
use crate::error::Result;
use crate::ir::{DeviceBuffer, Node, Realized};
use crate::sched::schedule::{Item, KernelItem, Schedule, Slot, product_dims, slot_of};
use crate::sched::walk::{HostInputs, Scheduler};
use kiln_runtime::PlannedKernel;
use std::sync::Arc;

/// A readback request: `bytes` bytes of `buffer` from `offset`.
pub(super) struct ReadRequest {
    pub buffer: Arc<dyn DeviceBuffer>,
    pub offset: u64,
    pub bytes: u64,
}

/// Why a schedule is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// To submit: slots get buffers, and a matmul shape class met for the
    /// first time is tuned.
    Run,
    /// To name its launches: slots stay placeholders and matmuls take the
    /// config already chosen for their class (or the default), untuned.
    Look,
}

/// A schedule recorded for one submit.
pub(super) struct Plan<'a> {
    gpu: &'a Gpu,
    pub rec: Recording,
    /// Each slot's buffer.
    buffers: Vec<Arc<dyn DeviceBuffer>>,
    results: Vec<(Node, GpuArray)>,
    /// The IR nodes each recorded launch computes (parallel to `rec.dispatches`).
    covers: Vec<Vec<u64>>,
}

impl Gpu {
    /// A scheduler for this device; inputs must live on it.
    pub(super) fn scheduler(&self) -> Scheduler<'_> {
        Scheduler::new(self, HostInputs::Refuse)
    }

    /// The schedule realizing `roots`.
    pub(super) fn schedule(&self, roots: &[Node]) -> Result<Schedule> {
        let mut s = self.scheduler();
        s.run(roots)?;
        Ok(s.finish())
    }

    /// The kernels realizing `roots` would launch, without launching them.
    pub(super) fn plan_kernels(&self, roots: &[Node]) -> Result<Vec<PlannedKernel>> {
        Ok(Plan::record(self, self.schedule(roots)?, Purpose::Look)?.kernels())
    }
}

/// `b`, or the buffer its slot was given.
fn resolved(slot_buffers: &[Arc<dyn DeviceBuffer>], b: &Arc<dyn DeviceBuffer>) -> Arc<dyn DeviceBuffer> {
    slot_of(b).map_or_else(|| b.clone(), |s| slot_buffers[s].clone())
}

impl<'a> Plan<'a> {
    /// Give `schedule`'s slots buffers and record its items.
    pub fn record(gpu: &'a Gpu, schedule: Schedule, purpose: Purpose) -> Result<Plan<'a>> {
        let buffers = schedule
            .slots
            .iter()
            .enumerate()
            .map(|(index, s)| match purpose {
                Purpose::Run => gpu.resources.alloc(s.op, s.dtype, &s.shape),
                Purpose::Look => Ok(Arc::new(Slot { index }) as Arc<dyn DeviceBuffer>),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut plan = Plan { gpu, rec: Recording::default(), buffers, results: Vec::new(), covers: Vec::new() };
        for k in schedule.items {
            plan.item(k, purpose)?;
        }
        plan.results = schedule.results.into_iter().map(|(n, a)| (n, plan.resolve(&a))).collect();
        Ok(plan)
    }

    /// `a` with its buffer the one its slot was given.
    pub fn resolve(&self, a: &GpuArray) -> GpuArray {
        GpuArray { buffer: self.buffer(&a.buffer), ..a.clone() }
    }

    fn buffer(&self, b: &Arc<dyn DeviceBuffer>) -> Arc<dyn DeviceBuffer> {
        resolved(&self.buffers, b)
    }

    fn item(&mut self, k: KernelItem, purpose: Purpose) -> Result<()> {
        let gpu = self.gpu;
        // Looking takes the config already chosen (or the default), untuned.
        let config = match (&k.item, purpose) {
            (Item::Matmul { a, b, operands, .. }, Purpose::Look) => {
                let (m, k, n) = product_dims(a, b);
                Some(gpu.tuner.chosen_config(*operands, m, n, k))
            }
            _ => None,
        };
        let buffers = &self.buffers;
        self.rec.item(gpu, k.op, &k.item, |b| resolved(buffers, b), config)?;
        self.covers.resize(self.rec.dispatches.len(), k.covers);
        Ok(())
    }

    /// The kernels recorded.
    pub fn kernels(&self) -> Vec<PlannedKernel> {
        let nodes = self.covers.iter().cloned().chain(std::iter::repeat(Vec::new()));
        self.rec
            .dispatches
            .iter()
            .zip(nodes)
            .map(|(d, nodes)| PlannedKernel { name: d.kernel.name.clone(), nodes })
            .collect()
    }

    /// Record every dispatch (and the readback copy) in one encoder, submit
    /// once, then store the computed values in their nodes.
    pub fn submit(self, read: Option<ReadRequest>) -> Result<Option<Arc<PooledBuffer>>> {
        let staging = self.gpu.submit(&self.rec, read)?;
        for (node, value) in self.results {
            node.set_realized(Realized::Gpu(value));
        }
        Ok(staging)
    }
}
