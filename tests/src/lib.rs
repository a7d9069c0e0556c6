//! The cross-adapter conformance suite: every op, on every adapter found,
//! against the CPU reference interpreter (f64), with per-op tolerances.
//!
//! `cargo test -p kiln-conformance` runs it; `cargo run --release -p
//! kiln-conformance --bin conformance` also rewrites docs/CONFORMANCE.md.

pub mod adapters;
pub mod batch_check;
pub mod batch_grad_check;
pub mod bindings;
pub mod browser;
pub mod cases;
// The CUDA checks run natively only (the browser page builds this crate too).
#[cfg(not(target_arch = "wasm32"))]
pub mod cuda_kernels;
pub mod fused_attention;
pub mod golden;
pub mod grad_cases;
pub mod grad_check;
pub mod matmul_family;
pub mod nn_cases;
pub mod quant_cases;
pub mod report;
pub mod rng;
pub mod transformer_cases;
pub mod validation;
pub mod vmap_checks;
pub mod workgroup_reductions;

/// Skips by name, or failures where the run requires the thing.
pub use kiln_require as require;

use kiln::prelude::*;

/// How close an adapter's result must be to the reference: each element
/// within `abs + rel · |reference|`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tol {
    pub abs: f64,
    pub rel: f64,
}

impl Tol {
    pub const EXACT: Tol = Tol { abs: 0.0, rel: 0.0 };
    /// Arithmetic that rounds once or twice in f32.
    pub const F32: Tol = Tol { abs: 1e-6, rel: 1e-5 };
    /// Transcendentals: GPU libraries promise a few ulp, not correct rounding.
    pub const MATH: Tol = Tol { abs: 1e-5, rel: 1e-4 };
    /// f16 storage: one rounding to 11 significant bits.
    pub const F16: Tol = Tol { abs: 1e-3, rel: 2e-3 };
    /// bf16 storage: 8 significant bits, so the reference's rounding and the
    /// adapter's (of a result computed in f32) may land one ulp apart: 2^-7.
    pub const BF16: Tol = Tol { abs: 1e-3, rel: 8e-3 };

    /// What storing a result as `dtype` costs: the rounding of a packed
    /// dtype, nothing for the others.
    pub fn storage(dtype: DType) -> Tol {
        match dtype {
            DType::F16 => Tol::F16,
            DType::BF16 => Tol::BF16,
            _ => Tol::EXACT,
        }
    }

    /// Twice as loose: a result compared against another that was computed
    /// in different kernels, each within this of the truth.
    pub fn doubled(self) -> Tol {
        Tol { abs: 2.0 * self.abs, rel: 2.0 * self.rel }
    }

    /// The looser of two tolerances, bound by bound.
    pub fn max(self, other: Tol) -> Tol {
        Tol { abs: self.abs.max(other.abs), rel: self.rel.max(other.rel) }
    }
}

pub type Build = Box<dyn Fn(&Device) -> Result<Tensor> + Send + Sync>;

/// One conformance case: an op applied to fixed-seed inputs.
pub struct Case {
    /// The op this case checks (a row group in the report).
    pub op: &'static str,
    /// What the case exercises: dtype, shapes, layout.
    pub detail: String,
    pub tol: Tol,
    pub build: Build,
}

/// The outcome of one case on one device.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Largest |adapter − reference| over the elements.
    pub max_abs_err: f64,
    pub passed: bool,
    /// Why it failed (an error, a shape or dtype mismatch, or the worst element).
    pub failure: Option<String>,
}

impl Outcome {
    /// A check that could not compare: why (an error, a shape mismatch).
    pub fn failed(why: String) -> Outcome {
        Outcome { max_abs_err: f64::NAN, passed: false, failure: Some(why) }
    }
}

/// Elementwise comparison; NaN must meet NaN, infinities must match exactly.
pub fn compare(got: &[f64], want: &[f64], tol: Tol) -> Outcome {
    let mut max_abs_err: f64 = 0.0;
    let mut worst: Option<(usize, f64, f64)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w.is_infinite() || g.is_infinite() {
            g == w
        } else {
            let err = (g - w).abs();
            max_abs_err = max_abs_err.max(err);
            err <= tol.abs + tol.rel * w.abs()
        };
        if !ok && worst.is_none() {
            worst = Some((i, g, w));
        }
    }
    Outcome {
        max_abs_err,
        passed: worst.is_none(),
        failure: worst.map(|(i, g, w)| format!("element {i}: got {g}, want {w} (tolerance {tol:?})")),
    }
}
