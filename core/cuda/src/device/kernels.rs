//! The CUDA device's compiled kernels, cached by structural key. A
//! realization's kernels not seen before are rendered as CUDA C++ and
//! compiled together, as one module (one NVRTC run, or one host build).
//! `KILN_DUMP_CUDA=dir` writes each new kernel's whole source to a file.

use super::engine::{Engine, Module};
use kiln_codegen::KernelKey;
use kiln_codegen::cuda::{CudaKernel, from_wgsl};
use kiln_codegen::dump::dump_kernel;
use kiln_ir::error::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A kernel ready to launch: its module, its place there, and its form.
pub struct Loaded {
    pub module: Arc<dyn Module>,
    pub index: usize,
    pub kernel: CudaKernel,
    /// As `KILN_DUMP_CUDA` and kernel timings name it.
    pub name: String,
}

#[derive(Default)]
pub struct Kernels {
    cache: Mutex<HashMap<KernelKey, Arc<Loaded>>>,
}

impl Kernels {
    /// The loaded kernel of each key, compiling the new ones as one module.
    pub fn get(&self, engine: &dyn Engine, keys: &[&KernelKey]) -> Result<Vec<Arc<Loaded>>> {
        let mut cache = self.cache.lock().unwrap();
        let mut new: Vec<KernelKey> = Vec::new();
        for &key in keys {
            if !cache.contains_key(key) && !new.contains(key) {
                new.push(key.clone());
            }
        }
        if !new.is_empty() {
            let kernels = new
                .iter()
                .map(|key| {
                    let kernel = from_wgsl(&key.wgsl())?;
                    dump_kernel("KILN_DUMP_CUDA", &key.name(), "cu", &kernel.source());
                    Ok(kernel)
                })
                .collect::<Result<Vec<_>>>()?;
            let module: Arc<dyn Module> = Arc::from(engine.load(&kernels)?);
            for (index, (key, kernel)) in new.into_iter().zip(kernels).enumerate() {
                let name = key.name();
                cache.insert(key, Arc::new(Loaded { module: module.clone(), index, kernel, name }));
            }
        }
        Ok(keys.iter().map(|key| cache[*key].clone()).collect())
    }

    /// Kernels compiled so far.
    pub fn len(&self) -> usize {
        self.cache.lock().unwrap().len()
    }

    /// The CUDA C++ of every kernel compiled so far.
    pub fn sources(&self) -> Vec<String> {
        self.cache.lock().unwrap().values().map(|l| l.kernel.source()).collect()
    }
}
