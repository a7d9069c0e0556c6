//! Integer weights ([`QuantFormat`]): the product with packed codes, and
//! the conversions between f32 weights and codes. All are graph ops, so
//! they run on every device (the browser's included) and jit captures them.

use crate::Tensor;
use crate::tensor::composite;
use half::f16;
use kiln_core::{DType, KilnError, Prim, QuantFormat, Result};

/// Most rows of x that [`Tensor::quant_matmul`] multiplies with codes
/// unpacked in registers on a GPU, whose workgroup form of that kernel
/// blocks only rows; past it the tuned matmul's tiles reuse each weight.
/// CPU adapters unpack in registers at any batch: their form blocks rows
/// and columns, and at 64 rows of a 4096² weight ran 2.4× as fast as
/// unpacking into f32 and the matmul on lavapipe (docs/BENCHMARKS.md,
/// 'What was tried').
pub const QUANT_MATMUL_MAX_ROWS: usize = 16;

impl Tensor {
    /// `self @ wᵀ` for a weight `w` `[n, k]` held as `format`'s `codes`
    /// (u32 `[n, k / per_word]`) and `scales` (any float dtype,
    /// `[n, ⌈k / group⌉]`), as
    /// [`Tensor::quantize`] makes them: `[.., k]` → `[.., n]`, f32. With
    /// [`QuantFormat::INT8`], x may also be int8 codes packed four per u32
    /// (`[.., k / 4]`), as [`Tensor::quant_matmul_w8a8`] passes them.
    ///
    /// Up to [`QUANT_MATMUL_MAX_ROWS`] rows of x, and at any batch on a CPU
    /// adapter, the codes are unpacked in registers and never stored as f32
    /// (the memory-bound case integer weights are for). Past it on a GPU the
    /// product is compute-bound: the weight is unpacked once into a
    /// transient f32 copy and multiplied by the tuned matmul, whose tiles
    /// reuse each weight across rows.
    pub fn quant_matmul(&self, codes: &Tensor, scales: &Tensor, format: QuantFormat) -> Result<Tensor> {
        let rows = self.shape()[..self.rank().saturating_sub(1)].iter().product::<usize>();
        let in_registers = rows <= QUANT_MATMUL_MAX_ROWS || self.device().info().is_cpu_adapter();
        if in_registers || self.dtype() != DType::F32 {
            return self.op(Prim::QuantMatmul { format }, &[codes, scales]);
        }
        composite("quant_matmul", || self.matmul(&Tensor::dequantize(codes, scales, format)?.t()?))
    }

    /// `self @ wᵀ` for int8 weights (`codes`, `scales` in
    /// [`QuantFormat::INT8`]) with int8 activations too (W8A8): each row of
    /// x is quantized on the fly like a weight row (its largest magnitude
    /// over 127), each word pair's four products summed exactly by
    /// `dot4I8Packed` (one instruction where the adapter has integer dot
    /// products; a polyfill elsewhere) and the sums carried to f32, then
    /// scaled by both scales. `[.., k]` → `[.., n]`, f32. Faster than
    /// [`Tensor::quant_matmul`] where the device multiplies int8 faster than
    /// f32; x's rounding costs accuracy (up to half a code of the row's
    /// largest value per element). For inference: x's codes are rounded, so
    /// x gets no gradient through them, only through its rows' scales; the
    /// weight's scales are differentiable.
    pub fn quant_matmul_w8a8(&self, codes: &Tensor, scales: &Tensor) -> Result<Tensor> {
        let op = "quant_matmul_w8a8";
        if self.rank() == 0 {
            return Err(KilnError::Shape { op, detail: format!("takes x [.., k], got {:?}", self.shape()) });
        }
        if !self.dtype().is_float() {
            return Err(KilnError::DType {
                op,
                detail: format!("takes a float x, got {} {:?}", self.dtype(), self.shape()),
            });
        }
        let k = self.shape()[self.rank() - 1];
        let n = codes.shape().first().copied().unwrap_or(0);
        QuantFormat::INT8.check_weight(op, (n, k), (codes.shape(), scales.shape()), Some(self.shape()))?;
        composite(op, || {
            // x's scales stay f32: an activation row may be far smaller
            // than f16's normal range, and their gradient is x's.
            let x_rows = self.reshape(&[-1, k as isize])?;
            let (x_codes, x_scales) = x_rows.quantize_with(QuantFormat::INT8, DType::F32)?;
            let y = x_codes.op(Prim::QuantMatmul { format: QuantFormat::INT8 }, &[codes, scales])?.mul(&x_scales)?;
            let mut shape: Vec<isize> = self.shape().iter().map(|&d| d as isize).collect();
            *shape.last_mut().expect("rank checked") = n as isize;
            y.reshape(&shape)
        })
    }

