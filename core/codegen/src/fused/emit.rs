//! The emitter: a fused kernel's SSA bodies as WGSL statements, read at
//! a flat index through each leaf's access, and the ops' WGSL forms.

use super::rows::shifted_by_row_max;
use crate::{
    compute_type, half_literal, held_packed, literal, load_expr, load4_expr, math, storage_type, unravel,
    vec4_storage_type,
};
use kiln_ir::dtype::DType;
use kiln_ir::ir::{BinaryOp, ReduceOp, UnaryOp};
use kiln_sched::lower::{Access, Body, Op, Sig, meta_bases};
use kiln_sched::pointwise::Pointwise;

/// Elements one invocation of a vectorized elementwise kernel handles.
pub const VEC: usize = 4;

/// A flat element index as a body reads its leaves there: `at`, a u32
/// expression, and, where the caller knows it as `origin + plus` (a
/// variable bound once and a constant, both multiples of 4), that form
/// too. A vec4 body then reads each contiguous leaf at a vec4 index bound
/// once per origin ([`Emitter::origin_lets`]) plus `plus / 4`, one addition
/// per read instead of three: on lavapipe, which reads each lane's vec4 on
/// its own, a sum's first pass ran about 5% faster so.
#[derive(Debug, Clone, Copy)]
pub struct Flat<'s> {
    pub at: &'s str,
    pub run: Option<(&'s str, usize)>,
}

impl<'s> Flat<'s> {
    /// An index known only as an expression.
    pub fn at(at: &'s str) -> Flat<'s> {
        Flat { at, run: None }
    }
}

/// Vec4s (or rows of them) one invocation of a vectorized elementwise
/// kernel handles.
pub const ROWS_PER_INVOCATION: usize = 8;

/// How an elementwise kernel's invocations walk the elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Walk {
    /// One element per invocation (two when an output is f16).
    Flat,
    /// Four consecutive elements at a time, [`ROWS_PER_INVOCATION`] times
    /// per invocation, a grid apart.
    Vec4,
    /// The elements seen as rows of the broadcast leaves' period (the
    /// first `Mod` leaf's): four consecutive columns of
    /// [`ROWS_PER_INVOCATION`] rows per invocation, so a bias is loaded
    /// once per invocation, not once per row (on CPU adapters a load costs
    /// as much as a whole row of arithmetic).
    Vec4Rows,
    /// The elements seen as rows of the row-broadcast leaves' repeat (every
    /// `Div` leaf's, with no `Mod` leaf): one vec4 in each eighth of a row
    /// per invocation, so a row statistic is loaded once per invocation,
    /// not splatted from a per-lane load at every vec4, and the loads are
    /// [`ROWS_PER_INVOCATION`] streams an eighth of a row apart.
    Vec4Segments,
    /// `Vec4`, over rows of a broadcast leaf's period or repeat that do not
    /// split into vec4s (a vocabulary's 50257): a vec4 may straddle two
    /// rows, so each of its elements reads its own row's value (`Div`) or
    /// column's (`Mod`).
    Vec4Straddling,
}

/// Writes the statements of one body; knows where meta keeps everything.
pub struct Emitter<'a> {
    pub(super) sig: &'a Sig,
    shape_base: usize,
    leaf_base: Vec<usize>,
    param_base: usize,
    /// Compute in `vec4`s over four consecutive elements.
    vec4: bool,
    /// Read leaf offsets and periods from `let`s ([`Emitter::meta_lets`])
    /// instead of the meta buffer at each use (SwiftShader's compiler does
    /// not share repeated uniform reads).
    meta_lets: bool,
    /// Index `Mod` and `Div` leaves by the quotient and remainder
    /// [`Emitter::periodic_start`] sets up and [`Emitter::periodic_advance`]
    /// steps, instead of dividing at every element (CPU adapters have no
    /// vector integer division: one per lane, a third of a row-broadcast
    /// subtraction's time on lavapipe).
    periodic: bool,
    /// Read `Mod` and `Div` leaves per element of a vec4
    /// ([`Walk::Vec4Straddling`]).
    straddling: bool,
    /// A row kernel's stages, whose values `Row(k)` ops read.
    stages: &'a [ReduceOp],
    /// Hold f16 values as WGSL's `f16` (buffers, registers, arithmetic)
    /// instead of packed words computed in f32: adapters with `shader-f16`.
    half: bool,
}

