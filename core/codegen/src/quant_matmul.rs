//! The integer-weight product `out = x @ wᵀ` (`kiln_ir::quant`): codes are
//! unpacked and scaled in registers, never written out as f32, so a batch
//! of one reads a quarter (int8) or an eighth (int4, plus its scales) of an
//! f32 weight's bytes. Each output column's code row is read as whole words,
//! along k; a word's codes become vec4s (vector shifts sign-extend them)
//! that meet x's values in `dot`s.
//!
//! Two shapes of one kernel:
//! - one invocation per block of `rows_per` rows × [`QUANT_COLS`] columns,
//!   walking k group by group, a group's sum scaled once: for CPU adapters
//!   and devices without workgroup memory. The block reuses each unpacked
//!   word for every row and each x value for every column;
//! - one workgroup per (column, row block), its [`QUANT_WG`] invocations
//!   striding along the code row together (adjacent words, so loads
//!   coalesce on a GPU), each word scaled, the partials summed in workgroup
//!   memory.
//!
//! Meta: 0 rows, 1 words per code row, 2 columns (n), 3 words per scale,
//! 4 scales per row, 5..8 the offsets of x, the codes and the scales.

use crate::{load_expr, storage_type};
use kiln_ir::dtype::DType;

/// Invocations per workgroup, in both shapes.
pub const QUANT_WG: u32 = 64;

/// Output columns per invocation in the per-invocation shape.
pub const QUANT_COLS: u32 = 4;

/// The kernel for `bits`-bit codes, `rows_per` rows of x per invocation or
/// workgroup; `cooperative`: one workgroup per output column; `packed_x`:
/// x is int8 codes four per u32 (int8 weights), each word pair summed
/// exactly by `dot4I8Packed` (one instruction where the device has it;
/// naga writes a polyfill elsewhere) and a group's sum kept in i32;
/// `scales`: the scales' float dtype (f16 and bf16 packed in pairs).
pub fn quant_matmul_wgsl(bits: u32, rows_per: u32, cooperative: bool, packed_x: bool, scales: DType) -> String {
    assert!(!packed_x || bits == 8, "int8 x pairs with int8 weights");
    let cols_per = if cooperative { 1 } else { QUANT_COLS };
    let fours = 32 / bits / 4;
    let block = Block { rows: rows_per, cols: cols_per, fours, packed_x };
    let mut s = String::from(super::META_DECL);
    s += "@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n";
    s += &format!("@group(0) @binding(2) var<storage, read> x: array<{}>;\n", if packed_x { "u32" } else { "f32" });
    s += "@group(0) @binding(3) var<storage, read> codes: array<u32>;\n";
    s += &format!("@group(0) @binding(4) var<storage, read> scales: array<{}>;\n", storage_type(scales));
    if !packed_x {
        s += &unpack_fns(bits);
        s +=
            "fn load_x4(at: u32) -> vec4<f32> {\n    return vec4<f32>(x[at], x[at + 1u], x[at + 2u], x[at + 3u]);\n}\n";
    }
    if cooperative {
        s += &format!("var<workgroup> partials: array<f32, {}>;\n", QUANT_WG * rows_per);
    }
    s += &format!("@compute @workgroup_size({QUANT_WG})\n");
    s += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lane: u32,\n";
    s += "        @builtin(num_workgroups) grid: vec3<u32>) {\n";
    s += "    let rows = m(0u);\n    let k_words = m(1u);\n    let n = m(2u);\n    let group_words = m(3u);\n";
    let t = if cooperative {
        "wid.y * grid.x + wid.x".to_string()
    } else {
        format!("(wid.y * grid.x + wid.x) * {QUANT_WG}u + lane")
    };
    s += &format!("    let t = {t};\n    let col_blocks = (n + {}u) / {cols_per}u;\n", cols_per - 1);
    s += &format!(
        "    let block_col = (t % col_blocks) * {cols_per}u;\n    let row0 = (t / col_blocks) * {rows_per}u;\n"
    );
    // Past the last row block (the grid rounds up): uniform per workgroup
    // in the cooperative shape, so no barrier is skipped by part of one.
    s += "    if (row0 >= rows) {\n        return;\n    }\n";
    // Rows and columns past the end read the last one; their sums are not stored.
    for c in 0..cols_per {
        s += &format!("    let col{c} = min(block_col + {c}u, n - 1u);\n");
        s += &format!(
            "    let code_row{c} = m(6u) + col{c} * k_words;\n    let scale_row{c} = m(7u) + col{c} * m(4u);\n"
        );
    }
    // x's row stride: a word per code word when packed, else its values.
    let x_per_word = if packed_x { 1 } else { fours * 4 };
    for r in 0..rows_per {
        s += &format!("    let xrow{r} = m(5u) + min(row0 + {r}u, rows - 1u) * k_words * {x_per_word}u;\n");
    }
    s += &block.decls("acc", "    ", "0.0");
    if cooperative {
        s += &format!("    for (var w = lane; w < k_words; w += {QUANT_WG}u) {{\n");
        s += &block.word("w", "        ");
        for c in 0..cols_per {
            let at = format!("scale_row{c} + w / group_words");
            s += &format!("        let scale{c} = {};\n", load_expr(scales, "scales", &at));
        }
        s += &block.each(|r, c| format!("        acc{r}_{c} += f32(dot{r}_{c}) * scale{c};\n"));
        s += "    }\n";
        s += &reduce_partials(rows_per);
    } else {
        // Group by group: each word's dots summed, then scaled once.
        s += "    for (var g = 0u; g < m(4u); g++) {\n";
        s += "        let w_end = min(g * group_words + group_words, k_words);\n";
        s += &block.decls("part", "        ", if packed_x { "0i" } else { "0.0" });
        s += "        for (var w = g * group_words; w < w_end; w++) {\n";
        s += &block.word("w", "            ");
        s += &block.each(|r, c| format!("            part{r}_{c} += dot{r}_{c};\n"));
        s += "        }\n";
        for c in 0..cols_per {
            s += &format!("        let scale{c} = {};\n", load_expr(scales, "scales", &format!("scale_row{c} + g")));
        }
        s += &block.each(|r, c| format!("        acc{r}_{c} += f32(part{r}_{c}) * scale{c};\n"));
        s += "    }\n";
        s += &block.each(|r, c| {
            format!("    if (row0 + {r}u < rows && block_col + {c}u < n) {{\n        out[(row0 + {r}u) * n + block_col + {c}u] = acc{r}_{c};\n    }}\n")
        });
    }
    s + "}\n"
}

