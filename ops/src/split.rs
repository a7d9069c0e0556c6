//! Ops over tensors held as pieces: those larger than the device's binding
//! limit (see kiln-core's `split`: GPT-2's token table is 154 MB, and a
//! browser binds 128 MiB). An op whose input is held as pieces, or whose
//! result would exceed the limit, is built piece by piece, so that no
//! kernel binds more than the limit and the user sees one tensor:
//! - along an axis the op maps through (elementwise ops, a matmul's rows
//!   or columns, a permute, a reduce over other axes), each piece of the
//!   result is the op over the matching pieces of the inputs;
//! - over an axis the op consumes, the pieces' results are combined: a
//!   reduce's partial results by its own operation, a matmul's partial
//!   products summed, a gather's reads from each piece summed (an index
//!   outside a piece reads 0 there);
//! - slices and reshapes keep the pieces they cover.

use crate::Tensor;
use kiln_core::ir::{BinaryOp, ReduceOp};
use kiln_core::shape::SliceSpec;
use kiln_core::{Device, KilnError, Node, Prim, Result, node_bytes};

impl Tensor {
    /// The axis and pieces of a tensor held as pieces.
    pub(crate) fn split_pieces(&self) -> Option<(usize, Vec<Tensor>)> {
        match self.node.prim() {
            Prim::Concat { axis } if self.device.is_split(&self.node) => {
                let pieces = self.node.inputs().into_iter().map(|n| Tensor::from_node(n, self.device.clone()));
                Some((*axis, pieces.collect()))
            }
            _ => None,
        }
    }
}

/// `prim` over `inputs` built piece by piece, where an input is held as
/// pieces or the result (`whole`, already checked) exceeds the binding
/// limit; `None` where neither applies, or where the result cannot be
/// split (building it whole then leaves the runtime to name the limit).
pub(crate) fn build(device: &Device, prim: &Prim, inputs: &[&Tensor], whole: &Node) -> Result<Option<Tensor>> {
    if matches!(prim, Prim::Concat { .. }) {
        // A concatenation over the limit is itself a tensor held as pieces.
        return Ok(None);
    }
    let split = inputs.iter().enumerate().find_map(|(j, t)| t.split_pieces().map(|(a, p)| (j, a, p)));
    match split {
        Some((j, axis, pieces)) => over_pieces(device, prim, inputs, whole, j, axis, &pieces).map(Some),
        None if node_bytes(whole) > device.binding_limit() => by_rows(device, prim, inputs, whole),
        None => Ok(None),
    }
}

/// A result too large for one binding, from inputs held whole: built in
/// runs along its first axis that the op maps through.
fn by_rows(device: &Device, prim: &Prim, inputs: &[&Tensor], whole: &Node) -> Result<Option<Tensor>> {
    let shape = whole.shape();
    let Some((b, map)) =
        (0..shape.len()).filter(|&b| shape[b] > 1).find_map(|b| Some((b, along(prim, inputs, shape, b)?)))
    else {
        return Ok(None);
    };
    let unit = node_bytes(whole).div_ceil(shape[b] as u64).max(1);
    let run = ((device.binding_limit() / unit) as usize).max(1);
    let ranges: Vec<(usize, usize)> = (0..shape[b]).step_by(run).map(|lo| (lo, run.min(shape[b] - lo))).collect();
    Ok(Some(mapped(device, prim, inputs, shape, b, &map, &ranges)?))
}

/// `prim` over `inputs`, input `j` held as `pieces` along `axis`.
fn over_pieces(
    device: &Device,
    prim: &Prim,
    inputs: &[&Tensor],
    whole: &Node,
    j: usize,
    axis: usize,
    pieces: &[Tensor],
) -> Result<Tensor> {
    let ranges = piece_ranges(pieces, axis);
    let shape = whole.shape();
    match prim {
        Prim::Slice { specs } => return slice(device, specs, axis, pieces, &ranges),
        Prim::Reshape { shape } => return reshape(device, inputs[0], shape, axis, pieces),
        _ => {}
    }
    if let Some((b, map)) =
        (0..shape.len()).find_map(|b| along(prim, inputs, shape, b).filter(|m| m[j] == Some(axis)).map(|m| (b, m)))
    {
        return mapped(device, prim, inputs, shape, b, &map, &ranges);
    }
    consumed(device, prim, inputs, j, axis, pieces, &ranges).ok_or_else(|| KilnError::Invalid {
        op: prim.name(),
        detail: format!(
            "its input {j} ({} {:?}) is over the device's binding limit of {} bytes and held in pieces along axis \
             {axis}, which this op cannot take piece by piece",
            inputs[j].dtype(),
            inputs[j].shape(),
            device.binding_limit()
        ),
    })?
}