impl<'a> Emitter<'a> {
    pub fn new(sig: &'a Sig, shape_base: usize, vec4: bool) -> Emitter<'a> {
        let (leaf_base, param_base) = meta_bases(sig, shape_base);
        let (meta_lets, periodic, straddling) = (false, false, false);
        let half = false;
        Emitter { sig, shape_base, leaf_base, param_base, vec4, meta_lets, periodic, straddling, stages: &[], half }
    }

    /// This emitter, computing f16 values as WGSL's `f16` when `on`.
    pub fn with_half(self, on: bool) -> Emitter<'a> {
        Emitter { half: on, ..self }
    }

    /// Whether values of `d` are WGSL `f16`s here.
    fn native_half(&self, d: DType) -> bool {
        self.half && d == DType::F16
    }

    /// The scalar type `d` computes in here.
    fn compute(&self, d: DType) -> &'static str {
        if self.native_half(d) { "f16" } else { compute_type(d) }
    }

    /// The element type of a storage buffer of `d` here.
    fn storage(&self, d: DType) -> &'static str {
        if self.native_half(d) { "f16" } else { storage_type(d) }
    }

    /// The element type a buffer of `d` is bound as: four elements at a
    /// time in a vec4 body (a pair of words where packed).
    pub(super) fn binding_type(&self, d: DType) -> String {
        match self.vec4 {
            true if held_packed(d, self.half) => vec4_storage_type(d).to_string(),
            true => format!("vec4<{}>", self.storage(d)),
            false => self.storage(d).to_string(),
        }
    }

    /// A scalar literal of `d`'s compute type here.
    fn scalar_literal(&self, d: DType, v: f64) -> String {
        if self.native_half(d) { half_literal(v) } else { literal(d, v) }
    }

    /// Element `at` of buffer `buf` holding `d`.
    fn load_scalar(&self, d: DType, buf: &str, at: &str) -> String {
        if self.native_half(d) { format!("{buf}[{at}]") } else { load_expr(d, buf, at) }
    }

    /// This emitter, in a row kernel whose `Row(k)` ops read `stages`.
    pub(crate) fn with_stages(self, stages: &'a [ReduceOp]) -> Emitter<'a> {
        Emitter { stages, ..self }
    }

    /// This emitter, reading contiguous, `Mod` and `Div` leaves' offsets
    /// and periods from the `let`s [`Emitter::meta_lets`] writes.
    pub fn with_meta_lets(self) -> Emitter<'a> {
        Emitter { meta_lets: true, ..self }
    }

    /// This emitter, reading `Mod` and `Div` leaves at the quotient and
    /// remainder of [`Emitter::periodic_start`].
    pub fn with_periodic(self) -> Emitter<'a> {
        Emitter { periodic: true, ..self }
    }

    /// This emitter, reading each `Mod` and `Div` leaf once per element of
    /// a vec4 when `on` (whose period or repeat is at least 4, so a vec4
    /// wraps at most once).
    pub fn with_straddling(self, on: bool) -> Emitter<'a> {
        Emitter { straddling: on, ..self }
    }

    /// Variables holding `f0 / period` and `f0 % period` for each `Mod` and
    /// `Div` leaf, for a walk whose flat index starts at `f0` and grows by
    /// `step` (both u32 expressions) at each [`Emitter::periodic_advance`].
    /// With strided leaves, also the coordinates `pc{d}` of `f0` and
    /// `sc{d}` of `step`.
    pub fn periodic_start(&self, f0: &str, step: &str) -> String {
        let mut s = String::new();
        if self.reads_strided() {
            let start = unravel(self.sig.rank, self.shape_base, f0);
            s += &start.replace("rem", "prem").replace("let c", "var pc");
            let step = unravel(self.sig.rank, self.shape_base, step);
            s += &step.replace("rem", "srem").replace("let c", "let sc");
        }
        for k in self.periodic_leaves() {
            let p = self.word(self.leaf_base[k] + 1);
            s += &format!("    var pq{k} = {f0} / {p};\n    var pr{k} = {f0} % {p};\n");
            s += &format!("    let sq{k} = {step} / {p};\n    let sr{k} = {step} % {p};\n");
        }
        s
    }

    /// Steps the quotients and remainders of [`Emitter::periodic_start`]
    /// (and its coordinates, with carries) by its `step`: no division, and
    /// no u32 overflow (`pr + sr` is not formed unless it stays below the
    /// period).
    pub fn periodic_advance(&self) -> String {
        if self.periodic_leaves().next().is_none() && !self.reads_strided() {
            return String::new();
        }
        let mut s = String::from("    {\n");
        if self.reads_strided() {
            // Innermost first, each coordinate plus its step and the carry
            // from the one inside it (below twice its extent: one wrap).
            let rank = self.sig.rank;
            s += "    var carry = 0u;\n";
            for d in (1..rank).rev() {
                let extent = format!("m({}u)", self.shape_base + d);
                s += &format!("    pc{d} += sc{d} + carry;\n    carry = select(0u, 1u, pc{d} >= {extent});\n");
                s += &format!("    pc{d} -= carry * {extent};\n");
            }
            s += "    pc0 += sc0 + carry;\n";
        }
        for k in self.periodic_leaves() {
            let p = self.word(self.leaf_base[k] + 1);
            s += &format!("    let wrap{k} = pr{k} >= {p} - sr{k};\n");
            s += &format!("    pr{k} = select(pr{k} + sr{k}, pr{k} - ({p} - sr{k}), wrap{k});\n");
            s += &format!("    pq{k} += sq{k} + select(0u, 1u, wrap{k});\n");
        }
        s + "    }\n"
    }

    /// Whether some leaf is read through coordinates (general strides).
    fn reads_strided(&self) -> bool {
        self.sig.leaves.iter().any(|l| l.access == Access::Strided)
    }

    fn periodic_leaves(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.sig.leaves.len()).filter(|&k| matches!(self.sig.leaves[k].access, Access::Mod | Access::Div))
    }

    /// `let`s holding the meta words those leaves' indices read.
    pub fn meta_lets(&self) -> String {
        let mut s = String::new();
        for (k, leaf) in self.sig.leaves.iter().enumerate() {
            let base = self.leaf_base[k];
            let words = match leaf.access {
                Access::Contiguous => 1,
                Access::Mod | Access::Div => 2,
                Access::Strided => 0,
            };
            (base..base + words).for_each(|w| s += &format!("    let meta{w} = m({w}u);\n"));
        }
        s
    }

    /// `let`s holding each contiguous leaf's vec4 index at `origin` (a
    /// flat index, a multiple of 4), which [`Flat`] runs from that origin
    /// read.
    pub fn origin_lets(&self, origin: &str) -> String {
        let mut s = String::new();
        for (k, leaf) in self.sig.leaves.iter().enumerate() {
            if leaf.access == Access::Contiguous && leaf.buffer.is_some() {
                s += &format!("    let {origin}_q{k} = ({} + {origin}) >> 2u;\n", self.word(self.leaf_base[k]));
            }
        }
        s
    }

    /// Meta word `w` as a leaf index reads it.
    fn word(&self, w: usize) -> String {
        if self.meta_lets { format!("meta{w}") } else { format!("m({w}u)") }
    }

    /// The meta word holding the period (`Mod`) or repeat (`Div`) of the
    /// first leaf read as `access`.
    pub(super) fn first_period_word(&self, access: Access) -> Option<usize> {
        let k = self.sig.leaves.iter().position(|l| l.access == access)?;
        Some(self.leaf_base[k] + 1)
    }

    /// Meta word just past this kernel's params.
    pub fn meta_end(&self) -> usize {
        self.param_base + self.sig.params.len()
    }

    fn ty(&self, d: DType) -> String {
        if self.vec4 { format!("vec4<{}>", self.compute(d)) } else { self.compute(d).to_string() }
    }

    fn lit(&self, d: DType, v: f64) -> String {
        if self.native_half(d) && v.is_infinite() {
            return self.narrow(&literal(DType::F32, v));
        }
        let v = self.scalar_literal(d, v);
        if self.vec4 { format!("vec4<{}>({v})", self.compute(d)) } else { v }
    }

    fn param(&self, d: DType, p: usize) -> String {
        let v = scalar_param(d, self.param_base + p);
        if self.native_half(d) {
            return self.narrow(&v);
        }
        if self.vec4 { format!("vec4<{}>({v})", self.compute(d)) } else { v }
    }

    /// An f16 value `v` as f32 (exactly).
    fn widen(&self, v: &str) -> String {
        if self.vec4 { format!("vec4<f32>({v})") } else { format!("f32({v})") }
    }

    /// A scalar f32 `v` (splat in a vec4 body) rounded to f16.
    fn narrow(&self, v: &str) -> String {
        if self.vec4 { format!("kiln_f16(vec4<f32>({v}))") } else { format!("kiln_f16({v})") }
    }

    /// The element index of leaf `k` at the current position (a u32 expression).
    fn index(&self, k: usize, f: &str, pfx: &str) -> String {
        let base = self.leaf_base[k];
        let (offset, period) = (self.word(base), self.word(base + 1));
        match self.sig.leaves[k].access {
            Access::Contiguous => return format!("({offset} + {f})"),
            Access::Mod if self.periodic => return format!("({offset} + pr{k})"),
            Access::Div if self.periodic => return format!("({offset} + pq{k})"),
            Access::Mod => return format!("({offset} + {f} % {period})"),
            Access::Div => return format!("({offset} + {f} / {period})"),
            Access::Strided => {}
        }
        let mut at = format!("i32(m({base}u))");
        for d in 0..self.sig.rank {
            at += &format!(" + i32({pfx}c{d}) * bitcast<i32>(m({}u))", base + 1 + d);
        }
        format!("u32({at})")
    }

    /// Whether leaf `k` is a `Mod` or `Div` leaf read once per element of
    /// a vec4.
    fn straddles(&self, k: usize) -> bool {
        self.vec4 && self.straddling && matches!(self.sig.leaves[k].access, Access::Mod | Access::Div)
    }

    /// `Mod` or `Div` leaf `k`'s element index for each element of the
    /// vec4 at flat index `f`. The first element's row (`Div`) or column
    /// (`Mod`) is `f`'s; a later one has moved to the next row, or wrapped
    /// to the row's start, where `f`'s remainder plus its place reaches the
    /// period (one division per vec4, none with `periodic`).
    fn straddling_indices(&self, k: usize, f: &str) -> [String; 4] {
        let base = self.leaf_base[k];
        let (offset, period) = (self.word(base), self.word(base + 1));
        let (q, r) = if self.periodic {
            (format!("pq{k}"), format!("pr{k}"))
        } else {
            (format!("({f} / {period})"), format!("({f} % {period})"))
        };
        let div = self.sig.leaves[k].access == Access::Div;
        std::array::from_fn(|j| match (j, div) {
            (0, true) => format!("({offset} + {q})"),
            (0, false) => format!("({offset} + {r})"),
            (_, true) => format!("({offset} + {q} + select(0u, 1u, {r} + {j}u >= {period}))"),
            (_, false) => format!("({offset} + select({r} + {j}u, {r} + {j}u - {period}, {r} + {j}u >= {period}))"),
        })
    }

    /// Leaf `k` at each of `indices`, into one vec4 (a vec4 binding's
    /// element `at` is `[at >> 2][at & 3]`).
    fn load_elements(&self, k: usize, indices: &[String]) -> String {
        let leaf = &self.sig.leaves[k];
        debug_assert!(!held_packed(leaf.dtype, self.half), "the launch reads packed leaves whole");
        let buf = format!("in{}", leaf.buffer.expect("load of a computed leaf"));
        let lanes: Vec<String> =
            indices.iter().map(|at| self.load_scalar(leaf.dtype, &buf, &format!("{at} >> 2u][{at} & 3u"))).collect();
        format!("vec4<{}>({})", self.compute(leaf.dtype), lanes.join(", "))
    }

    /// Leaf `k` at element index `at`, or at vec4 index `quad` where given.
    fn load(&self, k: usize, at: &str, quad: Option<String>) -> String {
        let leaf = &self.sig.leaves[k];
        let buf = format!("in{}", leaf.buffer.expect("load of a computed leaf"));
        let splat = leaf.access == Access::Div;
        let quad = quad.unwrap_or_else(|| format!("{at} >> 2u"));
        match (self.vec4, leaf.dtype) {
            // All four lanes read one element when the leaf repeats by 4s.
            (true, _) if splat => self.load_elements(k, &[at.to_string()]),
            (true, DType::Bool) => format!("({buf}[{quad}] != vec4<u32>(0u))"),
            (true, d) if held_packed(d, self.half) => load4_expr(d, &buf, &quad),
            (true, _) => format!("{buf}[{quad}]"),
            (false, d) => self.load_scalar(d, &buf, at),
        }
    }

    /// Contiguous leaf `k`'s vec4 index at `f`, where `f` is a run from an
    /// origin ([`Flat`]).
    fn quad(&self, k: usize, f: Flat) -> Option<String> {
        let (origin, plus) = f.run?;
        let contiguous = self.vec4 && self.sig.leaves[k].access == Access::Contiguous;
        contiguous.then(|| format!("{origin}_q{k} + {}u", plus / VEC))
    }

    /// Statements computing body `b` at flat index `f`, variables prefixed
    /// `pfx`; returns the expressions of the body's roots.
    pub fn body(&self, b: usize, f: &str, pfx: &str, s: &mut String) -> Vec<String> {
        self.body_hoisting(b, Flat::at(f), pfx, None, None, s)
    }

    /// [`Emitter::body`] with op `given.0`'s value read from the expression
    /// `given.1` instead of computed (and ops only it needed left out).
    pub fn body_given(&self, b: usize, f: &str, given: (usize, &str), s: &mut String) -> Vec<String> {
        self.body_hoisting(b, Flat::at(f), "", None, Some(given), s)
    }

    /// [`Emitter::body`], with the ops that depend only on leaves read as
    /// `hoisted.1` and params written to `hoisted.0` (outside the caller's
    /// loop; named without `pfx`, so one copy serves every prefix) when
    /// given, and op `given.0` read from `given.1`. Only ops the roots need
    /// are written.
    pub fn body_hoisting(
        &self,
        b: usize,
        flat: Flat,
        pfx: &str,
        mut hoisted: Option<(&mut String, Access)>,
        given: Option<(usize, &str)>,
        s: &mut String,
    ) -> Vec<String> {
        let f = flat.at;
        let body: &Body = &self.sig.bodies[b];
        let live = live_ops(body, given.map(|g| g.0));
        let strided = body.ops.iter().any(|(op, _)| match op {
            Op::Load(k) | Op::Iota { leaf: k, .. } | Op::Gather { src: k, .. } => {
                self.sig.leaves[*k].access == Access::Strided
            }
            Op::Row(_) | Op::Acc | Op::Param(_) | Op::Pointwise(_) => false,
        });
        if strided && self.periodic {
            // Stepped by `periodic_advance`, not divided out of `f`.
            (0..self.sig.rank).for_each(|d| s.push_str(&format!("    let {pfx}c{d} = pc{d};\n")));
        } else if strided {
            s.push_str(
                &unravel(self.sig.rank, self.shape_base, f)
                    .replace("rem", &format!("{pfx}rem"))
                    .replace("let c", &format!("let {pfx}c")),
            );
        }
        let mut invariant = vec![false; body.ops.len()];
        for (i, (op, d)) in body.ops.iter().enumerate() {
            let v = |j: usize| var_name(pfx, invariant[j], j);
            if !live[i] {
                continue;
            }
            let d = *d;
            let dt = |j: usize| body.ops[j].1;
            // An f16 op that f16 arithmetic would round differently from
            // the reference reads its operands as f32 and rounds once.
            let wide = self.native_half(d) && !computes_in_f16(op);
            let v = |j: usize| if wide && self.native_half(dt(j)) { self.widen(&v(j)) } else { v(j) };
            let dt = |j: usize| if wide && self.native_half(dt(j)) { DType::F32 } else { dt(j) };
            let dc = if wide { DType::F32 } else { d };
            let value = match op {
                // Whatever the op, the one the caller gives (`given.0`) is read from `given.1`.
                _ if given.is_some_and(|g| g.0 == i) => given.unwrap().1.to_string(),
                Op::Load(k) if self.straddles(*k) => self.load_elements(*k, &self.straddling_indices(*k, f)),
                Op::Load(k) => self.load(*k, &self.index(*k, f, pfx), self.quad(*k, flat)),
                Op::Iota { leaf, start, step } => {
                    let at = self.index(*leaf, f, pfx);
                    let idx = if self.straddles(*leaf) {
                        format!("{}(vec4<u32>({}))", self.ty(dc), self.straddling_indices(*leaf, f).join(", "))
                    } else if self.vec4 && self.sig.leaves[*leaf].access == Access::Div {
                        format!("{}(vec4<u32>({at}))", self.ty(dc))
                    } else if self.vec4 {
                        format!("{}(vec4<u32>({at}) + vec4<u32>(0u, 1u, 2u, 3u))", self.ty(dc))
                    } else {
                        format!("{}({at})", self.ty(dc))
                    };
                    format!("{} + {idx} * {}", self.param(dc, *start), self.param(dc, *step))
                }
                Op::Row(k) if self.vec4 => format!("{}(s{k})", self.ty(d)),
                Op::Row(k) => format!("s{k}"),
                Op::Acc => "acc".to_string(),
                Op::Param(p) => self.param(d, *p),
                Op::Pointwise(Pointwise::Unary(UnaryOp::Exp, x))
                    if shifted_by_row_max(self.sig, self.stages, body, *x) =>
                {
                    format!("kiln_exp_no_overflow({})", v(*x))
                }
                Op::Pointwise(Pointwise::Unary(op, x)) => unary(*op, dt(*x), &v(*x), &|d, x| self.lit(d, x)),
                Op::Pointwise(Pointwise::Binary(op, x, y)) => binary(*op, &v(*x), &v(*y), &self.ty(DType::U32)),
                Op::Pointwise(Pointwise::Where(c, x, y)) => format!("select({}, {}, {})", v(*y), v(*x), v(*c)),
                Op::Pointwise(Pointwise::Cast(x))
                    if self.native_half(d) && !matches!(dt(*x), DType::F16 | DType::Bool) =>
                {
                    let wide = cast(dt(*x), DType::F32, &v(*x), &self.ty(DType::F32), false, &|d, x| self.lit(d, x));
                    format!("kiln_f16({wide})")
                }
                Op::Pointwise(Pointwise::Cast(x)) => {
                    let same = self.compute(dt(*x)) == self.compute(d);
                    cast(dt(*x), d, &v(*x), &self.ty(d), same, &|d, x| self.lit(d, x))
                }
                Op::Gather { src, axis, index, len } => {
                    self.gather(*src, *axis, &v(*index), dt(*index), *len, &var_name(pfx, false, i), pfx, s);
                    continue;
                }
            };
            let value = if wide { format!("kiln_f16({value})") } else { value };
            invariant[i] = hoisted.as_ref().is_some_and(|h| match op {
                Op::Load(k) => self.sig.leaves[*k].access == h.1,
                Op::Param(_) => true,
                Op::Pointwise(p) => p.operands().into_iter().all(|&x| invariant[x]),
                Op::Iota { .. } | Op::Row(_) | Op::Acc | Op::Gather { .. } => false,
            });
            let line = format!("    let {}: {} = {value};\n", var_name(pfx, invariant[i], i), self.ty(d));
            match hoisted.as_mut() {
                Some((pre, _)) if invariant[i] => pre.push_str(&line),
                _ => s.push_str(&line),
            }
        }
        body.roots.iter().map(|&r| var_name(pfx, invariant[r], r)).collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn gather(&self, src: usize, axis: usize, j: &str, jd: DType, len: usize, name: &str, pfx: &str, s: &mut String) {
        let ji = if jd == DType::U32 { format!("bitcast<i32>({j})") } else { format!("i32({j})") };
        let base = self.leaf_base[src];
        let dtype = self.sig.leaves[src].dtype;
        let mut at = format!("i32(m({base}u))");
        for d in 0..self.sig.rank {
            let c = if d == axis { format!("{name}_j") } else { format!("i32({pfx}c{d})") };
            at += &format!(" + {c} * bitcast<i32>(m({}u))", base + 1 + d);
        }
        let buf = format!("in{}", self.sig.leaves[src].buffer.expect("gather source"));
        s.push_str(&format!("    let {name}_j = {ji};\n"));
        s.push_str(&format!("    var {name}: {} = {};\n", self.compute(dtype), self.scalar_literal(dtype, 0.0)));
        let bound = scalar_param(DType::U32, self.param_base + len);
        s.push_str(&format!("    if ({name}_j >= 0 && u32({name}_j) < {bound}) {{\n"));
        s.push_str(&format!("        {name} = {};\n    }}\n", self.load_scalar(dtype, &buf, &format!("u32({at})"))));
    }

    /// Input buffer declarations, bound after `outputs` output buffers.
    pub fn input_decls(&self, outputs: usize) -> String {
        self.input_decls_needing(outputs, math::Needs::default())
    }

    /// [`Emitter::input_decls`], with the math helpers that the kernel
    /// around the body calls (`also`) beside the body's own.
    pub fn input_decls_needing(&self, outputs: usize, also: math::Needs) -> String {
        let mut s = String::new();
        for (b, &d) in self.sig.buffers.iter().enumerate() {
            let elem = self.binding_type(d);
            s += &format!("@group(0) @binding({}) var<storage, read> in{b}: array<{elem}>;\n", outputs + 1 + b);
        }
        let narrowing = math::Needs { f16: self.half, ..math::Needs::default() };
        s + &math::helpers(self.math_needs().or(also).or(narrowing), self.vec4)
    }

    fn math_needs(&self) -> math::Needs {
        math_needs(self.sig.bodies.iter().flat_map(|b| &b.ops))
    }
}

