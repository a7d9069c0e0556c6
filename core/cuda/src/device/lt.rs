//! cuBLASLt on the driver engine: an f32 product with its epilogue (a
//! bias, ReLU, GELU) run inside the call, so no pass over the output
//! follows. Each product's shape gets its descriptors and algorithm once
//! (cuBLASLt's heuristic, for kiln's workspace), when the schedule asks
//! whether cuBLASLt runs it ([`Lt::runs`]; a shape it has no algorithm for
//! keeps cuBLAS and the pass), kept for later calls; a call then only sets
//! the bias's address.

use super::blas::{Gemm, GemmEpilogue};
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublaslt::{result, sys};
use kiln_ir::error::{KilnError, Result};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

fn lt_error(what: &'static str) -> impl Fn(result::CublasError) -> KilnError {
    move |e| KilnError::Gpu(format!("cuBLASLt: {what}: {e}"))
}

/// A product's shape as cuBLASLt plans it: its call with the addresses
/// left out.
fn shape_of(g: &Gemm) -> Gemm {
    Gemm { a: 0, b: 0, c: 0, bias: 0, ..*g }
}

/// A shape's descriptors and the algorithm chosen for it.
struct Plan {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
}

// SAFETY: descriptors are plain host objects; the engine uses each under
// its mutex.
unsafe impl Send for Plan {}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: created for this plan, destroyed once. Errors here leave
        // nothing to undo.
        unsafe {
            let _ = result::destroy_matmul_desc(self.desc);
            for layout in self.layouts.into_iter().filter(|l| !l.is_null()) {
                let _ = result::destroy_matrix_layout(layout);
            }
        }
    }
}

/// cuBLASLt's handle and the plans made so far (`None`: no algorithm).
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    plans: Mutex<HashMap<Gemm, Option<Plan>>>,
}

/// The alignment cuBLASLt's algorithms assume by default, in bytes.
pub const LT_ALIGNMENT: u64 = 256;

// SAFETY: a cuBLASLt handle may be used from any thread; the engine's
// calls are serialized by the device's enqueue order.
unsafe impl Send for Lt {}
unsafe impl Sync for Lt {}

