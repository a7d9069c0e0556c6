//! The GPU scheduler: turns the unrealized part of a graph into kernels,
//! recorded into one command encoder and submitted once. Views change
//! layouts only; every other primitive becomes one or more dispatches.

use super::pool::PooledBuffer;
use super::{Gpu, GpuArray};
use crate::codegen::elementwise::{EwKernel, Expr};
use crate::codegen::templates::{self, MATMUL_K_CHUNK, MATMUL_TILE, Monoid, REDUCE_CHUNK, ReduceSource};
use crate::codegen::{META_WORDS, Meta, WG};
use crate::dtype::DType;
use crate::error::{KilnError, Result};
use crate::ir::{Node, Prim, Realized};
use crate::shape::{Layout, numel};
use std::collections::HashMap;
use std::sync::Arc;

struct Dispatch {
    pipeline: Arc<wgpu::ComputePipeline>,
    meta_slot: usize,
    /// Bound at bindings 1, 2, ... (binding 0 is the meta block).
    buffers: Vec<Arc<PooledBuffer>>,
    groups: [u32; 3],
}

/// A readback request: `bytes` bytes of `buffer` from `offset`.
pub(super) struct ReadRequest {
    pub buffer: Arc<PooledBuffer>,
    pub offset: u64,
    pub bytes: u64,
}

pub(super) struct Plan<'a> {
    gpu: &'a Gpu,
    computed: Vec<(Node, GpuArray)>,
    values: HashMap<u64, GpuArray>,
    meta: Vec<u32>,
    dispatches: Vec<Dispatch>,
}