/// The math helpers `ops` call (each a polynomial of a few dozen operations).
pub(super) fn math_needs<'b>(ops: impl Iterator<Item = &'b (Op, DType)> + Clone) -> math::Needs {
    let uses = |f: &dyn Fn(&Op) -> bool| ops.clone().any(|(op, _)| f(op));
    let unary = |ops: &[UnaryOp]| uses(&|op| matches!(op, Op::Pointwise(Pointwise::Unary(u, _)) if ops.contains(u)));
    math::Needs {
        exp: unary(&[UnaryOp::Exp, UnaryOp::Sigmoid]),
        log: unary(&[UnaryOp::Log]),
        sin_cos: unary(&[UnaryOp::Sin, UnaryOp::Cos]),
        tanh: unary(&[UnaryOp::Tanh, UnaryOp::Gelu]),
        pow: uses(&|op| matches!(op, Op::Pointwise(Pointwise::Binary(BinaryOp::Pow, ..)))),
        f16: false,
    }
}

/// Which ops of `body` its roots need, not looking past op `cut`.
pub(super) fn live_ops(body: &Body, cut: Option<usize>) -> Vec<bool> {
    let mut live = vec![false; body.ops.len()];
    body.roots.iter().for_each(|&r| live[r] = true);
    for i in (0..body.ops.len()).rev() {
        if live[i] && Some(i) != cut {
            body.ops[i].0.operands().into_iter().for_each(|j| live[j] = true);
        }
    }
    live
}