impl Drop for Lt {
    fn drop(&mut self) {
        self.plans.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        // SAFETY: created in `open`, destroyed once.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}

impl Lt {
    /// cuBLASLt, where its library is found and opens and env
    /// `KILN_CUBLASLT` is not `0` (else epilogues run as passes of their
    /// own, as the warning says).
    pub fn open() -> Option<Lt> {
        if std::env::var("KILN_CUBLASLT").is_ok_and(|v| v == "0") {
            return None;
        }
        // SAFETY: only tries to dlopen the library's candidate names.
        if !unsafe { sys::is_culib_present() } {
            log::warn!("cuBLASLt (libcublasLt) not found: matmul epilogues run as passes of their own");
            return None;
        }
        match result::create_handle() {
            Ok(handle) => Some(Lt { handle, plans: Mutex::default() }),
            Err(e) => {
                log::warn!("cuBLASLt did not open ({e}): matmul epilogues run as passes of their own");
                None
            }
        }
    }

    /// Whether cuBLASLt has an algorithm for `g`'s shape within `workspace`
    /// bytes (asked once per shape).
    pub fn runs(&self, g: &Gemm, workspace: usize) -> bool {
        let shape = shape_of(g);
        let mut plans = self.plans.lock().unwrap();
        let plan = plans.entry(shape).or_insert_with(|| {
            self.plan(&shape, workspace)
                .inspect_err(|e| log::warn!("{} for {shape:?}: a pass of its own instead ({e})", g.name()))
                .ok()
        });
        plan.is_some()
    }

    /// Enqueue `g` (an f32 product with an epilogue) on `stream`, with
    /// `workspace` (address, bytes) for cuBLASLt's use.
    ///
    /// # Safety
    /// The addresses must hold every element `g` reads and writes; the
    /// workspace must be the stream's alone.
    pub unsafe fn gemm(&self, g: &Gemm, stream: sys::cudaStream_t, workspace: (u64, usize)) -> Result<()> {
        let refuse = |why: &str| Err(KilnError::Gpu(format!("{}: {why}", g.name())));
        if g.batch != 1 {
            return refuse("cuBLASLt is planned for one product, not a batch");
        }
        let addresses = [g.a, g.b, g.c, if g.bias == 0 { LT_ALIGNMENT } else { g.bias }];
        if !addresses.iter().all(|a| a.is_multiple_of(LT_ALIGNMENT)) {
            return refuse("an operand is not 256-byte aligned");
        }
        let mut plans = self.plans.lock().unwrap();
        let Some(Some(plan)) = plans.get_mut(&shape_of(g)) else {
            return refuse("cuBLASLt has no algorithm for this shape (it was not asked first)");
        };
        if matches!(g.epilogue, GemmEpilogue::Bias | GemmEpilogue::BiasRelu | GemmEpilogue::BiasGelu) {
            let bias = g.bias;
            // SAFETY: a live descriptor; cuBLASLt copies the pointer.
            unsafe {
                set_desc(plan.desc, sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias)
            }?;
        }
        let (alpha, beta) = (1f32, 0f32);
        let [a, b, c] = plan.layouts;
        // SAFETY: the caller's promise for the addresses; the plan's
        // descriptors describe them (made from the same shape).
        unsafe {
            result::matmul(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                g.a as *const c_void,
                a,
                g.b as *const c_void,
                b,
                g.c as *const c_void,
                c,
                g.c as *mut c_void,
                c,
                &plan.algo,
                workspace.0 as *mut c_void,
                workspace.1,
                stream,
            )
        }
        .map_err(lt_error(g.name()))
    }

    /// Descriptors for `shape` and cuBLASLt's best algorithm for them within
    /// `workspace` bytes.
    fn plan(&self, shape: &Gemm, workspace: usize) -> Result<Plan> {
        let compute = match shape.tf32 {
            true => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            false => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        };
        let f32 = sys::cudaDataType::CUDA_R_32F;
        let desc = result::create_matmul_desc(compute, f32).map_err(lt_error("matmul descriptor"))?;
        // Stored as the column-major matrices cuBLAS reads: op(A) is m×k,
        // op(B) k×n, C m×n.
        let stored = |trans: bool, rows: usize, cols: usize| if trans { (cols, rows) } else { (rows, cols) };
        let (a_rows, a_cols) = stored(shape.trans_a, shape.m, shape.k);
        let (b_rows, b_cols) = stored(shape.trans_b, shape.k, shape.n);
        let layout = |rows: usize, cols: usize, ld: usize| {
            result::create_matrix_layout(f32, rows as u64, cols as u64, ld as i64).map_err(lt_error("matrix layout"))
        };
        let mut plan = Plan {
            desc,
            layouts: [std::ptr::null_mut(); 3],
            // SAFETY: plain data, overwritten by the heuristic's choice.
            algo: unsafe { std::mem::zeroed() },
        };
        // One at a time, so that a failure leaves the made ones to `Drop`.
        plan.layouts[0] = layout(a_rows, a_cols, shape.lda)?;
        plan.layouts[1] = layout(b_rows, b_cols, shape.ldb)?;
        plan.layouts[2] = layout(shape.m, shape.n, shape.ldc)?;
        let op = |t: bool| (if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N }) as i32;
        let epilogue = match shape.epilogue {
            GemmEpilogue::None => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            GemmEpilogue::Bias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            GemmEpilogue::Relu => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU,
            GemmEpilogue::Gelu => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU,
            GemmEpilogue::BiasRelu => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            GemmEpilogue::BiasGelu => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
        };
        use sys::cublasLtMatmulDescAttributes_t as Attr;
        // SAFETY: a live descriptor; each value has its attribute's type.
        unsafe {
            set_desc(desc, Attr::CUBLASLT_MATMUL_DESC_TRANSA, &op(shape.trans_a))?;
            set_desc(desc, Attr::CUBLASLT_MATMUL_DESC_TRANSB, &op(shape.trans_b))?;
            set_desc(desc, Attr::CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue)?;
        }
        let pref = result::create_matmul_pref().map_err(lt_error("preference"))?;
        // SAFETY: a live preference, its attribute a size_t; destroyed below.
        let chosen = unsafe {
            result::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&workspace as *const usize).cast(),
                size_of::<usize>(),
            )
            .and_then(|()| {
                let [a, b, c] = plan.layouts;
                result::get_matmul_algo_heuristic(self.handle, desc, a, b, c, c, pref)
            })
        };
        // SAFETY: created above, used by nothing else.
        let _ = unsafe { result::destroy_matmul_pref(pref) };
        plan.algo = chosen.map_err(lt_error("no algorithm for this product"))?.algo;
        Ok(plan)
    }
}

/// Set descriptor attribute `attr` to `value`.
///
/// # Safety
/// `desc` must be live and `T` the attribute's type.
unsafe fn set_desc<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    value: &T,
) -> Result<()> {
    // SAFETY: the caller's promise.
    unsafe { result::set_matmul_desc_attribute(desc, attr, (value as *const T).cast(), size_of::<T>()) }
        .map_err(lt_error("descriptor attribute"))
}
