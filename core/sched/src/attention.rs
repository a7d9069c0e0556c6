//! Attention as one kernel: finds `softmax(scores) @ v` in the graph, where
//! `scores` is an elementwise function of one matmul `q @ kt` (scaling,
//! masks, position biases), so that the walk can compute the whole product
//! a tile of keys at a time ([`crate::schedule::Item::Attention`]) and the
//! scores never reach memory.
//!
//! The match is on the IR, before the walk: the walk would otherwise
//! materialize the scores (read by both of softmax's row stages) the
//! moment it reached them. Only values no one else reads qualify, so a
//! training step, whose backward pass reads the softmax, keeps the
//! separate kernels.
//!
//! A causal mask is recognized too (`hides_later_keys`), so that the
//! kernel stops at the keys its queries can see.

use kiln_ir::dtype::DType;
use kiln_ir::ir::{BinaryOp, Node, Prim, ReduceOp, UnaryOp};
use std::collections::{HashMap, HashSet};

/// One `softmax(scores) @ v` found in the graph.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The softmax's input.
    pub scores: Node,
    /// The softmax's own nodes (its max, sum, exp, ... and their
    /// broadcasts), inputs first: computed inside the attention kernel, or
    /// by the walk in this order when the kernel does not fit after all.
    pub softmax: Vec<Node>,
    /// The permutation of the one permute that reads the product, when it
    /// keeps the last axis last (the heads' merge, `[b, h, t, d]` to
    /// `[b, t, h, d]`): the kernel then writes the output so that the
    /// permute's view of it is contiguous, and the merge needs no copy.
    pub merged_by: Option<Vec<usize>>,
    /// Whether the scores hide every key after its query behind a fill
    /// far below any score (`hides_later_keys`): the kernel then skips
    /// the keys after a workgroup's last query, whose weights are exactly
    /// zero.
    pub causal: bool,
}

/// Highest fill that hides a key: `exp(fill − score)` is then exactly zero
/// in f32 for any score above `fill + 104`, which a query's own key has.
const HIDDEN_FILL_MAX: f64 = -1e9;

/// The patterns among `order` (a topological order of the unrealized
/// nodes), by the id of their final matmul. `consumers` counts each node's
/// readers in `order`; `roots` are what the caller asked for.
pub fn find(order: &[Node], roots: &[Node], consumers: &HashMap<u64, usize>) -> HashMap<u64, Pattern> {
    let roots: HashSet<u64> = roots.iter().map(Node::id).collect();
    let only = |n: &Node, readers: usize| consumers.get(&n.id()).copied() == Some(readers) && !roots.contains(&n.id());
    let mut found = HashMap::new();
    for n in order.iter().filter(|n| matches!(n.prim(), Prim::Matmul)) {
        let [p, v] = &n.inputs()[..] else { continue };
        if p.id() != v.id()
            && let Some(mut pattern) = softmax_of_scores(p, &only)
        {
            pattern.merged_by = only(n, 1).then(|| merging_permute(n, order)).flatten();
            found.insert(n.id(), pattern);
        }
    }
    found
}

/// The permutation of the permute reading `n` (its one reader), when it
/// moves axes but keeps the last one last.
fn merging_permute(n: &Node, order: &[Node]) -> Option<Vec<usize>> {
    let reader = order.iter().find(|r| r.inputs().iter().any(|i| i.id() == n.id()))?;
    let Prim::Permute { perm } = reader.prim() else { return None };
    let last = perm.len().checked_sub(1)?;
    let moves = perm.iter().enumerate().any(|(i, &p)| i != p);
    (perm[last] == last && moves).then(|| perm.clone())
}