    /// This weight `[n, k]` (one row per output channel) as `format`'s
    /// codes and f16 scales: symmetric, each scale the largest magnitude of
    /// its group over the largest code, held within f16's normal range
    /// (at least 2⁻¹⁴: a smaller group's weights are within 2⁻¹⁵ of their
    /// codes; at most 65504, past which the largest codes saturate) and
    /// rounded to f16, each code the weight over its stored scale rounded
    /// to nearest, ties to even.
    pub fn quantize(&self, format: QuantFormat) -> Result<(Tensor, Tensor)> {
        self.quantize_with(format, DType::F16)
    }

    /// [`Tensor::quantize`] with scales of `dtype`: f16 (held within its
    /// normal range) or f32 (an all-zero group's scale 1).
    fn quantize_with(&self, format: QuantFormat, dtype: DType) -> Result<(Tensor, Tensor)> {
        let op = "quantize";
        let [n, k] = self.shape()[..] else {
            return Err(KilnError::Shape { op, detail: format!("takes a weight [n, k], got {:?}", self.shape()) });
        };
        if !self.dtype().is_float() {
            return Err(KilnError::DType {
                op,
                detail: format!("takes a float weight, got {} {:?}", self.dtype(), [n, k]),
            });
        }
        format.shapes(op, n, k)?;
        composite(op, || {
            let (per_word, max_code) = (format.per_word(), format.max_code() as f64);
            let w = self.cast(DType::F32)?.per_group(format)?;
            let top = w.abs()?.max(&[-1], true)?;
            let raw = top.div_scalar(max_code)?;
            // Codes divide by the scale as stored, so a weight stays within
            // half a step of its code whatever f16 rounded (a normal f16 is
            // within 2⁻¹¹ of its value; a subnormal one could be 24% off).
            let scales = if dtype == DType::F16 {
                let normal = raw.maximum(&raw.scalar_like(f16::MIN_POSITIVE.to_f64())?)?;
                normal.minimum(&raw.scalar_like(f16::MAX.to_f64())?)?.cast(DType::F16)?.cast(DType::F32)?
            } else {
                Tensor::where_cond(&top.gt(&top.scalar_like(0.0)?)?, &raw, &raw.scalar_like(1.0)?)?
            };
            let codes = w.div(&scales)?.round()?;
            let codes = codes.maximum(&codes.scalar_like(-max_code)?)?.minimum(&codes.scalar_like(max_code)?)?;
            let codes = codes.reshape(&[n as isize, -1])?.narrow(1, 0, k)?;
            // Two's complement bits of each code, masked to its width and
            // moved to its place in the word; the fields do not overlap, so
            // their sum is their bitwise or.
            let bits = codes.cast(DType::I32)?.cast(DType::U32)?;
            let bits = bits.bitwise_and(&bits.scalar_like(((1u64 << format.bits) - 1) as f64)?)?;
            let bits = bits.reshape(&[n as isize, (k / per_word) as isize, per_word as isize])?;
            let places = Tensor::arange(self.device(), 0.0, 32.0, format.bits as f64, DType::U32)?;
            let words = bits.shift_left(&places)?.sum(&[-1], false)?;
            Ok((words, scales.cast(dtype)?.reshape(&[n as isize, format.groups(k) as isize])?))
        })
    }