/// The variable holding op `i` of a body: hoisted ones are shared by every
/// prefix.
fn var_name(pfx: &str, hoisted: bool, i: usize) -> String {
    if hoisted { format!("hv{i}") } else { format!("{pfx}v{i}") }
}

/// Whether an op of dtype f16 computes in f16 in a kernel computing f16
/// natively: where f16 arithmetic gives the exact result rounded once, as
/// the reference does (IEEE `+ − ×`, comparisons, and ops that do no
/// arithmetic). The others (`÷`, whose f16 form WGSL allows 2.5 ulp, and
/// the transcendentals, computed by kiln's f32 polynomials) compute in f32
/// and round once.
fn computes_in_f16(op: &Op) -> bool {
    match op {
        Op::Pointwise(Pointwise::Unary(u, _)) => {
            matches!(u, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Floor | UnaryOp::Round)
        }
        Op::Pointwise(Pointwise::Binary(b, ..)) => !matches!(b, BinaryOp::Div | BinaryOp::Pow),
        Op::Iota { .. } => false,
        Op::Load(_) | Op::Param(_) | Op::Gather { .. } | Op::Row(_) | Op::Acc => true,
        Op::Pointwise(Pointwise::Where(..) | Pointwise::Cast(_)) => true,
    }
}

/// (identity, merge(a, b)) of a reduction in compute type `d`.
pub fn reduce_monoid(op: ReduceOp, d: DType) -> (String, String) {
    let (lo, hi) = match d {
        DType::I32 => (format!("i32({})", i32::MIN), format!("i32({})", i32::MAX)),
        DType::U32 => ("0u".into(), format!("{}u", u32::MAX)),
        _ => (literal(d, f64::NEG_INFINITY), literal(d, f64::INFINITY)),
    };
    match op {
        ReduceOp::Sum => (literal(d, 0.0), "a + b".into()),
        ReduceOp::Prod => (literal(d, 1.0), "a * b".into()),
        ReduceOp::Max => (lo, "max(a, b)".into()),
        ReduceOp::Min => (hi, "min(a, b)".into()),
    }
}

