//! How a tensor lies across the ranks of a mesh.

use std::fmt;

/// How a tensor's values are laid across a mesh's ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// Every rank holds the whole tensor.
    Replicated,
    /// Rank `r` holds the `r`-th contiguous block along an axis (negative
    /// counts from the end): with `n` along it and `w` ranks, the first
    /// `n % w` ranks hold `n / w + 1`, the rest `n / w`.
    Split(isize),
    /// Every rank holds a tensor of the full shape, and the value is their
    /// sum: what a reduction over a split axis leaves before its all-reduce.
    Partial,
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sharding::Replicated => f.write_str("replicated"),
            Sharding::Split(axis) => write!(f, "split along axis {axis}"),
            Sharding::Partial => f.write_str("partial (awaiting all-reduce)"),
        }
    }
}

/// The start and length of rank `rank`'s block of `n` items over `world` ranks.
pub(crate) fn block(n: usize, world: usize, rank: usize) -> (usize, usize) {
    let (base, extra) = (n / world, n % world);
    let len = base + usize::from(rank < extra);
    (rank * base + rank.min(extra), len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_tile_the_axis_with_the_larger_ones_first() {
        for (n, world) in [(10, 3), (64, 2), (2, 3), (0, 2), (7, 7)] {
            let blocks: Vec<_> = (0..world).map(|r| block(n, world, r)).collect();
            let mut next = 0;
            for &(start, len) in &blocks {
                assert_eq!(start, next, "n {n} world {world}: {blocks:?}");
                next += len;
            }
            assert_eq!(next, n);
            let lens: Vec<usize> = blocks.iter().map(|b| b.1).collect();
            assert!(lens.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1), "{lens:?}");
        }
    }
}