/// `p = exp(s − max(s)) / sum(exp(s − max(s)))` along the last axis (as
/// `Tensor::softmax` builds it), read only by the matmul, with `s` an
/// elementwise function of one matmul.
fn softmax_of_scores(p: &Node, only: &dyn Fn(&Node, usize) -> bool) -> Option<Pattern> {
    let last = p.shape().len().checked_sub(1)?;
    let [e, sum_b] = binary(p, BinaryOp::Div)?;
    let sum = broadcast_source(&sum_b);
    let [d] = unary(&e, UnaryOp::Exp)?;
    let [s, max_b] = binary(&d, BinaryOp::Sub)?;
    let max = broadcast_source(&max_b);
    let reduces = |r: &Node, op: ReduceOp, of: &Node| {
        matches!(r.prim(), Prim::Reduce { op: o, axes, keepdim: true } if *o == op && axes == &[last])
            && live_inputs(r).first().is_some_and(|i| i.id() == of.id())
    };
    let read_once = [p, &d, &sum, &max].into_iter().chain([&sum_b, &max_b]).all(|n| only(n, 1));
    let fits = reduces(&sum, ReduceOp::Sum, &e)
        && reduces(&max, ReduceOp::Max, &s)
        && read_once
        && only(&e, 2)
        && only(&s, 2)
        && [p, &e, &s].iter().all(|n| n.dtype() == DType::F32)
        && of_one_matmul(&s, only);
    let mut softmax = vec![max.clone()];
    if max_b.id() != max.id() {
        softmax.push(max_b);
    }
    softmax.extend([d, e.clone(), sum.clone()]);
    if sum_b.id() != sum.id() {
        softmax.push(sum_b);
    }
    softmax.push(p.clone());
    fits.then(|| Pattern { causal: hides_later_keys(&s), scores: s, softmax, merged_by: None })
}

/// Whether `s` is one matmul, or reaches exactly one matmul of its shape
/// through elementwise nodes of that shape, each on the way (and the
/// matmul) read once: then the walk holds `s` as that matmul's epilogue.
fn of_one_matmul(s: &Node, only: &dyn Fn(&Node, usize) -> bool) -> bool {
    if s.realized_value().is_some() {
        return false;
    }
    if matches!(s.prim(), Prim::Matmul) {
        return true;
    }
    let mut matmuls = 0;
    let mut memo = HashMap::new();
    let alone = s.inputs().iter().all(|x| leads_to_matmul(x, s.shape(), only, &mut matmuls, &mut memo).is_some());
    alone && matmuls == 1
}

/// Whether `x` leads to a matmul of `shape` through elementwise nodes of
/// that shape (counting the matmuls in `matmuls`); `None` when a node on
/// such a way has other readers.
fn leads_to_matmul(
    x: &Node,
    shape: &[usize],
    only: &dyn Fn(&Node, usize) -> bool,
    matmuls: &mut usize,
    memo: &mut HashMap<u64, bool>,
) -> Option<bool> {
    if let Some(&known) = memo.get(&x.id()) {
        return Some(known);
    }
    if x.shape() != shape || x.realized_value().is_some() {
        return Some(false);
    }
    let leads = match x.prim() {
        Prim::Matmul => {
            *matmuls += 1;
            true
        }
        p if p.is_elementwise() => {
            let mut any = false;
            for i in x.inputs() {
                any |= leads_to_matmul(&i, shape, only, matmuls, memo)?;
            }
            any
        }
        // Any other primitive (a leaf, a view, a reduction, a concat, ...)
        // ends the way: only elementwise nodes lead on to the matmul.
        _ => false,
    };
    if leads && !only(x, 1) {
        return None;
    }
    memo.insert(x.id(), leads);
    Some(leads)
}

/// Whether `s` (`[.., tq, tk]`) is `where(k ≤ q, x, fill)` (or
/// `where(k > q, fill, x)`, or the comparison flipped), with `k` and `q`
/// one integer `arange` (start, step > 0) along the keys and the queries,
/// and `fill` at most [`HIDDEN_FILL_MAX`]: a causal mask. Key `j` is then
/// hidden from query `i` exactly when `j > i`, and key 0 is seen by all.
/// Not a causal mask combined with another (padding, joined by `and` or
/// nested in `x`): a query whose every key that mask hides weighs all keys
/// alike, the skipped ones included. (A mask `x` reads from a buffer, such
/// as an additive -inf bias, cannot be seen here: a query it hides every
/// visible key of would weigh only the keys the kernel walks.)
fn hides_later_keys(s: &Node) -> bool {
    let Prim::Where = s.prim() else { return false };
    let [cond, x, y] = &live_inputs(s)[..] else { return false };
    let cond = broadcast_source(cond);
    let Prim::Binary(op) = cond.prim() else { return false };
    // (whether the key is the left operand, whether true means seen)
    let (key_left, seen) = match op {
        BinaryOp::Le => (true, true),
        BinaryOp::Ge => (false, true),
        BinaryOp::Gt => (true, false),
        BinaryOp::Lt => (false, false),
        // Only an order comparison of keys and queries hides later keys.
        _ => return false,
    };
    let [a, b] = &live_inputs(&cond)[..] else { return false };
    let (k, q) = if key_left { (a, b) } else { (b, a) };
    let fill = if seen { y } else { x };
    let (Some((0, key)), Some((1, query))) = (arange_axis(k), arange_axis(q)) else { return false };
    key.start_step() == query.start_step() && hidden(fill) && !masks_within(if seen { x } else { y })
}

