//! The attention kernel (`kiln_conformance::fused_attention`) forced on in
//! every way of sharing keys each adapter has (workgroup tiles, subgroup
//! rows), under the Vulkan validation layer:
//! ALiBi, padding masks, head widths not a multiple of 4, batched and
//! unbatched products, causal masks (whose hidden keys the kernel skips)
//! and masks that only look causal, against the reference.

#[test]
fn attention_as_one_kernel_matches_the_reference() {
    kiln_conformance::adapters::each_with_workgroup_memory(|label, dev| {
        let failures = kiln::block_on(kiln_conformance::fused_attention::check(dev)).unwrap();
        assert!(failures.is_empty(), "{label}:\n{}", failures.join("\n"));
        eprintln!("{label}: attention as one kernel matches the reference");
    });
}

/// Probabilities, or scores (scaled or a bare product), realized before
/// the weighted sum (a user looking at them) are buffers, not a pattern to
/// fuse: the product reads them as they are, on every adapter (the matcher
/// once indexed a realized node's dropped inputs and panicked).
#[test]
fn realized_scores_or_probabilities_are_read_as_buffers() {
    use kiln::prelude::*;
    use kiln_conformance::cases::input;
    #[derive(Debug, Clone, Copy)]
    enum Realized {
        Probabilities,
        ScaledScores,
        BareScores,
    }
    let run = |dev: &Device, realized: Realized| -> Result<Vec<f32>> {
        let x = |seed, shape: &[usize]| input(dev, seed, shape, DType::F32, -1.0, 1.0);
        let product = x(90, &[40, 8])?.matmul(&x(91, &[8, 50])?)?;
        let scores = match realized {
            Realized::BareScores => product,
            _ => product.mul_scalar(0.5)?,
        };
        if !matches!(realized, Realized::Probabilities) {
            kiln::block_on(scores.realize())?;
        }
        let probabilities = scores.softmax(-1)?;
        if matches!(realized, Realized::Probabilities) {
            kiln::block_on(probabilities.realize())?;
        }
        kiln::block_on(probabilities.matmul(&x(92, &[50, 6])?)?.to_vec::<f32>())
    };
    for (label, dev) in kiln_conformance::adapters::shared().iter() {
        for realized in [Realized::Probabilities, Realized::ScaledScores, Realized::BareScores] {
            let (got, want) = (run(dev, realized).unwrap(), run(&Device::cpu(), realized).unwrap());
            let worst = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-5, "{label} ({realized:?} realized): off by {worst:e}");
        }
    }
}
