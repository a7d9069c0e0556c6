//! Raw matmul items through cuBLAS: kiln's row-major `out = a @ b` (A
//! `[.., m, k]`, B `[.., k, n]`, any strides; out contiguous) as one
//! strided batched sgemm in cuBLAS's column-major terms. cuBLAS sees the
//! row-major C as its transpose, so it computes Cᵀ = Bᵀ·Aᵀ: B comes first.
//! A layout cuBLAS cannot read (no unit stride in the last two dims,
//! batch dims that do not flatten to one stride) keeps kiln's own kernel.

use kiln_ir::dtype::DType;
use kiln_ir::shape::Layout;

/// One strided batched cuBLAS product (column-major; addresses in bytes):
/// `cublasSgemmStridedBatched` for f32 operands, `cublasGemmStridedBatchedEx`
/// for f16 ones (accumulating and writing f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gemm {
    /// f32, f16 or bf16: A's and B's dtype (C is f32).
    pub operands: DType,
    pub trans_a: bool,
    pub trans_b: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub lda: usize,
    pub stride_a: usize,
    pub b: u64,
    pub ldb: usize,
    pub stride_b: usize,
    pub c: u64,
    pub ldc: usize,
    pub stride_c: usize,
    pub batch: usize,
    /// Products from operands rounded to TF32 (10-bit mantissas) on tensor
    /// cores, as `Device::set_matmul_tf32` asks; else exact f32.
    pub tf32: bool,
    /// What cuBLASLt applies before writing C (`None`: plain cuBLAS).
    pub epilogue: GemmEpilogue,
    /// The bias's address, for an epilogue with one: `m` f32 values, one
    /// per row of cuBLAS's C (a column of kiln's output).
    pub bias: u64,
}

/// An epilogue cuBLASLt runs inside the product (`CUBLASLT_EPILOGUE_*`):
/// a bias along kiln's last axis, then ReLU or GELU (the tanh form, which
/// is kiln's too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GemmEpilogue {
    None,
    Bias,
    Relu,
    Gelu,
    BiasRelu,
    BiasGelu,
}

/// How cuBLAS reads a row-major-indexed matrix X[r, c] (strides `sr`,
/// `sc`) as the column-major c×r matrix Xᵀ: (transposed, leading
/// dimension), or `None`.
fn operand(r: usize, c: usize, sr: isize, sc: isize) -> Option<(bool, usize)> {
    if (sc == 1 || c == 1) && (r == 1 || sr >= c as isize) {
        // Stored as Xᵀ already: element (j, i) of the c×r matrix at i·ld + j.
        return Some((false, if r == 1 { c.max(1) } else { sr as usize }));
    }
    if (sr == 1 || r == 1) && (c == 1 || sc >= r as isize) {
        // Stored as X (r×c, column-major): cuBLAS transposes it.
        return Some((true, if c == 1 { r.max(1) } else { sc as usize }));
    }
    None
}

/// The one stride over the flattened batch index that `strides` amount
/// to over `dims`, if there is one (0: broadcast).
fn batch_stride(dims: &[usize], strides: &[isize]) -> Option<usize> {
    let mut unit: Option<isize> = None;
    // Steps of the flattened batch index per step along this dim.
    let mut inner = 1isize;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d > 1 {
            // The innermost dim that is not 1 sets the unit (`inner` is 1 there).
            let u = *unit.get_or_insert(s);
            if s < 0 || s != u * inner {
                return None;
            }
        }
        inner *= d as isize;
    }
    Some(unit.unwrap_or(0) as usize)
}

/// The cuBLAS call computing the raw f32 product of `a` and `b` into the
/// contiguous `out` of `shape`, its addresses the offsets into the buffers
/// ([`Gemm::located`] adds the buffers'); `None` where cuBLAS cannot read
/// the operands as they lie (or there is nothing to do).
pub fn plan(a: &Layout, b: &Layout, shape: &[usize], operands: DType) -> Option<Gemm> {
    let folded = fold_batch_into_rows(a, b, shape).and_then(|(a, b, shape)| plan_as_laid(&a, &b, &shape, operands));
    folded.or_else(|| plan_as_laid(a, b, shape, operands))
}

