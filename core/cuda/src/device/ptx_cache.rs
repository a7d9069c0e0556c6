//! Compiled PTX kept on disk, keyed by the source, the architecture and
//! NVRTC's version: a program's kernels compile once per machine, not once
//! per run. The directory is env `KILN_CUDA_CACHE`, else
//! `$XDG_CACHE_HOME/kiln/cuda` or `~/.cache/kiln/cuda`; without one, or
//! when it cannot be written, kernels just compile every run.

use crate::nvrtc;
use kiln_ir::error::Result;
use std::path::{Path, PathBuf};

fn directory() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KILN_CUDA_CACHE") {
        return Some(dir.into());
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("kiln").join("cuda"))
}

/// FNV-1a: stable across runs and Rust versions, as a file name must be.
pub(crate) fn fingerprint(parts: &[&str]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for byte in parts.iter().flat_map(|p| p.bytes().chain([0])) {
        hash = (hash ^ byte as u64).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Where `source`'s PTX for `compute_{arch}` is kept in `dir`.
pub fn path_in(dir: &Path, source: &str, arch: u32) -> Result<PathBuf> {
    let key = fingerprint(&[source, &arch.to_string(), &nvrtc::version()?]);
    Ok(dir.join(format!("{key:016x}.ptx")))
}

/// `source` as PTX for `compute_{arch}`: from the cache, or compiled by
/// NVRTC and then kept.
pub fn ptx(source: &str, arch: u32) -> Result<String> {
    ptx_in(directory().as_deref(), source, arch)
}

/// [`ptx`] with the cache in `dir` (none: compile every time).
pub fn ptx_in(dir: Option<&Path>, source: &str, arch: u32) -> Result<String> {
    let path = dir.map(|d| path_in(d, source, arch)).transpose()?;
    if let Some(ptx) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
        return Ok(ptx);
    }
    let compiled = nvrtc::compile(source, arch)?;
    if let Some(path) = path {
        keep(&path, &compiled.ptx);
    }
    Ok(compiled.ptx)
}

/// Write `ptx` whole or not at all (a temporary file renamed over it), so
/// a concurrent reader never sees half of one.
fn keep(path: &Path, ptx: &str) {
    let temporary = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(&temporary, ptx))
        .and_then(|()| std::fs::rename(&temporary, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        log::warn!("the CUDA kernel cache cannot keep {}: {e}", path.display());
    }
}
