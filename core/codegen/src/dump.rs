//! Generated kernels written to files for inspection: env `KILN_DUMP_WGSL`
//! (each WGSL kernel a runtime compiles) and `KILN_DUMP_CUDA` (each CUDA
//! one) name the directories. Native only; a failed write is a warning.

/// Write `source` to `$<variable>/<name>-<hash>.<extension>`, when the
/// variable is set.
pub fn dump_kernel(variable: &str, name: &str, extension: &str, source: &str) {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(dir) = std::env::var_os(variable) {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        source.hash(&mut h);
        let path = std::path::Path::new(&dir).join(format!("{name}-{:016x}.{extension}", h.finish()));
        let written = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, source));
        if let Err(e) = written {
            log::warn!("{variable}: cannot write {}: {e}", path.display());
        }
    }
    #[cfg(target_arch = "wasm32")]
    let _ = (variable, name, extension, source);
}
