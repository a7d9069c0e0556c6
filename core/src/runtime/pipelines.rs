//! Compiled kernels, cached by their structural key: a training loop
//! generates and compiles each kernel once, and a cache hit costs a hash,
//! not a WGSL string. `KILN_DUMP_WGSL=dir` writes each new kernel to a file.

use crate::codegen::KernelKey;
use crate::error::Result;
use crate::validate::validate_wgsl;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub struct Kernel {
    pub pipeline: wgpu::ComputePipeline,
    pub name: String,
    pub source: String,
}

#[derive(Debug, Default)]
pub struct PipelineCache {
    kernels: Mutex<HashMap<KernelKey, Arc<Kernel>>>,
}

impl PipelineCache {
    pub fn get(&self, device: &wgpu::Device, key: &KernelKey) -> Result<Arc<Kernel>> {
        if let Some(k) = self.kernels.lock().unwrap().get(key) {
            return Ok(k.clone());
        }
        let source = key.wgsl();
        let name = key.name();
        dump(&name, &source);
        // naga first, so that a bad kernel is an error carrying its source,
        // not an abort inside wgpu.
        validate_wgsl(&source)?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&name),
            source: wgpu::ShaderSource::Wgsl(source.as_str().into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let kernel = Arc::new(Kernel { pipeline, name, source });
        self.kernels.lock().unwrap().insert(key.clone(), kernel.clone());
        Ok(kernel)
    }

    /// Every WGSL source compiled so far (for validation in tests).
    pub fn sources(&self) -> Vec<String> {
        self.kernels.lock().unwrap().values().map(|k| k.source.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.kernels.lock().unwrap().len()
    }
}

/// Write a new kernel to `$KILN_DUMP_WGSL/<name>-<hash>.wgsl` (native only).
fn dump(name: &str, source: &str) {
    #[cfg(not(target_arch = "wasm32"))]
    if let Some(dir) = std::env::var_os("KILN_DUMP_WGSL") {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        source.hash(&mut h);
        let path = std::path::Path::new(&dir).join(format!("{name}-{:016x}.wgsl", h.finish()));
        let written = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, source));
        if let Err(e) = written {
            log::warn!("KILN_DUMP_WGSL: cannot write {}: {e}", path.display());
        }
    }
    #[cfg(target_arch = "wasm32")]
    let _ = (name, source);
}
