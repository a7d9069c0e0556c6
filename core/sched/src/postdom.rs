//! Which shared values one kernel reads entirely: a value whose every
//! reader lies inside the elementwise expression of one later node (its
//! immediate post-dominator) lands in that node's kernel, where the
//! lowerer merges repeated subexpressions and computes it once, unless the
//! walk splits that expression for its own limits (too many ops, bindings
//! or meta words; a row stage or matmul inside). Materializing it would
//! only add a write and a read (a Threefry draw's 20 rounds of shared
//! states had taken 13 kernels).

use kiln_ir::ir::Node;
use kiln_ir::shape::numel;
use std::collections::{HashMap, HashSet};

/// Nodes of `order` (topological, inputs first) of more than one element,
/// read by several nodes, all of which lie on elementwise paths of the
/// same shape to one node that is itself elementwise; each with the number
/// of ops on those paths, the sink's included (at most `max_ops`). A
/// scalar is left out: storing it costs nothing, and its whole expression
/// would be recomputed wherever it is broadcast.
pub fn read_in_one_kernel(order: &[Node], roots: &[Node], max_ops: usize) -> HashMap<u64, usize> {
    let at: HashMap<u64, usize> = order.iter().enumerate().map(|(i, n)| (n.id(), i)).collect();
    let mut readers = vec![Vec::new(); order.len()];
    for (i, n) in order.iter().enumerate() {
        for input in n.inputs() {
            if let Some(&j) = at.get(&input.id()) {
                readers[j].push(i);
            }
        }
    }
    let exit = order.len();
    let root_ids: HashSet<u64> = roots.iter().map(Node::id).collect();
    let ipdom = immediate_post_dominators(&readers, |i| root_ids.contains(&order[i].id()), exit);
    let fuses_with = |i: usize, shape: &[usize]| order[i].prim().is_elementwise() && order[i].shape() == shape;
    (0..order.len())
        .filter(|&i| readers[i].len() > 1 && ipdom[i] != exit && order[i].prim().is_elementwise())
        .filter(|&i| numel(order[i].shape()) > 1 && fuses_with(ipdom[i], order[i].shape()))
        .filter_map(|i| {
            let shape = order[i].shape();
            let ops = region_ops(&readers, i, ipdom[i], max_ops, |j| fuses_with(j, shape))?;
            Some((order[i].id(), ops))
        })
        .collect()
}

/// Each node's immediate post-dominator (`exit` past the roots and the
/// nodes nobody reads), by the intersection of its successors' chains: in
/// a DAG in topological order a post-dominator comes after what it
/// dominates, so the chains can be walked by index alone.
fn immediate_post_dominators(readers: &[Vec<usize>], is_root: impl Fn(usize) -> bool, exit: usize) -> Vec<usize> {
    let mut ipdom = vec![exit; readers.len()];
    for i in (0..readers.len()).rev() {
        let exits = is_root(i) || readers[i].is_empty();
        let mut successors = readers[i].iter().copied().chain(exits.then_some(exit));
        let first = successors.next().expect("a node has readers or exits the graph");
        ipdom[i] = successors.fold(first, |mut a, mut b| {
            while a != b {
                if a < b {
                    a = ipdom[a];
                } else {
                    b = ipdom[b];
                }
            }
            a
        });
    }
    ipdom
}

/// How many nodes lie on the paths from `from` to `sink` (which they all
/// reach), the sink included, when each of them fuses and there are at
/// most `max_ops`.
fn region_ops(
    readers: &[Vec<usize>],
    from: usize,
    sink: usize,
    max_ops: usize,
    fuses: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut seen = HashSet::new();
    let mut stack = readers[from].clone();
    while let Some(j) = stack.pop() {
        if j == sink || !seen.insert(j) {
            continue;
        }
        if !fuses(j) || seen.len() >= max_ops {
            return None;
        }
        stack.extend_from_slice(&readers[j]);
    }
    Some(seen.len() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A diamond 0 → {1, 2} → 3 → 4, where 2 is also read by root 5.
    fn readers(fork: bool) -> Vec<Vec<usize>> {
        let two = if fork { vec![3, 5] } else { vec![3] };
        vec![vec![1, 2], vec![3], two, vec![4], vec![], vec![]]
    }

    #[test]
    fn a_diamond_joins_where_its_paths_meet_and_a_fork_to_a_root_exits() {
        let is_root = |i| i == 4 || i == 5;
        assert_eq!(immediate_post_dominators(&readers(false), is_root, 6), [3, 3, 3, 4, 6, 6]);
        assert_eq!(immediate_post_dominators(&readers(true), is_root, 6), [6, 3, 6, 4, 6, 6]);
    }

    #[test]
    fn a_region_counts_its_nodes_and_the_sink_and_fails_on_any_that_does_not_fuse() {
        let readers = readers(false);
        assert_eq!(region_ops(&readers, 0, 3, 8, |_| true), Some(3));
        assert_eq!(region_ops(&readers, 0, 3, 8, |j| j != 2), None);
        assert_eq!(region_ops(&readers, 0, 3, 2, |_| true), None);
    }
}
