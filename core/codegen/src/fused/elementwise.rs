//! Elementwise kernels: one or more outputs at every element of a shape,
//! in one of the walks ([`Walk`]).

use super::emit::{Emitter, Flat, ROWS_PER_INVOCATION, Walk};
use crate::{META_DECL, PACK_DECL, WG, held_packed, pack_pair_expr, store_expr, unravel};
use kiln_ir::dtype::DType;
use kiln_ir::ir::BinaryOp;
use kiln_sched::lower::{Access, Op, Sig};
use kiln_sched::pointwise::Pointwise;
/// Whether a row or reduction body can run four elements at a time: only
/// 4-byte leaves (strided ones where their rows split into vec4s, which the
/// launch checks), no gather, no pow.
pub fn vectorizable(sig: &Sig) -> bool {
    vectorizable_reading_rows(sig) && !sig.bodies.iter().any(|b| b.ops.iter().any(|(op, _)| matches!(op, Op::Row(_))))
}

/// `vectorizable`, except that the bodies may read row stages (splat).
pub fn vectorizable_reading_rows(sig: &Sig) -> bool {
    sig.leaves.iter().all(|l| !l.dtype.is_packed())
        && sig.bodies.iter().all(|b| b.ops.iter().all(|(op, d)| !d.is_packed() && !scalar_only(op)))
}

/// Whether an elementwise body can run four elements at a time: no
/// gather, no pow. Packed leaves are read four at a time as a pair of
/// words where the launch finds them whole ([`crate::launch`]), and packed
/// outputs written so.
pub fn elementwise_vectorizable(sig: &Sig) -> bool {
    sig.bodies.iter().all(|b| b.ops.iter().all(|(op, _)| !scalar_only(op) && !matches!(op, Op::Row(_))))
}

/// Ops that have no vec4 form.
fn scalar_only(op: &Op) -> bool {
    matches!(op, Op::Gather { .. } | Op::Pointwise(Pointwise::Binary(BinaryOp::Pow, ..)) | Op::Acc)
}

