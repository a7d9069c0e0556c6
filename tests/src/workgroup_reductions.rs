//! Tree reductions that combine each workgroup's partials in workgroup
//! memory (what GPUs run; CPU adapters fold one partial per invocation),
//! forced on one device and checked against the CPU reference: natively by
//! `tests/workgroup_reductions.rs` on every adapter, and by the browser's
//! conformance page (Dawn compiles its own copy of these kernels).

use kiln::core::testing::TestHooks;
use kiln::prelude::*;

/// The outputs: 2^24 elements (the size that shows Mesa's 65,535-iteration
/// loop limit), rows of an odd length (one input large enough for the
/// streaming first pass), small integers with many ties for the arg
/// reductions, and long columns; integer-weight products of one row and of
/// a row block.
/// Sums are listed in [`SUMS`].
async fn outputs(dev: &Device) -> Result<Vec<Vec<f32>>> {
    let big = crate::rng::tensor(dev, &[1 << 24], 71, -1.0, 1.0);
    let rows = crate::rng::tensor(dev, &[3, 70001], 72, -2.0, 2.0);
    let ties = crate::rng::tensor(dev, &[5, 40000], 73, 0.0, 7.0).floor()?;
    let long = crate::rng::tensor(dev, &[5, 250001], 74, -1.0, 1.0);
    // Long columns, split into chunks whose partials the tree combines.
    let tall = crate::rng::tensor(dev, &[40000, 8], 81, -1.0, 1.0);
    let tall_ties = crate::rng::tensor(dev, &[40000, 6], 82, 0.0, 7.0).floor()?;
    let mut ys = vec![
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
        tall.sum(&[0], false)?,
        tall_ties.argmax(Some(0), false)?.cast(DType::F32)?,
    ];
    for (i, format) in [QuantFormat::INT8, QuantFormat::int4(32)].into_iter().enumerate() {
        let (codes, scales) = format.shapes("quant_matmul", 33, 1024)?;
        let codes = crate::cases::input(dev, 75 + i as u64, &codes, DType::U32, 0.0, 4e9)?;
        let scales = crate::rng::tensor(dev, &scales, 77 + i as u64, 0.001, 0.01);
        for rows in [1, 7] {
            let x = crate::rng::tensor(dev, &[rows, 1024], 79 + rows as u64, -1.0, 1.0);
            ys.push(x.quant_matmul(&codes, &scales, format)?);
        }
    }
    let mut out = Vec::new();
    for y in &ys {
        out.push(y.to_vec::<f32>().await?);
    }
    Ok(out)
}

/// Outputs that sum many terms, in another order than the reference's:
/// within 2e-4 of the largest result; the others must match exactly.
const SUMS: [usize; 10] = [0, 2, 4, 5, 9, 10, 12, 13, 14, 15];

/// Run the outputs twice on `dev` with the workgroup tree forced on; the
/// failures (off the reference, bits that differ between the runs, no
/// workgroup memory in the compiled kernels), empty when all hold.
pub async fn check(dev: &Device) -> Result<Vec<String>> {
    let want = outputs(&Device::cpu()).await?;
    dev.set_workgroup_reductions(Some(true));
    let first = outputs(dev).await;
    let again = outputs(dev).await;
    dev.set_workgroup_reductions(None);
    let (first, again) = (first?, again?);
    let mut failures = Vec::new();
    for (k, ((g, w), a)) in first.iter().zip(&want).zip(&again).enumerate() {
        let scale = w.iter().fold(1f32, |m, v| m.max(v.abs()));
        let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let tol = if SUMS.contains(&k) { 2e-4 * scale } else { 0.0 };
        if g.len() != w.len() || worst > tol {
            failures.push(format!("output {k}: off by {worst:e}"));
        }
        if !g.iter().zip(a).all(|(x, y)| x.to_bits() == y.to_bits()) {
            failures.push(format!("output {k}: bits differ between two runs"));
        }
    }
    for (kernel, marker) in [("reduction", "var<workgroup> part_v"), ("quant_matmul", "var<workgroup> partials")] {
        if !dev.compiled_sources().iter().any(|s| s.contains(marker)) {
            failures.push(format!("no {kernel} kernel combined partials in workgroup memory"));
        }
    }
    Ok(failures)
}
