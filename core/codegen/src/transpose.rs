//! A transposed f32 matrix (or a batch of them) copied into rows: the
//! copy a matmul makes of an operand whose rows are strided
//! ([`crate::launch::matmul`]). Each invocation moves a 4 × 4 block: four
//! vec4 loads along the source's contiguous axis, a transpose in
//! registers, four vec4 stores. An elementwise copy instead reads one
//! element per invocation after dividing its index by the row length, and
//! on lavapipe copied a 128 × 2048 view at under 1 GB/s.
//!
//! The view `[batch.., R, C]` reads element `(r, c)` at `r + c · stride`
//! (rows contiguous in the source), R and C multiples of 4, and every
//! stride and the offset too, so all loads and stores are whole vec4s.
//! Meta, in vec4s where it counts memory: 0 R, 1 C, 2 the offset / 4, 3 the
//! column stride / 4, 4 blocks per matrix, 5 matrices, then per batch axis
//! (outermost first) its extent and its stride / 4.

use crate::META_DECL;

/// Invocations per workgroup.
pub const TRANSPOSE_WG: u32 = 64;

/// The copy for views with `batch_rank` batch axes.
pub fn transpose_wgsl(batch_rank: usize) -> String {
    let mut s = String::from(META_DECL);
    s += "@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;\n";
    s += "@group(0) @binding(2) var<storage, read> src: array<vec4<f32>>;\n";
    s += &format!("@compute @workgroup_size({TRANSPOSE_WG})\n");
    s += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32,\n";
    s += "        @builtin(num_workgroups) grid: vec3<u32>) {\n";
    s += &format!("    let t = (wid.y * grid.x + wid.x) * {TRANSPOSE_WG}u + lane;\n");
    s += "    let blocks = m(4u);\n    if (t >= blocks * m(5u)) {\n        return;\n    }\n";
    s += "    let matrix = t / blocks;\n    let col_blocks = m(1u) / 4u;\n";
    s += "    let row_block = (t % blocks) / col_blocks;\n    let col_block = (t % blocks) % col_blocks;\n";
    // The matrix's first vec4 in the source: its batch index unravelled,
    // innermost axis first.
    s += "    var at = m(2u) + row_block;\n";
    if batch_rank > 0 {
        s += "    var rest = matrix;\n";
        for axis in (0..batch_rank).rev() {
            let (extent, stride) = (6 + 2 * axis, 7 + 2 * axis);
            s += &format!("    at += (rest % m({extent}u)) * m({stride}u);\n    rest /= m({extent}u);\n");
        }
    }
    // Column c0 + j of the block, its rows r0..r0 + 3.
    for j in 0..4 {
        s += &format!("    let c{j} = src[at + (col_block * 4u + {j}u) * m(3u)];\n");
    }
    // Row r0 + i of the output: element i of each column.
    s += "    let row = m(1u) / 4u;\n";
    s += "    let o = matrix * (m(0u) * row) + row_block * 4u * row + col_block;\n";
    for (i, e) in ["x", "y", "z", "w"].iter().enumerate() {
        s += &format!("    out[o + {i}u * row] = vec4<f32>(c0.{e}, c1.{e}, c2.{e}, c3.{e});\n");
    }
    s + "}\n"
}
