//! What a GPU device's kernels run with: pooled buffers and operand
//! textures, and the compiled pipelines.

use super::GpuArray;
use super::pipelines::PipelineCache;
use super::pool::{self, BufferPool, Pooled, PooledBuffer};
use super::textures::TexturePool;
use crate::DType;
use crate::error::{KilnError, Result};
use crate::ir::DeviceBuffer;
use crate::shape::Layout;
use std::sync::Arc;

pub(super) struct Resources {
    pub pool: BufferPool,
    pub textures: TexturePool,
    pub pipelines: PipelineCache,
    /// The adapter's limits a buffer must keep within: (name, bytes).
    buffer_limits: [(&'static str, u64); 2],
}

impl Resources {
    pub fn new(device: &wgpu::Device, limits: &kiln_runtime::Limits, own_spirv: bool) -> Resources {
        Resources {
            pool: BufferPool::new(device.clone()),
            textures: TexturePool::new(device.clone()),
            pipelines: PipelineCache::new(own_spirv),
            buffer_limits: [
                ("max_storage_buffer_binding_size", limits.max_storage_buffer_binding_size),
                ("max_buffer_size", limits.max_buffer_size),
            ],
        }
    }

    /// How kernels use buffers: bound as storage, copied to and from.
    pub fn storage_usage() -> wgpu::BufferUsages {
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST
    }

    /// A buffer for `shape` of `dtype`, checked against the adapter's limits.
    pub fn alloc(&self, op: &'static str, dtype: DType, shape: &[usize]) -> Result<Arc<dyn DeviceBuffer>> {
        let bytes = dtype.storage_bytes(crate::shape::numel(shape));
        for (limit_name, limit) in self.buffer_limits {
            if pool::size_class(bytes) > limit {
                return Err(KilnError::TooLarge { op, shape: shape.to_vec(), dtype, bytes, limit_name, limit });
            }
        }
        Ok(self.pool.get(bytes, Resources::storage_usage()))
    }

    /// A uniform buffer holding `words`: the meta blocks of a recording's launches.
    pub fn meta(&self, queue: &wgpu::Queue, words: &[u32]) -> Arc<PooledBuffer> {
        let meta = self.pool.get((words.len() * 4) as u64, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
        queue.write_buffer(meta.buffer(), 0, bytemuck::cast_slice(words));
        meta
    }

    /// `values` in a new buffer, written through `queue`.
    pub fn upload(&self, queue: &wgpu::Queue, dtype: DType, shape: &[usize], values: &[f64]) -> Result<GpuArray> {
        let buffer = self.alloc("upload", dtype, shape)?;
        let words = crate::dtype::pack_words(dtype, values);
        if !words.is_empty() {
            queue.write_buffer(buffer.buffer(), 0, bytemuck::cast_slice(&words));
        }
        Ok(GpuArray { buffer, layout: Layout::contiguous(shape), dtype })
    }
}
