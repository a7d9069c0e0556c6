//! The integer-weight product `out = x @ wᵀ` (`kiln_ir::quant`): codes are
//! unpacked and scaled in registers, never written out as f32, so a batch
//! of one reads a quarter (int8) or an eighth (int4, plus its scales) of an
//! f32 weight's bytes. Each output column's code row is read as whole words, along k.
//!
//! Two shapes of one kernel:
//! - one invocation per (column, row block): for CPU adapters and devices
//!   without workgroup memory;
//! - one workgroup per (column, row block), its [`QUANT_WG`] invocations
//!   striding along the code row together (adjacent words, so loads
//!   coalesce on a GPU) and summing their partials in workgroup memory.
//!
//! Meta: 0 rows, 1 words per code row, 2 columns (n), 3 words per scale,
//! 4 scales per row, 5..8 the offsets of x, the codes and the scales.

/// Invocations per workgroup, in both shapes.
pub const QUANT_WG: u32 = 64;

/// The kernel for `bits`-bit codes, `rows_per` rows of x per invocation or
/// workgroup; `cooperative`: one workgroup per output column.
pub fn quant_matmul_wgsl(bits: u32, rows_per: u32, cooperative: bool) -> String {
    let per_word = 32 / bits;
    let mut s = String::from(super::META_DECL);
    s += "@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n";
    s += "@group(0) @binding(2) var<storage, read> x: array<f32>;\n";
    s += "@group(0) @binding(3) var<storage, read> codes: array<u32>;\n";
    s += "@group(0) @binding(4) var<storage, read> scales: array<f32>;\n";
    if cooperative {
        s += &format!("var<workgroup> partials: array<f32, {}>;\n", QUANT_WG * rows_per);
    }
    s += &format!("@compute @workgroup_size({QUANT_WG})\n");
    s += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32,\n";
    s += "        @builtin(num_workgroups) grid: vec3<u32>) {\n";
    s += "    let rows = m(0u);\n    let k_words = m(1u);\n    let n = m(2u);\n    let group_words = m(3u);\n";
    let (t, first_word, step) = if cooperative {
        ("wid.y * grid.x + wid.x".to_string(), "lane", QUANT_WG)
    } else {
        (format!("(wid.y * grid.x + wid.x) * {QUANT_WG}u + lane"), "0u", 1)
    };
    s += &format!("    let t = {t};\n    let col = t % n;\n    let row0 = (t / n) * {rows_per}u;\n");
    // Past the last row block (the grid rounds up): uniform per workgroup
    // in the cooperative shape, so no barrier is skipped by part of one.
    s += "    if (row0 >= rows) {\n        return;\n    }\n";
    s += "    let code_row = m(6u) + col * k_words;\n    let scale_row = m(7u) + col * m(4u);\n";
    for r in 0..rows_per {
        // Rows past the end read the last row; their sums are not stored.
        s += &format!("    let x{r} = m(5u) + min(row0 + {r}u, rows - 1u) * k_words * {per_word}u;\n");
        s += &format!("    var acc{r} = 0.0;\n");
    }
    s += &format!("    for (var w = {first_word}; w < k_words; w += {step}u) {{\n");
    s += "        let word = codes[code_row + w];\n";
    s += "        let scale = scales[scale_row + w / group_words];\n";
    for e in 0..per_word {
        // Shift code e to the top, then arithmetic-shift it down: sign-extended.
        let up = 32 - bits * (e + 1);
        s += &format!("        let q{e} = f32(bitcast<i32>(word << {up}u) >> {}u) * scale;\n", 32 - bits);
    }
    s += &format!("        let at = w * {per_word}u;\n");
    for r in 0..rows_per {
        let terms: Vec<String> = (0..per_word).map(|e| format!("x[x{r} + at + {e}u] * q{e}")).collect();
        s += &format!("        acc{r} += {};\n", terms.join(" + "));
    }
    s += "    }\n";
    if cooperative {
        for r in 0..rows_per {
            s += &format!("    partials[{}u + lane] = acc{r};\n", r * QUANT_WG);
        }
        s += "    workgroupBarrier();\n";
        s += &format!("    for (var half = {}u; half > 0u; half >>= 1u) {{\n", QUANT_WG / 2);
        s += "        if (lane < half) {\n";
        for r in 0..rows_per {
            let base = r * QUANT_WG;
            s += &format!("            partials[{base}u + lane] += partials[{base}u + lane + half];\n");
        }
        s += "        }\n        workgroupBarrier();\n    }\n";
        s += &format!("    if (lane < {rows_per}u && row0 + lane < rows) {{\n");
        s += &format!("        out[(row0 + lane) * n + col] = partials[lane * {QUANT_WG}u];\n    }}\n");
    } else {
        for r in 0..rows_per {
            s += &format!("    if (row0 + {r}u < rows) {{\n        out[(row0 + {r}u) * n + col] = acc{r};\n    }}\n");
        }
    }
    s + "}\n"
}
