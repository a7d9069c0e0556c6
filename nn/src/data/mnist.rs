//! Image datasets from IDX files (u8 images, u8 labels), and MNIST: the
//! bundled 10,000-digit subset (`data/mnist-10k`) or the full files.

use super::{IdxArray, IdxData, file_err, parse_idx};
use kiln_core::Result;
use std::path::{Path, PathBuf};

/// Grayscale images as f32 in [0, 1] (row-major, `rows × cols` each) and
/// their labels as i32.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// `len × rows × cols` pixels in [0, 1], row-major.
    pub images: Vec<f32>,
    /// One label per image.
    pub labels: Vec<i32>,
    /// Image height in pixels.
    pub rows: usize,
    /// Image width in pixels.
    pub cols: usize,
}

/// The u8 elements of an IDX file of the given rank.
fn bytes_of_rank(a: IdxArray, rank: usize, what: &str, source: &str) -> Result<(Vec<usize>, Vec<u8>)> {
    let IdxArray { dims, data } = a;
    match data {
        IdxData::U8(v) if dims.len() == rank => Ok((dims, v)),
        IdxData::U8(_) => {
            Err(file_err("dataset", source, format!("{what} need rank {rank}, the file has dimensions {dims:?}")))
        }
        other => Err(file_err(
            "dataset",
            source,
            format!("{what} must be unsigned bytes (type code 0x08), the file holds {}", other.type_name()),
        )),
    }
}

impl Dataset {
    /// A dataset from the bytes of an images file (`n × rows × cols` u8)
    /// and a labels file (`n` u8), gzipped or plain; the names are used in
    /// errors.
    pub fn from_idx(images: &[u8], images_name: &str, labels: &[u8], labels_name: &str) -> Result<Dataset> {
        let (dims, pixels) = bytes_of_rank(parse_idx(images, images_name)?, 3, "images", images_name)?;
        let (ldims, labels) = bytes_of_rank(parse_idx(labels, labels_name)?, 1, "labels", labels_name)?;
        if dims[0] != ldims[0] {
            return Err(file_err(
                "dataset",
                images_name,
                format!("{} images but {} labels in {labels_name}", dims[0], ldims[0]),
            ));
        }
        Ok(Dataset {
            images: pixels.iter().map(|&p| p as f32 / 255.0).collect(),
            labels: labels.iter().map(|&l| l as i32).collect(),
            rows: dims[1],
            cols: dims[2],
        })
    }

    /// Read an images file and a labels file.
    pub fn load(images: impl AsRef<Path>, labels: impl AsRef<Path>) -> Result<Dataset> {
        let read = |p: &Path| {
            let name = p.display().to_string();
            std::fs::read(p)
                .map(|b| (b, name.clone()))
                .map_err(|e| file_err("dataset", &name, format!("cannot read: {e}")))
        };
        let ((ib, iname), (lb, lname)) = (read(images.as_ref())?, read(labels.as_ref())?);
        Dataset::from_idx(&ib, &iname, &lb, &lname)
    }

    /// The number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether it holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Pixels per image.
    pub fn pixels(&self) -> usize {
        self.rows * self.cols
    }

    /// Image `i`, row-major.
    pub fn image(&self, i: usize) -> &[f32] {
        &self.images[i * self.pixels()..(i + 1) * self.pixels()]
    }
}

/// MNIST's train and test sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Mnist {
    /// The training split.
    pub train: Dataset,
    /// The test split.
    pub test: Dataset,
}

/// The file stems of each split: the bundled subset names its test split
/// `test-…`, the original distribution `t10k-…`.
const SPLITS: [(&str, &[&str]); 2] = [("train", &["train"]), ("test", &["t10k", "test"])];

/// The first of `{stem}-{kind}-idx{rank}-ubyte[.gz]` present in `dir`.
fn find(dir: &Path, stems: &[&str], kind: &str, rank: usize) -> Result<PathBuf> {
    let names: Vec<String> = stems
        .iter()
        .flat_map(|s| [format!("{s}-{kind}-idx{rank}-ubyte.gz"), format!("{s}-{kind}-idx{rank}-ubyte")])
        .collect();
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file()).ok_or_else(|| {
        file_err("mnist", &dir.display().to_string(), format!("no {kind} file: looked for {}", names.join(", ")))
    })
}

impl Mnist {
    /// Load from a folder holding the bundled subset (`train-…`, `test-…`)
    /// or the full MNIST files (`train-…`, `t10k-…`), gzipped or plain.
    pub fn load(dir: impl AsRef<Path>) -> Result<Mnist> {
        let dir = dir.as_ref();
        let [train, test] = SPLITS.map(|(_, stems)| -> Result<Dataset> {
            Dataset::load(find(dir, stems, "images", 3)?, find(dir, stems, "labels", 1)?)
        });
        Ok(Mnist { train: train?, test: test? })
    }
}
