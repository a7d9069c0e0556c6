//! Vulkan validation for the suite: the Khronos layer from `../shared/vulkan`
//! is enabled through the environment before any instance exists, and a
//! logger collects every message it reports through wgpu. Any message is an
//! API misuse by kiln, so it fails the run.

use std::path::PathBuf;
use std::sync::Mutex;

static MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Collector;

impl log::Log for Collector {
    fn enabled(&self, meta: &log::Metadata) -> bool {
        meta.level() <= log::Level::Debug
    }
    fn log(&self, record: &log::Record) {
        let target = record.target();
        let text = record.args().to_string();
        let from_validation = target.starts_with("wgpu_hal::vulkan")
            && (text.contains("VUID") || text.contains("Validation") || text.contains("VALIDATION"));
        if record.level() <= log::Level::Warn && from_validation {
            MESSAGES.lock().unwrap().push(format!("[{target}] {text}"));
        } else if record.level() <= log::Level::Debug && target.contains("vulkan") {
            eprintln!("[{} {target}] {text}", record.level());
        }
    }
    fn flush(&self) {}
}

/// Where the validation layer's manifest lies, if the shared folder is
/// here and the library it names (Debian's chromium ships it) is installed;
/// otherwise why not.
pub fn layer_dir() -> Result<PathBuf, String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/vulkan");
    let manifest = dir.join("VkLayer_khronos_validation.json");
    let text = std::fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let library = text
        .split("\"library_path\"")
        .nth(1)
        .and_then(|rest| rest.split('"').nth(1))
        .ok_or_else(|| format!("{} names no library_path", manifest.display()))?;
    if !std::path::Path::new(library).exists() {
        return Err(format!("the layer's library {library} is not installed (Debian's chromium ships it)"));
    }
    dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))
}

/// SwiftShader's Vulkan driver ships with Debian's chromium package.
const SWIFTSHADER_ICD: &str = "/usr/lib/chromium/vk_swiftshader_icd.json";

/// Make SwiftShader's Vulkan driver visible beside the system's. Call
/// before any wgpu instance exists and while no other thread reads the
/// environment.
pub fn env_for_adapters() {
    // SAFETY: callers run this before other threads touch the environment
    // (first in main, or inside a OnceLock that every test goes through).
    unsafe {
        if std::path::Path::new(SWIFTSHADER_ICD).exists() && std::env::var_os("VK_ICD_FILENAMES").is_none() {
            // Added to the loader's own list, so a real GPU's driver stays visible.
            std::env::set_var("VK_ADD_DRIVER_FILES", SWIFTSHADER_ICD);
        }
    }
}

/// Set up the environment for the suite. Must run before any wgpu instance
/// is created and before other threads start (it sets env variables).
/// Returns a line describing whether validation is on; without the layer
/// the running test is reported skipped for it, or fails where the run
/// requires `vulkan-validation`.
pub fn setup() -> String {
    let _ = log::set_logger(&Collector).map(|()| log::set_max_level(log::LevelFilter::Debug));
    env_for_adapters();
    match layer_dir() {
        Ok(dir) => {
            // SAFETY: as above.
            unsafe {
                std::env::set_var("VK_LAYER_PATH", &dir);
                // Forced on through the loader: layers enabled through
                // wgpu's own flag did not report shader errors here.
                std::env::set_var("VK_INSTANCE_LAYERS", "VK_LAYER_KHRONOS_validation");
                std::env::set_var("VK_KHRONOS_VALIDATION_LOG_FILENAME", log_file());
                // The layer caches shaders it has checked across runs and
                // would not report a cached one again.
                std::env::set_var("VK_KHRONOS_VALIDATION_CHECK_SHADERS_CACHING", "false");
            }
            let _ = std::fs::remove_file(log_file());
            "Vulkan validation layer on (the Khronos layer, with the manifest in ../shared/vulkan)".into()
        }
        Err(why) => {
            kiln_require::skip("vulkan-validation", &why);
            format!("Vulkan validation layer not found ({why}): validation off")
        }
    }
}

/// The file the layer writes its messages to.
fn log_file() -> PathBuf {
    std::env::temp_dir().join(format!("kiln-validation-{}.log", std::process::id()))
}

/// Messages the validation layer reported since the last call.
pub fn take_messages() -> Vec<String> {
    let mut out = std::mem::take(&mut *MESSAGES.lock().unwrap());
    if let Ok(text) = std::fs::read_to_string(log_file()) {
        out.extend(text.split("Validation Error").skip(1).map(|m| format!("Validation Error{m}")));
        let _ = std::fs::remove_file(log_file());
    }
    out
}
