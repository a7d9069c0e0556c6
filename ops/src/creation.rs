//! Creating tensors: from host data, constants, ranges, identity.

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::{DType, Device, Element, KilnError, Prim, Result};

impl Tensor {
    /// A tensor holding `data` (row-major) with `shape`.
    pub fn from_slice<T: Element>(device: &Device, data: &[T], shape: &[usize]) -> Result<Tensor> {
        let values: Vec<f64> = data.iter().map(|v| v.to_f64()).collect();
        composite("from_slice", || Tensor::from_f64(device, &values, shape, T::DTYPE))
    }

    /// A tensor of `dtype` from f64 values (rounded or wrapped to the dtype).
    pub fn from_f64(device: &Device, values: &[f64], shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n = kiln_core::shape::checked_numel(shape);
        if n != Some(values.len()) {
            let elements = n.map_or("more than fit in memory".into(), |n| format!("{n} elements"));
            return Err(KilnError::Shape {
                op: "from_f64",
                detail: format!("{} values cannot fill shape {shape:?} ({elements})", values.len()),
            });
        }
        Ok(Tensor { node: device.upload(dtype, shape, values)?, device: device.clone() })
    }

    /// A tensor of `shape` and `dtype` with every element `value`.
    pub fn full(device: &Device, shape: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
        Tensor::build(device, Prim::Fill { value, shape: shape.to_vec(), dtype }, &[])
    }

    /// A tensor of `shape` and `dtype` filled with zeros.
    pub fn zeros(device: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
        composite("zeros", || Tensor::full(device, shape, 0.0, dtype))
    }

    /// A tensor of `shape` and `dtype` filled with ones.
    pub fn ones(device: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
        composite("ones", || Tensor::full(device, shape, 1.0, dtype))
    }

    /// A rank-0 tensor.
    pub fn scalar(device: &Device, value: f64, dtype: DType) -> Result<Tensor> {
        composite("scalar", || Tensor::full(device, &[], value, dtype))
    }

    /// `start, start + step, ...` up to (not including) `stop`, as NumPy.
    pub fn arange(device: &Device, start: f64, stop: f64, step: f64, dtype: DType) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !stop.is_finite() {
            return Err(KilnError::Invalid {
                op: "arange",
                detail: format!("start {start}, stop {stop}, step {step}: step must be finite and non-zero"),
            });
        }
        let len = ((stop - start) / step).ceil().max(0.0) as usize;
        Tensor::build(device, Prim::Iota { start, step, len, dtype }, &[])
    }

    /// An `n × m` matrix with ones on the diagonal.
    pub fn eye(device: &Device, n: usize, m: usize, dtype: DType) -> Result<Tensor> {
        composite("eye", || {
            let rows = Tensor::arange(device, 0.0, n as f64, 1.0, DType::I32)?.unsqueeze(1)?;
            let cols = Tensor::arange(device, 0.0, m as f64, 1.0, DType::I32)?.unsqueeze(0)?;
            rows.eq(&cols)?.cast(dtype)
        })
    }

    /// A tensor of `value` with this tensor's dtype, rank 0 (broadcasts).
    pub fn scalar_like(&self, value: f64) -> Result<Tensor> {
        Tensor::scalar(&self.device, value, self.dtype())
    }

    /// Zeros with this tensor's shape and dtype.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(&self.device, self.shape(), self.dtype())
    }

    /// Ones with this tensor's shape and dtype.
    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(&self.device, self.shape(), self.dtype())
    }
}
