//! Adapter discovery over every backend, and the choice among adapters: by
//! a selector (env `KILN_ADAPTER`: a backend name, `lavapipe`, or a piece of
//! the adapter name), else the fastest kind found.

use crate::error::{KilnError, Result};

/// Backend names a selector may use, with the backends they mean.
const BACKEND_NAMES: [(&str, wgpu::Backend); 7] = [
    ("vulkan", wgpu::Backend::Vulkan),
    ("gl", wgpu::Backend::Gl),
    ("opengl", wgpu::Backend::Gl),
    ("gles", wgpu::Backend::Gl),
    ("metal", wgpu::Backend::Metal),
    ("dx12", wgpu::Backend::Dx12),
    ("webgpu", wgpu::Backend::BrowserWebGpu),
];

pub fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type)
}

/// Lower is better: real GPUs first, SwiftShader (the slowest) last.
fn rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu if info.name.to_lowercase().contains("swiftshader") => 5,
        wgpu::DeviceType::Cpu => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 | wgpu::Backend::BrowserWebGpu => 0,
        _ => 1,
    };
    (kind, backend)
}

/// Whether `selector` picks this adapter. `lavapipe` (Mesa's Vulkan on the
/// CPU) names itself `llvmpipe`, like Mesa's GL driver, so it has an alias.
pub fn matches(selector: &str, info: &wgpu::AdapterInfo) -> bool {
    let s = selector.trim().to_lowercase();
    let name = info.name.to_lowercase();
    if s == "lavapipe" {
        return name.contains("llvmpipe") && info.backend == wgpu::Backend::Vulkan;
    }
    match BACKEND_NAMES.iter().find(|(name, _)| *name == s) {
        Some((_, backend)) => info.backend == *backend,
        None => name.contains(&s),
    }
}

/// Choose one adapter: the best match of `selector`, or the best overall.
pub fn choose(
    mut adapters: Vec<wgpu::Adapter>,
    selector: Option<&str>,
    backends: wgpu::Backends,
) -> Result<wgpu::Adapter> {
    if adapters.is_empty() {
        return Err(KilnError::NoAdapter { backends: format!("{backends:?}") });
    }
    adapters.sort_by_key(|a| rank(&a.get_info()));
    let available = || adapters.iter().map(|a| describe(&a.get_info())).collect::<Vec<_>>().join(", ");
    match selector.filter(|s| !s.trim().is_empty()) {
        None => Ok(adapters.remove(0)),
        Some(sel) => match adapters.iter().position(|a| matches(sel, &a.get_info())) {
            Some(i) => Ok(adapters.remove(i)),
            None => Err(KilnError::AdapterNotFound { selector: sel.to_string(), available: available() }),
        },
    }
}
