//! Every member of the matmul kernel family, forced in turn on every
//! adapter, agrees with the CPU reference (`kiln_conformance::matmul_family`).

use kiln_conformance::matmul_family::{CASES, check};

#[test]
fn every_matmul_config_matches_the_reference() {
    kiln_conformance::validation::env_for_adapters();
    let (found, _) = kiln::block_on(kiln_conformance::adapters::discover());
    assert!(!found.is_empty(), "no adapter found");
    for found in &found {
        let family = kiln::block_on(check(&found.device, &CASES)).unwrap();
        family.skipped.iter().for_each(|s| eprintln!("skipped on {}: {s}", found.label));
        assert!(family.failures.is_empty(), "on {}:\n{}", found.label, family.failures.join("\n"));
        assert!(family.checked >= CASES.len() * 5, "only {} checks ran on {}", family.checked, found.label);
        eprintln!("{}: {} (case, config) pairs match the reference", found.label, family.checked);
    }
}
