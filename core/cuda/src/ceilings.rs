//! Yardsticks on a CUDA GPU for kiln-bench, each a closure that runs once
//! and waits: a copy kernel's bandwidth, and cuBLAS's f32 matrix product
//! (exact f32: cuBLAS's default math mode takes no TF32 shortcut).

use crate::device::driver_available;
use crate::nvrtc;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, sys as blas_sys};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, LaunchConfig, PushKernelArg, sys};
use kiln_ir::error::{KilnError, Result};
use std::sync::{Arc, Mutex};

/// One timed run of a yardstick.
pub type Run = Box<dyn Fn() -> std::result::Result<(), String>>;

/// A grid-stride float4 copy: each element read once and written once.
const COPY: &str = r#"
extern "C" __global__ void copy4(const float4* __restrict__ src, float4* __restrict__ dst, unsigned long long n) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dst[i] = src[i];
    }
}
"#;

fn failed(what: &'static str) -> impl Fn(String) -> KilnError {
    move |detail| KilnError::Gpu(format!("CUDA yardstick {what}: {detail}"))
}

fn stream() -> Result<Arc<CudaStream>> {
    driver_available()?;
    let ctx = CudaContext::new(0).map_err(|e| failed("context")(e.to_string()))?;
    ctx.new_stream().map_err(|e| failed("stream")(e.to_string()))
}

/// Copy `bytes` (a multiple of 16) from one buffer to another.
pub fn copy(bytes: usize) -> Result<Run> {
    let stream = stream()?;
    let ctx = stream.context().clone();
    let (major, minor) = ctx.compute_capability().map_err(|e| failed("copy")(e.to_string()))?;
    let ptx = nvrtc::compile(COPY, (major * 10 + minor) as u32)?.ptx;
    let module = ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)).map_err(|e| failed("copy")(e.to_string()))?;
    let kernel = module.load_function("copy4").map_err(|e| failed("copy")(e.to_string()))?;
    let sms = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|e| failed("copy")(e.to_string()))?;
    let n = (bytes / 16) as u64;
    let alloc = |len| stream.alloc_zeros::<f32>(len).map_err(|e| failed("copy")(e.to_string()));
    let (src, dst): (CudaSlice<f32>, CudaSlice<f32>) = (alloc(bytes / 4)?, alloc(bytes / 4)?);
    let dst = Mutex::new(dst);
    let config = LaunchConfig { grid_dim: (sms as u32 * 8, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    Ok(Box::new(move || {
        let mut dst = dst.lock().unwrap();
        let mut args = stream.launch_builder(&kernel);
        args.arg(&src).arg(&mut *dst).arg(&n);
        // SAFETY: both buffers hold `n` float4s.
        unsafe { args.launch(config) }.map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())
    }))
}

/// cuBLAS sgemm of two `n`×`n` matrices: 2n³ flops.
pub fn sgemm(n: usize) -> Result<Run> {
    // SAFETY: only tries to dlopen the library's candidate names.
    if !unsafe { blas_sys::is_culib_present() } {
        return Err(KilnError::Unavailable {
            what: "cuBLAS (libcublas.so.13)",
            detail: "install the CUDA 13 toolkit, or `pip install nvidia-cublas` and add its lib/ to LD_LIBRARY_PATH"
                .into(),
        });
    }
    let stream = stream()?;
    let blas = CudaBlas::new(stream.clone()).map_err(|e| failed("sgemm")(e.to_string()))?;
    let alloc = || stream.alloc_zeros::<f32>(n * n).map_err(|e| failed("sgemm")(e.to_string()));
    let (a, b, c) = (alloc()?, alloc()?, Mutex::new(alloc()?));
    let side = n as i32;
    let config = GemmConfig {
        transa: blas_sys::cublasOperation_t::CUBLAS_OP_N,
        transb: blas_sys::cublasOperation_t::CUBLAS_OP_N,
        m: side,
        n: side,
        k: side,
        alpha: 1.0f32,
        lda: side,
        ldb: side,
        beta: 0.0f32,
        ldc: side,
    };
    Ok(Box::new(move || {
        let mut c = c.lock().unwrap();
        // SAFETY: a, b and c each hold n×n floats.
        unsafe { blas.gemm(config, &a, &b, &mut *c) }.map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())
    }))
}
