//! An attention item's launch ([`crate::attention`]): its kernel key, meta
//! block and grid, and whether a device runs it at all.

use super::{AttentionPlan, Launch, Variants, fused_meta, grid};
use crate::MAX_LOOP;
use crate::attention::{KeySharing, MAX_HEAD_DIM, QUERIES, attention_meta_fits, key_tile};
use crate::{Caps, KernelKey, Meta};
use kiln_ir::error::{KilnError, Result};
use kiln_ir::shape::{Layout, numel};
use kiln_sched::lower::{Args, Sig};
use kiln_sched::schedule::Target;

/// Fewest queries the kernel takes: fewer (a cached decoding step has one)
/// would leave most of each workgroup idle while one invocation walks
/// every key. KV-cache generation on lavapipe ran at 38 characters/s
/// through the kernel, 59 apart.
const MIN_QUERIES: usize = 16;

/// An attention item's operands, output shape (`[batch.., tq, dv]`),
/// output strides (1 along `dv`) and whether its scores are causal.
pub struct AttentionOperands<'a> {
    pub q: &'a Layout,
    pub kt: &'a Layout,
    pub v: &'a Layout,
    pub shape: &'a [usize],
    pub out_strides: &'a [isize],
    pub causal: bool,
}

impl AttentionOperands<'_> {
    /// (tq, tk, dk, dv).
    fn dims(&self) -> (usize, usize, usize, usize) {
        let r = self.shape.len();
        (self.shape[r - 2], self.kt.shape[r - 1], self.q.shape[r - 1], self.shape[r - 1])
    }

    fn batch(&self) -> &[usize] {
        &self.shape[..self.shape.len() - 2]
    }

    fn workgroups(&self) -> usize {
        let (tq, ..) = self.dims();
        numel(self.batch()) * tq.div_ceil(QUERIES as usize)
    }

    /// Whether a device with `caps` runs the kernel: enough queries, a way to
    /// share keys, rows
    /// that fit in registers, loops within Mesa's bound, a score's flat
    /// index within a u32, the meta block, and `bindings` inputs beside the
    /// output.
    pub fn runs_on(&self, caps: &Caps, keys: KeySharing, scores: &Sig, bindings: usize) -> bool {
        let (tq, tk, dk, dv) = self.dims();
        let scores_len = numel(self.batch()) * tq * tk;
        let grid_fits = self.workgroups().div_ceil(caps.max_workgroups_per_dimension as usize)
            <= caps.max_workgroups_per_dimension as usize;
        AttentionPlan::OneKernel(keys).possible(caps)
            && tq >= MIN_QUERIES
            && (1..=MAX_HEAD_DIM).contains(&dk)
            && (1..=MAX_HEAD_DIM).contains(&dv)
            && tk > 0
            && tk.div_ceil(keys_per_trip(keys, dk, dv)) <= MAX_LOOP
            && scores_len <= u32::MAX as usize
            && grid_fits
            && attention_meta_fits(self.batch().len(), scores)
            && bindings < caps.max_bindings()
    }
}

/// Keys the kernel's loop takes per trip.
fn keys_per_trip(keys: KeySharing, dk: usize, dv: usize) -> usize {
    match keys {
        KeySharing::Workgroup => key_tile(dk, dv),
        KeySharing::Subgroup(width) => width as usize,
    }
}

/// The launch computing the item, sharing keys as `variants` say; `None`
/// when its output is empty.
pub fn attention(
    caps: &Caps,
    variants: &Variants,
    op: &'static str,
    operands: &AttentionOperands,
    scores: &Sig,
    args: &Args,
) -> Result<Option<Launch>> {
    let (tq, tk, dk, dv) = operands.dims();
    if numel(operands.shape) == 0 {
        return Ok(None);
    }
    let r = operands.shape.len();
    let (q, kt, v) = (operands.q, operands.kt, operands.v);
    let mut meta = Meta::default();
    meta.u(tq).u(tk);
    meta.layout(q.offset, &q.strides[r - 2..]).layout(kt.offset, &kt.strides[r - 2..]);
    meta.layout(v.offset, &v.strides[r - 2..]);
    meta.u(tq.div_ceil(QUERIES as usize)).u(operands.workgroups()).i(operands.out_strides[r - 2]);
    operands.batch().iter().for_each(|&d| {
        meta.u(d);
    });
    for strides in [&q.strides, &kt.strides, &v.strides, operands.out_strides] {
        strides[..r - 2].iter().for_each(|&s| {
            meta.i(s);
        });
    }
    let mut scores_shape = operands.batch().to_vec();
    scores_shape.extend([tq, tk]);
    fused_meta(&mut meta, scores, args, &scores_shape);
    let AttentionPlan::OneKernel(keys) = variants.attention else {
        return Err(KilnError::Invalid {
            op,
            detail: "an attention item on a device that runs attention apart".into(),
        });
    };
    let (dk, dv) = (dk as u32, dv as u32);
    let causal = operands.causal;
    let key = KernelKey::Attention { batch_rank: r - 2, dk, dv, keys, causal, scores: scores.clone() };
    Ok(Some(Launch { key, meta, groups: grid(caps, op, operands.workgroups())?, elements: numel(operands.shape) }))
}
