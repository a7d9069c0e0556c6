//! A buffer pool: freed buffers go back to a free list by size class and
//! usage, and the next request of that class reuses them, so a training
//! loop stops allocating after its first steps.

use crate::ir::DeviceBuffer;
pub use crate::ir::{PoolStats, size_class};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

#[derive(Debug, Default)]
struct PoolState {
    free: HashMap<(u64, wgpu::BufferUsages), Vec<wgpu::Buffer>>,
    stats: PoolStats,
}

#[derive(Debug)]
pub struct BufferPool {
    device: wgpu::Device,
    state: Arc<Mutex<PoolState>>,
}

/// A buffer on loan from the pool; it returns there when dropped.
#[derive(Debug)]
pub struct PooledBuffer {
    buffer: Option<wgpu::Buffer>,
    class: u64,
    state: Weak<Mutex<PoolState>>,
}

impl PooledBuffer {
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("present until drop")
    }
    pub fn size(&self) -> u64 {
        self.class
    }
}

impl DeviceBuffer for PooledBuffer {}

/// The pool's buffer behind the opaque handle that the IR and the
/// scheduler hold.
pub trait Pooled {
    fn buffer(&self) -> &wgpu::Buffer;
    fn size(&self) -> u64;
}

impl Pooled for dyn DeviceBuffer {
    fn buffer(&self) -> &wgpu::Buffer {
        pooled(self).buffer()
    }
    fn size(&self) -> u64 {
        pooled(self).size()
    }
}

fn pooled(b: &dyn DeviceBuffer) -> &PooledBuffer {
    (b as &dyn Any).downcast_ref().expect("a device's arrays hold buffers of its own pool")
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        let (Some(buffer), Some(state)) = (self.buffer.take(), self.state.upgrade()) else {
            return;
        };
        let mut state = state.lock().unwrap();
        state.stats.bytes_in_use -= self.class;
        state.stats.bytes_free += self.class;
        state.free.entry((self.class, buffer.usage())).or_default().push(buffer);
    }
}

impl BufferPool {
    pub fn new(device: wgpu::Device) -> BufferPool {
        BufferPool { device, state: Arc::default() }
    }

    pub fn stats(&self) -> PoolStats {
        self.state.lock().unwrap().stats
    }

    pub fn get(&self, bytes: u64, usage: wgpu::BufferUsages) -> Arc<PooledBuffer> {
        let class = size_class(bytes);
        let mut state = self.state.lock().unwrap();
        state.stats.take(class);
        let buffer = match state.free.get_mut(&(class, usage)).and_then(Vec::pop) {
            Some(buffer) => {
                state.stats.bytes_free -= class;
                buffer
            }
            None => {
                state.stats.buffers_created += 1;
                self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("kiln"),
                    size: class,
                    usage,
                    mapped_at_creation: false,
                })
            }
        };
        Arc::new(PooledBuffer { buffer: Some(buffer), class, state: Arc::downgrade(&self.state) })
    }

    /// Destroy every free buffer (memory goes back to the driver).
    pub fn trim(&self) {
        let mut state = self.state.lock().unwrap();
        state.free.clear();
        state.stats.bytes_free = 0;
    }
}
