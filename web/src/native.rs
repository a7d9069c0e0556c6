//! Native helpers for the examples and tests: the repository's MNIST subset.

use crate::data::Split;
use crate::train::Mnist;
use std::path::Path;

/// data/mnist-10k/ of this repository, read and parsed.
pub fn load_mnist() -> Result<Mnist, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/mnist-10k");
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    Ok(Mnist {
        train: Split::from_gz("train", &read("train-images-idx3-ubyte.gz")?, &read("train-labels-idx1-ubyte.gz")?)?,
        test: Split::from_gz("test", &read("test-images-idx3-ubyte.gz")?, &read("test-labels-idx1-ubyte.gz")?)?,
    })
}
