//! Capture and replay: a realization recorded once (its kernels, parameters,
//! buffer plan and bindings) and replayed with new input buffers: one
//! submit, no graph building, no scheduling, no code generation.
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
use super::{Backend, Device, Gpu, GpuArray};
use crate::dtype::unpack_words;
use crate::error::{KilnError, Result};
use crate::interp::HostArray;
use crate::ir::{DeviceBuffer, Role, Roles};
use crate::ir::{Node, Prim, Realized};
use crate::shape::{Layout, numel};
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

/// A captured realization of `outputs` from `inputs`.
pub struct Program {
    device: Device,
    recorded: Recorded,
}

enum Recorded {
    Wgpu(WgpuProgram),
    #[cfg(not(target_arch = "wasm32"))]
    Cuda(kiln_cuda::device::CudaProgram),
}

/// A recording on wgpu: its launches, and where its outputs live.
struct WgpuProgram {
    launches: Vec<Launch>,
    meta: Option<Arc<PooledBuffer>>,
    /// Size of each output buffer the launches write.
    output_sizes: Vec<u64>,
    outputs: Vec<OutputSpec>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Program({} launches on {})", self.kernels(), self.device.info().name)
    }
}

fn gpu_array(n: &Node) -> Option<GpuArray> {
    match n.realized_value() {
        Some(Realized::Gpu(a)) => Some(a),
        _ => None,
    }
}

