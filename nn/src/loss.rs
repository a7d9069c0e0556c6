//! Losses, each the mean over the batch (a one-element f32 tensor).

use kiln::prelude::*;

fn check_pair(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() != b.shape() {
        return Err(KilnError::Shape {
            op,
            detail: format!("predictions {:?} and targets {:?} differ", a.shape(), b.shape()),
        });
    }
    Ok(())
}

/// Cross-entropy of `logits [N, C]` and integer `labels [N]` (log-softmax
/// is max-shifted, so large logits are safe). Labels outside `0..C` pick
/// nothing (their row's loss is 0).
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let shapes_fit = logits.rank() == 2 && labels.rank() == 1 && labels.shape()[0] == logits.shape()[0];
    if !shapes_fit {
        return Err(KilnError::Shape {
            op: "cross_entropy",
            detail: format!(
                "needs logits [N, C] and i32/u32 labels [N], got logits {:?} and {} labels {:?}",
                logits.shape(),
                labels.dtype(),
                labels.shape()
            ),
        });
    }
    if !labels.dtype().is_int() {
        return Err(KilnError::DType {
            op: "cross_entropy",
            detail: format!("needs i32/u32 labels, got {} labels {:?}", labels.dtype(), labels.shape()),
        });
    }
    let targets = labels.one_hot(logits.shape()[1], logits.dtype())?;
    cross_entropy_one_hot(logits, &targets)
}

/// Cross-entropy of `logits [N, C]` and target distributions `[N, C]`
/// (one-hot or soft labels).
pub fn cross_entropy_one_hot(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    check_pair("cross_entropy", logits, targets)?;
    if logits.rank() != 2 {
        return Err(KilnError::Shape {
            op: "cross_entropy",
            detail: format!("needs logits [N, C], got {:?}", logits.shape()),
        });
    }
    targets.mul(&logits.log_softmax(-1)?)?.sum(&[-1], false)?.mean(&[], false)?.neg()
}

/// Mean squared error.
pub fn mse(predictions: &Tensor, targets: &Tensor) -> Result<Tensor> {
    check_pair("mse", predictions, targets)?;
    let d = predictions.sub(targets)?;
    d.mul(&d)?.mean(&[], false)
}

/// Binary cross-entropy of logits and targets in [0, 1], in the stable form
/// `max(x, 0) − x·t + log(1 + exp(−|x|))`.
pub fn binary_cross_entropy_with_logits(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    check_pair("binary_cross_entropy_with_logits", logits, targets)?;
    let softplus = logits.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?;
    logits.relu()?.sub(&logits.mul(targets)?)?.add(&softplus)?.mean(&[], false)
}
