//! Every member of the matmul kernel family, forced in turn on every
//! adapter, agrees with the CPU reference (`kiln_conformance::matmul_family`),
//! with the Vulkan validation layer on: the staged members' workgroup
//! memory reaches Vulkan through kiln's own SPIR-V (`kiln_core::spirv`).

use kiln_conformance::matmul_family::{CASES, check};

#[test]
fn every_matmul_config_matches_the_reference() {
    eprintln!("{}", kiln_conformance::validation::setup());
    let (found, _) = kiln::block_on(kiln_conformance::adapters::discover());
    assert!(!found.is_empty(), "no adapter found");
    for found in &found {
        let family = kiln::block_on(check(&found.device, &CASES)).unwrap();
        family.skipped.iter().for_each(|s| eprintln!("skipped on {}: {s}", found.label));
        assert!(family.failures.is_empty(), "on {}:\n{}", found.label, family.failures.join("\n"));
        assert!(family.checked >= CASES.len() * 5, "only {} checks ran on {}", family.checked, found.label);
        eprintln!("{}: {} (case, config) pairs match the reference", found.label, family.checked);
    }
    let messages = kiln_conformance::validation::take_messages();
    assert!(messages.is_empty(), "the validation layer reported:\n{}", messages.join("\n"));
}
