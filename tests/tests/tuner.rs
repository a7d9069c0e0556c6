//! The matmul autotuner on every adapter: a product big enough to tune gets
//! a choice that computes the reference's result, the choice is appended to
//! the cache file, and a new device on the same adapter reads it back
//! instead of tuning again (the file does not grow). Planning never tunes.

use kiln::prelude::*;

/// 160×128 @ 128×128: 2.6M multiply-adds, above the tuner's threshold.
fn product(dev: &Device) -> Result<Vec<f32>> {
    kiln::block_on(lazy_product(dev)?.to_vec::<f32>())
}

fn lazy_product(dev: &Device) -> Result<Tensor> {
    let a = kiln_conformance::rng::tensor(dev, &[160, 128], 71, -1.0, 1.0);
    let b = kiln_conformance::rng::tensor(dev, &[128, 128], 72, -1.0, 1.0);
    a.matmul(&b)
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn the_tuner_chooses_caches_and_reads_its_cache_back() {
    let path = std::env::temp_dir().join(format!("kiln-tuner-test-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // SAFETY: this binary's only test sets it before creating any device,
    // so no other thread reads the environment concurrently.
    unsafe { std::env::set_var("KILN_TUNE_CACHE", &path) };
    // SwiftShader's Vulkan driver beside the system's, as every suite has it.
    kiln_conformance::validation::env_for_adapters();
    let want = product(&Device::cpu()).unwrap();
    let (found, _) = kiln::block_on(kiln_conformance::adapters::discover());
    assert!(!found.is_empty(), "no adapter found");
    let mut chosen = Vec::new();
    for found in &found {
        // Looking at the kernels (a graph picture) runs nothing and never tunes.
        found.device.plan_kernels(&[lazy_product(&found.device).unwrap().node().clone()]).unwrap();
        assert!(found.device.matmul_choices().is_empty(), "{}: planning tuned", found.label);
        assert_eq!(found.device.stats().tuning.classes_tuned, 0, "{}", found.label);
        let got = product(&found.device).unwrap();
        let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-4, "{}: off by {worst:e}", found.label);
        let choices = found.device.matmul_choices();
        assert_eq!(choices.len(), 1, "{}: {choices:?}", found.label);
        eprintln!("{}: {} tuned to {}", found.label, choices[0].0, choices[0].1);
        chosen.push(choices);
    }
    assert_eq!(lines(&path), found.len(), "one cached choice per adapter");

    let (again, _) = kiln::block_on(kiln_conformance::adapters::discover());
    for (found, chosen) in again.iter().zip(&chosen) {
        let got = product(&found.device).unwrap();
        assert!(got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-4), "{}", found.label);
        assert_eq!(&found.device.matmul_choices(), chosen, "{} read back another choice", found.label);
    }
    assert_eq!(lines(&path), found.len(), "a new device tuned again instead of reading the cache");
    let _ = std::fs::remove_file(&path);
}