/// Each piece's (offset, length) along `axis`.
fn piece_ranges(pieces: &[Tensor], axis: usize) -> Vec<(usize, usize)> {
    let mut offset = 0;
    pieces
        .iter()
        .map(|p| {
            let range = (offset, p.shape()[axis]);
            offset += range.1;
            range
        })
        .collect()
}

/// For output axis `b` of `prim`, the axis of each input that runs with it
/// (`None`: the input is used whole by every run), where runs of `b` are
/// the op over runs of the inputs.
fn along(prim: &Prim, inputs: &[&Tensor], out: &[usize], b: usize) -> Option<Vec<Option<usize>>> {
    let rank = out.len();
    Some(match prim {
        Prim::Unary(_) | Prim::Binary(_) | Prim::Where | Prim::Cast { .. } => vec![Some(b); inputs.len()],
        Prim::Concat { axis } => (b != *axis).then(|| vec![Some(b); inputs.len()])?,
        Prim::Fill { .. } | Prim::Iota { .. } => Vec::new(),
        Prim::Expand { shape } => {
            let x = inputs[0].shape();
            let lead = shape.len() - x.len();
            vec![(b >= lead && x[b - lead] != 1).then(|| b - lead)]
        }
        Prim::Permute { perm } => vec![Some(perm[b])],
        Prim::Matmul if b + 2 < rank => vec![Some(b), Some(b)],
        Prim::Matmul if b + 2 == rank => vec![Some(b), None],
        Prim::Matmul => vec![None, Some(b)],
        Prim::QuantMatmul { .. } if b + 1 < rank => vec![Some(b), None, None],
        Prim::QuantMatmul { .. } => vec![None, Some(0), Some(0)],
        Prim::Gather { axis } => vec![(b != *axis).then_some(b), Some(b)],
        Prim::Reduce { axes, keepdim, .. } => vec![Some(kept_axis(axes, *keepdim, inputs[0].rank(), b)?)],
        Prim::ArgReduce { axis, keepdim, .. } => vec![Some(kept_axis(&[*axis], *keepdim, inputs[0].rank(), b)?)],
        Prim::Reshape { .. } | Prim::Slice { .. } | Prim::Input { .. } => return None,
    })
}

/// The input axis that output axis `b` of a reduction over `axes` is.
fn kept_axis(axes: &[usize], keepdim: bool, rank: usize, b: usize) -> Option<usize> {
    if keepdim {
        return (!axes.contains(&b)).then_some(b);
    }
    (0..rank).filter(|a| !axes.contains(a)).nth(b)
}

