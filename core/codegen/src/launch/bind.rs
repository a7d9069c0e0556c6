//! An item's launches with what each binds after the meta block, in
//! binding order, over any runtime's buffer handles: the one place that
//! order is spelled, so the wgpu runtime and the CUDA checks bind alike.

use super::{
    AttentionOperands, Launch, MatmulOperands, Variants, attention, elementwise, matmul, partials_dtype, quant_matmul,
    reduce, row,
};
use crate::Caps;
use crate::matmul::MatmulConfig;
use crate::operand_textures::OperandTexture;
use kiln_ir::dtype::DType;
use kiln_ir::error::Result;
use kiln_ir::ir::DeviceBuffer;
use kiln_sched::schedule::{Item, product_dims};
use std::sync::Arc;

/// Where a launch's bindings come from in one runtime.
pub trait Binder {
    type Handle: Clone;
    /// The runtime's handle for a buffer the schedule names.
    fn buffer(&mut self, b: &Arc<dyn DeviceBuffer>) -> Self::Handle;
    /// A fresh buffer of `shape` elements of `dtype` that the launches add
    /// (a reduction's partials between passes, B's column panels).
    fn scratch(&mut self, op: &'static str, dtype: DType, shape: &[usize]) -> Result<Self::Handle>;
    /// An operand texture laid out as `t` (WebGPU's texture matmul).
    fn texture(&mut self, t: &OperandTexture) -> Result<Self::Handle>;
}

/// A launch and its bindings (bindings 1, 2, ...; 0 is the meta block).
#[derive(Debug, Clone)]
pub struct BoundLaunch<H> {
    pub launch: Launch,
    pub bindings: Vec<H>,
}

/// The launches of `item` on a device with `caps`, bound through `binder`;
/// a matmul takes `config` for its (m, k, n).
pub fn bind<B: Binder>(
    caps: &Caps,
    variants: &Variants,
    op: &'static str,
    item: &Item,
    config: impl FnOnce(DType, (usize, usize, usize)) -> Result<MatmulConfig>,
    binder: &mut B,
) -> Result<Vec<BoundLaunch<B::Handle>>> {
    let dtypes = |outputs: &[(DType, _)]| outputs.iter().map(|o| o.0).collect::<Vec<_>>();
    Ok(match item {
        Item::Elementwise { sig, args, shape, outputs, region } => {
            let l = elementwise(caps, op, sig.clone(), args, shape, &dtypes(outputs), region.as_ref())?;
            written_then_read(binder, l, outputs, &args.buffers)
        }
        Item::Row { sig, args, stages, shape, outputs, per_row } => {
            let (sig, stages) = (sig.clone(), stages.clone());
            let width = variants.subgroup_width;
            let l = row(caps, width, op, sig, args, stages, shape, &dtypes(outputs), *per_row)?;
            written_then_read(binder, l, outputs, &args.buffers)
        }
        Item::Reduce { monoid, sig, args, view_shape, rows, values, indices } => {
            let passes =
                reduce(caps, variants.workgroup_reductions, op, *monoid, sig.clone(), args, view_shape, *rows)?;
            let value_dtype = partials_dtype(sig);
            let (values, indices) = (binder.buffer(values), indices.as_ref().map(|i| binder.buffer(i)));
            let mut inputs: Vec<B::Handle> = handles(binder, &args.buffers);
            let mut bound = Vec::new();
            for pass in passes {
                // Each pass but the last leaves partials for the next.
                let (v_out, i_out) = if pass.partials == 1 {
                    (values.clone(), indices.clone())
                } else {
                    let partials = [rows * pass.partials];
                    let i_out = indices.as_ref().map(|_| binder.scratch(op, DType::I32, &partials)).transpose()?;
                    (binder.scratch(op, value_dtype, &partials)?, i_out)
                };
                let bindings = i_out.iter().cloned().chain([v_out.clone()]).chain(inputs).collect();
                bound.push(BoundLaunch { launch: pass.launch, bindings });
                inputs = std::iter::once(v_out).chain(i_out).collect();
            }
            bound
        }
        Item::Matmul { a, b, operands, shape, out, epilogue, args } => {
            let config = config(*operands, product_dims(a, b))?;
            let Some(plan) = matmul(caps, variants, config, op, a, b, *operands, shape, epilogue.clone(), args)? else {
                return Ok(Vec::new());
            };
            let mut reads: Vec<B::Handle> = handles(binder, &args.buffers);
            let mut bound = Vec::new();
            match &plan.operands {
                MatmulOperands::Buffers { copies } => {
                    let copied = copies.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s)));
                    for ((operand, shape), launch) in copied.zip(&plan.copies) {
                        let copy = binder.scratch(op, *operands, shape)?;
                        let bindings = vec![copy.clone(), reads[operand].clone()];
                        bound.push(BoundLaunch { launch: launch.clone(), bindings });
                        reads[operand] = copy;
                    }
                }
                MatmulOperands::Textures { a, b } => {
                    for (operand, (t, copy)) in [a, b].into_iter().zip(&plan.copies).enumerate() {
                        let texture = binder.texture(t)?;
                        bound.push(BoundLaunch {
                            launch: copy.clone(),
                            bindings: vec![reads[operand].clone(), texture.clone()],
                        });
                        reads[operand] = texture;
                    }
                }
            }
            let bindings: Vec<B::Handle> = std::iter::once(binder.buffer(out)).chain(reads).collect();
            bound.extend(plan.launches.into_iter().map(|launch| BoundLaunch { launch, bindings: bindings.clone() }));
            bound
        }
        Item::Attention { q, kt, v, scores, shape, out_strides, causal, out, args } => {
            let operands = AttentionOperands { q, kt, v, shape, out_strides, causal: *causal };
            let launch = attention(caps, variants, op, &operands, scores, args)?;
            let out: Vec<(DType, Arc<dyn DeviceBuffer>)> = vec![(DType::F32, out.clone())];
            written_then_read(binder, launch, &out, &args.buffers)
        }
        Item::QuantMatmul { format, packed_x, scales, rows, k, n, out, args } => {
            let launch = quant_matmul(caps, variants, op, (*format, *packed_x, *scales), (*rows, *k, *n), args)?;
            let out: Vec<(DType, Arc<dyn DeviceBuffer>)> = vec![(DType::F32, out.clone())];
            written_then_read(binder, launch, &out, &args.buffers)
        }
    })
}

fn handles<B: Binder>(binder: &mut B, buffers: &[Arc<dyn DeviceBuffer>]) -> Vec<B::Handle> {
    buffers.iter().map(|b| binder.buffer(b)).collect()
}

/// An elementwise or row launch's bindings: its outputs, then what its
/// body reads.
fn written_then_read<B: Binder>(
    binder: &mut B,
    launch: Option<Launch>,
    outputs: &[(DType, Arc<dyn DeviceBuffer>)],
    reads: &[Arc<dyn DeviceBuffer>],
) -> Vec<BoundLaunch<B::Handle>> {
    let outs: Vec<B::Handle> = outputs.iter().map(|o| binder.buffer(&o.1)).collect();
    let bindings = [outs, handles(binder, reads)].concat();
    launch.map(|launch| BoundLaunch { launch, bindings }).into_iter().collect()
}
