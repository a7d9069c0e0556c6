//! Hand-written kernels from `shaders/`, completed with a few generated
//! functions (loads for the input dtype and layout, the reduction's monoid).

use super::{META_DECL, compute_type, literal, load_expr, storage_type, strided_index, unravel};
use crate::dtype::DType;
use crate::ir::{ArgOp, ReduceOp};

pub const REDUCE_TEMPLATE: &str = include_str!("../../../shaders/reduce.wgsl");
pub const MATMUL_TEMPLATE: &str = include_str!("../../../shaders/matmul.wgsl");

/// Elements one reduce invocation folds (PER_THREAD in reduce.wgsl).
pub const REDUCE_CHUNK: usize = 64;
/// Longest k range of one matmul dispatch.
pub const MATMUL_K_CHUNK: usize = 16384;
/// Output tile of one matmul workgroup (8×8 invocations × 4×4 each).
pub const MATMUL_TILE: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monoid {
    Reduce(ReduceOp),
    Arg(ArgOp),
}

/// Where a reduce pass reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceSource {
    /// The tensor itself: contiguous rows (`offset + row * len + r`) or a
    /// strided view of the given rank (meta: shape at 4, then offset and
    /// strides).
    Tensor { dtype: DType, contiguous: bool, rank: usize },
    /// Partials of an earlier pass (values, and indices for arg reductions).
    Partials { dtype: DType },
}

pub fn reduce_wgsl(monoid: Monoid, src: ReduceSource) -> String {
    let value_dtype = match src {
        ReduceSource::Tensor { dtype, .. } | ReduceSource::Partials { dtype } => dtype,
    };
    let acc = compute_type(value_dtype);
    let is_arg = matches!(monoid, Monoid::Arg(_));
    let mut s = String::from(META_DECL);
    let value_out = if is_arg { 2 } else { 1 };
    if is_arg {
        s += "@group(0) @binding(1) var<storage, read_write> out_i: array<i32>;\n";
    }
    s += &format!(
        "@group(0) @binding({value_out}) var<storage, read_write> out_v: array<{}>;\n",
        storage_type(value_dtype.wide())
    );
    s += &format!(
        "@group(0) @binding({}) var<storage, read> in_v: array<{}>;\n",
        value_out + 1,
        storage_type(value_dtype_in(src))
    );
    if is_arg && matches!(src, ReduceSource::Partials { .. }) {
        s += &format!("@group(0) @binding({}) var<storage, read> in_i: array<i32>;\n", value_out + 2);
    }
    let (id, merge, take) = monoid_code(monoid, value_dtype);
    s += &format!("fn identity() -> {acc} {{ return {id}; }}\n");
    s += &format!("fn take(a: {acc}, b: {acc}) -> bool {{ return {take}; }}\n");
    s += &format!("fn merge(a: {acc}, b: {acc}) -> {acc} {{ return {merge}; }}\n");
    s += &load_fns(src, is_arg, acc);
    s += &format!("fn store(slot: u32, v: {acc}, i: u32) {{\n    out_v[slot] = v;\n");
    if is_arg {
        s += "    out_i[slot] = i32(i);\n";
    }
    s += "}\n";
    s + REDUCE_TEMPLATE
}

fn value_dtype_in(src: ReduceSource) -> DType {
    match src {
        ReduceSource::Tensor { dtype, .. } => dtype,
        ReduceSource::Partials { dtype } => dtype.wide(),
    }
}

/// (identity, merge(a, b), take(a, b)) of a reduction's monoid.
fn monoid_code(monoid: Monoid, d: DType) -> (String, String, String) {
    let (lo, hi) = match d {
        DType::I32 => (format!("i32({})", i32::MIN), format!("i32({})", i32::MAX)),
        DType::U32 => ("0u".into(), format!("{}u", u32::MAX)),
        _ => (literal(d, f64::NEG_INFINITY), literal(d, f64::INFINITY)),
    };
    let plain = |id: String, merge: &str| (id, merge.to_string(), "false".to_string());
    let arg = |id: String, cmp: &str| (id, format!("select(a, b, b {cmp} a)"), format!("b {cmp} a"));
    match monoid {
        Monoid::Reduce(ReduceOp::Sum) => plain(literal(d, 0.0), "a + b"),
        Monoid::Reduce(ReduceOp::Prod) => plain(literal(d, 1.0), "a * b"),
        Monoid::Reduce(ReduceOp::Max) => plain(lo, "max(a, b)"),
        Monoid::Reduce(ReduceOp::Min) => plain(hi, "min(a, b)"),
        Monoid::Arg(ArgOp::ArgMax) => arg(lo, ">"),
        Monoid::Arg(ArgOp::ArgMin) => arg(hi, "<"),
    }
}

fn load_fns(src: ReduceSource, is_arg: bool, acc: &str) -> String {
    let value = match src {
        ReduceSource::Tensor { dtype, contiguous: true, .. } => {
            format!("    return {};\n", load_expr(dtype, "in_v", "m(4u) + row * m(1u) + r"))
        }
        ReduceSource::Tensor { dtype, contiguous: false, rank } => format!(
            "{}{}    return {};\n",
            unravel(rank, 4, "row * m(1u) + r"),
            strided_index("in", rank, 4 + rank),
            load_expr(dtype, "in_v", "u32(at_in)")
        ),
        ReduceSource::Partials { .. } => "    return in_v[row * m(1u) + r];\n".to_string(),
    };
    let index = match src {
        ReduceSource::Partials { .. } if is_arg => "u32(in_i[row * m(1u) + r])",
        ReduceSource::Partials { .. } => "0u",
        ReduceSource::Tensor { .. } => "r",
    };
    format!(
        "fn load(row: u32, r: u32) -> {acc} {{\n{value}}}\nfn load_index(row: u32, r: u32) -> u32 {{ return {index}; }}\n"
    )
}

/// Matmul for f32 or packed-f16 operands with `batch_rank` batch dimensions.
/// Meta past slot 10: A offset, B offset, batch shape, A and B batch strides.
pub fn matmul_wgsl(dtype: DType, batch_rank: usize) -> String {
    let st = storage_type(dtype);
    let mut s = String::from(META_DECL);
    s += "@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n";
    s += &format!("@group(0) @binding(2) var<storage, read> a: array<{st}>;\n");
    s += &format!("@group(0) @binding(3) var<storage, read> b: array<{st}>;\n");
    s += &format!("fn load_a(e: i32) -> f32 {{ return {}; }}\n", load_expr(dtype, "a", "u32(e)"));
    s += &format!("fn load_b(e: i32) -> f32 {{ return {}; }}\n", load_expr(dtype, "b", "u32(e)"));
    let shape_base = 13;
    s += "fn batch_offsets(batch: u32) -> vec2<i32> {\n";
    s += &unravel(batch_rank, shape_base, "batch");
    s += "    var at_a = i32(m(11u));\n    var at_b = i32(m(12u));\n";
    for d in 0..batch_rank {
        s += &format!("    at_a += i32(c{d}) * bitcast<i32>(m({}u));\n", shape_base + batch_rank + d);
        s += &format!("    at_b += i32(c{d}) * bitcast<i32>(m({}u));\n", shape_base + 2 * batch_rank + d);
    }
    s += "    return vec2<i32>(at_a, at_b);\n}\n";
    s + MATMUL_TEMPLATE
}
