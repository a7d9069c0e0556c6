//! How a mesh's ranks exchange values: in one process, or across processes
//! (MPI). Reductions are built on gathering, then summing in rank order, so
//! their bits do not depend on the order in which ranks arrive.

use kiln::{KilnError, Result};
use std::ops::Range;

/// The exchange between the ranks of a mesh. A process holds a contiguous
/// range of ranks, one device each.
pub trait Collective: Send + Sync {
    /// Ranks in the whole mesh.
    fn world_size(&self) -> usize;

    /// The ranks this process holds.
    fn local_ranks(&self) -> Range<usize>;

    /// Every rank's vector, in rank order, given this process's ranks'
    /// vectors (in the order of [`Collective::local_ranks`]); lengths may
    /// differ between ranks.
    fn all_gather(&self, local: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>>;

    /// `Ok` when every process gives the same `value` for `what` (a model
    /// shape, a seed, kiln's version); otherwise an error naming `what` and
    /// the ranks that differ from rank 0.
    fn agree(&self, what: &str, value: u64) -> Result<()>;
}

/// Every rank in this process: the mesh of several adapters.
#[derive(Debug, Clone)]
pub struct InProcess {
    world: usize,
}

impl InProcess {
    /// `world` ranks, all in this process.
    pub fn new(world: usize) -> InProcess {
        InProcess { world }
    }
}

impl Collective for InProcess {
    fn world_size(&self) -> usize {
        self.world
    }

    fn local_ranks(&self) -> Range<usize> {
        0..self.world
    }

    fn all_gather(&self, local: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        expect_local_parts(self, local.len())?;
        Ok(local)
    }

    fn agree(&self, _: &str, _: u64) -> Result<()> {
        Ok(())
    }
}

/// A shared world, so that its owner can still reach it (to stop the job
/// on an error) once a mesh holds it.
impl<C: Collective + ?Sized> Collective for std::sync::Arc<C> {
    fn world_size(&self) -> usize {
        (**self).world_size()
    }

    fn local_ranks(&self) -> Range<usize> {
        (**self).local_ranks()
    }

    fn all_gather(&self, local: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        (**self).all_gather(local)
    }

    fn agree(&self, what: &str, value: u64) -> Result<()> {
        (**self).agree(what, value)
    }
}

pub(crate) fn expect_local_parts(c: &dyn Collective, given: usize) -> Result<()> {
    let want = c.local_ranks().len();
    if given != want {
        return Err(KilnError::Invalid {
            op: "all_gather",
            detail: format!("this process holds {want} ranks but gave {given} parts"),
        });
    }
    Ok(())
}

/// The element-wise sum over all ranks of equal-length vectors, accumulated
/// in f64 in rank order and rounded once: every process gets the same bits.
pub(crate) fn all_reduce_sum(c: &dyn Collective, local: Vec<Vec<f32>>) -> Result<Vec<f32>> {
    let parts = c.all_gather(local)?;
    sum_in_rank_order(&parts)
}

fn sum_in_rank_order(parts: &[Vec<f32>]) -> Result<Vec<f32>> {
    let n = parts.first().map_or(0, Vec::len);
    if let Some((rank, p)) = parts.iter().enumerate().find(|(_, p)| p.len() != n) {
        return Err(KilnError::Invalid {
            op: "all_reduce",
            detail: format!("rank {rank} gave {} values, rank 0 gave {n}", p.len()),
        });
    }
    let mut total = vec![0f64; n];
    for part in parts {
        for (t, &v) in total.iter_mut().zip(part) {
            *t += f64::from(v);
        }
    }
    Ok(total.into_iter().map(|v| v as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::mpsc;

    /// A world whose ranks are threads that deliver their parts one after
    /// another in `order`, as processes arrive at a gather in any order;
    /// the gather files each part under its rank. `arrived` records the
    /// order the parts came in.
    struct Arrivals {
        order: Vec<usize>,
        arrived: std::sync::Mutex<Vec<usize>>,
    }

    impl Collective for Arrivals {
        fn world_size(&self) -> usize {
            self.order.len()
        }
        fn local_ranks(&self) -> Range<usize> {
            0..self.order.len()
        }
        fn all_gather(&self, local: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
            expect_local_parts(self, local.len())?;
            let (send, receive) = mpsc::channel();
            for &rank in &self.order {
                let (send, part) = (send.clone(), local[rank].clone());
                std::thread::spawn(move || send.send((rank, part)).unwrap()).join().unwrap();
            }
            drop(send);
            let mut parts = vec![Vec::new(); self.order.len()];
            for (rank, part) in receive {
                self.arrived.lock().unwrap().push(rank);
                parts[rank] = part;
            }
            Ok(parts)
        }
        fn agree(&self, _: &str, _: u64) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_sum_is_the_same_in_any_arrival_order_and_rounds_once() {
        // In f32, (1 + 2^-24) + 2^-24 rounds twice to 1; summed in f64 the
        // two halves survive and round once to 1 + 2^-23. The second
        // column depends on the order of its terms even in f64: 2^60 + 1
        // loses the 1, 2^60 - 2^60 + 1 keeps it.
        let (tiny, big) = (f32::EPSILON / 2.0, 2f32.powi(60));
        let parts = vec![vec![1.0, big], vec![tiny, 1.0], vec![tiny, -big]];
        let total = sum_in_rank_order(&parts).unwrap();
        assert_eq!(total, [1.0 + f32::EPSILON, 0.0]);
        let mut arrival_sums = Vec::new();
        for order in [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] {
            let world = Arrivals { order: order.to_vec(), arrived: Default::default() };
            assert_eq!(all_reduce_sum(&world, parts.clone()).unwrap(), total, "arriving in order {order:?}");
            let arrived = world.arrived.into_inner().unwrap();
            assert_eq!(arrived, order, "the parts arrived as the test ordered them");
            let in_arrival_order: Vec<Vec<f32>> = arrived.iter().map(|&r| parts[r].clone()).collect();
            arrival_sums.push(sum_in_rank_order(&in_arrival_order).unwrap()[1]);
        }
        // Summed as they arrive, the bits would follow the order.
        assert!(arrival_sums.iter().any(|&s| s != 0.0), "{arrival_sums:?}");
    }

    #[test]
    fn mismatched_parts_are_errors() {
        let c = InProcess::new(2);
        let e = all_reduce_sum(&c, vec![vec![1.0]]).unwrap_err();
        assert!(e.to_string().contains("holds 2 ranks but gave 1"), "{e}");
        let e = all_reduce_sum(&c, vec![vec![1.0], vec![1.0, 2.0]]).unwrap_err();
        assert!(e.to_string().contains("rank 1 gave 2 values, rank 0 gave 1"), "{e}");
    }
}
