//! Softmax over [4096, 1024] written by hand in several layouts, to show
//! where a row kernel's time goes on each adapter (and so what the
//! generated one could reach): one row per invocation as kiln's row kernel
//! does without subgroups, with two exps per element or one (exp(x − max)
//! kept in the output), or none at all (the memory pattern alone); a
//! subgroup per row holding the row in registers (one read, one write; the
//! layout kiln generates where subgroups have a fixed width), with and
//! without the exp; the same with 8 lanes per row combining through
//! workgroup memory, 8 rows per workgroup (kiln's layout on CPU adapters off
//! Vulkan, without fixed-width subgroups). Each layout's result is
//! checked against a host softmax before it is timed.

use crate::ceilings::Gpu;
use crate::measure::{Paired, Reps, time_paired};
use kiln::core::codegen::math::{Needs, helpers};
use kiln::core::wgpu;

pub const ROWS: usize = 4096;
pub const LEN: usize = 1024;
/// vec4s per row.
const VECS: usize = LEN / 4;
/// Lanes per row in the workgroup layout (kiln's choice on CPU adapters
/// whose subgroups have no fixed width), and rows per workgroup.
const WG_LANES: usize = 8;
const WG_ROWS: usize = 8;

pub struct Layout {
    pub name: &'static str,
    /// Timed in pairs with the copy microkernel.
    pub timing: Result<Paired, String>,
}

/// The bindings, and the bit-pattern helper kiln's math functions use.
const BINDINGS: &str = "@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
fn f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }
";

/// `kiln_exp(x)`, or `x` itself when the layout leaves the exp out.
fn exp(with_exp: bool, x: &str) -> String {
    if with_exp { format!("kiln_exp({x})") } else { format!("({x})") }
}

fn prelude() -> String {
    format!("{BINDINGS}{}", helpers(Needs { exp: true, ..Default::default() }, true))
}

/// One row per invocation: a max pass, a pass summing exp(x − max) (and,
/// with `keep`, storing it), and an output pass.
fn per_invocation(exps: usize) -> String {
    let keep = exps == 1;
    let e = exp(exps > 0, "src[i] - vec4<f32>(mx)");
    let (sum_pass, out) = if keep {
        (format!("let ev = {e}; dst[i] = ev; b = b + ev;"), "dst[i] / vec4<f32>(s)".to_string())
    } else {
        (format!("b = b + {e};"), format!("{e} / vec4<f32>(s)"))
    };
    format!(
        "{}@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let first = gid.x * {VECS}u;
    var mv = vec4<f32>(-3e38);
    for (var j = 0u; j < {VECS}u; j++) {{ mv = max(mv, src[first + j]); }}
    let mx = max(max(mv.x, mv.y), max(mv.z, mv.w));
    var s = 0.0;
    for (var j0 = 0u; j0 < {VECS}u; j0 += 16u) {{
        var b = vec4<f32>(0.0);
        for (var j = j0; j < j0 + 16u; j++) {{ let i = first + j; {sum_pass} }}
        s = s + (b.x + b.y) + (b.z + b.w);
    }}
    for (var j = 0u; j < {VECS}u; j++) {{ let i = first + j; dst[i] = {out}; }}
}}
",
        prelude()
    )
}

/// How the lanes of a row combine their maxima and sums.
#[derive(Clone, Copy)]
enum Combine {
    /// One subgroup per row (workgroups of 64).
    Subgroup,
    /// `WG_ROWS` rows per workgroup, through workgroup memory (a barrier each).
    Workgroup,
}

/// `lanes` per row, each lane holding its vec4s in registers: the row is
/// read once and written once (the layout kiln generates, see `RowLanes`).
fn registers(with_exp: bool, lanes: usize, combine: Combine) -> String {
    let per_lane = VECS / lanes;
    let mut s = prelude();
    let combined = |name: &str, value: &str, subgroup_op: &str, merge: &str| match combine {
        Combine::Subgroup => format!("    let {name} = vec4<f32>({subgroup_op}({value}));\n"),
        Combine::Workgroup => {
            let mut c = format!(
                "    part_{name}[l] = {value};\n    workgroupBarrier();\n    var {name}_s = part_{name}[first];\n"
            );
            (1..lanes).for_each(|i| c += &format!("    {name}_s = {merge}({name}_s, part_{name}[first + {i}u]);\n"));
            c + &format!("    let {name} = vec4<f32>({name}_s);\n")
        }
    };
    match combine {
        Combine::Subgroup => {
            s += "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n";
            s += &format!("    let at = (gid.x / {lanes}u) * {VECS}u + gid.x % {lanes}u;\n");
        }
        Combine::Workgroup => {
            let wg = lanes * WG_ROWS;
            s += &format!("var<workgroup> part_mx: array<f32, {wg}>;\nvar<workgroup> part_s: array<f32, {wg}>;\n");
            s += &format!("fn add(a: f32, b: f32) -> f32 {{ return a + b; }}\n@compute @workgroup_size({wg})\n");
            s += "fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) l: u32) {\n";
            s += &format!("    let first = l - l % {lanes}u;\n");
            s += &format!("    let at = (wg.x * {WG_ROWS}u + l / {lanes}u) * {VECS}u + l % {lanes}u;\n");
        }
    }
    (0..per_lane).for_each(|t| s += &format!("    let x{t} = src[at + {}u];\n", t * lanes));
    s += "    var mv = x0;\n";
    (1..per_lane).for_each(|t| s += &format!("    mv = max(mv, x{t});\n"));
    s += &combined("mx", "max(max(mv.x, mv.y), max(mv.z, mv.w))", "subgroupMax", "max");
    s += "    var b = vec4<f32>(0.0);\n";
    (0..per_lane)
        .for_each(|t| s += &format!("    let e{t} = {};\n    b = b + e{t};\n", exp(with_exp, &format!("x{t} - mx"))));
    s += &combined("s", "(b.x + b.y) + (b.z + b.w)", "subgroupAdd", "add");
    (0..per_lane).for_each(|t| s += &format!("    dst[at + {}u] = e{t} / s;\n", t * lanes));
    s + "}\n"
}

