//! The batching rule of every primitive: one exhaustive `match` over
//! `Prim`, beside the vjp rules, so a new primitive does not compile until
//! it has one.
//!
//! A batched value carries its batch axis first. Each rule builds the
//! batched node from the node's inputs, some batched, others not: an
//! unbatched operand is broadcast over the batch only where the primitive
//! needs equal shapes (elementwise ops, matmul, concat, gather); axes
//! shift past the batch axis; a matmul whose right operand is shared folds
//! the batch into its rows, so it stays one product.

use kiln_core::ir::Node;
use kiln_core::shape::SliceSpec;
use kiln_core::{Prim, Result};

/// `x` (of a per-example shape) broadcast over a batch of `b`.
pub(crate) fn broadcast(x: &Node, b: usize) -> Result<Node> {
    let shape = x.shape().to_vec();
    let one = Node::new(Prim::Reshape { shape: [&[1], &shape[..]].concat() }, vec![x.clone()])?;
    Node::new(Prim::Expand { shape: [&[b], &shape[..]].concat() }, vec![one])
}

/// The node computing `prim` over a batch of `b`: `inputs` are the
/// per-example inputs, `batched[i]` input `i` with its batch axis first
/// where it has one (at least one has).
pub(crate) fn batch(prim: &Prim, inputs: &[Node], batched: &[Option<Node>], b: usize) -> Result<Node> {
    let operand = |i: usize| operand(inputs, batched, i, b);
    let all = || (0..inputs.len()).map(operand).collect::<Result<Vec<_>>>();
    let shifted = |axes: &[usize]| axes.iter().map(|a| a + 1).collect::<Vec<_>>();
    let with_batch = |shape: &[usize]| [&[b], shape].concat();
    match prim {
        Prim::Input { .. } | Prim::Fill { .. } | Prim::Iota { .. } => {
            unreachable!("a leaf has no inputs, so none of them is batched")
        }
        // The elementwise prims (`Prim::is_elementwise`), spelled out so that this match stays exhaustive.
        Prim::Unary(_) | Prim::Binary(_) | Prim::Where | Prim::Cast { .. } => Node::new(prim.clone(), all()?),
        Prim::Reduce { op, axes, keepdim } => {
            Node::new(Prim::Reduce { op: *op, axes: shifted(axes), keepdim: *keepdim }, all()?)
        }
        Prim::ArgReduce { op, axis, keepdim } => {
            Node::new(Prim::ArgReduce { op: *op, axis: axis + 1, keepdim: *keepdim }, all()?)
        }
        Prim::Reshape { shape } => Node::new(Prim::Reshape { shape: with_batch(shape) }, all()?),
        Prim::Permute { perm } => {
            let perm = std::iter::once(0).chain(perm.iter().map(|p| p + 1)).collect();
            Node::new(Prim::Permute { perm }, all()?)
        }
        Prim::Slice { specs } => {
            let whole = SliceSpec { start: 0, len: b, step: 1 };
            Node::new(Prim::Slice { specs: std::iter::once(whole).chain(specs.iter().cloned()).collect() }, all()?)
        }
        Prim::Expand { shape } => {
            // Leading dims the expand adds go after the batch axis.
            let x = operand(0)?;
            let added = shape.len() - inputs[0].shape().len();
            let padded = [&[b], &vec![1; added][..], inputs[0].shape()].concat();
            let x = Node::new(Prim::Reshape { shape: padded }, vec![x])?;
            Node::new(Prim::Expand { shape: with_batch(shape) }, vec![x])
        }
        Prim::Matmul => matmul(inputs, batched, b),
        Prim::Concat { axis } => Node::new(Prim::Concat { axis: axis + 1 }, all()?),
        Prim::Gather { axis } => Node::new(Prim::Gather { axis: axis + 1 }, all()?),
        Prim::QuantMatmul { .. } => quant_matmul(prim, inputs, batched, b),
    }
}

/// A batched matmul; `[b, M, K] @ [K, N]` (a shared right operand) as one
/// `[b·M, K] @ [K, N]` product, so that a batch of vectors times weights
/// stays a matrix product rather than `b` products of one row.
fn matmul(inputs: &[Node], batched: &[Option<Node>], b: usize) -> Result<Node> {
    if let (Some(a), None) = (&batched[0], &batched[1])
        && inputs[0].shape().len() == 2
        && inputs[1].shape().len() == 2
    {
        let (m, k, n) = (inputs[0].shape()[0], inputs[0].shape()[1], inputs[1].shape()[1]);
        let rows = Node::new(Prim::Reshape { shape: vec![b * m, k] }, vec![a.clone()])?;
        let product = Node::new(Prim::Matmul, vec![rows, inputs[1].clone()])?;
        return Node::new(Prim::Reshape { shape: vec![b, m, n] }, vec![product]);
    }
    Node::new(Prim::Matmul, vec![operand(inputs, batched, 0, b)?, operand(inputs, batched, 1, b)?])
}

/// A batched integer-weight product: x takes any leading axes, so a batch
/// of inputs against shared weights is one product; weights that differ
/// per example (rare: quantized weights are inference constants) take one
/// product per example, stacked.
fn quant_matmul(prim: &Prim, inputs: &[Node], batched: &[Option<Node>], b: usize) -> Result<Node> {
    if let [Some(x), None, None] = batched {
        return Node::new(prim.clone(), vec![x.clone(), inputs[1].clone(), inputs[2].clone()]);
    }
    let operands = (0..inputs.len()).map(|i| operand(inputs, batched, i, b)).collect::<Result<Vec<_>>>()?;
    let mut products = Vec::with_capacity(b);
    for e in 0..b {
        let own = operands.iter().map(|o| example(o, e)).collect::<Result<Vec<_>>>()?;
        let product = Node::new(prim.clone(), own)?;
        products.push(Node::new(Prim::Reshape { shape: [&[1], product.shape()].concat() }, vec![product])?);
    }
    Node::new(Prim::Concat { axis: 0 }, products)
}

/// Example `e` of a batched value (its batch axis dropped).
fn example(x: &Node, e: usize) -> Result<Node> {
    let rest = x.shape()[1..].iter().map(|&len| SliceSpec { start: 0, len, step: 1 });
    let specs = std::iter::once(SliceSpec { start: e, len: 1, step: 1 }).chain(rest).collect();
    let one = Node::new(Prim::Slice { specs }, vec![x.clone()])?;
    Node::new(Prim::Reshape { shape: x.shape()[1..].to_vec() }, vec![one])
}

/// Input `i` with its batch axis first: batched, or broadcast over the batch.
fn operand(inputs: &[Node], batched: &[Option<Node>], i: usize, b: usize) -> Result<Node> {
    match &batched[i] {
        Some(x) => Ok(x.clone()),
        None => broadcast(&inputs[i], b),
    }
}
