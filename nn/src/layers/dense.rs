//! Linear and Embedding.

use super::{bad_input, weight_dims};
use crate::init;
use kiln::prelude::*;

/// `y = x @ weight + bias` over the last axis; `weight` is `[in, out]`.
#[derive(Tree, Clone, Debug)]
pub struct Linear {
    /// `[in, out]`.
    pub weight: Tensor,
    /// `[out]`, or none.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// He-uniform weight (for ReLU networks) and zero bias.
    pub fn new(dev: &Device, key: Key, inputs: usize, outputs: usize) -> Result<Linear> {
        let weight = init::kaiming_uniform(dev, key, &[inputs, outputs], inputs)?;
        Ok(Linear { weight, bias: Some(init::zeros(dev, &[outputs])?) })
    }

    /// Input features (rows of the weight).
    pub fn inputs(&self) -> usize {
        self.weight.shape().first().copied().unwrap_or(0)
    }

    /// `x` `[.., in]` → `[.., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let [n, _] = weight_dims("Linear", &self.weight)?;
        if x.rank() == 0 || x.shape()[x.rank() - 1] != n {
            return bad_input("Linear", format!("[.., {n}]"), x.shape());
        }
        let y = x.matmul(&self.weight)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}

/// A lookup table `[vocab, dim]`: integer ids of any shape → `[.., dim]`.
/// Out-of-range ids give zero rows (docs/SHARP_EDGES.md, indexing).
#[derive(Tree, Clone, Debug)]
pub struct Embedding {
    /// The table, `[vocab, dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// N(0, 1) entries, as PyTorch.
    pub fn new(dev: &Device, key: Key, vocab: usize, dim: usize) -> Result<Embedding> {
        Ok(Embedding { weight: init::normal(dev, key, &[vocab, dim], 1.0)? })
    }

    /// Ids (i32 or u32, any shape) → their rows, `[.., dim]`.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        if !ids.dtype().is_int() {
            return Err(KilnError::DType {
                op: "Embedding",
                detail: format!("ids must be i32 or u32, got {} of shape {:?}", ids.dtype(), ids.shape()),
            });
        }
        let [_, dim] = weight_dims("Embedding", &self.weight)?;
        let rows = self.weight.index_select(0, &ids.reshape(&[-1])?)?;
        let mut shape: Vec<isize> = ids.shape().iter().map(|&s| s as isize).collect();
        shape.push(dim as isize);
        rows.reshape(&shape)
    }

    /// `x @ weightᵀ`: `[.., dim]` → `[.., vocab]`, the table reused as the
    /// output projection (weight tying, as GPT-2; its gradient sums both uses).
    pub fn attend(&self, x: &Tensor) -> Result<Tensor> {
        let [_, dim] = weight_dims("Embedding::attend", &self.weight)?;
        if x.rank() == 0 || x.shape()[x.rank() - 1] != dim {
            return bad_input("Embedding::attend", format!("[.., {dim}]"), x.shape());
        }
        x.matmul(&self.weight.t()?)
    }
}
