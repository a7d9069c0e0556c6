//! The scheduler's view of a device ([`Target`]), answered from [`Caps`]
//! and the kernels' own limits, so that a schedule is made without an
//! adapter.

use crate::Caps;
use crate::META_WORDS;
use crate::fused::ROW_MAX_LEN;
use crate::launch::{AttentionOperands, AttentionPlan, Variants};
use crate::reduce::matmul_epilogue_base;
use crate::row_stream::{ROW_STREAM_LANES, ROW_STREAM_MAX_LEN};
use kiln_sched::schedule::{Item, Target};

/// Rows longer than this take the streaming row kernel on CPU adapters
/// whose SIMD batches are 8 wide (llvmpipe), where the lanes layout cannot
/// hold them: softmax over [4096, 4096], [1024, 16384] and [4096, 3000]
/// ran 1.25–1.4× as fast as with a row per invocation on lavapipe and
/// llvmpipe GL, but 1.1–2× slower on SwiftShader (batches of 4), which
/// streams only rows too long for a row per invocation
/// (docs/BENCHMARKS.md, 'What was tried' (softmax/rows)).
const ROW_STREAM_MIN_LEN: usize = 2048;
/// Fewest rows streamed: a workgroup per row, and CPU adapters spread
/// workgroups over their threads (one row, a sum over everything, stays a
/// tree reduction over every thread).
const ROW_STREAM_MIN_ROWS: usize = 16;

impl Target for Caps {
    /// WebGPU guarantees 8; kiln binds no more on any adapter, so that a
    /// program schedules the same natively and in a browser.
    fn max_bindings(&self) -> usize {
        (self.max_storage_buffers as usize).min(8)
    }

    /// Meta words past the largest header (a batched matmul's) and the shape.
    fn meta_room(&self, rank: usize) -> usize {
        META_WORDS - matmul_epilogue_base(rank.saturating_sub(2)) - rank
    }

    /// On CPU adapters with workgroup memory (GPUs, unmeasured, keep tree
    /// reductions for long rows).
    fn streams_rows(&self, rows: usize, len: usize) -> bool {
        let wide_batches = self.subgroup_size.is_none_or(|w| w >= ROW_STREAM_LANES);
        let shortest = if wide_batches { ROW_STREAM_MIN_LEN } else { ROW_MAX_LEN } + 1;
        self.cpu
            && self.workgroup_memory
            && rows >= ROW_STREAM_MIN_ROWS
            && (shortest..=ROW_STREAM_MAX_LEN).contains(&len)
    }

    fn runs_attention(&self, item: &Item) -> bool {
        runs_attention(self, &Variants::of(self), item)
    }
}

/// [`Target::runs_attention`] for a device with `caps` running `variants`.
pub fn runs_attention(caps: &Caps, variants: &Variants, item: &Item) -> bool {
    let Item::Attention { q, kt, v, scores, shape, out_strides, causal, args, .. } = item else { return false };
    let AttentionPlan::OneKernel(keys) = variants.attention else { return false };
    AttentionOperands { q, kt, v, shape, out_strides, causal: *causal }.runs_on(caps, keys, scores, args.buffers.len())
}
