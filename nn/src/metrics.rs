//! Metrics (lazy one-element f32 tensors, like the losses).

use kiln::prelude::*;

/// The fraction of rows of `logits [N, C]` whose argmax equals `labels [N]`.
pub fn accuracy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let shapes_fit = logits.rank() == 2 && labels.shape() == [logits.shape()[0]];
    if !shapes_fit {
        return Err(KilnError::Shape {
            op: "accuracy",
            detail: format!(
                "needs logits [N, C] and i32 labels [N], got logits {:?} and {} labels {:?}",
                logits.shape(),
                labels.dtype(),
                labels.shape()
            ),
        });
    }
    if labels.dtype() != DType::I32 {
        return Err(KilnError::DType {
            op: "accuracy",
            detail: format!("needs i32 labels, got {} labels {:?}", labels.dtype(), labels.shape()),
        });
    }
    logits.argmax(Some(-1), false)?.eq(labels)?.cast(DType::F32)?.mean(&[], false)
}
