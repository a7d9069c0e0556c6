//! kiln's CUDA backend. Kernels come from `kiln_codegen::cuda` (every
//! kernel kind, printed from the same IR as its WGSL) and compile at run
//! time with NVRTC ([`nvrtc`]); [`ptxas`] assembles their PTX for a GPU
//! architecture, which is how the compile checks prove them on machines
//! without one. NVIDIA's libraries are loaded when first needed, so kiln
//! builds and runs where there is no CUDA: asking for one that is missing
//! is an error naming it, never a panic.

pub mod ceilings;
pub mod device;
pub mod host;
pub mod nvrtc;
pub mod ptxas;
mod runtime;

/// The GPU architectures kiln's CUDA kernels are checked for: Ampere
/// (A100) and Hopper (H100, H200).
pub const ARCHS: [u32; 2] = [80, 90];
