//! Tensors as one flat vector and back: what one all-reduce carries.

use kiln::prelude::*;

/// `leaves` flattened and concatenated, in order.
pub fn ravel(leaves: &[Tensor]) -> Result<Tensor> {
    let pieces = leaves.iter().map(|t| t.reshape(&[-1])).collect::<Result<Vec<_>>>()?;
    Tensor::concat(&pieces.iter().collect::<Vec<_>>(), 0)
}

/// The pieces of `flat` from `start` on, each shaped like the tensor of
/// `like` in its place: [`ravel`]'s inverse.
pub fn unravel(flat: &Tensor, start: usize, like: &[Tensor]) -> Result<Vec<Tensor>> {
    let mut at = start;
    like.iter()
        .map(|t| {
            let piece = flat.narrow(0, at, t.numel())?;
            at += t.numel();
            piece.reshape(&t.shape().iter().map(|&d| d as isize).collect::<Vec<_>>())
        })
        .collect()
}
