//! Kernels as CUDA C++ for NVIDIA GPUs: each kernel's WGSL, validated by
//! naga, is printed from naga's IR (`writer.rs`) over a small prelude of
//! WGSL's types and builtins ([`PRELUDE`]). So every kernel kiln
//! generates, whatever its variant, has a CUDA form with the same
//! arithmetic, from the one generator; subgroup variants become warp
//! shuffles and vec4 buffers 128-bit loads. Kernels that read textures
//! (a WebGPU-only matmul variant) have none.

mod prelude;
mod writer;

pub use prelude::PRELUDE;
pub use writer::ENTRY;

use crate::KernelKey;
use crate::validate::validate_wgsl;
use kiln_ir::error::{KilnError, Result};

/// A kernel in CUDA C++: its entry point is [`ENTRY`], taking one
/// `Globals` value (a pointer per binding, in binding order).
#[derive(Debug, Clone)]
pub struct CudaKernel {
    /// The kernel after the prelude: `Globals`, workgroup variables,
    /// helper functions and the entry point.
    pub body: String,
    /// The block size (WGSL's workgroup size).
    pub workgroup_size: [u32; 3],
    /// The buffers `Globals` points at, in its field order.
    pub bindings: Vec<CudaBinding>,
}

/// A buffer of a CUDA kernel: WGSL's binding number, and how it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaBinding {
    pub binding: u32,
    pub read_only: bool,
    /// The meta block (a uniform in WGSL).
    pub uniform: bool,
}

/// The CUDA form of a WGSL kernel; an error naming what has none.
pub fn from_wgsl(wgsl: &str) -> Result<CudaKernel> {
    let (module, info) = validate_wgsl(wgsl)?;
    writer::write(&module, &info)
        .map_err(|what| KilnError::Shader { message: format!("CUDA: no form for {what}"), wgsl: wgsl.to_string() })
}

impl CudaKernel {
    /// The whole translation unit: the prelude, then the kernel.
    pub fn source(&self) -> String {
        format!("{PRELUDE}{}", self.body)
    }
}

/// Many kernels as one translation unit (NVRTC then reads the prelude
/// once): each in a namespace of its own (`k0`, `k1`, ...), its entry point
/// the C symbol [`entry_of`] names.
pub fn batch(kernels: &[CudaKernel]) -> String {
    let mut s = PRELUDE.to_string();
    for (i, k) in kernels.iter().enumerate() {
        let entry = entry_of(i);
        s.push_str(&format!("#define {ENTRY} {entry}\nnamespace k{i} {{\n{}}}\n#undef {ENTRY}\n", k.body));
    }
    s
}

/// The C symbol of the `index`th kernel of a [`batch`].
pub fn entry_of(index: usize) -> String {
    format!("{ENTRY}_{index}")
}

impl KernelKey {
    /// This kernel in CUDA C++.
    pub fn cuda(&self) -> Result<CudaKernel> {
        from_wgsl(&self.wgsl())
    }
}