/// The op run by run along output axis `b`, each run's inputs cut from
/// the whole inputs as `map` says; the runs joined.
fn mapped(
    device: &Device,
    prim: &Prim,
    inputs: &[&Tensor],
    out: &[usize],
    b: usize,
    map: &[Option<usize>],
    ranges: &[(usize, usize)],
) -> Result<Tensor> {
    let runs = ranges.iter().map(|&(lo, len)| {
        let cut = inputs
            .iter()
            .zip(map)
            .map(|(t, m)| match m {
                Some(a) => t.narrow(*a as isize, lo, len),
                None => Ok((*t).clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::build(device, run_prim(prim, out, b, lo, len), &cut.iter().collect::<Vec<_>>())
    });
    join(device, runs.collect::<Result<_>>()?, b)
}

/// `prim` for the run `lo..lo + len` of output axis `b` (the primitives
/// that carry their output's shape).
fn run_prim(prim: &Prim, out: &[usize], b: usize, lo: usize, len: usize) -> Prim {
    let mut shape = out.to_vec();
    shape[b] = len;
    match prim {
        Prim::Fill { value, dtype, .. } => Prim::Fill { value: *value, shape, dtype: *dtype },
        Prim::Iota { start, step, dtype, .. } => {
            Prim::Iota { start: start + lo as f64 * step, step: *step, len, dtype: *dtype }
        }
        Prim::Expand { .. } => Prim::Expand { shape },
        other => other.clone(),
    }
}

/// `pieces` joined along `axis` (a single piece is itself).
fn join(device: &Device, mut pieces: Vec<Tensor>, axis: usize) -> Result<Tensor> {
    if pieces.len() == 1 {
        return Ok(pieces.remove(0));
    }
    Tensor::build(device, Prim::Concat { axis }, &pieces.iter().collect::<Vec<_>>())
}

/// An op over the axis `axis` of input `j`, which it consumes: the pieces'
/// results combined. `None` where the op has no such combination.
fn consumed(
    device: &Device,
    prim: &Prim,
    inputs: &[&Tensor],
    j: usize,
    axis: usize,
    pieces: &[Tensor],
    ranges: &[(usize, usize)],
) -> Option<Result<Tensor>> {
    let rank = inputs[j].rank();
    let combine = |parts: Result<Vec<Tensor>>, op: BinaryOp| {
        let mut parts = parts?.into_iter();
        let first = parts.next().expect("two pieces or more");
        parts.try_fold(first, |acc, p| Tensor::build(device, Prim::Binary(op), &[&acc, &p]))
    };
    match prim {
        Prim::Reduce { op, .. } => {
            let op = match op {
                ReduceOp::Sum => BinaryOp::Add,
                ReduceOp::Prod => BinaryOp::Mul,
                ReduceOp::Max => BinaryOp::Maximum,
                ReduceOp::Min => BinaryOp::Minimum,
            };
            Some(combine(pieces.iter().map(|p| Tensor::build(device, prim.clone(), &[p])).collect(), op))
        }
        // A contraction split along k: the partial products summed.
        Prim::Matmul if (j == 0 && axis == rank - 1) || (j == 1 && axis == rank - 2) => {
            let parts = ranges.iter().map(|&(lo, len)| {
                let a = inputs[0].narrow(rank as isize - 1, lo, len)?;
                let b = inputs[1].narrow(rank as isize - 2, lo, len)?;
                Tensor::build(device, Prim::Matmul, &[&a, &b])
            });
            Some(combine(parts.collect(), BinaryOp::Add))
        }
        // A table split along the gathered axis: each piece read at the
        // index shifted to it (reading 0 outside it), the reads summed.
        Prim::Gather { axis: gathered } if j == 0 && axis == *gathered => {
            let index = inputs[1];
            let parts = pieces.iter().zip(ranges).map(|(p, &(lo, _))| {
                let shifted = index.sub(&index.scalar_like(lo as f64)?)?;
                Tensor::build(device, prim.clone(), &[p, &shifted])
            });
            Some(combine(parts.collect(), BinaryOp::Add))
        }
        _ => None,
    }
}

/// A slice of a tensor held as pieces along `axis`: the pieces it covers,
/// each sliced.
fn slice(
    device: &Device,
    specs: &[SliceSpec],
    axis: usize,
    pieces: &[Tensor],
    ranges: &[(usize, usize)],
) -> Result<Tensor> {
    let spec = specs[axis];
    if spec.step != 1 && spec.len > 1 {
        return Err(KilnError::Invalid {
            op: "slice",
            detail: format!(
                "a step of {} along axis {axis}, along which a tensor over the binding limit of {} bytes is held \
                 in pieces",
                spec.step,
                device.binding_limit()
            ),
        });
    }
    let (start, end) = (spec.start, spec.start + spec.len);
    let mut covered = Vec::new();
    for (p, &(lo, len)) in pieces.iter().zip(ranges) {
        let (from, to) = (start.max(lo), end.min(lo + len));
        if from >= to {
            continue;
        }
        let mut local = specs.to_vec();
        local[axis] = SliceSpec { start: from - lo, len: to - from, step: 1 };
        let whole = local.iter().zip(p.shape()).all(|(s, &d)| s.start == 0 && s.len == d && s.step == 1);
        covered.push(if whole { p.clone() } else { Tensor::build(device, Prim::Slice { specs: local }, &[p])? });
    }
    join(device, covered, axis)
}

/// A reshape of `x`, held as pieces along `axis`, that keeps the pieces
/// contiguous blocks: the axes before `axis` keep their count, and each
/// piece fills whole runs of the new trailing axes.
fn reshape(device: &Device, x: &Tensor, to: &[usize], axis: usize, pieces: &[Tensor]) -> Result<Tensor> {
    let outer: usize = x.shape()[..axis].iter().product();
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let fits = |a: usize| {
        let trailing: usize = to[a + 1..].iter().product();
        to[..a].iter().product::<usize>() == outer
            && pieces.iter().all(|p| (p.shape()[axis] * inner).is_multiple_of(trailing.max(1)))
    };
    let Some(a) = (0..to.len()).find(|&a| fits(a)) else {
        return Err(KilnError::Invalid {
            op: "reshape",
            detail: format!(
                "{:?} → {to:?} mixes the pieces of a tensor over the binding limit of {} bytes, held along axis {axis}",
                x.shape(),
                device.binding_limit()
            ),
        });
    };
    let trailing: usize = to[a + 1..].iter().product();
    let reshaped = pieces.iter().map(|p| {
        let mut shape = to.to_vec();
        shape[a] = p.shape()[axis] * inner / trailing.max(1);
        Tensor::build(device, Prim::Reshape { shape }, &[p])
    });
    join(device, reshaped.collect::<Result<_>>()?, a)
}