/// (name, WGSL, workgroups, whether it computes softmax) for the layouts
/// this adapter can run: subgroups where they have a fixed width
/// (`subgroup`), workgroup memory off Vulkan (kiln's rule, see
/// `MatmulConfig::runs_on`).
fn layouts(subgroup: Option<usize>, vulkan: bool) -> Vec<(&'static str, String, usize, bool)> {
    let row_per_invocation_groups = ROWS.div_ceil(64);
    let mut v = vec![
        ("row per invocation, 2 exps/element", per_invocation(2), row_per_invocation_groups, true),
        ("row per invocation, 1 exp/element", per_invocation(1), row_per_invocation_groups, true),
        ("row per invocation, no exp", per_invocation(0), row_per_invocation_groups, false),
    ];
    if let Some(lanes) = subgroup {
        let groups = ROWS * lanes / 64;
        let sg = |e| registers(e, lanes, Combine::Subgroup);
        v.push(("a subgroup per row in registers, 1 exp/element", sg(true), groups, true));
        v.push(("a subgroup per row in registers, no exp", sg(false), groups, false));
    }
    if !vulkan {
        let wg = |e| registers(e, WG_LANES, Combine::Workgroup);
        let groups = ROWS / WG_ROWS;
        v.push(("8 lanes per row, 8 rows per workgroup, in registers, 1 exp/element", wg(true), groups, true));
        v.push(("8 lanes per row, 8 rows per workgroup, in registers, no exp", wg(false), groups, false));
    }
    v
}

/// The input: varied values in [-5, 5).
fn input() -> Vec<f32> {
    (0..ROWS * LEN).map(|i| ((i as u64 * 2_654_435_761 % 1000) as f32) / 100.0 - 5.0).collect()
}

/// Worst absolute difference from a host softmax of `x`.
fn softmax_error(x: &[f32], y: &[f32]) -> f64 {
    let mut worst = 0f64;
    for (xr, yr) in x.chunks(LEN).zip(y.chunks(LEN)) {
        let max = xr.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let sum: f64 = xr.iter().map(|&v| (v as f64 - max).exp()).sum();
        for (&a, &b) in xr.iter().zip(yr) {
            worst = worst.max((((a as f64 - max).exp() / sum) - b as f64).abs());
        }
    }
    worst
}

/// Each layout, checked against a host softmax and timed in pairs with `copy`.
pub fn measure(
    adapter: &wgpu::Adapter,
    reps: Reps,
    copy: &dyn Fn() -> Result<(), String>,
) -> Result<Vec<Layout>, String> {
    let subgroups = adapter.features().contains(wgpu::Features::SUBGROUP);
    let features = if subgroups { wgpu::Features::SUBGROUP } else { wgpu::Features::empty() };
    let info = adapter.get_info();
    let fixed = subgroups && info.subgroup_min_size == info.subgroup_max_size;
    let subgroup = fixed.then_some(info.subgroup_min_size as usize);
    let gpu = Gpu::open(adapter, features)?;
    let x = input();
    let bytes = (x.len() * 4) as u64;
    let (src, dst) = (gpu.buffer(bytes), gpu.buffer(bytes));
    gpu.queue.write_buffer(&src, 0, &x.iter().flat_map(|v| v.to_ne_bytes()).collect::<Vec<u8>>());
    let vulkan = adapter.get_info().backend == wgpu::Backend::Vulkan;
    let mut out = Vec::new();
    for (name, wgsl, groups, softmax) in layouts(subgroup, vulkan) {
        let run = gpu.kernel(&wgsl, &src, &dst, [groups as u32, 1]);
        let checked = run().and_then(|()| {
            let err = softmax_error(&x, &gpu.read(&dst, bytes)?);
            if softmax && err > 1e-6 { Err(format!("wrong result: off by {err:e}")) } else { Ok(()) }
        });
        out.push(Layout { name, timing: checked.and_then(|()| time_paired(reps, copy, &run)) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_validates() {
        for (name, source, _, _) in layouts(Some(8), false) {
            kiln_codegen::validate::translate_all(&source).unwrap_or_else(|e| panic!("{name}: {e}\n{source}"));
        }
    }
}
