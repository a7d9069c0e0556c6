//! Compiled kernels, cached by their structural key: a training loop
//! generates and compiles each kernel once, and a cache hit costs a hash,
//! not a WGSL string. `KILN_DUMP_WGSL=dir` writes each new kernel to a file.

use crate::codegen::KernelKey;
use crate::error::Result;
use crate::spirv;
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
    /// Vulkan with passthrough shaders: kernels with workgroup memory are
    /// compiled by kiln ([`crate::spirv`]), not by wgpu.
    own_spirv: bool,
}

impl PipelineCache {
    pub fn new(own_spirv: bool) -> PipelineCache {
        PipelineCache { own_spirv, ..Default::default() }
    }

    pub fn get(&self, device: &wgpu::Device, key: &KernelKey) -> Result<Arc<Kernel>> {
        if let Some(k) = self.kernels.lock().unwrap().get(key) {
            return Ok(k.clone());
        }
        let source = key.wgsl();
        let name = key.name();
        crate::codegen::dump::dump_kernel("KILN_DUMP_WGSL", &name, "wgsl", &source);
        // naga first, so that a bad kernel is an error carrying its source,
        // not an abort inside wgpu.
        let (module, info) = validate_wgsl(&source)?;
        let (shader, layout) = if self.own_spirv && spirv::uses_workgroup_memory(&module) {
            let words = spirv::for_vulkan(&module, &info, &source)?;
            let [x, y, z] = module.entry_points.first().map_or([1; 3], |e| e.workgroup_size);
            // SAFETY: naga validated the module and wrote the words with the
            // bounds checks wgpu would add; kiln's kernels write workgroup
            // memory before reading it (it is not zeroed); the layout below
            // is the module's.
            let shader = unsafe {
                device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                    label: Some(&name),
                    entry_points: vec![wgpu::PassthroughShaderEntryPoint {
                        name: "main".into(),
                        workgroup_size: (x, y, z),
                    }]
                    .into(),
                    spirv: Some(words.into()),
                    ..Default::default()
                })
            };
            (shader, Some(explicit_layout(device, &module, &name)))
        } else {
            let shader = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&name),
                source: wgpu::ShaderSource::Wgsl(source.as_str().into()),
            });
            (shader, None)
        };
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&name),
            layout: layout.as_ref(),
            module: &shader,
            entry_point: Some("main"),
            // Every kiln kernel writes its workgroup memory before reading
            // it, so wgpu's zeroing (WGSL's rule) is only cost: on GL it made
            // compiling a kernel with two 2048-float tiles take about a minute.
            // Browsers zero regardless (WebGPU has no such option).
            compilation_options: wgpu::PipelineCompilationOptions {
                zero_initialize_workgroup_memory: false,
                ..Default::default()
            },
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

/// The pipeline layout wgpu would derive from `module` (a passthrough
/// module has no reflection): group 0 holds every buffer binding kiln
/// kernels declare, all of which they use.
fn explicit_layout(device: &wgpu::Device, module: &naga::Module, name: &str) -> wgpu::PipelineLayout {
    let entries: Vec<wgpu::BindGroupLayoutEntry> = module
        .global_variables
        .iter()
        .filter_map(|(_, v)| {
            let ty = match v.space {
                naga::AddressSpace::Uniform => wgpu::BufferBindingType::Uniform,
                naga::AddressSpace::Storage { access } => {
                    wgpu::BufferBindingType::Storage { read_only: !access.contains(naga::StorageAccess::STORE) }
                }
                _ => return None,
            };
            Some(wgpu::BindGroupLayoutEntry {
                binding: v.binding.as_ref()?.binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
                count: None,
            })
        })
        .collect();
    let group =
        device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some(name), entries: &entries });
    device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(name),
        bind_group_layouts: &[Some(&group)],
        immediate_size: 0,
    })
}
