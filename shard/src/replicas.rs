//! A parameter tree replicated on every rank: one copy per local device.

use crate::mesh::Mesh;
use crate::sharded::all_reduce_tensors;
use kiln::KilnError;
use kiln::prelude::*;

/// One copy of a tree per local rank, each on its rank's device. Kept
/// equal by applying the same all-reduced updates on every rank.
#[derive(Clone, Debug)]
pub struct Replicas<P> {
    mesh: Mesh,
    trees: Vec<P>,
}

impl<P: Tree + Clone> Replicas<P> {
    /// `tree`'s values copied to every local device.
    pub async fn new(mesh: &Mesh, tree: &P) -> Result<Replicas<P>> {
        let leaves = tree.leaves();
        let hosts = futures_util::future::try_join_all(leaves.iter().map(Tensor::to_host)).await?;
        let trees = mesh
            .devices()
            .iter()
            .map(|device| {
                let copies = hosts
                    .iter()
                    .map(|h| Tensor::from_f64(device, &h.data, &h.shape, h.dtype))
                    .collect::<Result<Vec<_>>>()?;
                tree.unflatten(copies)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Replicas { mesh: mesh.clone(), trees })
    }

    /// Trees already on the mesh's devices, one per local rank in order.
    pub fn from_trees(mesh: &Mesh, trees: Vec<P>) -> Result<Replicas<P>> {
        if trees.len() != mesh.devices().len() {
            return Err(KilnError::Invalid {
                op: "replicas",
                detail: format!("{} trees for the {} local ranks", trees.len(), mesh.devices().len()),
            });
        }
        for (i, (tree, device)) in trees.iter().zip(mesh.devices()).enumerate() {
            if let Some((path, leaf)) = tree.named_leaves().into_iter().find(|(_, l)| l.device() != device) {
                return Err(KilnError::DeviceMismatch {
                    op: "replicas",
                    left: format!("rank {i}'s device {}", device.info().name),
                    right: format!("leaf `{path}` on {}", leaf.device().info().name),
                });
            }
        }
        Ok(Replicas { mesh: mesh.clone(), trees })
    }

    /// The mesh the copies live on.
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// The copies, one per local rank.
    pub fn trees(&self) -> &[P] {
        &self.trees
    }

    /// This process's first copy (rank 0's on the root process): the one to
    /// print, evaluate or save.
    pub fn local(&self) -> &P {
        &self.trees[0]
    }

    /// `f` on every copy (an optimizer's update, a forward pass).
    pub fn map<Q: Tree + Clone>(&self, f: impl Fn(&P) -> Result<Q>) -> Result<Replicas<Q>> {
        Replicas::from_trees(&self.mesh, self.trees.iter().map(f).collect::<Result<Vec<_>>>()?)
    }

    /// `f` on every pair of copies of this tree and `other`.
    pub fn zip_map<Q: Tree + Clone, R: Tree + Clone>(
        &self,
        other: &Replicas<Q>,
        f: impl Fn(&P, &Q) -> Result<R>,
    ) -> Result<Replicas<R>> {
        let pairs = self.trees.iter().zip(other.trees());
        Replicas::from_trees(&self.mesh, pairs.map(|(p, q)| f(p, q)).collect::<Result<Vec<_>>>()?)
    }

    /// The copies taken as parts of a sum over all ranks (per-rank
    /// gradients), summed in rank order: one flat all-reduce for the whole
    /// tree, the result replicated.
    pub async fn sum_over_ranks(&self) -> Result<Replicas<P>> {
        let groups: Vec<Vec<Tensor>> = self.trees.iter().map(Tree::leaves).collect();
        if let Some((path, leaf)) = self.trees[0].named_leaves().into_iter().find(|(_, l)| l.dtype() != DType::F32) {
            return Err(KilnError::DType {
                op: "all_reduce",
                detail: format!("leaf `{path}` is {} {:?}; all-reduce sums f32 leaves", leaf.dtype(), leaf.shape()),
            });
        }
        let totals = all_reduce_tensors(&self.mesh, "all_reduce", &groups).await?;
        let trees = self.trees.iter().zip(totals).map(|(t, leaves)| t.unflatten(leaves)).collect::<Result<_>>()?;
        Ok(Replicas { mesh: self.mesh.clone(), trees })
    }
}