impl Device {
    /// Realize `outputs`, built from the realized `inputs`, and record how
    /// as a [`Program`] to replay on other inputs of the same shapes,
    /// dtypes and layouts. `None` on the CPU reference (nothing to record).
    pub fn capture(&self, inputs: &[Node], outputs: &[Node]) -> Result<Option<Program>> {
        if let Some(n) = outputs.iter().find(|n| n.reads_placeholder()) {
            return Err(KilnError::Invalid {
                op: "jit",
                detail: format!(
                    "an output of {} {:?} is computed from a vmap input inside the mapped function, whose values \
                     exist only batched: capture the mapped function instead",
                    n.dtype(),
                    n.shape()
                ),
            });
        }
        if self.is_cpu() {
            return crate::interp::realize(outputs).map(|()| None);
        }
        let in_arrays = inputs
            .iter()
            .map(|n| {
                gpu_array(n).ok_or(KilnError::Invalid {
                    op: "jit",
                    detail: format!("input of shape {:?} must be realized on this device first", n.shape()),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let gpu = match &*self.0 {
            Backend::Gpu(gpu) => gpu,
            #[cfg(not(target_arch = "wasm32"))]
            Backend::Cuda(c) => {
                let recorded = Recorded::Cuda(c.capture(&in_arrays, outputs)?);
                return Ok(Some(Program { device: self.clone(), recorded }));
            }
            Backend::Cpu => unreachable!("the CPU reference returned above"),
        };
        let mut scheduler = gpu.scheduler();
        scheduler.run(outputs)?;
        let out_arrays = outputs.iter().map(|n| scheduler.array(n)).collect::<Result<Vec<_>>>()?;
        let plan = Plan::record(gpu, scheduler.finish(), Purpose::Run)?;
        let out_arrays: Vec<GpuArray> = out_arrays.iter().map(|a| plan.resolve(a)).collect();
        let program = Program::record(self, gpu, &plan.rec, &in_arrays, &out_arrays);
        plan.submit(None)?;
        Ok(Some(program))
    }
}

impl Program {
    fn record(device: &Device, gpu: &Gpu, rec: &Recording, inputs: &[GpuArray], outputs: &[GpuArray]) -> Program {
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
        let recorded = Recorded::Wgpu(WgpuProgram {
            launches,
            meta,
            output_sizes: roles.written.iter().map(|b| b.size()).collect(),
            outputs,
        });
        Program { device: device.clone(), recorded }
    }

    /// Kernels one replay launches.
    pub fn kernels(&self) -> usize {
        match &self.recorded {
            Recorded::Wgpu(p) => p.launches.len(),
            #[cfg(not(target_arch = "wasm32"))]
            Recorded::Cuda(p) => p.launches(),
        }
    }

    /// Run the program on `inputs` (realized, shaped and laid out as at
    /// capture); returns the outputs as realized nodes. One submit (on
    /// CUDA, one launch list).
    pub fn replay(&self, inputs: &[Node]) -> Result<Vec<Node>> {
        Ok(self.replay_with(inputs, None)?.0)
    }

    /// `replay`, with output `read` also on its way to the host: on wgpu
    /// its copy to a mappable buffer is in the replay's own submit (a step
    /// whose result the host needs at once takes one submit, not two),
    /// where the output is a contiguous run of words; otherwise it is read
    /// by a submit of its own.
    pub fn replay_reading(&self, inputs: &[Node], read: usize) -> Result<(Vec<Node>, PendingRead)> {
        if read >= self.outputs() {
            return Err(KilnError::Invalid {
                op: "jit",
                detail: format!("reading output {read} of a function with {} outputs", self.outputs()),
            });
        }
        let (outputs, staged) = self.replay_with(inputs, Some(read))?;
        let how = match staged {
            Some(staged) => Pending::Staged(staged),
            None => Pending::Node(outputs[read].clone()),
        };
        Ok((outputs, PendingRead { device: self.device.clone(), how }))
    }

    fn outputs(&self) -> usize {
        match &self.recorded {
            Recorded::Wgpu(p) => p.outputs.len(),
            #[cfg(not(target_arch = "wasm32"))]
            Recorded::Cuda(p) => p.outputs(),
        }
    }

    fn replay_with(&self, inputs: &[Node], read: Option<usize>) -> Result<(Vec<Node>, Option<Staged>)> {
        let in_arrays = inputs
            .iter()
            .map(|n| gpu_array(n).ok_or(KilnError::Invalid { op: "jit", detail: "replay input not realized".into() }))
            .collect::<Result<Vec<_>>>()?;
        let realized = |a: GpuArray| {
            Node::realized(Prim::Input { shape: a.layout.shape.clone(), dtype: a.dtype }, Realized::Gpu(a))
        };
        let (arrays, staged) = match (&self.recorded, &*self.device.0) {
            (Recorded::Wgpu(p), Backend::Gpu(gpu)) => p.replay(gpu, &in_arrays, read)?,
            #[cfg(not(target_arch = "wasm32"))]
            (Recorded::Cuda(p), Backend::Cuda(c)) => (c.replay(p, &in_arrays)?, None),
            _ => unreachable!("a program is replayed on the device that captured it"),
        };
        Ok((arrays.into_iter().map(realized).collect::<Result<_>>()?, staged))
    }
}

/// An output copied to a mappable buffer by its replay's submit.
struct Staged {
    staging: Arc<PooledBuffer>,
    dtype: crate::DType,
    shape: Vec<usize>,
    words: u64,
}

/// A replay's output on its way to the host ([`Program::replay_reading`]).
pub struct PendingRead {
    device: Device,
    how: Pending,
}

enum Pending {
    Staged(Staged),
    /// Read by a submit of its own.
    Node(Node),
}

impl PendingRead {
    /// `node`'s value, read by a submit of its own when waited for.
    pub fn later(node: Node, device: Device) -> PendingRead {
        PendingRead { device, how: Pending::Node(node) }
    }

    /// The value, once the device has computed it.
    pub async fn wait(self) -> Result<HostArray> {
        match (self.how, &*self.device.0) {
            (Pending::Node(node), _) => self.device.read(&node).await,
            (Pending::Staged(s), Backend::Gpu(gpu)) => {
                let n = numel(&s.shape);
                let slice = s.staging.buffer().slice(..s.words * 4);
                let data =
                    gpu.ctx.map_read(slice, |bytes| unpack_words(s.dtype, bytemuck::cast_slice(bytes), n)).await?;
                gpu.ctx.check_errors()?;
                Ok(HostArray { dtype: s.dtype, shape: s.shape, data })
            }
            (Pending::Staged(_), _) => unreachable!("only wgpu replays stage a read"),
        }
    }
}

impl WgpuProgram {
    /// The launches on `in_arrays`, in one submit; with `read`, that
    /// output's copy to a mappable buffer too, where it is a contiguous
    /// run of words.
    fn replay(
        &self,
        gpu: &Gpu,
        in_arrays: &[GpuArray],
        read: Option<usize>,
    ) -> Result<(Vec<GpuArray>, Option<Staged>)> {
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
            Some(Staged { staging, dtype: a.dtype, shape: a.layout.shape.clone(), words })
        });
        gpu.ctx.queue.submit([encoder.finish()]);
        gpu.submits.fetch_add(1, Ordering::Relaxed);
        gpu.kernels_launched.fetch_add(self.launches.len() as u64, Ordering::Relaxed);
        gpu.ctx.check_errors()?;
        Ok((arrays, staged))
    }
}
