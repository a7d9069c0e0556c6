//! Shapes, NumPy broadcasting, and strided layouts. A layout maps a logical
//! index to an element of a buffer: `offset + Σ coord[d] · strides[d]`, so
//! permute, slice and expand change only the layout and copy nothing.

use crate::error::{Result, shape_err};

pub type Shape = Vec<usize>;

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// [`numel`] for a shape a user gave: `None` past `usize::MAX`.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for d in (0..shape.len()).rev() {
        strides[d] = acc;
        acc *= shape[d] as isize;
    }
    strides
}

/// NumPy broadcasting of two shapes; the error names the op and both shapes.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return shape_err(op, format!("shapes {a:?} and {b:?} cannot be broadcast together"));
            }
        };
    }
    Ok(out)
}

/// Normalize a possibly negative axis against `rank`.
pub fn normalize_axis(op: &'static str, axis: isize, rank: usize) -> Result<usize> {
    let a = if axis < 0 { axis + rank as isize } else { axis };
    if a < 0 || a >= rank as isize {
        return Err(crate::KilnError::Axis { op, axis, rank });
    }
    Ok(a as usize)
}

/// One Python-style slice along one axis: `start:stop:step`, already clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SliceSpec {
    pub start: usize,
    pub len: usize,
    pub step: isize,
}

impl SliceSpec {
    /// Resolve Python slice bounds against a dimension of size `dim`.
    pub fn resolve(
        op: &'static str,
        dim: usize,
        start: Option<isize>,
        stop: Option<isize>,
        step: isize,
    ) -> Result<SliceSpec> {
        if step == 0 {
            return shape_err(op, "slice step must not be zero".into());
        }
        let n = dim as isize;
        let clamp = |v: isize, lo: isize, hi: isize| v.max(lo).min(hi);
        let norm = |v: isize| if v < 0 { v + n } else { v };
        // The span over |step|, rounded up, in unsigned arithmetic: a step
        // near isize::MIN or MAX must not overflow.
        let steps = |span: isize| if span > 0 { (span as usize - 1) / step.unsigned_abs() + 1 } else { 0 };
        let (start, len) = if step > 0 {
            let s = clamp(start.map_or(0, norm), 0, n);
            let e = clamp(stop.map_or(n, norm), 0, n);
            (s, steps(e - s))
        } else {
            let s = clamp(start.map_or(n - 1, norm), -1, n - 1);
            let e = clamp(stop.map_or(-1, norm), -1, n - 1);
            (s, steps(s - e))
        };
        Ok(SliceSpec { start: start.max(0) as usize, len, step })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Shape,
    pub strides: Vec<isize>,
    pub offset: usize,
}

impl Layout {
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Row-major and gap-free (any offset): a kernel may index it as `offset + i`.
    pub fn is_contiguous(&self) -> bool {
        let want = contiguous_strides(&self.shape);
        self.shape.iter().zip(self.strides.iter().zip(&want)).all(|(&d, (&s, &w))| d == 1 || s == w)
    }

    /// The buffer words holding these `dtype` values, `(first, count)`, when
    /// they are one run of whole words a copy can read back as they are:
    /// contiguous, and (packed dtypes) starting on a word.
    pub fn word_span(&self, dtype: crate::DType) -> Option<(u64, u64)> {
        let word_aligned = !dtype.is_packed() || self.offset.is_multiple_of(2);
        if !self.is_contiguous() || !word_aligned {
            return None;
        }
        let first = if dtype.is_packed() { self.offset / 2 } else { self.offset } as u64;
        Some((first, dtype.storage_bytes(self.numel()) / 4))
    }

    pub fn permute(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    pub fn slice(&self, specs: &[SliceSpec]) -> Layout {
        let mut offset = self.offset as isize;
        let mut shape = Vec::with_capacity(specs.len());
        let mut strides = Vec::with_capacity(specs.len());
        for (d, s) in specs.iter().enumerate() {
            if s.len > 0 {
                offset += s.start as isize * self.strides[d];
            }
            shape.push(s.len);
            strides.push(self.strides[d] * s.step);
        }
        Layout { shape, strides, offset: offset.max(0) as usize }
    }

    /// Broadcast to `shape` (same rank, size-1 dims grow with stride 0).
    pub fn expand(&self, shape: &[usize]) -> Layout {
        let lead = shape.len() - self.shape.len();
        let strides = (0..shape.len())
            .map(|d| if d < lead || (self.shape[d - lead] == 1 && shape[d] != 1) { 0 } else { self.strides[d - lead] })
            .collect();
        Layout { shape: shape.to_vec(), strides, offset: self.offset }
    }

    /// Reshape without a copy, as NumPy does: each run of old dimensions
    /// that merges or splits into new ones must be laid out as one stride
    /// progression (a broadcast dimension may still gain or lose size-1
    /// axes). `None` when the data would have to move.
    pub fn reshape(&self, shape: &[usize]) -> Option<Layout> {
        if self.is_contiguous() || numel(shape) == 0 {
            return Some(Layout { offset: self.offset, ..Layout::contiguous(shape) });
        }
        let old: Vec<(usize, isize)> =
            self.shape.iter().zip(&self.strides).filter(|(d, _)| **d != 1).map(|(&d, &s)| (d, s)).collect();
        let new_dims: Vec<usize> = shape.iter().copied().filter(|&d| d != 1).collect();
        let mut new_strides = Vec::with_capacity(new_dims.len());
        let (mut i, mut j) = (0, 0);
        while i < old.len() && j < new_dims.len() {
            // Grow a group of old dims [i, i2) and new dims [j, j2) with equal products.
            let (mut i2, mut j2) = (i + 1, j + 1);
            let (mut po, mut pn) = (old[i].0, new_dims[j]);
            while po != pn {
                if po < pn {
                    po *= old.get(i2)?.0;
                    i2 += 1;
                } else {
                    pn *= *new_dims.get(j2)?;
                    j2 += 1;
                }
            }
            // The old group must be one stride progression.
            if (i..i2 - 1).any(|k| old[k].1 != old[k + 1].1 * old[k + 1].0 as isize) {
                return None;
            }
            let mut stride = old[i2 - 1].1;
            let mut group = Vec::with_capacity(j2 - j);
            for k in (j..j2).rev() {
                group.push(stride);
                stride *= new_dims[k] as isize;
            }
            new_strides.extend(group.into_iter().rev());
            (i, j) = (i2, j2);
        }
        if i != old.len() || j != new_dims.len() {
            return None;
        }
        let mut it = new_strides.into_iter();
        let strides = shape.iter().map(|&d| if d == 1 { 0 } else { it.next().unwrap_or(0) }).collect();
        Some(Layout { shape: shape.to_vec(), strides, offset: self.offset })
    }
}

/// Unravel a flat row-major index into coordinates of `shape`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut coords = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        if shape[d] > 0 {
            coords[d] = i % shape[d];
            i /= shape[d];
        }
    }
    coords
}
