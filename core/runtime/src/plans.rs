//! Kernel plans made with no device at hand: the schedule of some roots
//! for a device's caps, and the kernels it would launch, for tests that
//! check every kernel through its compilers and for tools.

use kiln_codegen::launch::{self, Variants};
use kiln_codegen::matmul::MatmulConfig;
use kiln_codegen::{Caps, KernelKey};
use kiln_ir::error::Result;
use kiln_ir::ir::Node;
use kiln_sched::schedule::{Item, Schedule};
use kiln_sched::walk::{HostInputs, Scheduler};

/// The schedule realizing `roots` on a device with `caps`, made without
/// one: inputs realized anywhere stand as slots of their own.
pub fn schedule_for(caps: &Caps, roots: &[Node]) -> Result<Schedule> {
    let mut s = Scheduler::new(caps, HostInputs::Placeholder);
    s.run(roots)?;
    Ok(s.finish())
}

/// The kernels realizing `roots` launches on a device with `caps` (its own
/// variants; matmuls take the untuned default config), in order: the
/// schedule rendered with no device at hand. `KernelKey::wgsl` gives each
/// one's source.
pub fn kernels_for(caps: &Caps, roots: &[Node]) -> Result<Vec<KernelKey>> {
    keys_with(caps, roots, |_| None)
}

/// Every kernel a CUDA device may launch for `roots`: [`kernels_for`] with
/// [`Caps::cuda`], and for each matmul with an epilogue also the pass that
/// runs it after cuBLAS's product ([`Item::epilogue_pass`]; kiln's own
/// kernel runs where cuBLAS cannot read the operands or is missing).
pub fn cuda_kernels_for(roots: &[Node]) -> Result<Vec<KernelKey>> {
    // Names only: the item's own output stands in for the product.
    keys_with(&Caps::cuda(), roots, |item| item.epilogue_pass(item.writes()[0].clone()))
}

/// The kernels of each item of `roots`' schedule, then those of the item
/// `also` gives for it, if any.
fn keys_with(caps: &Caps, roots: &[Node], also: impl Fn(&Item) -> Option<Item>) -> Result<Vec<KernelKey>> {
    let (variants, config) = (Variants::of(caps), |_, _| MatmulConfig::default_for(caps));
    let mut keys = Vec::new();
    for k in schedule_for(caps, roots)?.items {
        keys.extend(launch::item_kernels(caps, &variants, k.op, &k.item, config)?);
        if let Some(extra) = also(&k.item) {
            keys.extend(launch::item_kernels(caps, &variants, k.op, &extra, config)?);
        }
    }
    Ok(keys)
}
