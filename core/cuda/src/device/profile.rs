//! Kernel timing on CUDA: while profiling is on, each call (a kernel
//! launch or a cuBLAS call) is enqueued between two stamps of the engine
//! (CUDA events on a GPU; the host's clock on the host engine), and jit
//! replays enqueue their calls one by one rather than as a graph, so that
//! each is timed. [`Profiler::take`] waits for the stamps and gives each
//! call's time on the device's clock, leaving out what the host spends
//! enqueueing.

use super::engine::{Call, Engine, Stamp};
use kiln_ir::error::Result;
use kiln_runtime::KernelTiming;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

struct Timed {
    name: String,
    grid: [u32; 3],
    start: Box<dyn Stamp>,
    end: Box<dyn Stamp>,
}

#[derive(Default)]
pub(super) struct Profiler {
    on: AtomicBool,
    pending: Mutex<Vec<Timed>>,
}

impl Profiler {
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Enqueue `calls`, each between two stamps.
    ///
    /// # Safety
    /// As [`Engine::enqueue`].
    pub unsafe fn enqueue(&self, engine: &dyn Engine, calls: &[Call]) -> Result<()> {
        let mut pending = self.pending.lock().unwrap();
        for call in calls {
            let start = engine.stamp()?;
            // SAFETY: the caller's promise, passed on.
            unsafe { engine.enqueue(std::slice::from_ref(call))? };
            let end = engine.stamp()?;
            pending.push(Timed { name: call.name().to_string(), grid: call.grid(), start, end });
        }
        Ok(())
    }

    /// The calls timed since the last take, in enqueue order, once they
    /// have run: a kernel by its name (as `KILN_DUMP_CUDA` names it) and
    /// grid, a cuBLAS call by its routine's name and a grid of one block.
    pub fn take(&self) -> Result<Vec<KernelTiming>> {
        let timed = std::mem::take(&mut *self.pending.lock().unwrap());
        timed
            .into_iter()
            .map(|t| Ok(KernelTiming { nanos: t.end.nanos_since(&*t.start)?, name: t.name, groups: t.grid }))
            .collect()
    }
}
