//! Hand-written kernels from `shaders/`, completed with a few generated
//! functions (loads for the input dtype and layout, the reduction's monoid).

use super::fused::{Emitter, reduce_monoid};
use super::{META_DECL, compute_type, storage_type};
use crate::dtype::DType;
use crate::ir::{ArgOp, ReduceOp};
use crate::sched::lower::Sig;

pub const REDUCE_TEMPLATE: &str = include_str!("../../../shaders/reduce.wgsl");

/// Elements one reduce invocation folds (PER_THREAD in reduce.wgsl).
pub const REDUCE_CHUNK: usize = 64;
/// Longest k range of one matmul dispatch.
pub const MATMUL_K_CHUNK: usize = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Monoid {
    Reduce(ReduceOp),
    Arg(ArgOp),
}

/// Where a reduce pass reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceSource<'a> {
    /// A fused expression (body 0 of the signature) over the input seen as
    /// `[kept.., reduced..]`, evaluated at `f = row · len + r`; meta holds
    /// that shape at 4, then the expression's leaves and params.
    Prologue(&'a Sig),
    /// Partials of an earlier pass (values, and indices for arg reductions).
    Partials { dtype: DType },
}

/// Invocations that share a span of a row in a plain reduce pass (the SIMD
/// width of CPU adapters with AVX2; see shaders/reduce.wgsl).
const REDUCE_LANES: u32 = 8;

/// A reduce pass; with `vec4` (a contiguous prologue, rows a multiple of 4
/// long, 4-aligned leaves) each invocation reads its run as vec4s.
pub fn reduce_wgsl(monoid: Monoid, src: ReduceSource, vec4: bool) -> String {
    let value_dtype = match src {
        ReduceSource::Prologue(sig) => sig.bodies[0].ops[sig.bodies[0].roots[0]].1,
        ReduceSource::Partials { dtype } => dtype,
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
    let (id, merge, take) = monoid_code(monoid, value_dtype);
    s += &format!("fn identity() -> {acc} {{ return {id}; }}\n");
    s += &format!("fn take(a: {acc}, b: {acc}) -> bool {{ return {take}; }}\n");
    s += &format!("fn merge(a: {acc}, b: {acc}) -> {acc} {{ return {merge}; }}\n");
    match src {
        ReduceSource::Prologue(sig) => {
            let e = Emitter::new(sig, 4, vec4);
            s += &e.input_decls(value_out);
            s += &format!("fn load(row: u32, r: u32) -> {acc} {{\n    let f = row * m(1u) + r;\n");
            let v = e.body(0, "f", "", &mut s);
            if vec4 {
                let x = &v[0];
                s += &format!("    return merge(merge({x}.x, {x}.y), merge({x}.z, {x}.w));\n}}\n");
            } else {
                s += &format!("    return {};\n}}\n", v[0]);
            }
            s += "fn load_index(row: u32, r: u32) -> u32 { return r; }\n";
        }
        ReduceSource::Partials { dtype } => {
            let st = storage_type(dtype.wide());
            s += &format!("@group(0) @binding({}) var<storage, read> in_v: array<{st}>;\n", value_out + 1);
            s += &format!("fn load(row: u32, r: u32) -> {acc} {{ return in_v[row * m(1u) + r]; }}\n");
            if is_arg {
                s += &format!("@group(0) @binding({}) var<storage, read> in_i: array<i32>;\n", value_out + 2);
                s += "fn load_index(row: u32, r: u32) -> u32 { return u32(in_i[row * m(1u) + r]); }\n";
            } else {
                s += "fn load_index(row: u32, r: u32) -> u32 { return 0u; }\n";
            }
        }
    }
    s += &format!("fn store(slot: u32, v: {acc}, i: u32) {{\n    out_v[slot] = v;\n");
    if is_arg {
        s += "    out_i[slot] = i32(i);\n";
    }
    s += "}\n";
    s += &format!("const STEP: u32 = {}u;\n", if vec4 { 4 } else { 1 });
    // Arg partials must hold consecutive runs (ties keep the lower index).
    s += &format!("const LANES: u32 = {}u;\n", if is_arg { 1 } else { REDUCE_LANES });
    s + REDUCE_TEMPLATE
}

/// (identity, merge(a, b), take(a, b)) of a reduction's monoid.
fn monoid_code(monoid: Monoid, d: DType) -> (String, String, String) {
    match monoid {
        Monoid::Reduce(op) => {
            let (id, merge) = reduce_monoid(op, d);
            (id, merge, "false".to_string())
        }
        Monoid::Arg(a) => {
            let (op, cmp) = match a {
                ArgOp::ArgMax => (ReduceOp::Max, ">"),
                ArgOp::ArgMin => (ReduceOp::Min, "<"),
            };
            (reduce_monoid(op, d).0, format!("select(a, b, b {cmp} a)"), format!("b {cmp} a"))
        }
    }
}

/// Meta word where the matmul's batch shape starts.
pub(crate) const MATMUL_SHAPE_BASE: usize = 14;

/// Meta word where an epilogue's shape starts, past the batch layout.
pub fn matmul_epilogue_base(batch_rank: usize) -> usize {
    MATMUL_SHAPE_BASE + 3 * batch_rank
}

/// The default member of the matmul family (see `codegen::matmul`).
pub fn matmul_wgsl(dtype: DType, batch_rank: usize, epilogue: Option<&Sig>) -> String {
    super::matmul::matmul_kernel(&super::matmul::MatmulConfig::DEFAULT, dtype, batch_rank, epilogue)
}