    /// A weight `[n, k]` as `[n, groups, group]`, the last group padded
    /// with zeros (which quantize to code 0 and add nothing to a sum).
    pub fn per_group(&self, format: QuantFormat) -> Result<Tensor> {
        let [n, k] = self.shape()[..] else {
            return Err(KilnError::Shape { op: "per_group", detail: format!("takes [n, k], got {:?}", self.shape()) });
        };
        let (groups, group) = (format.groups(k), format.group_len(k));
        let padded = if groups * group > k {
            let zeros = Tensor::zeros(self.device(), &[n, groups * group - k], self.dtype())?;
            Tensor::concat(&[self, &zeros], 1)?
        } else {
            self.clone()
        };
        padded.reshape(&[n as isize, groups as isize, group as isize])
    }

    /// The f32 weight `[n, k]` that `format`'s `codes` and (float) `scales`
    /// stand for.
    pub fn dequantize(codes: &Tensor, scales: &Tensor, format: QuantFormat) -> Result<Tensor> {
        let op = "dequantize";
        let (Some(&n), Some(&words)) = (codes.shape().first(), codes.shape().get(1)) else {
            return Err(KilnError::Shape { op, detail: format!("takes codes [n, words], got {:?}", codes.shape()) });
        };
        let k = words * format.per_word();
        format.check_weight(op, (n, k), (codes.shape(), scales.shape()), None)?;
        if codes.dtype() != DType::U32 || !scales.dtype().is_float() {
            return Err(KilnError::DType {
                op,
                detail: format!("takes u32 codes and float scales, got {} and {}", codes.dtype(), scales.dtype()),
            });
        }
        composite(op, || {
            let width = format.bits as f64;
            // Code j moved to the top of the word, then shifted back down as
            // an i32: sign-extended.
            let up = Tensor::arange(codes.device(), 32.0 - width, -1.0, -width, DType::U32)?;
            let words = codes.reshape(&[n as isize, words as isize, 1])?;
            let top = words.shift_left(&up)?.cast(DType::I32)?;
            let values = top.shift_right(&top.scalar_like(32.0 - width)?)?.cast(DType::F32)?;
            values.reshape(&[n as isize, k as isize])?.mul(&scales.cast(DType::F32)?.per_weight(format, k)?)
        })
    }

    /// Scales `[n, groups]` repeated over the k each covers: `[n, k]`.
    fn per_weight(&self, format: QuantFormat, k: usize) -> Result<Tensor> {
        let (n, groups, group) = (self.shape()[0], format.groups(k), format.group_len(k));
        let repeated = self.reshape(&[n as isize, groups as isize, 1])?.expand(&[n, groups, group])?;
        repeated.reshape(&[n as isize, (groups * group) as isize])?.narrow(1, 0, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_core::Device;

    #[test]
    fn a_quantized_weight_comes_back_within_half_a_step() {
        let dev = Device::cpu();
        // Magnitudes up to 7, and up to 7e-3 and 5.7e-7, whose scales would
        // be subnormal f16s (int8 from 7.8e-3 down, int4 from 4.3e-4).
        for size in [1.0, 1e-3, 8e-8] {
            let w: Vec<f32> = (0..4 * 80).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0 * size).collect();
            within_half_a_step(&dev, &w);
        }
    }

    fn within_half_a_step(dev: &Device, w: &[f32]) {
        let t = Tensor::from_slice(dev, w, &[4, 80]).unwrap();
        for format in [QuantFormat::INT8, QuantFormat::int4(32)] {
            let (codes, scales) = t.quantize(format).unwrap();
            let back = Tensor::dequantize(&codes, &scales, format).unwrap();
            let back = pollster::block_on(back.to_vec::<f32>()).unwrap();
            let scales = pollster::block_on(scales.cast(DType::F32).unwrap().to_vec::<f32>()).unwrap();
            let (group, groups) = (format.group_len(80), format.groups(80));
            for (i, (a, b)) in w.iter().zip(&back).enumerate() {
                let step = scales[i / 80 * groups + i % 80 / group];
                let bound = step * 0.5001 + f32::EPSILON * a.abs();
                assert!((a - b).abs() <= bound, "{format}: {a} came back as {b} (step {step})");
            }
        }
    }
}