pub fn scalar_param(dtype: DType, slot: usize) -> String {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => format!("bitcast<f32>(m({slot}u))"),
        DType::I32 => format!("bitcast<i32>(m({slot}u))"),
        DType::U32 => format!("m({slot}u)"),
        DType::Bool => format!("(m({slot}u) != 0u)"),
    }
}

/// Transcendentals are kiln's own (`math`), so every adapter computes the
/// same bits; `rsqrt` is `1 / sqrt`, both correctly rounded everywhere
/// (`inverseSqrt` is not).
fn unary(op: UnaryOp, d: DType, v: &str, lit: &dyn Fn(DType, f64) -> String) -> String {
    match op {
        UnaryOp::Neg => format!("-{v}"),
        UnaryOp::Abs | UnaryOp::Relu if d == DType::U32 => v.to_string(),
        UnaryOp::Abs => format!("abs({v})"),
        UnaryOp::Relu => format!("max({v}, {})", lit(d, 0.0)),
        UnaryOp::Exp => format!("kiln_exp({v})"),
        UnaryOp::Log => format!("kiln_log({v})"),
        UnaryOp::Sqrt => format!("sqrt({v})"),
        UnaryOp::Rsqrt => format!("1.0 / sqrt({v})"),
        UnaryOp::Sin => format!("kiln_sin_cos({v}, {})", lit(DType::I32, 0.0)),
        UnaryOp::Cos => format!("kiln_sin_cos({v}, {})", lit(DType::I32, 1.0)),
        UnaryOp::Tanh => format!("kiln_tanh({v})"),
        UnaryOp::Sigmoid => format!("1.0 / (1.0 + kiln_exp(-{v}))"),
        UnaryOp::Gelu => {
            format!("0.5 * {v} * (1.0 + kiln_tanh(0.7978845608028654 * ({v} + 0.044715 * {v} * {v} * {v})))")
        }
        UnaryOp::Floor => format!("floor({v})"),
        UnaryOp::Round => format!("round({v})"),
        UnaryOp::Not => format!("!{v}"),
    }
}

