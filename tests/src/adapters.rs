//! The adapters the suite runs on: every Vulkan and GL adapter found and
//! a CUDA GPU, plus the ones this project expects on its CI machines: each
//! missing one is reported as skipped by name, or fails the test where
//! `KILN_REQUIRE_ADAPTERS` lists it (`kiln_require`).

use kiln::prelude::*;

/// Adapters the CI machines have, by the name `KILN_REQUIRE_ADAPTERS`
/// gives them, with the adapter name and backend that identify them.
pub const EXPECTED: [(&str, &str); 3] =
    [("lavapipe", "llvmpipe|vulkan"), ("swiftshader", "swiftshader|vulkan"), ("gl", "llvmpipe|gl")];

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

/// Open every adapter; returns the devices and the expected adapters that
/// were not found (or failed to open, with the reason), each also reported
/// skipped for the running test, or failing it where the run requires the
/// adapter. A required adapter name that no adapter matches fails too, as
/// does a run that requires adapters and finds none.
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
    // A CUDA GPU where there is one (natively); else skipped, saying why.
    // `KILN_ADAPTER=cuda-host` puts the CUDA runtime's host engine in its
    // place (a dry run of the GPU checks, `scripts/device-check --dry-run`).
    #[cfg(not(target_arch = "wasm32"))]
    let cuda = match std::env::var("KILN_ADAPTER").as_deref() {
        Ok("cuda-host") => Ok(Device::cuda_on_host()),
        _ => Device::cuda(),
    };
    #[cfg(not(target_arch = "wasm32"))]
    match cuda {
        Ok(device) => found.push(Found { label: label(&device), device }),
        Err(e) => {
            kiln_require::skip("cuda", &e.to_string());
            skipped.push(format!("CUDA: {e}"));
        }
    }
    for (name, pattern) in EXPECTED {
        if !found.iter().any(|f| matches(&f.device, pattern)) {
            let why =
                format!("not found on this machine (found {:?})", found.iter().map(|f| &f.label).collect::<Vec<_>>());
            kiln_require::skip(name, &why);
            skipped.push(format!("{name}: {why}"));
        }
    }
    for name in kiln_require::required_adapters() {
        let known = EXPECTED.iter().any(|(n, _)| *n == name) || name == "cuda" || name == "webgpu";
        assert!(known, "{ADAPTERS}: unknown adapter {name:?} (known: lavapipe, swiftshader, gl, cuda, webgpu)");
    }
    (found, skipped)
}

const ADAPTERS: &str = kiln_require::ADAPTERS_VAR;

/// Every adapter found, opened once per test process (skipped ones are
/// printed by name). Tests hold the lock so launch counts don't mix.
/// Native only: devices are not `Send` on the web.
#[cfg(not(target_arch = "wasm32"))]
pub fn shared() -> SharedDevices {
    use std::sync::{Mutex, OnceLock};
    static DEVICES: OnceLock<Mutex<Vec<(String, Device)>>> = OnceLock::new();
    let guard = DEVICES
        .get_or_init(|| {
            crate::validation::env_for_adapters();
            let (found, skipped) = pollster::block_on(discover());
            for s in skipped {
                eprintln!("skipped: {s}");
            }
            Mutex::new(found.into_iter().map(|f| (f.label, f.device)).collect())
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    SharedDevices(guard)
}

/// The shared devices, locked. Releasing them waits until every device
/// has finished its work: these devices are never dropped, and a lavapipe
/// queue thread still compiling a kernel when the test process exits
/// crashed it (SIGSEGV in LLVM after all tests passed, about one run in
/// fifty of the `graph` tests).
#[cfg(not(target_arch = "wasm32"))]
pub struct SharedDevices(std::sync::MutexGuard<'static, Vec<(String, Device)>>);

#[cfg(not(target_arch = "wasm32"))]
impl std::ops::Deref for SharedDevices {
    type Target = Vec<(String, Device)>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Drop for SharedDevices {
    fn drop(&mut self) {
        for (label, device) in self.0.iter() {
            if let Err(e) = pollster::block_on(device.synchronize()) {
                eprintln!("{label}: waiting for its work failed: {e}");
            }
        }
    }
}

/// `per_device(device)` on every device at once, one thread each, the
/// results in the order of `devices`: one adapter's kernels compile (LLVM
/// and Subzero compile a pipeline on one thread) while another's run, so a
/// suite over several adapters takes less wall time on few cores.
#[cfg(not(target_arch = "wasm32"))]
pub fn at_once<T: Send>(devices: &[&Device], per_device: impl Fn(&Device) -> T + Sync) -> Vec<T> {
    let per_device = &per_device;
    std::thread::scope(|scope| {
        let threads: Vec<_> = devices.iter().map(|&d| scope.spawn(move || per_device(d))).collect();
        threads.into_iter().map(|t| t.join().expect("a device's thread panicked")).collect()
    })
}

/// Row `i` of per-device columns: each device's `i`th result.
pub fn row<T: Clone>(columns: &[Vec<T>], i: usize) -> Vec<T> {
    columns.iter().map(|c| c[i].clone()).collect()
}

/// Run `check(label, device)` on every adapter with workgroup memory under
/// the Vulkan validation layer, printing the others as skipped; panics
/// when none has it or when the layer reported anything.
#[cfg(not(target_arch = "wasm32"))]
pub fn each_with_workgroup_memory(check: impl Fn(&str, &Device)) {
    eprintln!("{}", crate::validation::setup());
    let (found, _) = kiln::block_on(discover());
    let mut checked = 0;
    for found in &found {
        if !found.device.info().workgroup_memory {
            eprintln!("skipped on {}: no workgroup memory", found.label);
            continue;
        }
        check(&found.label, &found.device);
        checked += 1;
    }
    assert!(checked > 0, "no adapter has workgroup memory");
    let messages = crate::validation::take_messages();
    assert!(messages.is_empty(), "the validation layer reported:\n{}", messages.join("\n"));
}
