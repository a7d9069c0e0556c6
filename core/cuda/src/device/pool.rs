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
    /// Each open [`Park`]'s buffer, by its number.
    parks: HashMap<u64, Option<Box<dyn Memory>>>,
    next_park: u64,
    stats: PoolStats,
}

#[derive(Debug, Default)]
pub struct Pool {
    state: Arc<Mutex<State>>,
}

/// A buffer on loan from a CUDA device's pool; back there when dropped,
/// or to the [`Park`] it was taken for.
#[derive(Debug)]
pub struct CudaBuffer {
    memory: Option<Box<dyn Memory>>,
    class: u64,
    /// The device that made it (`CudaDevice::id`).
    pub(super) owner: usize,
    pool: Weak<Mutex<State>>,
    park: Option<u64>,
}

/// One free buffer kept for one use, such as one output of a jit program:
/// the buffer taken for it comes back here when dropped (if the park is
/// empty), and the next buffer for that use is taken from here. A training
/// loop's replays then bind the same two buffers per output, step after
/// step, whatever else the pool hands out in between, so their addresses
/// recur (as CUDA graphs need). Its buffer goes back to the pool with it.
#[derive(Debug)]
pub struct Park {
    number: u64,
    pool: Weak<Mutex<State>>,
    class: u64,
}

impl Drop for Park {
    fn drop(&mut self) {
        let Some(state) = self.pool.upgrade() else { return };
        let mut state = state.lock().unwrap();
        if let Some(Some(memory)) = state.parks.remove(&self.number) {
            state.free.entry(self.class).or_default().push(memory);
        }
    }
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
        // Into its park if that is open and empty, else the free list.
        let park = self.park.and_then(|n| state.parks.get_mut(&n)).filter(|kept| kept.is_none());
        match park {
            Some(kept) => *kept = Some(memory),
            None => state.free.entry(self.class).or_default().push(memory),
        }
    }
}

impl Pool {
    /// A buffer of at least `bytes`, for the device numbered `owner`.
    pub fn get(&self, engine: &dyn Engine, bytes: u64, owner: usize) -> Result<Arc<CudaBuffer>> {
        Ok(self.take(engine, size_class(bytes), owner, None)?.0)
    }

    /// An empty park for buffers of at least `bytes`.
    pub fn park(&self, bytes: u64) -> Park {
        let mut state = self.state.lock().unwrap();
        let number = state.next_park;
        state.next_park += 1;
        state.parks.insert(number, None);
        Park { number, pool: Arc::downgrade(&self.state), class: size_class(bytes) }
    }

    /// A buffer for `park`'s use, which comes back to `park` when dropped,
    /// and whether it is the one kept there (else it is from the pool).
    pub fn get_parked(&self, engine: &dyn Engine, park: &Park, owner: usize) -> Result<(Arc<CudaBuffer>, bool)> {
        self.take(engine, park.class, owner, Some(park.number))
    }

    fn take(
        &self,
        engine: &dyn Engine,
        class: u64,
        owner: usize,
        park: Option<u64>,
    ) -> Result<(Arc<CudaBuffer>, bool)> {
        let (reused, parked) = {
            let mut state = self.state.lock().unwrap();
            let parked = park.and_then(|n| state.parks.get_mut(&n)?.take());
            let was_parked = parked.is_some();
            let reused = parked.or_else(|| state.free.get_mut(&class).and_then(Vec::pop));
            if reused.is_some() {
                state.stats.bytes_free -= class;
            }
            (reused, was_parked)
        };
        let memory = match reused {
            Some(m) => m,
            None => {
                let m = engine.alloc(class)?;
                self.state.lock().unwrap().stats.buffers_created += 1;
                m
            }
        };
        self.state.lock().unwrap().stats.take(class);
        let buffer = CudaBuffer { memory: Some(memory), class, owner, pool: Arc::downgrade(&self.state), park };
        Ok((Arc::new(buffer), parked))
    }

    pub fn stats(&self) -> PoolStats {
        self.state.lock().unwrap().stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::emulated::HostEngine;

    /// A parked use gets back its own buffer whatever the pool handed out
    /// meanwhile; a second buffer for it goes to the pool; the park's
    /// buffer returns to the pool with the park, nothing allocated anew.
    #[test]
    fn a_park_keeps_one_buffer_for_its_use() {
        let (pool, engine) = (Pool::default(), HostEngine::default());
        let park = pool.park(1000);
        let (first, parked) = pool.get_parked(&engine, &park, 0).unwrap();
        assert!(!parked);
        let (address, other) = (first.address(), pool.get(&engine, 1000, 0).unwrap());
        let other_address = other.address();
        drop(first);
        drop(other);
        // The pool would hand out `other`'s buffer (freed last) first.
        assert_eq!(pool.get(&engine, 1000, 0).unwrap().address(), other_address);
        let (again, parked) = pool.get_parked(&engine, &park, 0).unwrap();
        assert!(parked);
        assert_eq!(again.address(), address, "the parked buffer");
        let (second, parked) = pool.get_parked(&engine, &park, 0).unwrap();
        assert!(!parked);
        drop(again);
        drop(second);
        assert_eq!(pool.stats().buffers_created, 2);
        drop(park);
        let held: Vec<_> = (0..2).map(|_| pool.get(&engine, 1000, 0).unwrap()).collect();
        assert_eq!(pool.stats().buffers_created, 2, "the park's buffer went back to the pool");
        assert_eq!(pool.stats().bytes_free, 0);
        assert_eq!(pool.stats().bytes_in_use, 2 * size_class(1000));
        drop(held);
    }
}
