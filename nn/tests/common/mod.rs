//! What the nn tests share: the devices to run on and value comparison.
#![allow(dead_code)]

use kiln::prelude::*;

/// The CPU reference, then every GPU adapter found, with their labels and
/// the absolute tolerance (relative to a value's magnitude, at least 1)
/// for f32 results computed against an f64 reference.
pub fn devices() -> Vec<(String, Device, f64)> {
    kiln_conformance::validation::env_for_adapters();
    let (found, skipped) = kiln::block_on(kiln_conformance::adapters::discover());
    for s in skipped {
        eprintln!("skipped: {s}");
    }
    let mut out = vec![("cpu".to_string(), Device::cpu(), 1e-9)];
    out.extend(found.into_iter().map(|f| (f.label, f.device, 5e-5)));
    eprintln!("devices: {:?}", out.iter().map(|d| &d.0).collect::<Vec<_>>());
    out
}

pub fn read(t: &Tensor) -> Vec<f64> {
    kiln::block_on(t.to_host()).unwrap().data
}

/// `got` equals `want` within `tol · max(1, |want|)` elementwise.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what}[{i}]: got {g}, want {w} (tol {tol})");
    }
}

/// `python3 script args..` with the test's Python packages (scripts/py-tools.sh
/// puts their folder in `KILN_PY_TOOLS`): whether it succeeded and what it
/// printed, or `None`, printed as skipping `test`, where python3 or a package
/// is missing (a failure where the run requires `py-tools`, as scripts/test does).
pub fn python(test: &str, script: &str, args: &[&std::path::Path]) -> Option<(bool, String)> {
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .env("PYTHONPATH", std::env::var("KILN_PY_TOOLS").unwrap_or_default())
        .output();
    let missing = match &out {
        Err(e) => Some(format!("python3: {e}")),
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("ModuleNotFoundError") => {
            Some(String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or_default().to_string())
        }
        Ok(_) => None,
    };
    if let Some(why) = missing {
        kiln_conformance::require::skip("py-tools", &format!("{test}: {why}"));
        return None;
    }
    let out = out.expect("checked above");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), said))
}