/// The rows × columns of outputs one invocation (or workgroup) computes,
/// for words of `fours` vec4s of codes; `packed_x`: x's words are int8 codes.
struct Block {
    rows: u32,
    cols: u32,
    fours: u32,
    packed_x: bool,
}

impl Block {
    /// `f(row, col)` for every output of the block, joined.
    fn each(&self, f: impl Fn(u32, u32) -> String) -> String {
        (0..self.rows).flat_map(|r| (0..self.cols).map(move |c| (r, c))).map(|(r, c)| f(r, c)).collect()
    }

    /// `var {name}{r}_{c} = {zero};` for every output.
    fn decls(&self, name: &str, pad: &str, zero: &str) -> String {
        self.each(|r, c| format!("{pad}var {name}{r}_{c} = {zero};\n"))
    }

    /// Word `w` of every column unpacked, and `dot{r}_{c}`: its dot with
    /// row r's x values (an i32 with packed x).
    fn word(&self, w: &str, pad: &str) -> String {
        let mut s = String::new();
        if self.packed_x {
            for c in 0..self.cols {
                s += &format!("{pad}let word{c} = codes[code_row{c} + {w}];\n");
            }
            for r in 0..self.rows {
                s += &format!("{pad}let x{r} = x[xrow{r} + {w}];\n");
            }
            return s + &self.each(|r, c| format!("{pad}let dot{r}_{c} = dot4I8Packed(x{r}, word{c});\n"));
        }
        for c in 0..self.cols {
            s += &format!("{pad}let word{c} = codes[code_row{c} + {w}];\n");
            for f in 0..self.fours {
                s += &format!("{pad}let q{c}_{f} = unpack{f}(word{c});\n");
            }
        }
        for r in 0..self.rows {
            for f in 0..self.fours {
                s += &format!("{pad}let x{r}_{f} = load_x4(xrow{r} + {w} * {}u + {}u);\n", self.fours * 4, f * 4);
            }
        }
        s + &self.each(|r, c| {
            let dots: Vec<String> = (0..self.fours).map(|f| format!("dot(x{r}_{f}, q{c}_{f})")).collect();
            format!("{pad}let dot{r}_{c} = {};\n", dots.join(" + "))
        })
    }
}

/// `unpack{f}(word)`: the word's codes 4f..4f+3, sign-extended, as a vec4
/// (the first code is the low bits): each shifted to the top, then
/// arithmetic-shifted down.
fn unpack_fns(bits: u32) -> String {
    let per_word = 32 / bits;
    let mut s = String::new();
    for f in 0..per_word / 4 {
        let up: Vec<String> = (0..4).map(|e| format!("{}u", 32 - bits * (4 * f + e + 1))).collect();
        s += &format!("fn unpack{f}(word: u32) -> vec4<f32> {{\n");
        s += &format!("    let up = vec4<u32>(word) << vec4<u32>({});\n", up.join(", "));
        s += &format!("    return vec4<f32>(bitcast<vec4<i32>>(up) >> vec4<u32>({}u));\n}}\n", 32 - bits);
    }
    s
}

/// The cooperative shape's end: each row's partials summed in workgroup
/// memory, lane r storing row r.
fn reduce_partials(rows_per: u32) -> String {
    let mut s = String::new();
    for r in 0..rows_per {
        s += &format!("    partials[{}u + lane] = acc{r}_0;\n", r * QUANT_WG);
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
    s + &format!("        out[(row0 + lane) * n + block_col] = partials[lane * {QUANT_WG}u];\n    }}\n")
}
