//! The workgroup tree of tree reductions and of the integer-weight product
//! (`kiln_conformance::workgroup_reductions`)
//! forced on every adapter with workgroup memory, under the Vulkan
//! validation layer: it matches the reference, keeps the first extreme of
//! argmax/argmin, and gives the same bits from run to run.

#[test]
fn reductions_combined_in_workgroup_memory_match_the_reference() {
    kiln_conformance::adapters::each_with_workgroup_memory(|label, dev| {
        let failures = kiln::block_on(kiln_conformance::workgroup_reductions::check(dev)).unwrap();
        assert!(failures.is_empty(), "{label}:\n{}", failures.join("\n"));
        eprintln!("{label}: reductions through workgroup memory match the reference");
    });
}
