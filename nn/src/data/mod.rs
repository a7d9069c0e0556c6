//! Data: the IDX file format (MNIST's), image datasets with integer labels,
//! and batches in an explicit sample order (shuffle by passing a permutation,
//! e.g. from a random key).

mod batches;
mod idx;
mod mnist;

pub use batches::{Batch, Batches, ImageLayout};
pub use idx::{IdxArray, IdxData, parse_idx, read_idx};
pub use mnist::{Dataset, Mnist};

use kiln_core::KilnError;

/// An error about the data file `source`.
pub(crate) fn file_err(op: &'static str, source: &str, detail: String) -> KilnError {
    KilnError::File { op, path: source.to_string(), detail }
}
