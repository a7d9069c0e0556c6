//! The adapters the suite runs on: every Vulkan and GL adapter found, plus
//! the ones this project expects on its CI machines, reported as skipped by
//! name when absent.

use kiln::prelude::*;

/// Adapters the CI machines have; each missing one is reported as skipped.
pub const EXPECTED: [(&str, &str); 3] = [
    ("lavapipe (Vulkan)", "llvmpipe|vulkan"),
    ("SwiftShader (Vulkan)", "swiftshader|vulkan"),
    ("llvmpipe (OpenGL)", "llvmpipe|gl"),
];

pub struct Found {
    pub label: String,
    pub device: Device,
}

/// A short label: name and backend.
pub fn label(device: &Device) -> String {
    let info = device.info();
    format!("{} ({})", info.name, info.backend)
}

fn matches(device: &Device, pattern: &str) -> bool {
    let info = device.info();
    let (name, backend) = pattern.split_once('|').unwrap_or((pattern, ""));
    info.name.to_lowercase().contains(name) && info.backend.to_lowercase() == backend
}

/// Open every adapter; returns the devices and the names of expected
/// adapters that were not found (or failed to open, with the reason).
pub async fn discover() -> (Vec<Found>, Vec<String>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let backends = kiln::core::wgpu::Backends::VULKAN | kiln::core::wgpu::Backends::GL;
    for (name, device) in Device::all(backends).await {
        match device {
            Ok(device) => found.push(Found { label: label(&device), device }),
            Err(e) => skipped.push(format!("{name}: could not open ({e})")),
        }
    }
    for (name, pattern) in EXPECTED {
        if !found.iter().any(|f| matches(&f.device, pattern)) {
            skipped.push(format!("{name}: not found on this machine"));
        }
    }
    (found, skipped)
}

/// Every adapter found, opened once per test process (skipped ones are
/// printed by name). Tests hold the lock so launch counts don't mix.
/// Native only: devices are not `Send` on the web.
#[cfg(not(target_arch = "wasm32"))]
pub fn shared() -> std::sync::MutexGuard<'static, Vec<(String, Device)>> {
    use std::sync::{Mutex, OnceLock};
    static DEVICES: OnceLock<Mutex<Vec<(String, Device)>>> = OnceLock::new();
    DEVICES
        .get_or_init(|| {
            crate::validation::env_for_adapters();
            let (found, skipped) = pollster::block_on(discover());
            for s in skipped {
                eprintln!("skipped: {s}");
            }
            Mutex::new(found.into_iter().map(|f| (f.label, f.device)).collect())
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}
