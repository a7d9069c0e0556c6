//! kiln binds at most 8 storage buffers per kernel (fewer where the
//! adapter allows fewer; browsers' WebGPU default is 8): the kernels a
//! device has compiled that bind more, read off their WGSL.

use kiln::prelude::*;

/// The storage buffers a kernel may bind on `dev`.
pub fn cap(dev: &Device) -> usize {
    (dev.info().limits.max_storage_buffers_per_shader_stage as usize).min(8)
}

/// Each kernel compiled on `dev` that binds more than [`cap`] storage
/// buffers, as "its first line: N buffers".
pub fn over_cap(dev: &Device) -> Vec<String> {
    dev.compiled_sources()
        .iter()
        .filter_map(|src| {
            let n = src.matches("var<storage").count();
            (n > cap(dev)).then(|| format!("{}: {n} buffers", src.lines().next().unwrap_or("")))
        })
        .collect()
}
