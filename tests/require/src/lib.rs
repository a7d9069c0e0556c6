//! What a test needs that a machine may lack (an adapter, a compiler, a
//! GPU library): where it is missing the test reports itself skipped, by
//! name, in a line the test command counts, or fails where the run says it
//! requires the thing.
//!
//! A run lists what it requires in two variables, comma-separated:
//! `KILN_REQUIRE_ADAPTERS` (`lavapipe`, `swiftshader`, `gl`, `cuda`; the
//! browser suite reads `webgpu`) and `KILN_REQUIRE` (tools and libraries:
//! `spirv-val`, `vulkan-validation`, `nvrtc`, `py-tools`, `nccl`).
//! `scripts/test` sets both for this project's CI machines.

use std::collections::HashSet;
use std::io::Write;
use std::sync::Mutex;

/// The adapters a run requires, as `KILN_REQUIRE_ADAPTERS` names them.
pub const ADAPTERS_VAR: &str = "KILN_REQUIRE_ADAPTERS";
/// Everything else a run requires.
pub const THINGS_VAR: &str = "KILN_REQUIRE";

/// Names listed in env `var`, lowercased.
fn listed(var: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether this run requires adapter `name` (`KILN_REQUIRE_ADAPTERS`).
pub fn adapter_required(name: &str) -> bool {
    listed(ADAPTERS_VAR).iter().any(|a| a == &name.to_lowercase())
}

/// The adapters this run requires.
pub fn required_adapters() -> Vec<String> {
    listed(ADAPTERS_VAR)
}

/// What a test that runs on whichever adapter is found needs: required
/// wherever some adapter is.
pub const ANY_ADAPTER: &str = "any adapter";

/// Whether this run requires `thing` (`KILN_REQUIRE`, or
/// `KILN_REQUIRE_ADAPTERS` for an adapter's name, or [`ANY_ADAPTER`]).
pub fn required(thing: &str) -> bool {
    let thing = thing.to_lowercase();
    let adapters = listed(ADAPTERS_VAR);
    listed(THINGS_VAR).contains(&thing) || adapters.contains(&thing) || (thing == ANY_ADAPTER && !adapters.is_empty())
}

/// The running test's name: libtest names each test's thread after it; a
/// binary without the harness is named after its executable.
pub fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => std::env::args()
            .next()
            .and_then(|p| std::path::Path::new(&p).file_name().map(|f| f.to_string_lossy().into_owned()))
            .map(|f| f.rsplit_once('-').map_or(f.clone(), |(stem, _)| stem.to_string()))
            .unwrap_or_else(|| "unnamed".into()),
    }
}

/// The line a skip prints: `SKIPPED <test>: <thing>: <why>`.
pub fn skip_line(test: &str, thing: &str, why: &str) -> String {
    format!("SKIPPED {test}: {thing}: {}", why.replace('\n', " "))
}

/// `thing` is missing (`why` says how): panics where the run requires it,
/// else reports the running test skipped for it, on stderr past the test
/// harness's capture so the line is seen (and counted) whether or not the
/// test passes. The caller then returns without checking anything.
pub fn skip(thing: &str, why: &str) {
    let test = test_name();
    assert!(!required(thing), "{test}: {thing} is required by this run ({THINGS_VAR}/{ADAPTERS_VAR}) but {why}");
    // Once per test, however often the test looks for the thing.
    static REPORTED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let line = skip_line(&test, thing, why);
    let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    if !reported.get_or_insert_with(HashSet::new).insert(line.clone()) {
        return;
    }
    // One write of a whole line, not through print!'s capture.
    let _ = std::io::stderr().lock().write_all(format!("{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_line_names_the_test_and_the_thing() {
        assert_eq!(skip_line("t", "nccl", "no libnccl\nhere"), "SKIPPED t: nccl: no libnccl here");
    }

    #[test]
    fn the_running_test_is_named_by_its_thread() {
        assert_eq!(test_name(), "tests::the_running_test_is_named_by_its_thread");
    }
}