/// [`plan`] for the layouts as given.
fn plan_as_laid(a: &Layout, b: &Layout, shape: &[usize], operands: DType) -> Option<Gemm> {
    let size = match operands {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
        _ => return None,
    };
    let rank = shape.len();
    let (m, n, k) = (a.shape[rank - 2], b.shape[rank - 1], a.shape[rank - 1]);
    let batch_dims = &shape[..rank - 2];
    let batch: usize = batch_dims.iter().product();
    let fits = |x: usize| x <= i32::MAX as usize;
    if m == 0 || n == 0 || k == 0 || batch == 0 || ![m, n, k, batch].into_iter().all(fits) {
        return None;
    }
    // cuBLAS's first operand is Bᵀ (n×k), its second Aᵀ (k×m).
    let (trans_a, lda) = operand(k, n, b.strides[rank - 2], b.strides[rank - 1])?;
    let (trans_b, ldb) = operand(m, k, a.strides[rank - 2], a.strides[rank - 1])?;
    let stride_a = batch_stride(batch_dims, &b.strides[..rank - 2])?;
    let stride_b = batch_stride(batch_dims, &a.strides[..rank - 2])?;
    if ![lda, ldb, stride_a, stride_b].into_iter().all(fits) {
        return None;
    }
    Some(Gemm {
        operands,
        trans_a,
        trans_b,
        m: n,
        n: m,
        k,
        a: size * b.offset as u64,
        lda,
        stride_a,
        b: size * a.offset as u64,
        ldb,
        stride_b,
        c: 0,
        ldc: n,
        stride_c: m * n,
        batch,
        tf32: false,
        epilogue: GemmEpilogue::None,
        bias: 0,
    })
}

/// A batched product with B the same for every batch (a dense layer over
/// `[batch.., rows, features]`) whose A rows follow on from batch to batch
/// is one product of all the rows: `a` as `[batch·m, k]`, `b` as `[k, n]`.
/// One large call runs faster than a batch of small ones, and cuBLASLt's
/// epilogues take it.
fn fold_batch_into_rows(a: &Layout, b: &Layout, shape: &[usize]) -> Option<(Layout, Layout, Vec<usize>)> {
    let rank = shape.len();
    let batch_dims = &shape[..rank.checked_sub(2)?];
    if batch_dims.iter().product::<usize>() < 2 || batch_stride(batch_dims, &b.strides[..rank - 2]) != Some(0) {
        return None;
    }
    let (m, row) = (a.shape[rank - 2], a.strides[rank - 2]);
    if row <= 0 || batch_stride(batch_dims, &a.strides[..rank - 2])? != m * row as usize {
        return None;
    }
    let rows = batch_dims.iter().product::<usize>() * m;
    let a = Layout { shape: vec![rows, a.shape[rank - 1]], strides: vec![row, a.strides[rank - 1]], offset: a.offset };
    let b = Layout { shape: b.shape[rank - 2..].to_vec(), strides: b.strides[rank - 2..].to_vec(), offset: b.offset };
    Some((a, b, vec![rows, shape[rank - 1]]))
}

impl Gemm {
    /// The cuBLAS routine, as plans and logs name it.
    pub fn name(&self) -> &'static str {
        match (self.operands, self.epilogue) {
            (DType::F16, _) => "cublas_gemm_ex_f16",
            (DType::BF16, _) => "cublas_gemm_ex_bf16",
            (_, GemmEpilogue::None) => "cublas_sgemm",
            (_, GemmEpilogue::Bias) => "cublaslt_sgemm_bias",
            (_, GemmEpilogue::Relu) => "cublaslt_sgemm_relu",
            (_, GemmEpilogue::Gelu) => "cublaslt_sgemm_gelu",
            (_, GemmEpilogue::BiasRelu) => "cublaslt_sgemm_bias_relu",
            (_, GemmEpilogue::BiasGelu) => "cublaslt_sgemm_bias_gelu",
        }
    }

    /// The call over buffers at these addresses: kiln's A, B, out and the
    /// bias's buffer (cuBLAS reads B as its first operand).
    pub fn located(self, a: u64, b: u64, out: u64, bias: Option<u64>) -> Gemm {
        Gemm { a: self.a + b, b: self.b + a, c: self.c + out, bias: self.bias + bias.unwrap_or(0), ..self }
    }
}