impl<'a> Plan<'a> {
    pub fn new(gpu: &'a Gpu) -> Plan<'a> {
        Plan { gpu, computed: Vec::new(), values: HashMap::new(), meta: Vec::new(), dispatches: Vec::new() }
    }

    /// Plan every unrealized node that `roots` need.
    pub fn run(&mut self, roots: &[Node]) -> Result<()> {
        for node in Node::topo_unrealized(roots) {
            let value = self.compute(&node)?;
            self.values.insert(node.id(), value.clone());
            self.computed.push((node, value));
        }
        Ok(())
    }

    pub fn value(&self, node: &Node) -> Result<GpuArray> {
        if let Some(v) = self.values.get(&node.id()) {
            return Ok(v.clone());
        }
        match node.realized_value() {
            Some(Realized::Gpu(v)) => Ok(v),
            _ => Err(KilnError::Invalid {
                op: node.prim().name(),
                detail: "the input lives on another device (the CPU reference); move it first".into(),
            }),
        }
    }

    fn compute(&mut self, node: &Node) -> Result<GpuArray> {
        let inputs = node.inputs().iter().map(|n| self.value(n)).collect::<Result<Vec<_>>>()?;
        let (op, shape, dtype) = (node.prim().name(), node.shape().to_vec(), node.dtype());
        let x = |i: usize| inputs[i].clone();
        let view = |layout: Layout| Ok(GpuArray { layout, ..x(0) });
        match node.prim() {
            Prim::Input { .. } => Err(KilnError::Invalid { op, detail: "input node without data".into() }),
            Prim::Fill { value, .. } => self.elementwise(op, Expr::Fill, &[], dtype, &shape, &[(dtype, *value)]),
            Prim::Iota { start, step, .. } => {
                self.elementwise(op, Expr::Iota, &[], dtype, &shape, &[(dtype, *start), (dtype, *step)])
            }
            Prim::Unary(u) => {
                self.elementwise(op, Expr::Unary(*u, Box::new(Expr::Input(0))), &inputs, dtype, &shape, &[])
            }
            Prim::Binary(b) => {
                let expr = Expr::Binary(*b, Box::new(Expr::Input(0)), Box::new(Expr::Input(1)));
                self.elementwise(op, expr, &inputs, dtype, &shape, &[])
            }
            Prim::Where => {
                let [c, a, b] = [0, 1, 2].map(|i| Box::new(Expr::Input(i)));
                self.elementwise(op, Expr::Where(c, a, b), &inputs, dtype, &shape, &[])
            }
            Prim::Cast { to } => {
                self.elementwise(op, Expr::Cast(Box::new(Expr::Input(0)), *to), &inputs, dtype, &shape, &[])
            }
            Prim::Reduce { op: r, axes, .. } => {
                let wide = self.reduce(op, &x(0), Monoid::Reduce(*r), axes, r.identity())?;
                self.narrow(GpuArray { layout: Layout::contiguous(&shape), ..wide }, dtype)
            }
            Prim::ArgReduce { op: a, axis, .. } => {
                let out = self.reduce(op, &x(0), Monoid::Arg(*a), &[*axis], None)?;
                Ok(GpuArray { layout: Layout::contiguous(&shape), ..out })
            }
            Prim::Reshape { shape } => match x(0).layout.reshape(shape) {
                Some(layout) => view(layout),
                None => {
                    let copy = self.materialize(&x(0))?;
                    Ok(GpuArray { layout: Layout::contiguous(shape), ..copy })
                }
            },
            Prim::Permute { perm } => view(x(0).layout.permute(perm)),
            Prim::Slice { specs } => view(x(0).layout.slice(specs)),
            Prim::Expand { shape } => view(x(0).layout.expand(shape)),
            Prim::Matmul => {
                let wide = self.matmul(op, &x(0), &x(1), &shape)?;
                self.narrow(wide, dtype)
            }
            Prim::Concat { axis } => {
                let wide = self.concat(op, &inputs, *axis, &shape, dtype)?;
                self.narrow(wide, dtype)
            }
            Prim::Gather { axis } => {
                let src_len = x(0).layout.shape[*axis] as f64;
                self.elementwise(op, Expr::Gather { axis: *axis }, &inputs, dtype, &shape, &[(DType::U32, src_len)])
            }
        }
    }

    /// Copy a strided value into a fresh contiguous buffer.
    pub fn materialize(&mut self, x: &GpuArray) -> Result<GpuArray> {
        self.elementwise("contiguous", Expr::Input(0), std::slice::from_ref(x), x.dtype, &x.layout.shape, &[])
    }

    /// Pack a 4-byte result into f16 when the node is f16.
    fn narrow(&mut self, wide: GpuArray, dtype: DType) -> Result<GpuArray> {
        if wide.dtype == dtype {
            return Ok(wide);
        }
        let shape = wide.layout.shape.clone();
        self.elementwise("cast", Expr::Cast(Box::new(Expr::Input(0)), dtype), &[wide], dtype, &shape, &[])
    }

    /// A 1-D grid of workgroups covering `threads`, folded into y past the
    /// adapter's per-dimension limit. Returns the grid and threads per row.
    fn grid(&self, op: &'static str, workgroups: usize) -> Result<[u32; 3]> {
        let max = self.gpu.info.limits.max_compute_workgroups_per_dimension as usize;
        let x = workgroups.clamp(1, max);
        let y = workgroups.div_ceil(x);
        if y > max {
            return Err(KilnError::Invalid {
                op,
                detail: format!("{workgroups} workgroups exceed the adapter's grid"),
            });
        }
        Ok([x as u32, y as u32, 1])
    }

    fn elementwise(
        &mut self,
        op: &'static str,
        expr: Expr,
        inputs: &[GpuArray],
        out: DType,
        shape: &[usize],
        params: &[(DType, f64)],
    ) -> Result<GpuArray> {
        let buffer = self.gpu.alloc(op, out, shape)?;
        let result = GpuArray { buffer: buffer.clone(), layout: Layout::contiguous(shape), dtype: out };
        let kernel = EwKernel {
            out,
            out_strided: false,
            rank: shape.len(),
            inputs: inputs.iter().map(|x| (x.dtype, x.layout.is_contiguous())).collect(),
            expr,
        };
        self.launch_elementwise(op, &kernel, shape, inputs, buffer, None, params)?;
        Ok(result)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_elementwise(
        &mut self,
        op: &'static str,
        kernel: &EwKernel,
        shape: &[usize],
        inputs: &[GpuArray],
        out: Arc<PooledBuffer>,
        out_layout: Option<&Layout>,
        params: &[(DType, f64)],
    ) -> Result<()> {
        let n = numel(shape);
        if n == 0 {
            return Ok(());
        }
        let groups = self.grid(op, n.div_ceil(kernel.per_thread()).div_ceil(WG as usize))?;
        let mut meta = Meta::default();
        meta.u(n).u(groups[0] as usize * WG as usize);
        shape.iter().for_each(|&d| {
            meta.u(d);
        });
        for x in inputs {
            meta.layout(x.layout.offset, &x.layout.strides);
        }
        if let Some(l) = out_layout {
            meta.layout(l.offset, &l.strides);
        }
        for &(d, v) in params {
            meta.scalar(d, v);
        }
        let buffers = std::iter::once(out).chain(inputs.iter().map(|x| x.buffer.clone())).collect();
        self.dispatch(&kernel.wgsl(), meta, buffers, groups)
    }

    fn dispatch(&mut self, source: &str, meta: Meta, buffers: Vec<Arc<PooledBuffer>>, groups: [u32; 3]) -> Result<()> {
        if meta.0.len() > META_WORDS {
            return Err(KilnError::Gpu(format!("kernel parameters overflow the meta block ({} words)", meta.0.len())));
        }
        let pipeline = self.gpu.pipelines.get(&self.gpu.device, source)?;
        let meta_slot = self.meta.len() / META_WORDS;
        self.meta.extend(&meta.0);
        self.meta.resize((meta_slot + 1) * META_WORDS, 0);
        self.dispatches.push(Dispatch { pipeline, meta_slot, buffers, groups });
        Ok(())
    }

    /// Reduce `x` over `axes` into a contiguous buffer of the kept
    /// elements, in as many tree passes as the reduced length needs.
    fn reduce(
        &mut self,
        op: &'static str,
        x: &GpuArray,
        monoid: Monoid,
        axes: &[usize],
        identity: Option<f64>,
    ) -> Result<GpuArray> {
        let rank = x.layout.shape.len();
        let perm: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).chain(axes.iter().copied()).collect();
        let view = x.layout.permute(&perm);
        let rows: usize = perm[..rank - axes.len()].iter().map(|&d| x.layout.shape[d]).product();
        let mut len: usize = axes.iter().map(|&d| x.layout.shape[d]).product();
        let is_arg = matches!(monoid, Monoid::Arg(_));
        let value_dtype = x.dtype.wide();
        let out_dtype = if is_arg { DType::I32 } else { value_dtype };
        if len == 0 {
            // Only sum and prod get here (inference rejects the rest).
            return self.elementwise(op, Expr::Fill, &[], out_dtype, &[rows], &[(out_dtype, identity.unwrap_or(0.0))]);
        }
        let result = self.gpu.alloc(op, out_dtype, &[rows])?;
        if rows == 0 {
            return Ok(GpuArray { buffer: result, layout: Layout::contiguous(&[0]), dtype: out_dtype });
        }
        let contiguous = view.is_contiguous();
        let mut source = ReduceSource::Tensor { dtype: x.dtype, contiguous, rank };
        let mut inputs = vec![x.buffer.clone()];
        loop {
            let groups = len.div_ceil(REDUCE_CHUNK);
            let last = groups == 1;
            let grid = self.grid(op, (rows * groups).div_ceil(WG as usize))?;
            let mut meta = Meta::default();
            meta.u(rows).u(len).u(groups).u(grid[0] as usize * WG as usize);
            if let ReduceSource::Tensor { .. } = source {
                if contiguous {
                    meta.u(view.offset);
                } else {
                    view.shape.iter().for_each(|&d| {
                        meta.u(d);
                    });
                    meta.layout(view.offset, &view.strides);
                }
            }
            let values =
                if last && !is_arg { result.clone() } else { self.gpu.alloc(op, value_dtype, &[rows * groups])? };
            let mut outputs = vec![values.clone()];
            let mut next = vec![values];
            if is_arg {
                let indices = if last { result.clone() } else { self.gpu.alloc(op, DType::I32, &[rows * groups])? };
                outputs.insert(0, indices.clone());
                next.push(indices);
            }
            let source_code = templates::reduce_wgsl(monoid, source);
            self.dispatch(&source_code, meta, outputs.into_iter().chain(inputs).collect(), grid)?;
            if last {
                return Ok(GpuArray { buffer: result, layout: Layout::contiguous(&[rows]), dtype: out_dtype });
            }
            inputs = next;
            len = groups;
            source = ReduceSource::Partials { dtype: x.dtype };
        }
    }

    fn matmul(&mut self, op: &'static str, a: &GpuArray, b: &GpuArray, shape: &[usize]) -> Result<GpuArray> {
        let r = shape.len();
        let (m, k, n) = (a.layout.shape[r - 2], a.layout.shape[r - 1], b.layout.shape[r - 1]);
        let batch_shape = &shape[..r - 2];
        let batch: usize = batch_shape.iter().product();
        if k == 0 {
            return self.elementwise(op, Expr::Fill, &[], DType::F32, shape, &[(DType::F32, 0.0)]);
        }
        let out = self.gpu.alloc(op, DType::F32, shape)?;
        let result = GpuArray { buffer: out.clone(), layout: Layout::contiguous(shape), dtype: DType::F32 };
        if numel(shape) == 0 {
            return Ok(result);
        }
        let max = self.gpu.info.limits.max_compute_workgroups_per_dimension as usize;
        let (gx, gy) = (n.div_ceil(MATMUL_TILE), m.div_ceil(MATMUL_TILE));
        if gx > max || gy > max {
            return Err(KilnError::Invalid { op, detail: format!("an output of {m}×{n} exceeds the adapter's grid") });
        }
        let source = templates::matmul_wgsl(a.dtype, batch_shape.len());
        let (la, lb) = (&a.layout, &b.layout);
        for b0 in (0..batch).step_by(max) {
            for k0 in (0..k).step_by(MATMUL_K_CHUNK) {
                let mut meta = Meta::default();
                meta.u(m).u(k).u(n).u(k0).u((k0 + MATMUL_K_CHUNK).min(k)).u((k0 > 0) as usize).u(b0);
                meta.i(la.strides[r - 2]).i(la.strides[r - 1]).i(lb.strides[r - 2]).i(lb.strides[r - 1]);
                meta.u(la.offset).u(lb.offset);
                batch_shape.iter().for_each(|&d| {
                    meta.u(d);
                });
                la.strides[..r - 2].iter().chain(&lb.strides[..r - 2]).for_each(|&s| {
                    meta.i(s);
                });
                let groups = [gx as u32, gy as u32, (batch - b0).min(max) as u32];
                self.dispatch(&source, meta, vec![out.clone(), a.buffer.clone(), b.buffer.clone()], groups)?;
            }
        }
        Ok(result)
    }

    /// Copy each part into its region of one buffer (in the wide dtype).
    fn concat(
        &mut self,
        op: &'static str,
        parts: &[GpuArray],
        axis: usize,
        shape: &[usize],
        dtype: DType,
    ) -> Result<GpuArray> {
        let wide = dtype.wide();
        let out = self.gpu.alloc(op, wide, shape)?;
        let out_layout = Layout::contiguous(shape);
        let mut start = 0;
        for part in parts {
            let region = Layout { offset: start * out_layout.strides[axis] as usize, ..out_layout.clone() };
            let kernel = EwKernel {
                out: wide,
                out_strided: true,
                rank: shape.len(),
                inputs: vec![(part.dtype, part.layout.is_contiguous())],
                expr: Expr::Cast(Box::new(Expr::Input(0)), wide),
            };
            self.launch_elementwise(
                op,
                &kernel,
                &part.layout.shape,
                std::slice::from_ref(part),
                out.clone(),
                Some(&region),
                &[],
            )?;
            start += part.layout.shape[axis];
        }
        Ok(GpuArray { buffer: out, layout: out_layout, dtype: wide })
    }

    /// Record every dispatch (and the readback copy) in one encoder, submit
    /// once, then store the computed values in their nodes.
    pub fn submit(self, read: Option<ReadRequest>) -> Result<Option<Arc<PooledBuffer>>> {
        let gpu = self.gpu;
        gpu.check_errors()?;
        if self.dispatches.is_empty() && read.is_none() {
            self.finish();
            return Ok(None);
        }
        let mut encoder =
            gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kiln step") });
        let meta_buffer = (!self.meta.is_empty()).then(|| {
            let buf =
                gpu.pool.get((self.meta.len() * 4) as u64, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
            gpu.queue.write_buffer(buf.buffer(), 0, bytemuck::cast_slice(&self.meta));
            buf
        });
        if let Some(meta_buffer) = &meta_buffer {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("kiln"), timestamp_writes: None });
            for d in &self.dispatches {
                let meta_binding = wgpu::BufferBinding {
                    buffer: meta_buffer.buffer(),
                    offset: (d.meta_slot * META_WORDS * 4) as u64,
                    size: std::num::NonZeroU64::new((META_WORDS * 4) as u64),
                };
                let mut entries =
                    vec![wgpu::BindGroupEntry { binding: 0, resource: wgpu::BindingResource::Buffer(meta_binding) }];
                for (i, b) in d.buffers.iter().enumerate() {
                    entries
                        .push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.buffer().as_entire_binding() });
                }
                let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &d.pipeline.get_bind_group_layout(0),
                    entries: &entries,
                });
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(d.groups[0], d.groups[1], d.groups[2]);
            }
        }
        let staging = read.map(|r| {
            let staging = gpu.pool.get(r.bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
            encoder.copy_buffer_to_buffer(r.buffer.buffer(), r.offset, staging.buffer(), 0, r.bytes);
            staging
        });
        gpu.queue.submit([encoder.finish()]);
        gpu.submits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        gpu.kernels_launched.fetch_add(self.dispatches.len() as u64, std::sync::atomic::Ordering::Relaxed);
        gpu.check_errors()?;
        self.finish();
        Ok(staging)
    }

    fn finish(self) {
        for (node, value) in self.computed {
            node.set_realized(Realized::Gpu(value));
        }
    }
}