/// `u32_ty` is the (scalar or vector) u32 type that shift amounts need.
fn binary(op: BinaryOp, a: &str, b: &str, u32_ty: &str) -> String {
    let infix = |o: &str| format!("{a} {o} {b}");
    match op {
        BinaryOp::Add => infix("+"),
        BinaryOp::Sub => infix("-"),
        BinaryOp::Mul => infix("*"),
        BinaryOp::Div => infix("/"),
        BinaryOp::Pow => format!("kiln_pow({a}, {b})"),
        BinaryOp::Maximum => format!("max({a}, {b})"),
        BinaryOp::Minimum => format!("min({a}, {b})"),
        BinaryOp::Eq => infix("=="),
        BinaryOp::Ne | BinaryOp::Xor => infix("!="),
        BinaryOp::Lt => infix("<"),
        BinaryOp::Le => infix("<="),
        BinaryOp::Gt => infix(">"),
        BinaryOp::Ge => infix(">="),
        // `&` and `|` (not `&&`, `||`) also work on bool vectors.
        BinaryOp::And | BinaryOp::BitAnd => infix("&"),
        BinaryOp::Or | BinaryOp::BitOr => infix("|"),
        BinaryOp::BitXor => infix("^"),
        // Masked to 5 bits: SPIR-V leaves larger shift amounts undefined.
        BinaryOp::Shl => format!("{a} << ({u32_ty}({b}) & {u32_ty}(31u))"),
        BinaryOp::Shr => format!("{a} >> ({u32_ty}({b}) & {u32_ty}(31u))"),
    }
}

/// WGSL conversions: float → int truncates and saturates, i32 ↔ u32
/// reinterprets the bits (wraps), bool ↔ number is 0/1. `same`: both
/// compute in one type.
fn cast(from: DType, to: DType, v: &str, ty: &str, same: bool, lit: &dyn Fn(DType, f64) -> String) -> String {
    if same {
        v.to_string()
    } else if to == DType::Bool {
        format!("({v} != {})", lit(from, 0.0))
    } else if from == DType::Bool {
        format!("select({}, {}, {v})", lit(to, 0.0), lit(to, 1.0))
    } else {
        format!("{ty}({v})")
    }
}
