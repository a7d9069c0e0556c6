//! Batches over a dataset in a given order of sample indices: host arrays
//! first (cheap to build ahead), device tensors on demand.

use super::Dataset;
use kiln_core::{Device, KilnError, Result};
use kiln_ops::Tensor;

/// How images are shaped as a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageLayout {
    /// `[B, rows · cols]`, for an MLP.
    Flat,
    /// `[B, 1, rows, cols]`, for convolutions.
    Nchw,
}

/// One batch on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// `len × rows × cols` pixels, row-major.
    pub images: Vec<f32>,
    /// Labels `[len]`, i32 class ids.
    pub labels: Vec<i32>,
    /// Image height in pixels.
    pub rows: usize,
    /// Image width in pixels.
    pub cols: usize,
}

impl Batch {
    /// Samples in this batch.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// `(images, labels)` on `device`: f32 images shaped by `layout`, i32
    /// labels `[B]`.
    pub fn to_device(&self, device: &Device, layout: ImageLayout) -> Result<(Tensor, Tensor)> {
        let b = self.len();
        let shape = match layout {
            ImageLayout::Flat => vec![b, self.rows * self.cols],
            ImageLayout::Nchw => vec![b, 1, self.rows, self.cols],
        };
        Ok((Tensor::from_slice(device, &self.images, &shape)?, Tensor::from_slice(device, &self.labels, &[b])?))
    }
}

/// An iterator of batches of `batch_size` samples taken in `order`.
#[derive(Debug, Clone)]
pub struct Batches<'a> {
    data: &'a Dataset,
    order: Vec<usize>,
    batch_size: usize,
    drop_last: bool,
    next: usize,
}

impl Dataset {
    /// Batches of `batch_size` samples in `order` (indices into the
    /// dataset, e.g. a shuffled permutation, or `0..len` in order); the
    /// last partial batch is dropped when `drop_last`.
    pub fn batches(&self, order: Vec<usize>, batch_size: usize, drop_last: bool) -> Result<Batches<'_>> {
        let err = |detail: String| KilnError::Invalid { op: "batches", detail };
        if batch_size == 0 {
            return Err(err("batch size must be at least 1".into()));
        }
        // The fields are public: a dataset built by hand may not add up.
        if self.images.len() != self.len() * self.pixels() {
            return Err(err(format!(
                "the dataset holds {} pixel values for {} labels of {}×{} images",
                self.images.len(),
                self.len(),
                self.rows,
                self.cols
            )));
        }
        if let Some(i) = order.iter().find(|&&i| i >= self.len()) {
            return Err(err(format!("sample index {i} is out of range for a dataset of {}", self.len())));
        }
        Ok(Batches { data: self, order, batch_size, drop_last, next: 0 })
    }
}

impl Batches<'_> {
    /// Batches left, including this one.
    fn remaining(&self) -> usize {
        let left = self.order.len() - self.next;
        if self.drop_last { left / self.batch_size } else { left.div_ceil(self.batch_size) }
    }
}

impl Iterator for Batches<'_> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        if self.remaining() == 0 {
            return None;
        }
        let end = (self.next + self.batch_size).min(self.order.len());
        let take = &self.order[self.next..end];
        self.next = end;
        let d = self.data;
        Some(Batch {
            images: take.iter().flat_map(|&i| d.image(i).iter().copied()).collect(),
            labels: take.iter().map(|&i| d.labels[i]).collect(),
            rows: d.rows,
            cols: d.cols,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining(), Some(self.remaining()))
    }
}

impl ExactSizeIterator for Batches<'_> {}
