//! Reverse accumulation over the part of a graph that depends on a trace's
//! leaves: topological order, then each node's vjp rule in reverse,
//! summing the cotangents of nodes used more than once.

use crate::vjp_rules::vjp;
use kiln_core::ir::Trace;
use kiln_core::{KilnError, Node, Prim, Result};
use kiln_ops::Tensor;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Nodes reachable from `roots` through nodes traced by `trace`, inputs first.
fn traced_order(roots: &[Node], trace: &Arc<Trace>) -> Vec<Node> {
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<(Node, bool)> = roots.iter().map(|n| (n.clone(), false)).collect();
    while let Some((node, expanded)) = stack.pop() {
        if expanded {
            order.push(node);
            continue;
        }
        if !node.is_traced_by(trace) || !seen.insert(node.id()) {
            continue;
        }
        stack.push((node.clone(), true));
        stack.extend(node.inputs().into_iter().map(|n| (n, false)));
    }
    order
}

fn accumulate(cts: &mut HashMap<u64, Tensor>, id: u64, g: Tensor) -> Result<()> {
    let total = match cts.remove(&id) {
        Some(prev) => prev.add(&g)?,
        None => g,
    };
    cts.insert(id, total);
    Ok(())
}

/// The cotangents of `leaves` (`None`: `f` did not depend on that leaf),
/// given `(output, cotangent)` pairs. Only nodes traced by `trace` are
/// visited; everything else is a constant.
pub(crate) fn backprop(
    trace: &Arc<Trace>,
    seeds: &[(Tensor, Tensor)],
    leaves: &[Tensor],
) -> Result<Vec<Option<Tensor>>> {
    let mut cts: HashMap<u64, Tensor> = HashMap::new();
    for (out, ct) in seeds {
        if out.node().is_traced_by(trace) {
            accumulate(&mut cts, out.node().id(), ct.clone())?;
        }
    }
    let leaf_ids: HashSet<u64> = leaves.iter().map(|l| l.node().id()).collect();
    let roots: Vec<Node> = seeds.iter().map(|(o, _)| o.node().clone()).collect();
    for node in traced_order(&roots, trace).into_iter().rev() {
        if leaf_ids.contains(&node.id()) || !node.dtype().is_float() {
            continue;
        }
        let Some(g) = cts.remove(&node.id()) else { continue };
        let inputs = node.inputs();
        let source = matches!(node.prim(), Prim::Input { .. } | Prim::Fill { .. } | Prim::Iota { .. });
        if inputs.is_empty() && !source {
            // Traced nodes keep their inputs while the trace lives; a
            // scheduler that drops them anyway would make this a constant.
            return Err(KilnError::Invalid {
                op: node.prim().name(),
                detail: format!("the {:?} node lost its inputs while a grad traced it (a bug in kiln)", node.shape()),
            });
        }
        let wants: Vec<bool> = inputs.iter().map(|n| n.is_traced_by(trace) && n.dtype().is_float()).collect();
        if !wants.contains(&true) {
            continue;
        }
        let device = g.device().clone();
        let x: Vec<Tensor> = inputs.iter().map(|n| Tensor::from_node(n.clone(), device.clone())).collect();
        let y = Tensor::from_node(node.clone(), device.clone());
        let grads = vjp(node.prim(), &x, &y, &g, &wants)?;
        for ((input, gi), want) in inputs.iter().zip(grads).zip(&wants) {
            let Some(gi) = gi.filter(|_| *want) else { continue };
            if gi.shape() != input.shape() || gi.dtype() != input.dtype() {
                return Err(KilnError::Invalid {
                    op: node.prim().name(),
                    detail: format!(
                        "vjp rule gave a {} {:?} cotangent for a {} {:?} input (a bug in kiln)",
                        gi.dtype(),
                        gi.shape(),
                        input.dtype(),
                        input.shape()
                    ),
                });
            }
            accumulate(&mut cts, input.id(), gi)?;
        }
    }
    Ok(leaves.iter().map(|l| cts.remove(&l.node().id())).collect())
}
