//! Gradients over a mesh: each rank differentiates its own graph, and the
//! gradient of the replicated parameters is the all-reduce of the ranks'.

use crate::replicas::Replicas;
use crate::sharded::Sharded;
use crate::sharding::Sharding;
use kiln::KilnError;
use kiln::prelude::*;
use std::cell::Cell;

/// `f(params)`'s value and its gradient with respect to every leaf of the
/// replicated `params`. `f` builds a one-element loss from sharded ops
/// (say [`Sharded::cross_entropy`] of a batch split along its rows),
/// partial or replicated. Each rank's pullback gives its part of the
/// gradient, and one all-reduce, in rank order, sums the loss and every
/// leaf's gradient: both come back replicated.
pub async fn value_and_grad<P: Tree + Clone>(
    params: &Replicas<P>,
    f: impl Fn(&Replicas<P>) -> Result<Sharded>,
) -> Result<(Sharded, Replicas<P>)> {
    let op = "shard::value_and_grad";
    let mesh = params.mesh().clone();
    let loss_sharding = Cell::new(Sharding::Partial);
    let loss_shape = Cell::new(Vec::new());
    let traced = |trees: &Vec<P>| -> Result<Vec<Tensor>> {
        let loss = f(&Replicas::from_trees(&mesh, trees.clone())?)?;
        if loss.shape().iter().product::<usize>() != 1 || loss.dtype() != DType::F32 {
            return Err(KilnError::Shape {
                op,
                detail: format!("the loss must be one f32 value, got {} {:?}", loss.dtype(), loss.shape()),
            });
        }
        if let Sharding::Split(_) = loss.sharding() {
            return Err(KilnError::Invalid {
                op,
                detail: "the loss is split across ranks; reduce it (sum or mean) first".into(),
            });
        }
        loss_sharding.set(loss.sharding());
        loss_shape.set(loss.shape().to_vec());
        Ok(loss.shards().to_vec())
    };
    let (losses, pullback) = vjp(traced, &params.trees().to_vec())?;
    // A partial loss is the sum of the ranks' parts, so each part's seed is
    // 1; a replicated one is counted once over the world.
    let seed = match loss_sharding.get() {
        Sharding::Partial => 1.0,
        _ => 1.0 / mesh.world_size() as f64,
    };
    let seeds = losses.iter().map(|l| l.ones_like()?.mul_scalar(seed)).collect::<Result<Vec<_>>>()?;
    let parts = Replicas::from_trees(&mesh, pullback.pullback(&seeds)?)?;
    // The loss travels with the gradient: one all-reduce for both.
    let with_loss = parts.zip_map(&Replicas::from_trees(&mesh, losses)?, |g, l| {
        let l = if loss_sharding.get() == Sharding::Partial { l.clone() } else { l.mul_scalar(seed)? };
        Ok((g.clone(), l))
    })?;
    let total = with_loss.sum_over_ranks().await?;
    let grads = total.map(|(g, _)| Ok(g.clone()))?;
    let loss = Sharded::from_shards(
        &mesh,
        Sharding::Replicated,
        loss_shape.take(),
        total.trees().iter().map(|(_, l)| l.clone()).collect(),
    )?;
    Ok((loss, grads))
}
