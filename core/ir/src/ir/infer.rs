//! Shape and dtype inference: one arm per primitive. Every user mistake is
//! caught here, at graph-building time, with the op and shapes in the error.

use super::{Prim, TypeInfo};
use crate::dtype::DType;
use crate::error::{KilnError, Result, dtype_err, dtype_mismatch, matmul_misaligned, shape_err};
use crate::quant::QuantFormat;
use crate::shape::numel;

pub(super) fn infer(prim: &Prim, inputs: &[&TypeInfo]) -> Result<TypeInfo> {
    let op = prim.name();
    let arity = match prim {
        Prim::Input { .. } | Prim::Fill { .. } | Prim::Iota { .. } => 0,
        Prim::Binary(_) | Prim::Matmul | Prim::Gather { .. } => 2,
        Prim::Where | Prim::QuantMatmul { .. } => 3,
        Prim::Concat { .. } => inputs.len().max(1),
        Prim::Unary(_)
        | Prim::Cast { .. }
        | Prim::Reduce { .. }
        | Prim::ArgReduce { .. }
        | Prim::Reshape { .. }
        | Prim::Permute { .. }
        | Prim::Slice { .. }
        | Prim::Expand { .. } => 1,
    };
    if inputs.len() != arity {
        return Err(KilnError::Invalid { op, detail: format!("takes {arity} inputs, got {}", inputs.len()) });
    }
    match prim {
        Prim::Input { shape, dtype } | Prim::Fill { shape, dtype, .. } => {
            Ok(TypeInfo { shape: shape.clone(), dtype: *dtype })
        }
        Prim::Iota { len, dtype, .. } => {
            if *dtype == DType::Bool {
                return dtype_err(op, "arange cannot produce bool".into());
            }
            Ok(TypeInfo { shape: vec![*len], dtype: *dtype })
        }
        Prim::Unary(u) => {
            let x = inputs[0];
            if !u.accepts(x.dtype) {
                return dtype_err(op, format!("not defined for {} (shape {:?})", x.dtype, x.shape));
            }
            Ok(x.clone())
        }
        Prim::Binary(b) => {
            let (x, y) = (inputs[0], inputs[1]);
            if x.shape != y.shape {
                return shape_err(op, format!("shapes {:?} and {:?} differ", x.shape, y.shape));
            }
            if x.dtype != y.dtype {
                return Err(dtype_mismatch(op, (x.dtype, &x.shape), (y.dtype, &y.shape)));
            }
            if !b.accepts(x.dtype) {
                return dtype_err(op, format!("not defined for {} (shape {:?})", x.dtype, x.shape));
            }
            let dtype = if b.is_comparison() { DType::Bool } else { x.dtype };
            Ok(TypeInfo { shape: x.shape.clone(), dtype })
        }
        Prim::Where => {
            let (c, a, b) = (inputs[0], inputs[1], inputs[2]);
            if c.shape != a.shape || a.shape != b.shape {
                return shape_err(op, format!("shapes {:?}, {:?} and {:?} differ", c.shape, a.shape, b.shape));
            }
            if c.dtype != DType::Bool {
                return dtype_err(op, format!("condition must be bool, got {}", c.dtype));
            }
            if a.dtype != b.dtype {
                return Err(dtype_mismatch(op, (a.dtype, &a.shape), (b.dtype, &b.shape)));
            }
            Ok(a.clone())
        }
        Prim::Cast { to } => Ok(TypeInfo { shape: inputs[0].shape.clone(), dtype: *to }),
        Prim::Reduce { op: r, axes, keepdim } => {
            let x = inputs[0];
            if !x.dtype.is_numeric() {
                return dtype_err(op, format!("not defined for bool (shape {:?}); cast first", x.shape));
            }
            check_axes(op, axes, x.shape.len())?;
            if r.identity().is_none() && axes.iter().any(|&a| x.shape[a] == 0) {
                return shape_err(op, format!("cannot reduce a zero-size axis of shape {:?}", x.shape));
            }
            Ok(TypeInfo { shape: reduced_shape(&x.shape, axes, *keepdim), dtype: x.dtype })
        }
        Prim::ArgReduce { axis, keepdim, .. } => {
            let x = inputs[0];
            if !x.dtype.is_numeric() {
                return dtype_err(op, format!("not defined for bool (shape {:?})", x.shape));
            }
            check_axes(op, &[*axis], x.shape.len())?;
            if x.shape[*axis] == 0 {
                return shape_err(op, format!("cannot reduce a zero-size axis of shape {:?}", x.shape));
            }
            Ok(TypeInfo { shape: reduced_shape(&x.shape, &[*axis], *keepdim), dtype: DType::I32 })
        }
        Prim::Reshape { shape } => {
            let x = inputs[0];
            if numel(shape) != numel(&x.shape) {
                return shape_err(
                    op,
                    format!("cannot reshape {:?} ({} elements) to {:?}", x.shape, numel(&x.shape), shape),
                );
            }
            Ok(TypeInfo { shape: shape.clone(), dtype: x.dtype })
        }
        Prim::Permute { perm } => {
            let x = inputs[0];
            let mut seen = vec![false; x.shape.len()];
            let valid = perm.len() == x.shape.len()
                && perm.iter().all(|&p| p < seen.len() && !std::mem::replace(&mut seen[p], true));
            if !valid {
                return shape_err(op, format!("{perm:?} is not a permutation of the axes of {:?}", x.shape));
            }
            Ok(TypeInfo { shape: perm.iter().map(|&p| x.shape[p]).collect(), dtype: x.dtype })
        }
        Prim::Slice { specs } => {
            let x = inputs[0];
            if specs.len() != x.shape.len() {
                return shape_err(op, format!("{} slice specs for shape {:?}", specs.len(), x.shape));
            }
            Ok(TypeInfo { shape: specs.iter().map(|s| s.len).collect(), dtype: x.dtype })
        }
        Prim::Expand { shape } => {
            let x = inputs[0];
            let lead = shape.len().checked_sub(x.shape.len());
            let ok = lead.is_some_and(|lead| x.shape.iter().enumerate().all(|(d, &s)| s == shape[d + lead] || s == 1));
            if !ok {
                return shape_err(op, format!("cannot broadcast {:?} to {:?}", x.shape, shape));
            }
            Ok(TypeInfo { shape: shape.clone(), dtype: x.dtype })
        }
        Prim::Matmul => {
            let (a, b) = (inputs[0], inputs[1]);
            let (ra, rb) = (a.shape.len(), b.shape.len());
            if ra < 2 || ra != rb || a.shape[..ra - 2] != b.shape[..rb - 2] {
                return shape_err(op, format!("shapes {:?} and {:?} have different batch axes", a.shape, b.shape));
            }
            if a.shape[ra - 1] != b.shape[rb - 2] {
                return Err(matmul_misaligned(op, &a.shape, &b.shape, a.shape[ra - 1], b.shape[rb - 2]));
            }
            if a.dtype != b.dtype || !a.dtype.is_float() {
                return dtype_err(
                    op,
                    format!(
                        "needs two inputs of one float dtype, got {} {:?} and {} {:?}",
                        a.dtype, a.shape, b.dtype, b.shape
                    ),
                );
            }
            let mut shape = a.shape.clone();
            shape[ra - 1] = b.shape[rb - 1];
            Ok(TypeInfo { shape, dtype: a.dtype })
        }
        Prim::Concat { axis } => {
            let first = inputs[0];
            check_axes(op, &[*axis], first.shape.len())?;
            let mut shape = first.shape.clone();
            shape[*axis] = 0;
            for x in inputs {
                let same_rest = x.shape.len() == first.shape.len()
                    && x.shape.iter().zip(&first.shape).enumerate().all(|(d, (p, q))| d == *axis || p == q);
                if !same_rest {
                    return shape_err(op, format!("shapes {:?} and {:?} differ off axis {axis}", first.shape, x.shape));
                }
                if x.dtype != first.dtype {
                    return dtype_err(op, format!("dtypes {} and {} differ", first.dtype, x.dtype));
                }
                shape[*axis] += x.shape[*axis];
            }
            Ok(TypeInfo { shape, dtype: first.dtype })
        }
        Prim::Gather { axis } => {
            let (src, idx) = (inputs[0], inputs[1]);
            if !idx.dtype.is_int() {
                return dtype_err(op, format!("indices must be i32 or u32, got {}", idx.dtype));
            }
            check_axes(op, &[*axis], src.shape.len())?;
            let fits = idx.shape.len() == src.shape.len()
                && idx.shape.iter().zip(&src.shape).enumerate().all(|(d, (i, s))| d == *axis || i <= s);
            if !fits {
                return shape_err(
                    op,
                    format!("index shape {:?} does not fit source shape {:?} on axis {axis}", idx.shape, src.shape),
                );
            }
            Ok(TypeInfo { shape: idx.shape.clone(), dtype: src.dtype })
        }
        Prim::QuantMatmul { format } => quant_matmul(*format, inputs[0], inputs[1], inputs[2]),
    }
}

