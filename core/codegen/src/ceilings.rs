//! The ceilings' microkernels, which benchmarks set kiln's kernels
//! against: copy bandwidth (a vec4 copy, bytes read + written) and FMA
//! throughput (independent `acc = fma(acc, a, b)` chains in registers, the
//! multiply-add form the matmul kernels use). kiln-bench runs them
//! natively; the browser's benchmark page runs the same WGSL through
//! WebGPU. Both bind `src` (binding 0, read) and `dst` (binding 1).

/// The copy takes 8 vec4s per invocation, a grid apart, as kiln's own
/// elementwise kernels do: with one vec4 per invocation, kiln's generated
/// one-op kernel outran this "ceiling" by up to a quarter on CPU adapters.
pub const COPY_VEC4S_PER_INVOCATION: usize = 8;
/// The copy's workgroup size.
pub const COPY_WORKGROUP: usize = 256;

/// The copy over a 2D grid of `COPY_WORKGROUP`-wide workgroups.
pub fn copy_wgsl() -> String {
    format!(
        "
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size({COPY_WORKGROUP})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {{
    let row = groups.x * {COPY_WORKGROUP}u;
    let threads = row * groups.y;
    let t = gid.y * row + gid.x;
    let n = arrayLength(&dst);
    for (var r = 0u; r < {COPY_VEC4S_PER_INVOCATION}u; r++) {{
        let i = t + r * threads;
        if (i < n) {{
            dst[i] = src[i];
        }}
    }}
}}
"
    )
}

/// Enough chains to hide FMA latency, few enough to stay in registers on
/// CPU adapters (more chains, or vec4 chains, measured slower on lavapipe:
/// spills).
pub const FMA_CHAINS: usize = 12;
/// Each loop trip's unrolled multiply-adds per chain.
const FMA_UNROLL: usize = 8;
/// Loop count per invocation.
const FMA_ITERS: u32 = 4096;
/// The FMA kernel's workgroup size.
pub const FMA_WORKGROUP: u32 = 64;
/// Invocations of one FMA run (a 1D grid of `FMA_WORKGROUP`s); `dst`
/// holds a vec4 for each.
pub const FMA_INVOCATIONS: u32 = FMA_WORKGROUP * 512;

/// `FMA_CHAINS` independent f32 chains of `fma`, unrolled `FMA_UNROLL`×
/// per loop trip; `src` holds [`fma_params`].
pub fn fma_wgsl() -> String {
    let chains = 0..FMA_CHAINS;
    let mut s = format!(
        "@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@compute @workgroup_size({FMA_WORKGROUP})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let a = src[0].x;
    let b = src[1].x;
    let iters = u32(src[2].x);
"
    );
    chains.clone().for_each(|c| s += &format!("    var c{c} = f32(gid.x) + {c}.0;\n"));
    s += &format!("    for (var k = 0u; k < iters; k += {FMA_UNROLL}u) {{\n");
    for _ in 0..FMA_UNROLL {
        chains.clone().for_each(|c| s += &format!("        c{c} = fma(c{c}, a, b);\n"));
    }
    let sum: Vec<String> = chains.map(|c| format!("c{c}")).collect();
    s + &format!("    }}\n    dst[gid.x] = vec4<f32>({});\n}}\n", sum.join(" + "))
}

/// The FMA kernel's `src`: three vec4s whose x are `a`, `b` (read at run
/// time, so the compiler cannot fold the chains) and the loop count.
pub fn fma_params() -> [f32; 12] {
    [0.999, 0.999, 0.999, 0.999, 1e-3, 1e-3, 1e-3, 1e-3, FMA_ITERS as f32, 0.0, 0.0, 0.0]
}

/// Floating-point operations of one FMA run (two per multiply-add).
pub fn fma_flops() -> f64 {
    FMA_INVOCATIONS as f64 * FMA_ITERS as f64 * FMA_CHAINS as f64 * 2.0
}

#[cfg(all(test, feature = "translate"))]
mod tests {
    use super::*;

    #[test]
    fn the_microkernels_validate() {
        for (name, source) in [("copy", copy_wgsl()), ("fma", fma_wgsl())] {
            crate::validate::translate_all(&source).unwrap_or_else(|e| panic!("{name}: {e}\n{source}"));
        }
        assert_eq!(fma_wgsl().matches("fma(").count(), FMA_CHAINS * FMA_UNROLL);
    }
}