/// An integer `arange` along one axis: its start, step and length.
#[derive(Clone, Copy)]
struct Arange {
    start: i64,
    step: i64,
    len: usize,
}

impl Arange {
    fn start_step(self) -> (i64, i64) {
        (self.start, self.step)
    }
}

/// An integer `arange` seen through unit reshapes and broadcasts: the axis
/// it runs along (counted from the last), when it rises from a start ≥ 0
/// and stays within i32 (so that it cannot wrap).
fn arange_axis(n: &Node) -> Option<(usize, Arange)> {
    match n.prim() {
        Prim::Iota { start, step, len, dtype } => {
            let last = start + step * (*len as f64 - 1.0);
            let whole = start.fract() == 0.0 && step.fract() == 0.0;
            let rises = *len > 1 && *start >= 0.0 && *step > 0.0 && last <= f64::from(i32::MAX);
            let arange = Arange { start: *start as i64, step: *step as i64, len: *len };
            (dtype.is_int() && whole && rises).then_some((0, arange))
        }
        // Right-aligned: the axis keeps its place counted from the last.
        Prim::Expand { .. } => arange_axis(live_inputs(n).first()?),
        // Only a reshape that moves the arange's one long axis among unit
        // ones (of a broadcast, it would interleave copies).
        Prim::Reshape { shape } => {
            let input = live_inputs(n).first()?.clone();
            let (_, inner) = arange_axis(&input)?;
            let long = |dims: &[usize]| -> Vec<(usize, usize)> {
                dims.iter().rev().copied().enumerate().filter(|&(_, d)| d != 1).collect()
            };
            match (&long(input.shape())[..], &long(shape)[..]) {
                ([(_, a)], [(axis, b)]) if *a == inner.len && *b == inner.len => Some((*axis, inner)),
                _ => None,
            }
        }
        // Any other primitive is no arange seen through reshapes and broadcasts.
        _ => None,
    }
}

/// Whether `x`'s elementwise graph (down to the matmul and buffers) masks
/// scores itself: a `where`, or a fill at most [`HIDDEN_FILL_MAX`].
fn masks_within(x: &Node) -> bool {
    let mut seen = HashSet::new();
    let mut todo = vec![x.clone()];
    while let Some(n) = todo.pop() {
        if !seen.insert(n.id()) {
            continue;
        }
        match n.prim() {
            Prim::Where => return true,
            Prim::Fill { value, .. } if *value <= HIDDEN_FILL_MAX => return true,
            Prim::Unary(_) | Prim::Binary(_) | Prim::Cast { .. } | Prim::Expand { .. } | Prim::Reshape { .. } => {
                todo.extend(live_inputs(&n));
            }
            // Any other node (a leaf, the matmul, a reduction, another view)
            // ends the search along that path: it is not the scores' elementwise graph.
            _ => {}
        }
    }
    false
}

/// Whether `n` is a constant fill at most [`HIDDEN_FILL_MAX`].
fn hidden(n: &Node) -> bool {
    matches!(broadcast_source(n).prim(), Prim::Fill { value, .. } if *value <= HIDDEN_FILL_MAX)
}

/// `n`'s inputs, or none when it is realized: a realized node is a buffer
/// to the matchers, whatever its prim (which it keeps; its inputs it drops
/// unless a live trace still needs them).
fn live_inputs(n: &Node) -> Vec<Node> {
    if n.realized_value().is_some() { Vec::new() } else { n.inputs() }
}

fn unary(n: &Node, op: UnaryOp) -> Option<[Node; 1]> {
    match (n.prim(), &live_inputs(n)[..]) {
        (Prim::Unary(o), [x]) if *o == op => Some([x.clone()]),
        // Another primitive or op, or a realized node (no live inputs).
        _ => None,
    }
}

fn binary(n: &Node, op: BinaryOp) -> Option<[Node; 2]> {
    match (n.prim(), &live_inputs(n)[..]) {
        (Prim::Binary(o), [a, b]) if *o == op => Some([a.clone(), b.clone()]),
        // Another primitive or op, or a realized node (no live inputs).
        _ => None,
    }
}

/// What `n` broadcasts (itself when it is no `Expand`, or a realized one).
fn broadcast_source(n: &Node) -> Node {
    match (n.prim(), &live_inputs(n)[..]) {
        (Prim::Expand { .. }, [x]) => x.clone(),
        // Any other primitive, or a realized expand (no live inputs): `n` itself.
        _ => n.clone(),
    }
}
