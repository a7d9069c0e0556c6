//! The CUDA device's buffer pool: a dropped buffer goes back to the free
//! list of its size class and the next request of that class takes it, so
//! a training loop stops allocating after its first steps. Reuse is safe
//! without waiting: every use of a buffer is enqueued on the device's one
//! stream, behind the uses before it.

use super::engine::{Engine, Memory};
use kiln_ir::error::Result;
use kiln_ir::ir::{DeviceBuffer, PoolStats, size_class};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

#[derive(Debug, Default)]
struct State {
    free: HashMap<u64, Vec<Box<dyn Memory>>>,
    stats: PoolStats,
}

#[derive(Debug, Default)]
pub struct Pool {
    state: Arc<Mutex<State>>,
}

/// A buffer on loan from a CUDA device's pool; back there when dropped.
#[derive(Debug)]
pub struct CudaBuffer {
    memory: Option<Box<dyn Memory>>,
    class: u64,
    /// The device that made it (`CudaDevice::id`).
    pub(super) owner: usize,
    pool: Weak<Mutex<State>>,
}

impl DeviceBuffer for CudaBuffer {}

impl CudaBuffer {
    pub fn address(&self) -> u64 {
        self.memory.as_ref().expect("present until drop").address()
    }
    pub fn memory(&self) -> &dyn Memory {
        self.memory.as_deref().expect("present until drop")
    }
    pub fn size(&self) -> u64 {
        self.class
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        let (Some(memory), Some(state)) = (self.memory.take(), self.pool.upgrade()) else { return };
        let mut state = state.lock().unwrap();
        state.stats.bytes_in_use -= self.class;
        state.stats.bytes_free += self.class;
        state.free.entry(self.class).or_default().push(memory);
    }
}

impl Pool {
    /// A buffer of at least `bytes`, for the device numbered `owner`.
    pub fn get(&self, engine: &dyn Engine, bytes: u64, owner: usize) -> Result<Arc<CudaBuffer>> {
        let class = size_class(bytes);
        let reused = {
            let mut state = self.state.lock().unwrap();
            let reused = state.free.get_mut(&class).and_then(Vec::pop);
            if reused.is_some() {
                state.stats.bytes_free -= class;
            }
            reused
        };
        let memory = match reused {
            Some(m) => m,
            None => {
                let m = engine.alloc(class)?;
                self.state.lock().unwrap().stats.buffers_created += 1;
                m
            }
        };
        self.state.lock().unwrap().stats.bytes_in_use += class;
        Ok(Arc::new(CudaBuffer { memory: Some(memory), class, owner, pool: Arc::downgrade(&self.state) }))
    }

    pub fn stats(&self) -> PoolStats {
        self.state.lock().unwrap().stats
    }
}
