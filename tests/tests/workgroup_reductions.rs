//! Tree reductions that combine each workgroup's partials in workgroup
//! memory (what GPUs run; CPU adapters fold one partial per invocation),
//! made to run so on every adapter with workgroup memory, under the Vulkan
//! validation layer: they match the reference, keep the first extreme of
//! argmax/argmin, and give the same bits from run to run.

use kiln::prelude::*;

/// The inputs: 2^24 elements (the size that shows Mesa's 65,535-iteration
/// loop limit), rows of an odd length (one input large enough for the
/// streaming first pass), and small integers with many ties for the arg
/// reductions.
fn outputs(dev: &Device) -> Result<Vec<Vec<f32>>> {
    let big = kiln_conformance::rng::tensor(dev, &[1 << 24], 71, -1.0, 1.0);
    let rows = kiln_conformance::rng::tensor(dev, &[3, 70001], 72, -2.0, 2.0);
    let long = kiln_conformance::rng::tensor(dev, &[5, 250001], 74, -1.0, 1.0);
    let ties = kiln_conformance::rng::tensor(dev, &[5, 40000], 73, 0.0, 7.0).floor()?;
    let ys = [
        big.sum(&[], false)?,
        big.max(&[], false)?,
        rows.sum(&[-1], false)?,
        rows.min(&[-1], false)?,
        rows.sum(&[0], false)?,
        rows.exp()?.mean(&[-1], false)?,
        ties.argmax(Some(-1), false)?.cast(DType::F32)?,
        ties.argmin(Some(-1), false)?.cast(DType::F32)?,
        ties.argmax(None, false)?.cast(DType::F32)?,
        long.sum(&[-1], false)?,
    ];
    ys.iter().map(|y| kiln::block_on(y.to_vec::<f32>())).collect()
}

#[test]
fn reductions_combined_in_workgroup_memory_match_the_reference() {
    let want = outputs(&Device::cpu()).unwrap();
    kiln_conformance::adapters::each_with_workgroup_memory(|label, dev| {
        dev.set_workgroup_reductions(Some(true));
        let (first, again) = (outputs(dev).unwrap(), outputs(dev).unwrap());
        dev.set_workgroup_reductions(None);
        for (k, ((g, w), a)) in first.iter().zip(&want).zip(&again).enumerate() {
            let scale = w.iter().fold(1f32, |m, v| m.max(v.abs()));
            let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            // Sums of up to 2^24 terms in another order: relative to the
            // largest result; extremes and indices exactly.
            let tol = if matches!(k, 0 | 2 | 4 | 5 | 9) { 2e-4 * scale } else { 0.0 };
            assert!(worst <= tol, "output {k} on {label}: off by {worst:e}");
            let same_bits = g.iter().zip(a).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same_bits, "output {k} on {label}: bits differ between two runs");
        }
        assert!(dev.compiled_sources().iter().any(|s| s.contains("var<workgroup> part_v")), "{label}");
        eprintln!("{label}: reductions through workgroup memory match the reference");
    });
}