/// `x` `[.., k]` (f32) against `n` rows of `k` integer weights: the codes
/// `[n, k / per_word]` (u32) and scales `[n, ⌈k / group⌉]` (any float
/// dtype: [`QuantFormat`] makes f16).
fn quant_matmul(format: QuantFormat, x: &TypeInfo, codes: &TypeInfo, scales: &TypeInfo) -> Result<TypeInfo> {
    let op = "quant_matmul";
    let (Some(&x_last), Some(&n)) = (x.shape.last(), codes.shape.first()) else {
        return shape_err(op, format!("x {:?} and codes {:?} need at least one axis", x.shape, codes.shape));
    };
    // x as f32, or (int8 weights only) as int8 codes packed four per u32.
    let packed_x = x.dtype == DType::U32 && format == QuantFormat::INT8;
    if !(x.dtype == DType::F32 || packed_x) || codes.dtype != DType::U32 || !scales.dtype.is_float() {
        return dtype_err(
            op,
            format!(
                "takes x f32 (or u32 int8 codes with int8 per-channel weights), codes u32 and float scales, got {} {:?}, {} {:?} \
                 and {} {:?} ({format})",
                x.dtype, x.shape, codes.dtype, codes.shape, scales.dtype, scales.shape
            ),
        );
    }
    let k = if packed_x { x_last * format.per_word() } else { x_last };
    // Kernels sum int8 × int8 products in i32, codes down to -128 (quantize
    // never writes it, but codes may come from elsewhere): k · 128² must fit.
    if packed_x && k > i32::MAX as usize / (128 * 128) {
        return shape_err(
            op,
            format!(
                "x {:?} (int8 codes, k = {k}) and codes {:?}: past k = 131,071 an i32 sum of int8 products could overflow",
                x.shape, codes.shape
            ),
        );
    }
    format.check_weight(op, (n, k), (&codes.shape, &scales.shape), Some(&x.shape))?;
    let mut shape = x.shape.clone();
    *shape.last_mut().expect("checked above") = n;
    Ok(TypeInfo { shape, dtype: DType::F32 })
}

fn check_axes(op: &'static str, axes: &[usize], rank: usize) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        if a >= rank {
            return Err(KilnError::Axis { op, axis: a as isize, rank });
        }
        if axes[..i].contains(&a) {
            return shape_err(op, format!("axis {a} given twice"));
        }
    }
    Ok(())
}

pub(crate) fn reduced_shape(shape: &[usize], axes: &[usize], keepdim: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &s)| match (axes.contains(&d), keepdim) {
            (false, _) => Some(s),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}
