//! The runtime's own choices of kernel variant that a test may pin, so that
//! every variant runs on whatever adapter the tests have. Set through
//! [`TestHooks`], which exists only with the crate feature `testing`: they
//! are not part of the API a program uses.

use kiln_codegen::Caps;
use kiln_codegen::attention::KeySharing;
use kiln_codegen::launch::{AttentionPlan, Variants};
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// A subgroup width that stands for "no fixed width".
const NO_FIXED_WIDTH: u32 = u32::MAX;

/// Each field 0 when the runtime decides (atomics: set through a shared device).
#[derive(Debug, Default)]
pub struct Overrides {
    /// The subgroup width row kernels assume instead of the adapter's
    /// ([`NO_FIXED_WIDTH`]: no fixed width).
    subgroup_width: AtomicU32,
    /// 1 off, 2 on.
    workgroup_reductions: AtomicU8,
    /// 1 off, 2 on.
    matmul_panels: AtomicU8,
    /// [`plan_code`] of the pinned attention plan.
    attention: AtomicU32,
}

/// An attention plan as a nonzero word: 1 apart, 2 workgroup tiles, 3 + w
/// subgroups `w` wide.
#[cfg(feature = "testing")]
fn plan_code(plan: AttentionPlan) -> u32 {
    match plan {
        AttentionPlan::Apart => 1,
        AttentionPlan::OneKernel(KeySharing::Workgroup) => 2,
        AttentionPlan::OneKernel(KeySharing::Subgroup(width)) => 3 + width,
    }
}

fn read_plan(code: u32) -> Option<AttentionPlan> {
    match code {
        0 => None,
        1 => Some(AttentionPlan::Apart),
        2 => Some(AttentionPlan::OneKernel(KeySharing::Workgroup)),
        w => Some(AttentionPlan::OneKernel(KeySharing::Subgroup(w - 3))),
    }
}

#[cfg(feature = "testing")]
fn tristate(on: Option<bool>) -> u8 {
    on.map_or(0, |on| if on { 2 } else { 1 })
}

fn read_tristate(v: &AtomicU8) -> Option<bool> {
    match v.load(Ordering::Relaxed) {
        0 => None,
        set => Some(set == 2),
    }
}

impl Overrides {
    /// The variants a device with `caps` runs: its own, or those pinned.
    pub fn variants(&self, caps: &Caps) -> Variants {
        let own = Variants::of(caps);
        let subgroup_width = match self.subgroup_width.load(Ordering::Relaxed) {
            NO_FIXED_WIDTH => None,
            w if w > 0 && caps.subgroups => Some(w),
            _ => own.subgroup_width,
        };
        let workgroup_reductions = read_tristate(&self.workgroup_reductions)
            .map_or(own.workgroup_reductions, |on| on && caps.workgroup_memory);
        let attention = read_plan(self.attention.load(Ordering::Relaxed))
            .filter(|plan| plan.possible(caps))
            .unwrap_or(own.attention);
        Variants { subgroup_width, workgroup_reductions, matmul_panels: read_tristate(&self.matmul_panels), attention }
    }
}

/// Pins for the runtime's choices of kernel variant (feature `testing`).
#[cfg(feature = "testing")]
pub trait TestHooks {
    /// Generate subgroup row kernels for subgroups `width` wide instead of
    /// the adapter's width (`None`: the adapter's). A width the adapter does
    /// not have sends them down their fallback, which must still compute
    /// the right result. Ignored where the adapter has no subgroups.
    fn assume_subgroup_width(&self, width: Option<u32>);
    /// Generate row kernels as for subgroups of no fixed width, i.e.
    /// combining a row's lanes through workgroup memory where the device
    /// has it; `assume_subgroup_width` undoes it.
    fn assume_no_fixed_subgroup_width(&self);
    /// Make tree reductions combine each workgroup's partials in workgroup
    /// memory (`Some(true)`, what GPUs run) or not (`Some(false)`, what CPU
    /// adapters run); `None`: by device type. Ignored where the device has
    /// no workgroup memory.
    fn set_workgroup_reductions(&self, on: Option<bool>);
    /// Make vec4 matmuls read B from a copy laid out as column panels
    /// wherever its shape allows (`Some(true)`), never (`Some(false)`), or
    /// on CPU adapters for large B (`None`, the default).
    fn set_matmul_panels(&self, on: Option<bool>);
    /// Run `softmax(scores) @ v` as `plan` says (one kernel sharing keys
    /// through workgroup memory, as GPUs do, or through subgroups, as CPU
    /// adapters do; or apart); `None`: by device type. Ignored where the
    /// device cannot (no workgroup memory, no subgroups).
    fn set_attention(&self, plan: Option<AttentionPlan>);
}

/// What carries variant pins: a device, through its runtime's
/// [`Overrides`] (`None` where the runtime has no variants to pin).
pub trait Pinned {
    fn overrides(&self) -> Option<&Overrides>;
}

#[cfg(feature = "testing")]
impl<T: Pinned + ?Sized> TestHooks for T {
    fn assume_subgroup_width(&self, width: Option<u32>) {
        if let Some(o) = self.overrides() {
            o.subgroup_width.store(width.unwrap_or(0), Ordering::Relaxed);
        }
    }

    fn assume_no_fixed_subgroup_width(&self) {
        if let Some(o) = self.overrides() {
            o.subgroup_width.store(NO_FIXED_WIDTH, Ordering::Relaxed);
        }
    }

    fn set_workgroup_reductions(&self, on: Option<bool>) {
        if let Some(o) = self.overrides() {
            o.workgroup_reductions.store(tristate(on), Ordering::Relaxed);
        }
    }

    fn set_matmul_panels(&self, on: Option<bool>) {
        if let Some(o) = self.overrides() {
            o.matmul_panels.store(tristate(on), Ordering::Relaxed);
        }
    }

    fn set_attention(&self, plan: Option<AttentionPlan>) {
        if let Some(o) = self.overrides() {
            o.attention.store(plan.map_or(0, plan_code), Ordering::Relaxed);
        }
    }
}
