//! Row kernels that combine a row's lanes through workgroup memory (the
//! layout for adapters whose subgroups have no fixed width) on every adapter
//! with workgroup memory, made to use it whatever their subgroups, under the
//! Vulkan validation layer: on Vulkan these kernels reach the driver as
//! kiln's own SPIR-V (`kiln_core::spirv`).

use kiln::core::testing::TestHooks;
use kiln::prelude::*;

/// Softmax, log-softmax and a variance over rows of 1024 (lanes kernels
/// with two stages, and with a stage that reads a stage before it).
fn outputs(dev: &Device) -> Result<Vec<Vec<f32>>> {
    let x = kiln_conformance::rng::tensor(dev, &[33, 1024], 62, -3.0, 3.0);
    let centred = x.sub(&x.mean(&[-1], true)?)?;
    let ys = [x.softmax(-1)?, x.log_softmax(-1)?, centred.mul(&centred)?.mean(&[-1], false)?];
    ys.iter().map(|y| kiln::block_on(y.to_vec::<f32>())).collect()
}

#[test]
fn rows_combined_through_workgroup_memory_match_the_reference() {
    let want = outputs(&Device::cpu()).unwrap();
    kiln_conformance::adapters::each_with_workgroup_memory(|label, dev| {
        dev.assume_no_fixed_subgroup_width();
        let got = outputs(dev);
        dev.assume_subgroup_width(None);
        for (k, (g, w)) in got.unwrap().iter().zip(&want).enumerate() {
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst <= 2e-5, "output {k} on {label}: off by {worst:e}");
        }
        assert!(dev.compiled_sources().iter().any(|s| s.contains("var<workgroup>")), "{label}");
        eprintln!("{label}: rows through workgroup memory match the reference");
    });
}
