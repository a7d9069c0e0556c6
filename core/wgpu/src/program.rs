//! Capture and replay on wgpu: a realization recorded once (its kernels,
//! parameters, buffer plan and bindings) and replayed with new input
//! buffers: one submit, no graph building, no scheduling, no code generation.
//!
//! Every buffer a captured launch binds is an input (replaced per call), an
//! output (freshly allocated per call) or fixed (an intermediate the program
//! keeps, or a tensor the function read from outside its inputs: its value
//! at capture time is what every replay sees).

use super::launch::{Bound, Recording};
use super::pipelines::Kernel;
use super::pool::{Pooled, PooledBuffer};
use super::profile;
use super::realize::{Plan, Purpose};
use super::resources::Resources;
use super::textures::PooledTexture;
use super::{Gpu, GpuArray};
use crate::dtype::unpack_words;
use crate::error::Result;
use crate::interp::HostArray;
use crate::ir::Node;
use crate::ir::{DeviceBuffer, Role, Roles};
use crate::shape::{Layout, numel};
use kiln_runtime::{Captured, Staged};
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[derive(Debug, Clone)]
enum Slot {
    Input(usize),
    Output(usize),
    Fixed(Arc<dyn DeviceBuffer>),
    /// A texture matmul's operand texture, rewritten by every replay.
    Texture(Arc<PooledTexture>),
}

struct Launch {
    kernel: Arc<Kernel>,
    meta_slot: usize,
    bindings: Vec<Slot>,
    groups: [u32; 3],
}

/// Where an output's value lives on replay.
struct OutputSpec {
    slot: Slot,
    layout: Layout,
    dtype: crate::DType,
}

/// A recording on wgpu: its launches, and where its outputs live.
pub(crate) struct WgpuProgram {
    launches: Vec<Launch>,
    meta: Option<Arc<PooledBuffer>>,
    /// Size of each output buffer the launches write.
    output_sizes: Vec<u64>,
    outputs: Vec<OutputSpec>,
}

impl Gpu {
    /// Realize `outputs` from the realized `inputs`, recording how.
    pub(crate) fn capture(&self, inputs: &[GpuArray], outputs: &[Node]) -> Result<WgpuProgram> {
        let mut scheduler = self.scheduler();
        scheduler.run(outputs)?;
        let out_arrays = outputs.iter().map(|n| scheduler.array(n)).collect::<Result<Vec<_>>>()?;
        let plan = Plan::record(self, scheduler.finish(), Purpose::Run)?;
        let out_arrays: Vec<GpuArray> = out_arrays.iter().map(|a| plan.resolve(a)).collect();
        let program = WgpuProgram::record(self, &plan.rec, inputs, &out_arrays);
        plan.submit(None)?;
        Ok(program)
    }

    /// The value of an output a replay staged.
    pub(crate) async fn read_staged(&self, s: &WgpuStaged) -> Result<HostArray> {
        let n = numel(&s.shape);
        let slice = s.staging.buffer().slice(..s.words * 4);
        let data = self.ctx.map_read(slice, |bytes| unpack_words(s.dtype, bytemuck::cast_slice(bytes), n)).await?;
        self.ctx.check_errors()?;
        Ok(HostArray { dtype: s.dtype, shape: s.shape.clone(), data })
    }
}

impl WgpuProgram {
    fn record(gpu: &Gpu, rec: &Recording, inputs: &[GpuArray], outputs: &[GpuArray]) -> WgpuProgram {
        let mut roles = Roles::new(inputs, outputs);
        let mut slot_of = |b: &Arc<dyn DeviceBuffer>| match roles.of(b) {
            Role::Input(k) => Slot::Input(k),
            Role::Output(j) => Slot::Output(j),
            Role::Fixed => Slot::Fixed(b.clone()),
        };
        let launches = rec
            .dispatches
            .iter()
            .map(|d| Launch {
                kernel: d.kernel.clone(),
                meta_slot: d.meta_slot,
                bindings: d
                    .bindings
                    .iter()
                    .map(|b| match b {
                        Bound::Buffer(b) => slot_of(b),
                        Bound::Texture(t) => Slot::Texture(t.clone()),
                    })
                    .collect(),
                groups: d.groups,
            })
            .collect();
        let outputs = outputs
            .iter()
            .map(|o| OutputSpec { slot: slot_of(&o.buffer), layout: o.layout.clone(), dtype: o.dtype })
            .collect();
        let meta = (!rec.meta.is_empty()).then(|| gpu.resources.meta(&gpu.ctx.queue, &rec.meta));
        WgpuProgram { launches, meta, output_sizes: roles.written.iter().map(|b| b.size()).collect(), outputs }
    }
}

