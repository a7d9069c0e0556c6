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