/// An elementwise kernel writing the roots of body 0 to `outputs` buffers.
/// Meta: 0 element count, 1 threads per grid row, shape at 2, then leaves
/// and params, then (with `out_strided`) the one output's layout. `whole`:
/// a vec4 walk's grid covers the elements exactly (8 vec4s for each
/// invocation), so it needs no bounds checks. `half`: f16 values are WGSL
/// `f16`s.
pub fn elementwise_wgsl(
    sig: &Sig,
    outputs: &[DType],
    out_strided: bool,
    walk: Walk,
    whole: bool,
    half: bool,
) -> String {
    let vec4 = walk != Walk::Flat;
    let e = Emitter::new(sig, 2, vec4).with_half(half);
    let packed_outputs = outputs.iter().any(|&d| held_packed(d, half));
    let mut s = if half { String::from("enable f16;\n") } else { String::new() };
    s += META_DECL;
    if packed_outputs {
        s += PACK_DECL;
    }
    for (k, &d) in outputs.iter().enumerate() {
        let elem = e.binding_type(d);
        s += &format!("@group(0) @binding({}) var<storage, read_write> out{k}: array<{elem}>;\n", k + 1);
    }
    s += &e.input_decls(outputs.len());
    s += &format!("@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, ");
    s += "@builtin(num_workgroups) nwg: vec3<u32>) {\n";
    s += "    let t = gid.y * m(1u) + gid.x;\n    let n = m(0u);\n";
    let store = |d: DType, v: &str| match d {
        DType::Bool if vec4 => format!("select(vec4<u32>(0u), vec4<u32>(1u), {v})"),
        // Four packed values: a pair of words.
        _ if vec4 && held_packed(d, half) => {
            let (lo, hi) = (
                pack_pair_expr(d, &format!("{v}.x"), &format!("{v}.y")),
                pack_pair_expr(d, &format!("{v}.z"), &format!("{v}.w")),
            );
            format!("vec2<u32>({lo}, {hi})")
        }
        _ => store_expr(d, v),
    };
    // A walk's bounds check, left out where the grid covers the elements
    // exactly (`whole`; see the grid-strided walk below).
    let bounds = |past: &str| if whole { String::new() } else { format!("    if ({past}) {{ return; }}\n") };
    // The vec4 stores of `roots` at flat index `f`.
    let outputs_stored = |roots: &[String]| -> String {
        let stores = outputs.iter().zip(roots).enumerate();
        stores.map(|(k, (&d, r))| format!("    out{k}[f >> 2u] = {};\n", store(d, r))).collect()
    };
    if walk == Walk::Vec4Rows {
        let period = e.first_period_word(Access::Mod).expect("a Vec4Rows kernel has a broadcast leaf");
        let mut setup = format!("    let period = m({period}u);\n    let cols = period / 4u;\n");
        setup += &format!("    let r0 = (t / cols) * {ROWS_PER_INVOCATION}u;\n    let rows = n / period;\n");
        setup += &(bounds("r0 >= rows") + "    let col = (t % cols) * 4u;\n");
        // Mod leaves read at `col` (= f % period), so hoisted loads see `f = col`.
        let each = "    let r = r0 + i;\n".to_string() + &bounds("r >= rows") + "    let f = r * period + col;\n";
        s += &hoisted_walk(&e, Access::Mod, &setup, "col", &each, &outputs_stored);
    } else if walk == Walk::Vec4Segments {
        let repeat = e.first_period_word(Access::Div).expect("a Vec4Segments kernel has a row-broadcast leaf");
        let mut setup = format!("    let repeat = m({repeat}u);\n    let segment = repeat / {ROWS_PER_INVOCATION}u;\n");
        setup += "    let per_row = segment / 4u;\n    let row = t / per_row;\n";
        setup += &(bounds("row >= n / repeat") + "    let f0 = row * repeat + (t % per_row) * 4u;\n");
        // Div leaves read at f / repeat, so hoisted loads see the row's start.
        s += &hoisted_walk(&e, Access::Div, &setup, "row * repeat", "    let f = f0 + i * segment;\n", &outputs_stored);
    } else if vec4 {
        // Invocation t takes vec4s t, t + T, t + 2T, ... (T invocations in
        // all): neighbours read neighbouring memory, and the per-invocation
        // cost of CPU adapters is shared by several vec4s.
        // Unrolled, each step in its own block (CPU adapters' compilers keep
        // a loop as written), and with no bounds check where the grid
        // covers the elements exactly (`whole`): a branch leaves every load
        // and store after it masked lane by lane on CPU adapters. A copy's
        // loop with a `break` ran 17.3–18.2 ms over 16M f32 on lavapipe,
        // unrolled 14.1–16.0, without the check 13.1–13.7.
        let e = e.with_periodic().with_straddling(walk == Walk::Vec4Straddling);
        s += "    let stride = m(1u) * nwg.y;\n";
        s += &e.periodic_start("(t * 4u)", "(stride * 4u)");
        let mut step = String::from("    let f = q * 4u;\n");
        let roots = e.body(0, "f", "", &mut step);
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            step += &format!("    out{k}[q] = {};\n", store(d, r));
        }
        let step = if whole { step } else { format!("    if (q * 4u < n) {{\n{step}    }}\n") };
        for i in 0..ROWS_PER_INVOCATION {
            let advance = if i + 1 < ROWS_PER_INVOCATION { e.periodic_advance() } else { String::new() };
            s += &format!("    {{\n    let q = t + {i}u * stride;\n{step}{advance}    }}\n");
        }
    } else if packed_outputs {
        // Two elements per invocation, so packed outputs write whole words.
        s += "    let f0 = t * 2u;\n    if (f0 >= n) { return; }\n    let f1 = min(f0 + 1u, n - 1u);\n";
        let a = e.body(0, "f0", "a_", &mut s);
        let b = e.body(0, "f1", "b_", &mut s);
        for (k, &d) in outputs.iter().enumerate() {
            if held_packed(d, half) {
                s += &format!("    out{k}[t] = {};\n", pack_pair_expr(d, &a[k], &b[k]));
            } else {
                s += &format!("    out{k}[f0] = {};\n", store(d, &a[k]));
                s += &format!("    if (f0 + 1u < n) {{ out{k}[f0 + 1u] = {}; }}\n", store(d, &b[k]));
            }
        }
    } else {
        s += "    if (t >= n) { return; }\n    let f = t;\n";
        let roots = e.body(0, "f", "", &mut s);
        let at = if out_strided {
            s += &unravel(sig.rank, 2, "f").replace("rem", "orem").replace("let c", "let oc");
            let ob = e.meta_end();
            let mut at = format!("i32(m({ob}u))");
            for d in 0..sig.rank {
                at += &format!(" + i32(oc{d}) * bitcast<i32>(m({}u))", ob + 1 + d);
            }
            format!("u32({at})")
        } else {
            "f".to_string()
        };
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            s += &format!("    out{k}[{at}] = {};\n", store(d, r));
        }
    }
    s + "}\n"
}

/// The body of a walk that computes what depends only on leaves read as
/// `access` once per invocation, at flat index `hoisted_f`, after `setup`;
/// then [`ROWS_PER_INVOCATION`] times, for `i` = 0, 1, …: `each` (which
/// binds `f`, and may return), the rest of the body, and `stores` of its
/// roots.
fn hoisted_walk(
    e: &Emitter,
    access: Access,
    setup: &str,
    hoisted_f: &str,
    each: &str,
    stores: &dyn Fn(&[String]) -> String,
) -> String {
    let mut pre = String::new();
    let mut inner = String::new();
    let roots = e.body_hoisting(0, Flat::at("f"), "", Some((&mut pre, access)), None, &mut inner);
    let mut s = format!("{setup}    let f = {hoisted_f};\n{pre}");
    // Unrolled, each step in its own block: CPU adapters' compilers keep a
    // loop as written; unrolled, a long-row softmax's output pass ran 14%
    // faster on lavapipe (docs/BENCHMARKS.md, 'What was tried' (elementwise)).
    let step = format!("{each}{inner}{}", stores(&roots));
    for i in 0..ROWS_PER_INVOCATION {
        s += &format!("    {{\n    let i = {i}u;\n{step}    }}\n");
    }
    s
}
