//! Data parallelism: a [`Mesh`] of devices (the adapters of this process,
//! or one device per process across an MPI world), tensors laid across it
//! by a [`Sharding`], and ops on [`Sharded`] tensors whose results follow
//! the shardings of their operands. A reduction over a split axis leaves a
//! [`Sharding::Partial`] sum, which [`Sharded::all_reduce`] completes; the
//! gradient of a replicated parameter is all-reduced by [`value_and_grad`].
//!
//! Every all-reduce sums the ranks' parts in rank order, in f64, whatever
//! order they arrive in: the same world size gives the same bits.
//!
//! ```
//! use kiln::prelude::*;
//! use kiln_shard::{Mesh, Sharded, Sharding};
//! # fn main() -> kiln::Result<()> { kiln::block_on(async {
//! let mesh = Mesh::local(vec![Device::cpu(), Device::cpu()])?;
//! let x = Sharded::from_slice(&mesh, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], Sharding::Split(0))?;
//! let total = x.sum(&[0], false)?; // each rank sums its rows: a partial sum
//! assert_eq!(total.sharding(), Sharding::Partial);
//! assert_eq!(total.all_reduce().await?.gather().await?.data, [9.0, 12.0]);
//! # Ok(()) }) }
//! ```
#![deny(missing_docs)]

mod collective;
mod grad;
mod mesh;
#[cfg(feature = "mpi")]
mod mpi_world;
#[cfg(all(feature = "nccl", not(target_arch = "wasm32")))]
mod nccl_world;
mod ravel;
mod replicas;
mod sharded;
mod sharding;

pub use collective::{Collective, InProcess};
pub use grad::value_and_grad;
pub use mesh::Mesh;
#[cfg(feature = "mpi")]
pub use mpi_world::MpiWorld;
#[cfg(all(feature = "nccl", not(target_arch = "wasm32")))]
pub use nccl_world::{NcclWorld, nccl_available};
pub use ravel::{ravel, unravel};
pub use replicas::Replicas;
pub use sharded::{ShardTensor, Sharded};
pub use sharding::Sharding;
