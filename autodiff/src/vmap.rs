//! `vmap`: a function written for one example, mapped over a batch axis as
//! one batched graph (batched kernels, not a loop). Each call traces `f`
//! on per-example placeholders, then rewrites the graph it built from
//! them, node by node, with the batching rules (`batch_rules`); nodes that
//! do not depend on a batched input are kept as they are. The result is
//! ordinary graph, so `grad`, `jit` and `vmap` itself compose with it.

use crate::batch_rules::{batch, broadcast};
use crate::tree::Tree;
use kiln_core::ir::Node;
use kiln_core::shape::normalize_axis;
use kiln_core::{KilnError, Prim, Result};
use kiln_ops::{Jit, Tensor, jit};
use std::collections::HashMap;

/// `f` mapped over a batch: `in_axes` gives each input leaf's batch axis
/// (negative counts from the end) or `None` to give every example the whole
/// leaf; `out_axes` where each output leaf's batch axis goes. A single
/// entry applies to every leaf. Like JAX's `vmap`: `vmap(grad(f), ..)` gives
/// per-example gradients.
pub fn vmap<P: Tree, O: Tree>(
    f: impl Fn(&P) -> Result<O>,
    in_axes: Vec<Option<isize>>,
    out_axes: Vec<isize>,
) -> impl Fn(&P) -> Result<O> {
    move |xs: &P| mapped(&f, &in_axes, &out_axes, xs)
}

/// `vmap` of a jit'd function, as JAX's `vmap(jit(f))`: the batched
/// function is itself jit'd, so its graph is traced (through the inner
/// function's trace), batched and captured once per input signature, then
/// replayed with one submit. `kiln::jit(f).vmap(in_axes, out_axes)`.
pub trait VmapJit {
    /// The batched function (axes as for [`vmap`](fn@vmap)), jit'd.
    fn vmap(self, in_axes: Vec<Option<isize>>, out_axes: Vec<isize>) -> Jit<impl Fn(&[Tensor]) -> Result<Vec<Tensor>>>;
}

impl<F: Fn(&[Tensor]) -> Result<Vec<Tensor>>> VmapJit for Jit<F> {
    fn vmap(self, in_axes: Vec<Option<isize>>, out_axes: Vec<isize>) -> Jit<impl Fn(&[Tensor]) -> Result<Vec<Tensor>>> {
        jit(move |xs: &[Tensor]| mapped(&|x: &Vec<Tensor>| self.trace(x), &in_axes, &out_axes, &xs.to_vec()))
    }
}

fn invalid(detail: String) -> KilnError {
    KilnError::Invalid { op: "vmap", detail }
}

/// `axes` with one entry per leaf of `leaves` leaves.
fn per_leaf<T: Copy>(axes: &[T], leaves: usize, what: &str) -> Result<Vec<T>> {
    match axes {
        [one] => Ok(vec![*one; leaves]),
        _ if axes.len() == leaves => Ok(axes.to_vec()),
        _ => Err(invalid(format!("{} {what} for {leaves} leaves (give one per leaf, or one for all)", axes.len()))),
    }
}

/// `x` with axis `from` moved to `to`.
fn move_axis(x: &Node, from: usize, to: usize) -> Result<Node> {
    if from == to {
        return Ok(x.clone());
    }
    let mut perm: Vec<usize> = (0..x.shape().len()).filter(|&d| d != from).collect();
    perm.insert(to, from);
    Node::new(Prim::Permute { perm }, vec![x.clone()])
}

fn mapped<P: Tree, O: Tree>(
    f: &impl Fn(&P) -> Result<O>,
    in_axes: &[Option<isize>],
    out_axes: &[isize],
    xs: &P,
) -> Result<O> {
    let leaves = xs.named_leaves();
    let axes = per_leaf(in_axes, leaves.len(), "in_axes")?;
    // Each batched leaf's batch (axis first), keyed by its placeholder's node.
    let mut batched: HashMap<u64, Node> = HashMap::new();
    let mut size: Option<(usize, String, Vec<usize>)> = None;
    let mut examples = Vec::new();
    for ((path, t), axis) in leaves.iter().zip(axes) {
        let Some(axis) = axis else {
            examples.push(t.clone());
            continue;
        };
        let shape = t.shape().to_vec();
        let a = normalize_axis("vmap", axis, shape.len())
            .map_err(|_| invalid(format!("in_axes {axis} is out of range for leaf `{path}` of shape {shape:?}")))?;
        match &size {
            Some((b, first, first_shape)) if *b != shape[a] => {
                return Err(invalid(format!(
                    "batch sizes disagree: leaf `{first}` of shape {first_shape:?} has {b}, \
                     leaf `{path}` of shape {shape:?} has {} along its axis {axis}",
                    shape[a]
                )));
            }
            Some(_) => {}
            None => size = Some((shape[a], path.clone(), shape.clone())),
        }
        let mut example_shape = shape.clone();
        example_shape.remove(a);
        let placeholder = Node::placeholder(example_shape, t.dtype())?;
        batched.insert(placeholder.id(), move_axis(t.node(), a, 0)?);
        examples.push(Tensor::from_node(placeholder, t.device().clone()));
    }
    let Some((b, _, _)) = size else {
        return Err(invalid("no input leaf is batched (every in_axes entry is None)".into()));
    };
    let out = f(&xs.unflatten(examples)?)?;
    let outs = out.named_leaves();
    let roots: Vec<Node> = outs.iter().map(|(_, t)| t.node().clone()).collect();
    for n in Node::topo_unrealized(&roots) {
        if batched.contains_key(&n.id()) {
            continue;
        }
        let inputs = n.inputs();
        let of_inputs: Vec<Option<Node>> = inputs.iter().map(|i| batched.get(&i.id()).cloned()).collect();
        if of_inputs.iter().any(Option::is_some) {
            batched.insert(n.id(), batch(n.prim(), &inputs, &of_inputs, b)?);
        }
    }
    let out_axes = per_leaf(out_axes, outs.len(), "out_axes")?;
    let mut results = Vec::new();
    for ((path, t), axis) in outs.iter().zip(out_axes) {
        let x = match batched.get(&t.node().id()) {
            Some(x) => x.clone(),
            None => broadcast(t.node(), b)?,
        };
        let to = normalize_axis("vmap", axis, x.shape().len()).map_err(|_| {
            invalid(format!("out_axes {axis} is out of range for output `{path}` of batched shape {:?}", x.shape()))
        })?;
        results.push(Tensor::from_node(move_axis(&x, 0, to)?, t.device().clone()));
    }
    out.unflatten(results)
}
