//! Which matmul epilogues cuBLASLt runs inside its product, so that no
//! pass over the output follows: a bias along the output's last axis
//! (a dense layer's), ReLU, GELU (kiln's is the tanh form, as cuBLASLt's
//! is), or a bias then one of the two. Any other epilogue keeps the pass.

use super::blas::GemmEpilogue;
use kiln_ir::dtype::DType;
use kiln_ir::ir::{BinaryOp, UnaryOp};
use kiln_ir::shape::Layout;
use kiln_sched::lower::{Op, Sig};
use kiln_sched::pointwise::Pointwise;

/// `sig` (a matmul's epilogue over an output of `shape`, its leaves laid
/// out as `layouts`) as cuBLASLt's, with the leaf its bias reads.
pub fn lt_epilogue(sig: &Sig, layouts: &[Layout], shape: &[usize]) -> Option<(GemmEpilogue, Option<usize>)> {
    let [body] = &sig.bodies[..] else { return None };
    if body.roots != [body.ops.len().checked_sub(1)?] || body.ops.iter().any(|(_, t)| *t != DType::F32) {
        return None;
    }
    let ops: Vec<&Op> = body.ops.iter().map(|(op, _)| op).collect();
    let (activation, value) = match ops[..] {
        [ref value @ .., Op::Pointwise(Pointwise::Unary(op @ (UnaryOp::Relu | UnaryOp::Gelu), x))]
            if *x == value.len() - 1 =>
        {
            (Some(*op), value)
        }
        ref value => (None, value),
    };
    let bias = match value {
        [Op::Acc] => None,
        [x, y, Op::Pointwise(Pointwise::Binary(BinaryOp::Add, 0, 1))] => match (x, y) {
            (Op::Acc, Op::Load(leaf)) | (Op::Load(leaf), Op::Acc) if is_bias(sig, layouts, *leaf, shape) => Some(*leaf),
            // Any other sum than the product plus a bias keeps the pass.
            _ => return None,
        },
        // Any other epilogue (a slice pattern of ops: no list of variants can cover it) keeps the pass.
        _ => return None,
    };
    let epilogue = match (bias.is_some(), activation) {
        (true, None) => GemmEpilogue::Bias,
        (false, Some(UnaryOp::Relu)) => GemmEpilogue::Relu,
        (false, Some(_)) => GemmEpilogue::Gelu,
        (true, Some(UnaryOp::Relu)) => GemmEpilogue::BiasRelu,
        (true, Some(_)) => GemmEpilogue::BiasGelu,
        (false, None) => return None,
    };
    Some((epilogue, bias))
}

/// Whether leaf `leaf` reads one f32 buffer value per column of the
/// output, the same for every row: `[n]` broadcast over the rest.
fn is_bias(sig: &Sig, layouts: &[Layout], leaf: usize, shape: &[usize]) -> bool {
    let (Some(desc), Some(layout)) = (sig.leaves.get(leaf), layouts.get(leaf)) else { return false };
    let Some((last, leading)) = layout.strides.split_last() else { return false };
    desc.dtype == DType::F32
        && desc.buffer.is_some()
        && layout.shape == shape
        && *last == 1
        && leading.iter().all(|&s| s == 0)
}
