//! Every member of the matmul kernel family, forced in turn on every
//! adapter, agrees with the CPU reference (`kiln_conformance::matmul_family`),
//! with the Vulkan validation layer on: the staged members' workgroup
//! memory reaches Vulkan through kiln's own SPIR-V (`kiln_core::spirv`).

use kiln::prelude::Device;
use kiln_conformance::adapters::at_once;
use kiln_conformance::matmul_family::{CASES, Coverage, check};

#[test]
fn every_matmul_config_matches_the_reference() {
    eprintln!("{}", kiln_conformance::validation::setup());
    let (found, _) = kiln::block_on(kiln_conformance::adapters::discover());
    assert!(!found.is_empty(), "no adapter found");
    // Each (case, config) pair on one adapter, a different third on each:
    // with Mesa's shader cache empty (a fresh machine) all pairs took
    // lavapipe 7.8 min and GL 4.6, a third of them SwiftShader 2.6, most of
    // it compiling. GL and lavapipe share llvmpipe's LLVM back end, and the
    // configs the tuner picks run the whole conformance suite on every
    // adapter. The adapters run at once: each compiles on one thread.
    let devices: Vec<&Device> = found.iter().map(|f| &f.device).collect();
    let families = at_once(&devices, |device| {
        let info = device.info();
        let offset = match (info.backend == "gl", info.name.to_lowercase().contains("swiftshader")) {
            (true, _) => 2,
            (false, true) => 0,
            (false, false) => 1,
        };
        kiln::block_on(check(device, &CASES, Coverage::Sample { every: 3, offset }))
    });
    for (found, family) in found.iter().zip(families) {
        let family = family.unwrap();
        family.skipped.iter().for_each(|s| eprintln!("skipped on {}: {s}", found.label));
        assert!(family.failures.is_empty(), "on {}:\n{}", found.label, family.failures.join("\n"));
        assert!(family.unchecked.is_empty(), "on {}, no case checked {:?}", found.label, family.unchecked);
        let least = CASES.len() * 2;
        assert!(family.checked >= least, "only {} checks ran on {}", family.checked, found.label);
        eprintln!("{}: {} (case, config) pairs match the reference", found.label, family.checked);
    }
    let messages = kiln_conformance::validation::take_messages();
    assert!(messages.is_empty(), "the validation layer reported:\n{}", messages.join("\n"));
}