/// An output copied to a mappable buffer by its replay's submit.
pub(crate) struct WgpuStaged {
    staging: Arc<PooledBuffer>,
    dtype: crate::DType,
    shape: Vec<usize>,
    words: u64,
}

impl WgpuProgram {
    /// The launches on `in_arrays`, in one submit; with `read`, that
    /// output's copy to a mappable buffer too, where it is a contiguous
    /// run of words.
    pub(crate) fn replay(
        &self,
        gpu: &Gpu,
        in_arrays: &[GpuArray],
        read: Option<usize>,
    ) -> Result<(Vec<GpuArray>, Option<WgpuStaged>)> {
        let fresh: Vec<Arc<dyn DeviceBuffer>> = self
            .output_sizes
            .iter()
            .map(|&size| -> Arc<dyn DeviceBuffer> { gpu.resources.pool.get(size, Resources::storage_usage()) })
            .collect();
        let bound = |s: &Slot| match s {
            Slot::Input(k) => Bound::Buffer(in_arrays[*k].buffer.clone()),
            Slot::Output(j) => Bound::Buffer(fresh[*j].clone()),
            Slot::Fixed(b) => Bound::Buffer(b.clone()),
            Slot::Texture(t) => Bound::Texture(t.clone()),
        };
        gpu.ctx.check_errors()?;
        let mut encoder =
            gpu.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kiln jit") });
        if let Some(meta) = &self.meta {
            let launches: Vec<profile::Launch> = self
                .launches
                .iter()
                .map(|l| {
                    let bindings: Vec<Bound> = l.bindings.iter().map(bound).collect();
                    let bind_group = gpu.bind_group(&l.kernel, meta, l.meta_slot, &bindings);
                    profile::Launch { kernel: &l.kernel, bind_group, groups: l.groups }
                })
                .collect();
            gpu.profiler.encode_launches(&gpu.ctx.device, &mut encoder, &launches, "kiln jit");
        }
        let arrays: Vec<GpuArray> = self
            .outputs
            .iter()
            .map(|o| {
                let Bound::Buffer(buffer) = bound(&o.slot) else { unreachable!("outputs are buffers") };
                GpuArray { buffer, layout: o.layout.clone(), dtype: o.dtype }
            })
            .collect();
        let staged = read.and_then(|k| {
            let a = &arrays[k];
            let (first_word, words) = a.layout.word_span(a.dtype).filter(|&(_, words)| words > 0)?;
            let usage = wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST;
            let staging = gpu.resources.pool.get(words * 4, usage);
            encoder.copy_buffer_to_buffer(a.buffer.buffer(), first_word * 4, staging.buffer(), 0, words * 4);
            Some(WgpuStaged { staging, dtype: a.dtype, shape: a.layout.shape.clone(), words })
        });
        gpu.ctx.queue.submit([encoder.finish()]);
        gpu.submits.fetch_add(1, Ordering::Relaxed);
        gpu.kernels_launched.fetch_add(self.launches.len() as u64, Ordering::Relaxed);
        gpu.ctx.check_errors()?;
        Ok((arrays, staged))
    }
}

impl Captured for WgpuProgram {
    fn launches(&self) -> usize {
        self.launches.len()
    }

    fn outputs(&self) -> usize {
        self.outputs.len()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Staged for WgpuStaged {
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
