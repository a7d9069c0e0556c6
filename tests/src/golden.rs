//! Golden kernels: the WGSL sources a suite compiles on an adapter, kept as
//! one FNV-1a hash per source in `tests/golden/<suite>/<adapter>.txt`. A
//! refactoring of the scheduler or of code generation that should change no
//! kernel proves it here; a change that should is blessed with
//! `KILN_BLESS=1` and its kernels inspected with `KILN_DUMP_WGSL=dir`.
//! Files are keyed by what changes the WGSL, the capabilities codegen reads
//! ([`caps_key`]), not by the adapter's name or driver version, so another
//! machine with the same capabilities checks the same kernels; an adapter
//! whose capabilities have no file is reported skipped, by name.

use kiln::core::codegen::Caps;
use std::path::PathBuf;

pub enum Golden {
    Same(usize),
    /// Kernels gained and lost, as hashes.
    Differs {
        gained: Vec<String>,
        lost: Vec<String>,
    },
    Unchecked(String),
    Blessed(usize),
}

pub(crate) fn fnv1a(text: &str) -> String {
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{h:016x}")
}

/// The golden file's name for a device with `caps`: every capability that
/// codegen reads, none of the names it only prints.
pub fn caps_key(caps: &Caps) -> String {
    let subgroups = match (caps.subgroups, caps.subgroup_size) {
        (false, _) => "nosubgroups".to_string(),
        (true, None) => "subgroups".to_string(),
        (true, Some(n)) => format!("subgroups{n}"),
    };
    format!(
        "{}-{}-{subgroups}-{}-{}-{}buffers-tex{}x{}-{}groups-{}",
        caps.backend,
        if caps.cpu { "cpu" } else { "gpu" },
        if caps.workgroup_memory { "wgmem" } else { "nowgmem" },
        if caps.storage_textures { "textures" } else { "notextures" },
        caps.max_storage_buffers,
        caps.max_texture_side,
        caps.max_texture_layers,
        caps.max_workgroups_per_dimension,
        if caps.f16_compute { "f16" } else { "f16packed" },
    )
}

/// A file name from an adapter label: letters, digits and dashes.
fn slug(label: &str) -> String {
    let s: String =
        label.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

fn path(suite: &str, label: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden").join(suite).join(format!("{}.txt", slug(label)))
}

/// Compare the hashes of `sources` with the suite's file for `label`
/// (write it instead when `KILN_BLESS=1`).
pub fn check(suite: &str, label: &str, sources: &[String]) -> Golden {
    let mut hashes: Vec<String> = sources.iter().map(|s| fnv1a(s)).collect();
    hashes.sort();
    hashes.dedup();
    let file = path(suite, label);
    if std::env::var("KILN_BLESS").is_ok_and(|v| v == "1") {
        let text: String = hashes.iter().map(|h| format!("{h}\n")).collect();
        let written =
            std::fs::create_dir_all(file.parent().expect("a folder")).and_then(|_| std::fs::write(&file, text));
        return match written {
            Ok(()) => Golden::Blessed(hashes.len()),
            Err(e) => Golden::Unchecked(format!("{label}: cannot write {}: {e}", file.display())),
        };
    }
    let Ok(text) = std::fs::read_to_string(&file) else {
        return Golden::Unchecked(format!("{label}: no golden kernels ({} absent)", file.display()));
    };
    let want: Vec<String> = text.lines().map(str::to_string).collect();
    compare(&hashes, &want)
}

/// [`check`] as a line to print, or the failure to report.
pub fn verdict(suite: &str, label: &str, sources: &[String]) -> Result<String, String> {
    match check(suite, label, sources) {
        Golden::Same(n) => Ok(format!("golden kernels ({suite}): {label}: the same {n}")),
        Golden::Blessed(n) => Ok(format!("golden kernels ({suite}): {label}: wrote {n}")),
        Golden::Unchecked(why) => {
            kiln_require::skip(&format!("golden kernels ({suite})"), &why);
            Ok(format!("golden kernels ({suite}) unchecked: {why}"))
        }
        Golden::Differs { gained, lost } => Err(format!(
            "golden kernels ({suite}): {label}: {} kernels new and {} gone (KILN_DUMP_WGSL=dir shows them; \
             KILN_BLESS=1 accepts them): new {gained:?}, gone {lost:?}",
            gained.len(),
            lost.len()
        )),
    }
}

fn compare(got: &[String], want: &[String]) -> Golden {
    let gained: Vec<String> = got.iter().filter(|h| !want.contains(h)).cloned().collect();
    let lost: Vec<String> = want.iter().filter(|h| !got.contains(h)).cloned().collect();
    if gained.is_empty() && lost.is_empty() { Golden::Same(got.len()) } else { Golden::Differs { gained, lost } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_become_file_names() {
        assert_eq!(slug("llvmpipe (LLVM 15.0.6, 256 bits) (vulkan)"), "llvmpipe-llvm-15-0-6-256-bits-vulkan");
    }

    #[test]
    fn the_key_follows_the_capabilities_not_the_name() {
        let caps = Caps { adapter: "llvmpipe (LLVM 15.0.6, 256 bits)".into(), ..Caps::webgpu() };
        let renamed = Caps { adapter: "llvmpipe (LLVM 19.1.7, 256 bits)".into(), ..caps.clone() };
        assert_eq!(caps_key(&caps), caps_key(&renamed));
        assert_ne!(caps_key(&caps), caps_key(&Caps { subgroups: true, subgroup_size: Some(8), ..caps.clone() }));
        assert!(!caps_key(&caps).contains("llvm"), "{}", caps_key(&caps));
    }

    #[test]
    fn a_changed_kernel_is_one_gained_and_one_lost() {
        let (old, new, kept) = (fnv1a("fn a() {}"), fnv1a("fn a() { }"), fnv1a("fn b() {}"));
        assert_ne!(old, new);
        assert!(matches!(compare(&[kept.clone(), old.clone()], &[kept.clone(), old.clone()]), Golden::Same(2)));
        match compare(&[kept.clone(), new.clone()], &[kept, old.clone()]) {
            Golden::Differs { gained, lost } => assert_eq!((gained, lost), (vec![new], vec![old])),
            _ => panic!("a changed kernel must differ"),
        }
    }
}
