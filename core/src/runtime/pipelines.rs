//! Compiled pipelines, cached by WGSL source: each kernel compiles once.

use crate::error::Result;
use crate::validate::validate_wgsl;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub struct PipelineCache {
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
}

impl PipelineCache {
    pub fn get(&self, device: &wgpu::Device, source: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        if let Some(p) = self.pipelines.lock().unwrap().get(source) {
            return Ok(p.clone());
        }
        // naga first, so that a bad kernel is an error carrying its source,
        // not an abort inside wgpu.
        validate_wgsl(source)?;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("kiln kernel"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = Arc::new(device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("kiln kernel"),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        }));
        self.pipelines.lock().unwrap().insert(source.to_string(), pipeline.clone());
        Ok(pipeline)
    }

    /// Every WGSL source compiled so far (for validation in tests).
    pub fn sources(&self) -> Vec<String> {
        self.pipelines.lock().unwrap().keys().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.pipelines.lock().unwrap().len()
    }
}
