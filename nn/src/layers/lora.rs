//! Low-rank adapters (LoRA, Hu et al. 2021): a trainable update of rank r
//! beside a frozen projection, `y = base(x) + scale · (x @ a) @ b`.

use super::bad_input;
use crate::init;
use kiln::prelude::*;

/// The low-rank update of one projection: `a` `[r, in]` and `b` `[out, r]`
/// (as PEFT stores `lora_A` and `lora_B`: `nn.Linear`'s `[out, in]`), and
/// `scale` (`alpha / r`). `b` starts at zero, so a new adapter leaves the
/// projection as it was.
#[derive(Tree, Clone, Debug)]
pub struct Lora {
    /// Down-projection `[r, in]`.
    pub a: Tensor,
    /// Up-projection `[out, r]`.
    pub b: Tensor,
    /// Multiplies the update: `alpha / r`, as PEFT.
    #[tree(skip)]
    pub scale: f64,
}

impl Lora {
    /// A fresh adapter of `rank` for a projection `[inputs] → [outputs]`:
    /// `a` from U(±1/√inputs) (PEFT's default), `b` zero, scale
    /// `alpha / rank`. Errors if `rank` is 0 or larger than either side.
    pub fn new(dev: &Device, key: Key, inputs: usize, outputs: usize, rank: usize, alpha: f64) -> Result<Lora> {
        if rank == 0 || rank > inputs.min(outputs) || !alpha.is_finite() {
            return Err(KilnError::Invalid {
                op: "Lora",
                detail: format!("rank {rank} and alpha {alpha} for a projection [{inputs}] → [{outputs}]"),
            });
        }
        let a = init::uniform(dev, key, &[rank, inputs], 1.0 / (inputs as f64).sqrt())?;
        Ok(Lora { a, b: init::zeros(dev, &[outputs, rank])?, scale: alpha / rank as f64 })
    }

    /// The rank r.
    pub fn rank(&self) -> usize {
        self.a.shape().first().copied().unwrap_or(0)
    }

    /// `scale · (x @ aᵀ) @ bᵀ`: `[.., in]` → `[.., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let inputs = self.a.shape().get(1).copied().unwrap_or(0);
        if x.rank() == 0 || x.shape()[x.rank() - 1] != inputs {
            return bad_input("Lora", format!("[.., {inputs}]"), x.shape());
        }
        x.matmul(&self.a.t()?)?.matmul(&self.b.t()?)?.mul_scalar(self.scale)
    }

    /// Errors (naming `op`) unless this adapter maps `[inputs]` to
    /// `[outputs]` through a rank that `a` and `b` share.
    pub fn check_fits(&self, op: &'static str, inputs: usize, outputs: usize) -> Result<()> {
        let fits =
            matches!((self.a.shape(), self.b.shape()), ([r, i], [o, r2]) if (*i, *o) == (inputs, outputs) && r == r2);
        if !fits {
            return Err(KilnError::Shape {
                op,
                detail: format!(
                    "a LoRA of a {:?} and b {:?} does not fit a projection [{inputs}] → [{outputs}]",
                    self.a.shape(),
                    self.b.shape()
                ),
            });
        }
        Ok(())
    }
}

/// A frozen layer and the low-rank update added to its output; its leaves
/// are the base's under `base` and the adapter's under `lora`.
#[derive(Tree, Clone, Debug)]
pub struct Adapted<T> {
    /// The layer as it was (trained elsewhere; frozen here).
    pub base: T,
    /// The update.
    pub lora: Lora,
}
