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
use crate::error::{KilnError, Result};
use crate::ir::{DeviceBuffer, Role, Roles};
use crate::ir::{Node, Prim, Realized};
use crate::shape::Layout;
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
    /// dtypes and layouts. `None` on the CPU reference (nothing to record) and
    /// on CUDA (replay there is to come).
    pub fn capture(&self, inputs: &[Node], outputs: &[Node]) -> Result<Option<Program>> {
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
        let in_arrays = inputs
            .iter()
            .map(|n| gpu_array(n).ok_or(KilnError::Invalid { op: "jit", detail: "replay input not realized".into() }))
            .collect::<Result<Vec<_>>>()?;
        let realized = |a: GpuArray| {
            Node::realized(Prim::Input { shape: a.layout.shape.clone(), dtype: a.dtype }, Realized::Gpu(a))
        };
        match (&self.recorded, &*self.device.0) {
            (Recorded::Wgpu(p), Backend::Gpu(gpu)) => p.replay(gpu, &in_arrays)?.into_iter().map(realized).collect(),
            #[cfg(not(target_arch = "wasm32"))]
            (Recorded::Cuda(p), Backend::Cuda(c)) => c.replay(p, &in_arrays)?.into_iter().map(realized).collect(),
            _ => unreachable!("a program is replayed on the device that captured it"),
        }
    }
}

impl WgpuProgram {
    fn replay(&self, gpu: &Gpu, in_arrays: &[GpuArray]) -> Result<Vec<GpuArray>> {
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
        gpu.ctx.queue.submit([encoder.finish()]);
        gpu.submits.fetch_add(1, Ordering::Relaxed);
        gpu.kernels_launched.fetch_add(self.launches.len() as u64, Ordering::Relaxed);
        gpu.ctx.check_errors()?;
        Ok(self
            .outputs
            .iter()
            .map(|o| {
                let Bound::Buffer(buffer) = bound(&o.slot) else { unreachable!("outputs are buffers") };
                GpuArray { buffer, layout: o.layout.clone(), dtype: o.dtype }
            })
            .collect())
    }
}
