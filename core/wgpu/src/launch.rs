//! Recording kernel launches: each launch is a cached pipeline, a slot of
//! parameters in the shared uniform buffer, its buffers and a grid. A
//! [`Recording`] is submitted as one command encoder and one submit, and
//! the jit replays one with other input buffers.

use super::Gpu;
use super::pipelines::Kernel;
use super::pool::{Pooled, PooledBuffer};
use super::profile::Launch;
use super::realize::ReadRequest;
use super::textures::PooledTexture;
use crate::codegen::META_WORDS;
use crate::codegen::launch;
use crate::codegen::matmul::MatmulConfig;
use crate::codegen::operand_textures::OperandTexture;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::DeviceBuffer;
use crate::sched::schedule::Item;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A resource a launch binds: a buffer, or a texture matmul's operand texture.
#[derive(Debug, Clone)]
pub(super) enum Bound {
    Buffer(Arc<dyn DeviceBuffer>),
    Texture(Arc<PooledTexture>),
}

impl Bound {
    fn resource(&self) -> wgpu::BindingResource<'_> {
        match self {
            Bound::Buffer(b) => b.buffer().as_entire_binding(),
            Bound::Texture(t) => wgpu::BindingResource::TextureView(t.view()),
        }
    }
}

pub(super) struct Dispatch {
    pub kernel: Arc<Kernel>,
    pub meta_slot: usize,
    /// Bound at bindings 1, 2, ... (binding 0 is the meta block).
    pub bindings: Vec<Bound>,
    pub groups: [u32; 3],
}

/// Launches recorded for one submit.
#[derive(Default)]
pub(super) struct Recording {
    pub meta: Vec<u32>,
    pub dispatches: Vec<Dispatch>,
}

fn log_kernels() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_LOG").is_ok_and(|v| v.split(',').any(|p| p == "kernels")))
}

impl Recording {
    /// Record `launch` with its bindings (after the meta block).
    fn dispatch_binding(&mut self, gpu: &Gpu, launch: &launch::Launch, bindings: Vec<Bound>) -> Result<()> {
        let kernel = gpu.resources.pipelines.get(&gpu.ctx.device, &launch.key)?;
        if log_kernels() {
            eprintln!("kiln: launch {} ({} elements, grid {:?})", kernel.name, launch.elements, launch.groups);
        }
        let meta_slot = launch.append_meta(&mut self.meta)?;
        self.dispatches.push(Dispatch { kernel, meta_slot, bindings, groups: launch.groups });
        Ok(())
    }

    /// Record `item`'s launches, the schedule's buffers it names given by
    /// `buffer`; a matmul takes `config`, or without one the tuner's.
    pub fn item(
        &mut self,
        gpu: &Gpu,
        op: &'static str,
        item: &Item,
        buffer: impl Fn(&Arc<dyn DeviceBuffer>) -> Arc<dyn DeviceBuffer>,
        config: Option<MatmulConfig>,
    ) -> Result<()> {
        let config = |dtype, (m, k, n)| match config {
            Some(c) => Ok(c),
            None => gpu.tuner.config(gpu, dtype, m, n, k),
        };
        let mut binder = GpuBinder { gpu, buffer };
        for b in launch::bind(&gpu.ctx.caps, &gpu.variants(), op, item, config, &mut binder)? {
            self.dispatch_binding(gpu, &b.launch, b.bindings)?;
        }
        Ok(())
    }
}

/// Bindings on wgpu: the schedule's buffers as given, scratch buffers from
/// the pool, operand textures from theirs.
struct GpuBinder<'a, F> {
    gpu: &'a Gpu,
    buffer: F,
}

impl<F: Fn(&Arc<dyn DeviceBuffer>) -> Arc<dyn DeviceBuffer>> launch::Binder for GpuBinder<'_, F> {
    type Handle = Bound;
    fn buffer(&mut self, b: &Arc<dyn DeviceBuffer>) -> Bound {
        Bound::Buffer((self.buffer)(b))
    }
    fn scratch(&mut self, op: &'static str, dtype: DType, shape: &[usize]) -> Result<Bound> {
        Ok(Bound::Buffer(self.gpu.resources.alloc(op, dtype, shape)?))
    }
    fn texture(&mut self, t: &OperandTexture) -> Result<Bound> {
        Ok(Bound::Texture(self.gpu.resources.textures.get(t.width, t.height, t.layers)))
    }
}

impl Gpu {
    /// The bindings of one launch: its slot of `meta`, then `bindings`.
    pub(super) fn bind_group(
        &self,
        kernel: &Kernel,
        meta: &PooledBuffer,
        meta_slot: usize,
        bindings: &[Bound],
    ) -> wgpu::BindGroup {
        let meta_binding = wgpu::BufferBinding {
            buffer: meta.buffer(),
            offset: (meta_slot * META_WORDS * 4) as u64,
            size: std::num::NonZeroU64::new((META_WORDS * 4) as u64),
        };
        let mut entries =
            vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(meta_binding) }];
        for (i, b) in bindings.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.resource() });
        }
        self.ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &kernel.pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Encode `rec` (and a readback copy) in one command encoder and submit
    /// it once; returns the staging buffer of the copy.
    pub(super) fn submit(&self, rec: &Recording, read: Option<ReadRequest>) -> Result<Option<Arc<PooledBuffer>>> {
        let staging = self.submit_uncounted(rec, read)?;
        if !rec.dispatches.is_empty() || staging.is_some() {
            self.submits.fetch_add(1, Ordering::Relaxed);
            self.kernels_launched.fetch_add(rec.dispatches.len() as u64, Ordering::Relaxed);
        }
        Ok(staging)
    }

    /// `submit` without counting it (the autotuner's trial runs).
    pub(super) fn submit_uncounted(
        &self,
        rec: &Recording,
        read: Option<ReadRequest>,
    ) -> Result<Option<Arc<PooledBuffer>>> {
        self.ctx.check_errors()?;
        if rec.dispatches.is_empty() && read.is_none() {
            return Ok(None);
        }
        let mut encoder =
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kiln step") });
        // On loan until after the submit: back in the pool sooner, another
        // thread's realization could take it and queue its own meta write,
        // which wgpu runs at the next submit, before these launches.
        let meta = (!rec.dispatches.is_empty()).then(|| self.resources.meta(&self.ctx.queue, &rec.meta));
        if let Some(meta) = &meta {
            let launches: Vec<Launch> = rec
                .dispatches
                .iter()
                .map(|d| Launch {
                    kernel: &d.kernel,
                    bind_group: self.bind_group(&d.kernel, meta, d.meta_slot, &d.bindings),
                    groups: d.groups,
                })
                .collect();
            self.profiler.encode_launches(&self.ctx.device, &mut encoder, &launches, "kiln");
        }
        let staging = read.map(|r| {
            let staging = self.resources.pool.get(r.bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
            encoder.copy_buffer_to_buffer(r.buffer.buffer(), r.offset, staging.buffer(), 0, r.bytes);
            staging
        });
        self.ctx.queue.submit([encoder.finish()]);
        drop(meta);
        self.ctx.check_errors()?;
        Ok(staging)
    }
}