/// `x` rounded to TF32 (the nearest value with a 10-bit mantissa, ties to
/// even), as tensor cores read f32 operands in TF32 mode.
pub fn to_tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let bits = x.to_bits();
    f32::from_bits(bits.wrapping_add(0x0fff + ((bits >> 13) & 1)) & !0x1fff)
}

/// GELU in its tanh form, as cuBLASLt's epilogue computes it.
fn gelu(x: f32) -> f32 {
    kiln_ir::interp::gelu(f64::from(x)) as f32
}

/// Element `i` of an operand at `base`, as f32.
///
/// # Safety
/// `base` must hold element `i` of `dtype` (f32, f16 or bf16).
unsafe fn operand_at(base: u64, i: usize, dtype: DType) -> f32 {
    // SAFETY: the caller's promise.
    unsafe {
        match dtype {
            DType::F16 => half::f16::from_bits(*((base as usize + 2 * i) as *const u16)).to_f32(),
            DType::BF16 => half::bf16::from_bits(*((base as usize + 2 * i) as *const u16)).to_f32(),
            _ => *((base as usize + 4 * i) as *const f32),
        }
    }
}

/// What cuBLAS computes for `g`, on the host (the host engine's cuBLAS).
///
/// # Safety
/// The addresses must hold every element `g` reads (of its operands'
/// dtype) and writes (f32).
pub unsafe fn host_gemm(g: &Gemm) {
    for p in 0..g.batch {
        for j in 0..g.n {
            for i in 0..g.m {
                let mut acc = 0f32;
                for l in 0..g.k {
                    // op(A)[i, l] and op(B)[l, j], column-major.
                    let a = if g.trans_a { l + i * g.lda } else { i + l * g.lda };
                    let b = if g.trans_b { j + l * g.ldb } else { l + j * g.ldb };
                    // SAFETY: the caller vouches for the operands' extent.
                    let (x, y) = unsafe {
                        (
                            operand_at(g.a, p * g.stride_a + a, g.operands),
                            operand_at(g.b, p * g.stride_b + b, g.operands),
                        )
                    };
                    acc += if g.tf32 { to_tf32(x) * to_tf32(y) } else { x * y };
                }
                // SAFETY: an epilogue with a bias has one per row.
                let bias = || unsafe { *((g.bias as usize + 4 * i) as *const f32) };
                acc = match g.epilogue {
                    GemmEpilogue::None => acc,
                    GemmEpilogue::Bias => acc + bias(),
                    GemmEpilogue::Relu => acc.max(0.0),
                    GemmEpilogue::Gelu => gelu(acc),
                    GemmEpilogue::BiasRelu => (acc + bias()).max(0.0),
                    GemmEpilogue::BiasGelu => gelu(acc + bias()),
                };
                // SAFETY: as above, for the output.
                unsafe { *((g.c as usize + 4 * (p * g.stride_c + i + j * g.ldc)) as *mut f32) = acc };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(shape: &[usize], strides: &[isize]) -> Layout {
        Layout { shape: shape.to_vec(), strides: strides.to_vec(), offset: 0 }
    }

    /// `a @ b` through `plan` and `host_sgemm`, against a direct loop over
    /// the row-major layouts.
    fn check(a: &Layout, b: &Layout, shape: &[usize]) {
        let len = |l: &Layout| {
            l.offset + l.shape.iter().zip(&l.strides).map(|(&d, &s)| (d.max(1) - 1) * s as usize).sum::<usize>() + 1
        };
        let xs: Vec<f32> = (0..len(a)).map(|i| (i % 7) as f32 - 3.0).collect();
        let ys: Vec<f32> = (0..len(b)).map(|i| (i % 5) as f32 * 0.5).collect();
        let total: usize = shape.iter().product();
        let mut out = vec![0f32; total];
        let g = plan(a, b, shape, DType::F32).expect("planned").located(
            xs.as_ptr() as u64,
            ys.as_ptr() as u64,
            out.as_mut_ptr() as u64,
            None,
        );
        // SAFETY: the buffers span the layouts.
        unsafe { host_gemm(&g) };
        let rank = shape.len();
        let (m, n, k) = (shape[rank - 2], shape[rank - 1], a.shape[rank - 1]);
        for (index, got) in out.iter().enumerate() {
            let (batch, i, j) = (index / (m * n), index / n % m, index % n);
            let mut rest = batch;
            let (mut oa, mut ob) = (a.offset as isize, b.offset as isize);
            for d in (0..rank - 2).rev() {
                let at = rest % shape[d];
                rest /= shape[d];
                oa += at as isize * a.strides[d];
                ob += at as isize * b.strides[d];
            }
            let want: f32 = (0..k)
                .map(|l| {
                    xs[(oa + i as isize * a.strides[rank - 2] + l as isize * a.strides[rank - 1]) as usize]
                        * ys[(ob + l as isize * b.strides[rank - 2] + j as isize * b.strides[rank - 1]) as usize]
                })
                .sum();
            assert_eq!(*got, want, "element {index} of {shape:?}");
        }
    }

    #[test]
    fn row_major_transposed_batched_and_broadcast_operands_are_read_as_they_lie() {
        check(&layout(&[3, 4], &[4, 1]), &layout(&[4, 5], &[5, 1]), &[3, 5]);
        check(&layout(&[3, 4], &[1, 3]), &layout(&[4, 5], &[1, 4]), &[3, 5]);
        check(&layout(&[2, 3, 4], &[12, 4, 1]), &layout(&[2, 4, 5], &[0, 5, 1]), &[2, 3, 5]);
        check(&layout(&[2, 2, 3, 4], &[24, 12, 4, 1]), &layout(&[2, 2, 4, 5], &[40, 20, 1, 4]), &[2, 2, 3, 5]);
        check(&layout(&[1, 4], &[4, 1]), &layout(&[4, 1], &[1, 1]), &[1, 1]);
        let mut offset = layout(&[3, 4], &[6, 1]);
        offset.offset = 2;
        check(&offset, &layout(&[4, 5], &[5, 1]), &[3, 5]);
    }

    /// A batch over one B whose A rows follow on is one product of all
    /// the rows; A's rows strided apart per batch stay a batch.
    #[test]
    fn a_dense_layer_over_a_batch_is_one_product() {
        let b = layout(&[2, 4, 5], &[0, 5, 1]);
        let folded = plan(&layout(&[2, 3, 4], &[12, 4, 1]), &b, &[2, 3, 5], DType::F32).unwrap();
        assert_eq!((folded.batch, folded.n, folded.m, folded.k), (1, 6, 5, 4));
        let apart = plan(&layout(&[2, 3, 4], &[16, 4, 1]), &b, &[2, 3, 5], DType::F32).unwrap();
        assert_eq!((apart.batch, apart.n, apart.stride_a, apart.stride_b), (2, 3, 0, 16));
        check(&layout(&[2, 3, 4], &[16, 4, 1]), &b, &[2, 3, 5]);
    }

    #[test]
    fn tf32_keeps_ten_mantissa_bits_rounding_to_nearest() {
        assert_eq!(to_tf32(1.0), 1.0);
        assert_eq!(to_tf32(1.0 + 2f32.powi(-10)), 1.0 + 2f32.powi(-10), "representable");
        assert_eq!(to_tf32(1.0 + 2f32.powi(-12)), 1.0, "below half an ulp: down");
        assert_eq!(to_tf32(1.0 + 3.0 * 2f32.powi(-12)), 1.0 + 2f32.powi(-10), "above half an ulp: up");
        assert_eq!(to_tf32(1.0 + 2f32.powi(-11)), 1.0, "a tie goes to even");
        assert_eq!(to_tf32(-1.0 - 3.0 * 2f32.powi(-12)), -1.0 - 2f32.powi(-10));
        assert!(to_tf32(f32::NAN).is_nan());
    }

    #[test]
    fn layouts_cublas_cannot_read_keep_kiln_s_kernel() {
        let b = layout(&[4, 5], &[5, 1]);
        assert_eq!(plan(&layout(&[3, 4], &[8, 2]), &b, &[3, 5], DType::F32), None, "no unit stride");
        let batched = layout(&[2, 3, 3, 4], &[100, 12, 4, 1]);
        assert_eq!(
            plan(&batched, &layout(&[2, 3, 4, 5], &[60, 20, 5, 1]), &[2, 3, 3, 5], DType::F32),
            None,
            "two strides"
        );
        assert_eq!(plan(&layout(&[3, 0], &[0, 1]), &layout(&[0, 5], &[5, 1]), &[3, 5], DType::F32), None, "k = 0");
    }
}
