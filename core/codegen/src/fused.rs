//! WGSL for fused kernels. Every kernel evaluates one or more [`Body`]s of
//! SSA ops at a flat index `f` of the kernel's shape: contiguous leaves are
//! read at `offset + f`, strided ones through coordinates unravelled from
//! `f` (so broadcasts, permutes and slices cost index arithmetic, not
//! copies). Four kernels use this: elementwise (one or more outputs),
//! the prologue of a tree reduction, the row kernel (reductions along the
//! last axis and what consumes them) and the matmul epilogue.

use super::{META_DECL, WG, compute_type, literal, load_expr, math, storage_type, store_expr, unravel};
use kiln_ir::dtype::DType;
use kiln_ir::ir::{BinaryOp, ReduceOp, UnaryOp};
use kiln_sched::lower::{Access, Body, Op, Sig, meta_bases};

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
    sig: &'a Sig,
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
}

impl<'a> Emitter<'a> {
    pub fn new(sig: &'a Sig, shape_base: usize, vec4: bool) -> Emitter<'a> {
        let (leaf_base, param_base) = meta_bases(sig, shape_base);
        let (meta_lets, periodic, straddling) = (false, false, false);
        Emitter { sig, shape_base, leaf_base, param_base, vec4, meta_lets, periodic, straddling, stages: &[] }
    }

    /// This emitter, in a row kernel whose `Row(k)` ops read `stages`.
    pub(super) fn with_stages(self, stages: &'a [ReduceOp]) -> Emitter<'a> {
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
    fn first_period_word(&self, access: Access) -> Option<usize> {
        let k = self.sig.leaves.iter().position(|l| l.access == access)?;
        Some(self.leaf_base[k] + 1)
    }

    /// Meta word just past this kernel's params.
    pub fn meta_end(&self) -> usize {
        self.param_base + self.sig.params.len()
    }

    fn ty(&self, d: DType) -> String {
        if self.vec4 { format!("vec4<{}>", compute_type(d)) } else { compute_type(d).to_string() }
    }

    fn lit(&self, d: DType, v: f64) -> String {
        if self.vec4 { format!("vec4<{}>({})", compute_type(d), literal(d, v)) } else { literal(d, v) }
    }

    fn param(&self, d: DType, p: usize) -> String {
        let v = scalar_param(d, self.param_base + p);
        if self.vec4 { format!("vec4<{}>({v})", compute_type(d)) } else { v }
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
        let buf = format!("in{}", leaf.buffer.expect("load of a computed leaf"));
        let lanes: Vec<String> =
            indices.iter().map(|at| load_expr(leaf.dtype, &buf, &format!("{at} >> 2u][{at} & 3u"))).collect();
        format!("vec4<{}>({})", compute_type(leaf.dtype), lanes.join(", "))
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
            (true, _) => format!("{buf}[{quad}]"),
            (false, d) => load_expr(d, &buf, at),
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
            Op::Row(_) | Op::Acc | Op::Param(_) | Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast(_) => false,
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
            let value = match op {
                _ if given.is_some_and(|g| g.0 == i) => given.unwrap().1.to_string(),
                Op::Load(k) if self.straddles(*k) => self.load_elements(*k, &self.straddling_indices(*k, f)),
                Op::Load(k) => self.load(*k, &self.index(*k, f, pfx), self.quad(*k, flat)),
                Op::Iota { leaf, start, step } => {
                    let at = self.index(*leaf, f, pfx);
                    let idx = if self.straddles(*leaf) {
                        format!("{}(vec4<u32>({}))", self.ty(d), self.straddling_indices(*leaf, f).join(", "))
                    } else if self.vec4 && self.sig.leaves[*leaf].access == Access::Div {
                        format!("{}(vec4<u32>({at}))", self.ty(d))
                    } else if self.vec4 {
                        format!("{}(vec4<u32>({at}) + vec4<u32>(0u, 1u, 2u, 3u))", self.ty(d))
                    } else {
                        format!("{}({at})", self.ty(d))
                    };
                    format!("{} + {idx} * {}", self.param(d, *start), self.param(d, *step))
                }
                Op::Row(k) if self.vec4 => format!("{}(s{k})", self.ty(d)),
                Op::Row(k) => format!("s{k}"),
                Op::Acc => "acc".to_string(),
                Op::Param(p) => self.param(d, *p),
                Op::Unary(UnaryOp::Exp, x) if shifted_by_row_max(self.sig, self.stages, body, *x) => {
                    format!("kiln_exp_no_overflow({})", v(*x))
                }
                Op::Unary(op, x) => unary(*op, dt(*x), &v(*x), &|d, x| self.lit(d, x)),
                Op::Binary(op, x, y) => binary(*op, &v(*x), &v(*y), &self.ty(DType::U32)),
                Op::Where(c, x, y) => format!("select({}, {}, {})", v(*y), v(*x), v(*c)),
                Op::Cast(x) => cast(dt(*x), d, &v(*x), &self.ty(d), &|d, x| self.lit(d, x)),
                Op::Gather { src, axis, index, len } => {
                    self.gather(*src, *axis, &v(*index), dt(*index), *len, &v(i), pfx, s);
                    continue;
                }
            };
            invariant[i] = hoisted.as_ref().is_some_and(|h| match op {
                Op::Load(k) => self.sig.leaves[*k].access == h.1,
                Op::Param(_) => true,
                Op::Unary(_, x) | Op::Cast(x) => invariant[*x],
                Op::Binary(_, x, y) => invariant[*x] && invariant[*y],
                Op::Where(c, x, y) => invariant[*c] && invariant[*x] && invariant[*y],
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
        s.push_str(&format!("    var {name}: {} = {};\n", compute_type(dtype), literal(dtype, 0.0)));
        let bound = scalar_param(DType::U32, self.param_base + len);
        s.push_str(&format!("    if ({name}_j >= 0 && u32({name}_j) < {bound}) {{\n"));
        s.push_str(&format!("        {name} = {};\n    }}\n", load_expr(dtype, &buf, &format!("u32({at})"))));
    }

    /// Input buffer declarations, bound after `outputs` output buffers.
    pub fn input_decls(&self, outputs: usize) -> String {
        let mut s = String::new();
        for (b, &d) in self.sig.buffers.iter().enumerate() {
            let elem = if self.vec4 { format!("vec4<{}>", storage_type(d)) } else { storage_type(d).to_string() };
            s += &format!("@group(0) @binding({}) var<storage, read> in{b}: array<{elem}>;\n", outputs + 1 + b);
        }
        s + &math::helpers(self.math_needs(), self.vec4)
    }

    fn math_needs(&self) -> math::Needs {
        math_needs(self.sig.bodies.iter().flat_map(|b| &b.ops))
    }
}

/// The math helpers `ops` call (each a polynomial of a few dozen operations).
fn math_needs<'b>(ops: impl Iterator<Item = &'b (Op, DType)> + Clone) -> math::Needs {
    let uses = |f: &dyn Fn(&Op) -> bool| ops.clone().any(|(op, _)| f(op));
    let unary = |ops: &[UnaryOp]| uses(&|op| matches!(op, Op::Unary(u, _) if ops.contains(u)));
    math::Needs {
        exp: unary(&[UnaryOp::Exp, UnaryOp::Sigmoid]),
        log: unary(&[UnaryOp::Log]),
        sin_cos: unary(&[UnaryOp::Sin, UnaryOp::Cos]),
        tanh: unary(&[UnaryOp::Tanh, UnaryOp::Gelu]),
        pow: uses(&|op| matches!(op, Op::Binary(BinaryOp::Pow, ..))),
    }
}

/// Which ops of `body` its roots need, not looking past op `cut`.
fn live_ops(body: &Body, cut: Option<usize>) -> Vec<bool> {
    let mut live = vec![false; body.ops.len()];
    body.roots.iter().for_each(|&r| live[r] = true);
    for i in (0..body.ops.len()).rev() {
        if live[i] && Some(i) != cut {
            body.ops[i].0.operands().into_iter().for_each(|j| live[j] = true);
        }
    }
    live
}

/// Whether a body can run four elements at a time: only 4-byte leaves
/// (strided ones where their rows split into vec4s, which the launch
/// checks), no gather, no pow.
pub fn vectorizable(sig: &Sig) -> bool {
    vectorizable_reading_rows(sig) && !sig.bodies.iter().any(|b| b.ops.iter().any(|(op, _)| matches!(op, Op::Row(_))))
}

/// `vectorizable`, except that the bodies may read row stages (splat).
pub fn vectorizable_reading_rows(sig: &Sig) -> bool {
    sig.leaves.iter().all(|l| l.dtype != DType::F16)
        && sig.bodies.iter().all(|b| {
            b.ops.iter().all(|(op, d)| {
                *d != DType::F16 && !matches!(op, Op::Gather { .. } | Op::Binary(BinaryOp::Pow, ..) | Op::Acc)
            })
        })
}

/// An elementwise kernel writing the roots of body 0 to `outputs` buffers.
/// Meta: 0 element count, 1 threads per grid row, shape at 2, then leaves
/// and params, then (with `out_strided`) the one output's layout. `whole`:
/// a vec4 walk's grid covers the elements exactly (8 vec4s for each
/// invocation), so it needs no bounds checks.
pub fn elementwise_wgsl(sig: &Sig, outputs: &[DType], out_strided: bool, walk: Walk, whole: bool) -> String {
    let vec4 = walk != Walk::Flat;
    let e = Emitter::new(sig, 2, vec4);
    let mut s = String::from(META_DECL);
    for (k, &d) in outputs.iter().enumerate() {
        let elem = if vec4 { format!("vec4<{}>", storage_type(d)) } else { storage_type(d).to_string() };
        s += &format!("@group(0) @binding({}) var<storage, read_write> out{k}: array<{elem}>;\n", k + 1);
    }
    s += &e.input_decls(outputs.len());
    s += &format!("@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, ");
    s += "@builtin(num_workgroups) nwg: vec3<u32>) {\n";
    s += "    let t = gid.y * m(1u) + gid.x;\n    let n = m(0u);\n";
    let store = |d: DType, v: &str| {
        if vec4 && d == DType::Bool { format!("select(vec4<u32>(0u), vec4<u32>(1u), {v})") } else { store_expr(d, v) }
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
        // unrolled 14.1–16.0, without the check 13.1–13.7 (nineteenth
        // session).
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
    } else if outputs.contains(&DType::F16) {
        // Two elements per invocation, so f16 outputs write whole words.
        s += "    let f0 = t * 2u;\n    if (f0 >= n) { return; }\n    let f1 = min(f0 + 1u, n - 1u);\n";
        let a = e.body(0, "f0", "a_", &mut s);
        let b = e.body(0, "f1", "b_", &mut s);
        for (k, &d) in outputs.iter().enumerate() {
            if d == DType::F16 {
                s += &format!("    out{k}[t] = pack2x16float(vec2<f32>({}, {}));\n", a[k], b[k]);
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

/// The variable holding op `i` of a body: hoisted ones are shared by every
/// prefix.
fn var_name(pfx: &str, hoisted: bool, i: usize) -> String {
    if hoisted { format!("hv{i}") } else { format!("{pfx}v{i}") }
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

/// Longest row the row kernel loops over (Mesa ends loops after 65,535
/// iterations; each stage is one loop over the row).
pub const ROW_MAX_LEN: usize = 16384;
const ROW_BLOCK: usize = 64;

/// The row kernel: one invocation per row of `[rows.., len]`. Bodies
/// `0..stages.len()` are the stages' inputs, each folded over the row in
/// order; the last body computes the outputs, for every element of the row
/// or (with `per_row`) once per row at `j = 0`. With `vec4` (rows a multiple
/// of 4 long, 4-aligned leaves, not `per_row`) every loop reads and writes
/// runs of four elements: vector loads on CPU adapters.
/// Meta: 0 rows, 1 len, 2 threads per grid row, shape at 3.
pub fn row_wgsl(sig: &Sig, stages: &[ReduceOp], outputs: &[DType], per_row: bool, vec4: bool) -> String {
    let e = Emitter::new(sig, 3, vec4).with_stages(stages);
    let step = if vec4 { VEC } else { 1 };
    let mut s = row_decls(&e, stages, outputs, vec4, vec4);
    s += &format!("@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n");
    s += "    let row = gid.y * m(2u) + gid.x;\n    if (row >= m(0u)) { return; }\n    let len = m(1u);\n";
    // Each stage folds blocks of ROW_BLOCK elements, then the blocks: a sum's
    // rounding error grows with len / ROW_BLOCK + ROW_BLOCK, not len.
    let reuse = reused_stage(sig, stages, outputs, per_row);
    let at = if vec4 { "f >> 2u" } else { "f" };
    let mut k = 0;
    while k < stages.len() {
        // The online pass rescales its sums and stores nothing, so it runs
        // only when neither of its stages keeps a value for the outputs.
        let keeps = reuse.is_some_and(|(r, _)| r == k || r == k + 1);
        if !keeps && sums_exp_of_shifted_max(sig, stages, k) {
            s += &online_max_and_exp_sum(&e, k, vec4, RowWalk::whole_row(step));
            k += 2;
            continue;
        }
        let keep = reuse.filter(|&(r, _)| r == k).map(|(_, o)| format!("out{o}[{at}]"));
        s += &fold_stage(&e, k, vec4, RowWalk::whole_row(step), keep.as_deref());
        k += 1;
    }
    let last = stages.len();
    if per_row {
        s += "    let f = row * len;\n";
        let roots = e.body(last, "f", "", &mut s);
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            s += &format!("    out{k}[row] = {};\n", store_expr(d, r));
        }
    } else {
        s += &format!("    for (var j = 0u; j < len; j += {step}u) {{\n    let f = row * len + j;\n");
        let roots = match reuse {
            Some((k, o)) => e.body_given(last, "f", (sig.bodies[k].roots[0], &format!("out{o}[{at}]")), &mut s),
            None => e.body(last, "f", "", &mut s),
        };
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            s += &format!("    out{k}[{at}] = {};\n", store_expr(d, r));
        }
        s += "    }\n";
    }
    s + "}\n"
}

/// The row kernels' buffers, math helpers, and each stage's `merge{k}`
/// (`merge{k}v` too with `vec4`) and `identity{k}`; outputs are arrays of
/// vec4s with `vec4_outputs`.
pub(super) fn row_decls(e: &Emitter, stages: &[ReduceOp], outputs: &[DType], vec4: bool, vec4_outputs: bool) -> String {
    let mut s = String::from(META_DECL);
    for (k, &d) in outputs.iter().enumerate() {
        let elem = if vec4_outputs { format!("vec4<{}>", storage_type(d)) } else { storage_type(d).to_string() };
        s += &format!("@group(0) @binding({}) var<storage, read_write> out{k}: array<{elem}>;\n", k + 1);
    }
    s += &e.input_decls(outputs.len());
    for (k, &op) in stages.iter().enumerate() {
        let (id, merge) = reduce_monoid(op, stage_dtype(e.sig, k));
        let ct = compute_type(stage_dtype(e.sig, k));
        s += &format!("fn merge{k}(a: {ct}, b: {ct}) -> {ct} {{ return {merge}; }}\n");
        s += &format!("fn identity{k}() -> {ct} {{ return {id}; }}\n");
        if vec4 {
            s += &format!("fn merge{k}v(a: vec4<{ct}>, b: vec4<{ct}>) -> vec4<{ct}> {{ return {merge}; }}\n");
        }
    }
    s
}

pub(super) fn stage_dtype(sig: &Sig, k: usize) -> DType {
    sig.bodies[k].ops[sig.bodies[k].roots[0]].1
}

/// The lanes row layout: `lanes` invocations per row of `len` elements,
/// lane l holding vec4s (or with `vec4` false, elements) l, l + lanes, … of
/// the row in registers. Every element is read once and written once, and
/// the lanes' loads are contiguous (on CPU adapters, vector loads instead
/// of the row-per-invocation layout's gathers across rows; on GPUs,
/// coalesced). Where the row does not split evenly, the last slot is
/// ragged: lanes past the row's end read its last vec4 (or element) again,
/// fold the identity instead, and store the same bits its own lane stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RowLanes {
    pub lanes: u32,
    pub len: u32,
    pub combine: Combine,
    pub vec4: bool,
}

/// How a row's lanes combine their partial results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combine {
    /// The lanes are one subgroup (of a fixed width): a butterfly of
    /// `subgroupShuffleXor`, no barrier. Workgroups of [`ROW_LANES_WG`].
    Subgroup,
    /// The lanes share a workgroup (with other rows' lanes, up to
    /// [`ROW_LANES_WG`] invocations): each writes its partial to workgroup
    /// memory, one barrier, and each folds its row's.
    Workgroup,
}

/// Invocations per workgroup of the lanes row kernel (rows with more
/// lanes than this take a workgroup each).
pub const ROW_LANES_WG: u32 = 64;
/// Lanes per row where they combine through workgroup memory, on CPU
/// adapters: one SIMD batch of llvmpipe (256 bits); on llvmpipe GL 8 lanes
/// with 8 rows per workgroup ran softmax [4096, 1024] 1.9× as fast as 16
/// lanes with one row per workgroup (docs/BENCHMARKS.md, 'What was tried'
/// (softmax/rows)).
const WORKGROUP_LANES_CPU: u32 = 8;
/// The same on GPUs (not measured on one yet): 16 lanes keep a lane's
/// share of a 1024-long row to 16 vec4 registers.
const WORKGROUP_LANES_GPU: u32 = 16;
/// Most vec4s one lane keeps in registers (the row is unrolled into them).
const LANE_SLOTS_MAX: usize = 64;
/// Most elements one lane keeps where they are not read as vec4s (rows of
/// 1023 on lavapipe and GL; the unrolled kernel's length bounds it).
const LANE_SCALAR_SLOTS_MAX: usize = 128;
/// A ragged row takes the lanes layout where at most this fraction of its
/// lanes' slots idle: rows of 100 (a quarter idle with 8 lanes) ran 15%
/// slower on llvmpipe GL than with a row per invocation, rows of 200 and
/// 1000 (an eighth and 2%) 1.1–1.5× faster on every adapter.
const RAGGED_IDLE_MAX: f64 = 0.125;

impl RowLanes {
    /// The layout for `stages` over rows of `len` (vec4-readable, written
    /// per element) on an adapter whose subgroups are `subgroup_width` wide
    /// (`None`: no subgroups, or of no fixed width): a subgroup per row where
    /// the width is known, else lanes combined through workgroup memory where
    /// the device has it (`Caps::workgroup_memory`), as many as suit a
    /// `cpu_adapter` or a GPU; if the row fits, read as `vec4`s or not.
    #[allow(clippy::too_many_arguments)]
    pub fn for_device(
        workgroup_memory: bool,
        cpu_adapter: bool,
        subgroup_width: Option<u32>,
        sig: &Sig,
        stages: &[ReduceOp],
        len: usize,
        vec4: bool,
    ) -> Option<RowLanes> {
        match subgroup_width {
            Some(width) => RowLanes::fitting(width, Combine::Subgroup, sig, stages, len, vec4),
            None if workgroup_memory => {
                let lanes = if cpu_adapter { WORKGROUP_LANES_CPU } else { WORKGROUP_LANES_GPU };
                RowLanes::fitting(lanes, Combine::Workgroup, sig, stages, len, vec4)
            }
            None => None,
        }
    }

    /// The layout with `lanes` per row combined by `combine`, reading
    /// `vec4`s (`len` a multiple of 4) or elements, if each lane's share
    /// fits in `LANE_SLOTS_MAX` vec4s (or `LANE_SCALAR_SLOTS_MAX` elements),
    /// a ragged row leaves at most `RAGGED_IDLE_MAX` of its slots idle, and
    /// every stage is a 32-bit value.
    pub fn fitting(
        lanes: u32,
        combine: Combine,
        sig: &Sig,
        stages: &[ReduceOp],
        len: usize,
        vec4: bool,
    ) -> Option<RowLanes> {
        let word = (0..stages.len()).all(|k| matches!(stage_dtype(sig, k), DType::F32 | DType::I32 | DType::U32));
        let row = RowLanes { lanes, len: len as u32, combine, vec4 };
        let (step, max) = if vec4 { (VEC, LANE_SLOTS_MAX) } else { (1, LANE_SCALAR_SLOTS_MAX) };
        let fits = lanes > 0
            && len > 0
            && (combine == Combine::Workgroup || ROW_LANES_WG.is_multiple_of(lanes))
            && len.is_multiple_of(step)
            && row.slots() <= max
            && row.idle() <= RAGGED_IDLE_MAX;
        (word && fits).then_some(row)
    }

    /// Invocations per workgroup: a whole number of rows' lanes.
    pub fn workgroup_size(self) -> u32 {
        match self.combine {
            Combine::Subgroup => ROW_LANES_WG,
            Combine::Workgroup => self.lanes * (ROW_LANES_WG / self.lanes).max(1),
        }
    }

    /// Elements one slot of one lane holds.
    fn step(self) -> usize {
        if self.vec4 { VEC } else { 1 }
    }

    /// The row's vec4s (or elements).
    fn units(self) -> usize {
        self.len as usize / self.step()
    }

    fn slots(self) -> usize {
        self.units().div_ceil(self.lanes as usize)
    }

    /// Whether the last slot reaches past the row's end for some lanes.
    fn ragged(self) -> bool {
        !self.units().is_multiple_of(self.lanes as usize)
    }

    /// The fraction of the lanes' slots past the row's end.
    fn idle(self) -> f64 {
        let slots = self.slots() * self.lanes as usize;
        (slots - self.units()) as f64 / slots as f64
    }
}

/// The row kernel in the [`RowLanes`] layout (same bodies, stages and
/// meta as [`row_wgsl`], outputs per element, vec4 leaves with
/// `lanes.vec4`). Each stage folds the lane's slots in order, then the
/// vec4's lanes, then combines the row's lanes in a fixed order with kiln's
/// own merge, every lane getting the same bits.
pub fn row_lanes_wgsl(sig: &Sig, stages: &[ReduceOp], outputs: &[DType], lanes: RowLanes) -> String {
    let vec4 = lanes.vec4;
    let e = Emitter::new(sig, 3, vec4).with_meta_lets().with_stages(stages);
    let (l, len, step) = (lanes.lanes, lanes.len, lanes.step());
    let mut s = row_decls(&e, stages, outputs, vec4, vec4);
    if lanes.combine == Combine::Workgroup {
        for k in 0..stages.len() {
            let (ct, wg) = (compute_type(stage_dtype(sig, k)), lanes.workgroup_size());
            s += &format!("var<workgroup> part{k}: array<{ct}, {wg}>;\n");
        }
    }
    let ids = match lanes.combine {
        Combine::Subgroup => ", @builtin(subgroup_size) sg_size: u32, @builtin(subgroup_invocation_id) sg_lane: u32",
        Combine::Workgroup => ", @builtin(local_invocation_index) local: u32",
    };
    s += &format!(
        "@compute @workgroup_size({})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>{}) {{\n",
        lanes.workgroup_size(),
        ids
    );
    // No early return: every lane of a row must reach the shuffles or
    // barriers. Lanes past the last row redo it and store the same values
    // as its own lanes (a stored branch costs SwiftShader masked stores).
    s += &format!(
        "    let at = gid.y * m(2u) + gid.x;\n    let row = min(at / {l}u, m(0u) - 1u);\n    let lane = at % {l}u;\n"
    );
    s += &e.meta_lets();
    match lanes.combine {
        // Whether the row's lanes are one subgroup, lane for lane (so far
        // always, where an adapter reports one subgroup width).
        Combine::Subgroup => {
            s += &format!("    let lanes_are_subgroup = subgroupAll(sg_size == {l}u && sg_lane == lane);\n")
        }
        // Where the row's partials sit in workgroup memory.
        Combine::Workgroup => s += "    let first_lane = local - lane;\n",
    }
    let names: Vec<String> = (0..lanes.slots()).map(|t| format!("slot{t}")).collect();
    let ragged = lanes.ragged().then_some(names.len() - 1);
    for (t, f) in names.iter().enumerate() {
        let unit = format!("lane + {}u", t as u32 * l);
        if ragged == Some(t) {
            let last = lanes.units() - 1;
            s += &format!("    let {f} = row * {len}u + min({unit}, {last}u) * {step}u;\n");
            s += &format!("    let in_row = {unit} <= {last}u;\n");
        } else {
            s += &format!("    let {f} = row * {len}u + ({unit}) * {step}u;\n");
        }
    }
    // Whole vec4 slots are runs from the first (its vec4 indices bound once).
    let slots: Vec<Flat> = (names.iter().enumerate())
        .map(|(t, f)| match ragged != Some(t) && vec4 {
            true => Flat { at: f, run: Some(("slot0", t * l as usize * step)) },
            false => Flat::at(f),
        })
        .collect();
    if vec4 {
        s += &e.origin_lets("slot0");
        s += "    let slot0_q = slot0 >> 2u;\n";
    }
    // For each body, the latest earlier stage whose value it can be given.
    let given: Vec<Option<(usize, usize)>> =
        (0..=stages.len()).map(|b| (0..b).rev().find_map(|k| stage_value_in(sig, k, b).map(|op| (k, op)))).collect();
    for (k, &stage_given) in given[..stages.len()].iter().enumerate() {
        // Each value folded as soon as it is made (SwiftShader's compiler
        // runs about 10% slower when all are made first).
        let (identity, merge) = slot_monoid(k, vec4);
        for (t, &f) in slots.iter().enumerate() {
            let v = lane_roots(&e, k, stage_given, t, f, &mut s).remove(0);
            let v = if ragged == Some(t) { format!("select({identity}, {v}, in_row)") } else { v };
            s += &if t == 0 { format!("    var b{k} = {v};\n") } else { format!("    b{k} = {merge}(b{k}, {v});\n") };
        }
        s += &format!("    var s{k} = {};\n", slot_total(k, &format!("b{k}"), vec4));
        s += &combine_lanes(&e, k, lanes);
    }
    for (t, &f) in slots.iter().enumerate() {
        let roots = lane_roots(&e, stages.len(), given[stages.len()], t, f, &mut s);
        let at = match f.run {
            Some((_, plus)) => format!("slot0_q + {}u", plus / VEC),
            None if vec4 => format!("{} >> 2u", f.at),
            None => f.at.to_string(),
        };
        for (k, (&d, r)) in outputs.iter().zip(&roots).enumerate() {
            s += &format!("    out{k}[{at}] = {};\n", store_expr(d, r));
        }
    }
    s + "}\n"
}

/// Statements leaving in `s{k}` stage k's value over the whole row, from
/// each lane's `s{k}`. In the butterfly both lanes of a pair merge the
/// same operands in the same places (the lower lane's value first), so they
/// get the same bits even from a merge whose result depends on the order
/// (`max` of −0 and +0). Ordering by a select of two merges is not enough:
/// Mesa's compiler treats `max` as commutative and makes them one.
/// Where the subgroup turns out not to be the row's lanes, each lane folds
/// the whole row itself instead (correct, L times the work).
fn combine_lanes(e: &Emitter, k: usize, lanes: RowLanes) -> String {
    let l = lanes.lanes;
    match lanes.combine {
        Combine::Subgroup => {
            let mut s = String::new();
            for w in (0..l.ilog2()).map(|i| 1u32 << i) {
                s += &format!(
                    "    let o{k}_{w} = subgroupShuffleXor(s{k}, {w}u);\n    let low{k}_{w} = (lane & {w}u) == 0u;\n"
                );
                s += &format!(
                    "    s{k} = merge{k}(select(o{k}_{w}, s{k}, low{k}_{w}), select(s{k}, o{k}_{w}, low{k}_{w}));\n"
                );
            }
            let (len, step) = (lanes.len, lanes.step());
            let (init, merge) = slot_monoid(k, lanes.vec4);
            s += &format!("    if (!lanes_are_subgroup) {{\n        var c{k} = {init};\n");
            s += &format!("        for (var j = 0u; j < {len}u; j += {step}u) {{\n        let f = row * {len}u + j;\n");
            let v = e.body(k, "f", &format!("fb{k}_"), &mut s).remove(0);
            s += &format!("        c{k} = {merge}(c{k}, {v});\n        }}\n");
            s + &format!("        s{k} = {};\n    }}\n", slot_total(k, &format!("c{k}"), lanes.vec4))
        }
        Combine::Workgroup => {
            let mut s =
                format!("    part{k}[local] = s{k};\n    workgroupBarrier();\n    s{k} = part{k}[first_lane];\n");
            (1..l).for_each(|i| s += &format!("    s{k} = merge{k}(s{k}, part{k}[first_lane + {i}u]);\n"));
            s
        }
    }
}

/// Stage `k`'s identity and merge over vec4s or elements.
fn slot_monoid(k: usize, vec4: bool) -> (String, String) {
    if vec4 {
        (format!("vec4(identity{k}())"), format!("merge{k}v"))
    } else {
        (format!("identity{k}()"), format!("merge{k}"))
    }
}

/// Stage `k`'s value from the accumulator `acc`: with `vec4`, its four
/// lanes merged in a fixed order.
fn slot_total(k: usize, acc: &str, vec4: bool) -> String {
    if vec4 { format!("merge{k}(merge{k}({acc}.x, {acc}.y), merge{k}({acc}.z, {acc}.w))") } else { acc.to_string() }
}

/// Body `b`'s roots at slot `t` (flat index `f`), named `k{b}t{t}_v…`.
/// With `given` = (stage k, op), that op is stage k's value at this slot,
/// already in registers, instead of being read and computed again.
fn lane_roots(e: &Emitter, b: usize, given: Option<(usize, usize)>, t: usize, f: Flat, s: &mut String) -> Vec<String> {
    let value = given.map(|(k, op)| (op, format!("k{k}t{t}_v{op}")));
    e.body_hoisting(b, f, &format!("k{b}t{t}_"), None, value.as_ref().map(|(op, v)| (*op, v.as_str())), s)
}

/// A stage whose value the outputs compute again, costly enough to keep
/// (softmax's exp(x − max)): its pass stores each value in output `o` (an
/// f32 one), and the output pass reads it back from there. As (stage, o).
/// The last body must begin with the stage's body, whose root is its last op;
/// the latest such stage is kept (it contains the earlier ones' values).
fn reused_stage(sig: &Sig, stages: &[ReduceOp], outputs: &[DType], per_row: bool) -> Option<(usize, usize)> {
    let o = outputs.iter().position(|&d| d == DType::F32).filter(|_| !per_row)?;
    let last = &sig.bodies[stages.len()];
    let k = (0..stages.len()).rfind(|&k| {
        let (ops, n) = (&sig.bodies[k].ops, sig.bodies[k].ops.len());
        math_needs(ops.iter()).any()
            && ops[n - 1].1 == DType::F32
            && last.ops.len() > n
            && stage_value_in(sig, k, stages.len()).is_some()
    })?;
    Some((k, o))
}

/// The op of body `b` that is stage `k`'s value, when body `b` begins
/// with stage `k`'s body (whose one root is its last op) and needs that
/// value: `b` can then be given it instead of computing it again.
fn stage_value_in(sig: &Sig, k: usize, b: usize) -> Option<usize> {
    let (stage, body) = (&sig.bodies[k], &sig.bodies[b]);
    let n = stage.ops.len();
    let prefix = stage.roots == [n - 1] && body.ops.starts_with(&stage.ops);
    (prefix && live_ops(body, None)[n - 1]).then_some(n - 1)
}

/// Where a row stage's loops walk its row: from element `first` (a u32
/// expression) of the walk, which starts at flat index `origin` and ends
/// `end` elements later, `stride` elements at a time, folding blocks of
/// `span` elements (a sum's rounding error grows with the blocks and a
/// block's length, not with the row's). With `mask` (a `vec4<bool>`
/// expression of the flat index it is given), the vec4 at `f` may reach
/// outside the row: its elements where the mask is false count as the
/// stage's identity. A trip of the loop takes `unroll` strides while that
/// many remain in the block.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowWalk<'a> {
    pub first: &'a str,
    pub stride: usize,
    pub span: usize,
    pub origin: &'a str,
    pub end: &'a str,
    pub mask: Option<fn(&str) -> String>,
    pub unroll: usize,
}

impl RowWalk<'_> {
    /// A row per invocation: every element of the row, `step` at a time.
    fn whole_row(step: usize) -> RowWalk<'static> {
        RowWalk { first: "0u", stride: step, span: ROW_BLOCK, origin: "row * len", end: "len", mask: None, unroll: 1 }
    }
}

/// Opens the loop over blocks of a row stage's walk (declaring the block's
/// accumulators `block_vars`) and writes the loops over the block, each
/// trip's code written by `trip` for its flat indices. The caller closes
/// the block loop.
fn row_blocks(block_vars: &str, walk: RowWalk, s: &mut String, trip: impl FnMut(&[String], &mut String)) {
    let RowWalk { first, span, end, .. } = walk;
    *s += &format!(
        "    for (var j0 = {first}; j0 < {end}; j0 += {span}u) {{\n{block_vars}    let j1 = min(j0 + {span}u, {end});\n"
    );
    strided_trips("j0", "j1", walk, s, trip);
}

/// Loops `j` from `from` to `to` (u32 expressions) by `walk.stride`, at
/// flat index `walk.origin + j`: `walk.unroll` strides per trip (flat
/// indices `f`, `fu1`, …) while that many remain, then one per trip, so
/// that CPU adapters pay a loop's masks and branches once per several
/// loads. `trip` writes a trip's code for its flat indices.
pub(super) fn strided_trips(
    from: &str,
    to: &str,
    walk: RowWalk,
    s: &mut String,
    mut trip: impl FnMut(&[String], &mut String),
) {
    let RowWalk { stride, origin, unroll, .. } = walk;
    // The loop of single strides declares `j` unless the unrolled loop did.
    let mut init = format!("var j = {from}");
    if unroll > 1 {
        *s +=
            &format!("    {init};\n    for (; j + {}u < {to}; j += {}u) {{\n", (unroll - 1) * stride, unroll * stride);
        *s += &format!("    let f = {origin} + j;\n");
        let fs: Vec<String> = (0..unroll).map(|u| if u == 0 { "f".to_string() } else { format!("fu{u}") }).collect();
        (1..unroll).for_each(|u| *s += &format!("    let fu{u} = f + {}u;\n", u * stride));
        trip(&fs, s);
        *s += "    }\n";
        init.clear();
    }
    *s += &format!("    for ({init}; j < {to}; j += {stride}u) {{\n    let f = {origin} + j;\n");
    trip(&["f".to_string()], s);
    *s += "    }\n";
}

/// The prefix naming the values of the `u`-th stride of an unrolled trip.
pub(super) fn trip_prefix(u: usize) -> String {
    if u == 0 { String::new() } else { format!("u{u}_") }
}

/// The value `v` of a walk's element (or vec4) at `f`, its elements outside
/// the row replaced by `identity` where the walk has a mask.
fn masked(walk: RowWalk, identity: &str, f: &str, v: String) -> String {
    match walk.mask {
        Some(mask) => format!("select({identity}, {v}, {})", mask(f)),
        None => v,
    }
}

/// Stage `k` folded along `walk` into `s{k}`: each block into `b{k}`,
/// then the block into `s{k}`. With `keep`, each value is also stored
/// there (an output the outputs' pass reads back).
pub(super) fn fold_stage(e: &Emitter, k: usize, vec4: bool, walk: RowWalk, keep: Option<&str>) -> String {
    assert!(keep.is_none() || walk.unroll == 1, "a kept value is stored at `f`");
    let (init, merge) = slot_monoid(k, vec4);
    let mut s = format!("    var s{k} = identity{k}();\n");
    row_blocks(&format!("    var b{k} = {init};\n"), walk, &mut s, |fs, s| {
        for (u, f) in fs.iter().enumerate() {
            let v = masked(walk, &init, f, e.body(k, f, &trip_prefix(u), s).remove(0));
            if let Some(at) = keep {
                *s += &format!("    {at} = {v};\n");
            }
            *s += &format!("    b{k} = {merge}(b{k}, {v});\n");
        }
    });
    let block = slot_total(k, &format!("b{k}"), vec4);
    s + &format!("    s{k} = merge{k}(s{k}, {block});\n    }}\n")
}

/// Whether stage `k + 1` sums `exp(x − m)` where stage `k` is the max `m`
/// of the same f32 `x` (softmax, log-softmax, cross-entropy): body `k + 1`
/// is body `k`'s ops, then `Row(k)`, the subtraction and the exp.
pub(super) fn sums_exp_of_shifted_max(sig: &Sig, stages: &[ReduceOp], k: usize) -> bool {
    let (Some(ReduceOp::Max), Some(ReduceOp::Sum)) = (stages.get(k), stages.get(k + 1)) else {
        return false;
    };
    let (x, e) = (&sig.bodies[k], &sig.bodies[k + 1]);
    let n = x.ops.len();
    let f32_op = |op: Op| (op, DType::F32);
    x.roots.len() == 1
        && x.ops[x.roots[0]].1 == DType::F32
        && e.roots == [n + 2]
        && e.ops.len() == n + 3
        && e.ops[n] == f32_op(Op::Row(k))
        && e.ops[n + 1] == f32_op(Op::Binary(BinaryOp::Sub, x.roots[0], n))
        && e.ops[n + 2] == f32_op(Op::Unary(UnaryOp::Exp, n + 1))
        && shifted_by_row_max(sig, stages, e, n + 1)
}

/// Whether op `x` of `body` is `a − max(a)` along the row: it subtracts
/// row stage k, a max, from the value stage k's body folds, which `body`
/// computes with the same ops first. Such a value is at most 0 (or NaN), so
/// its exp cannot overflow. (If a row holds a NaN, WGSL leaves `max`'s
/// result open, and such a row's exp values are unspecified either way.)
fn shifted_by_row_max(sig: &Sig, stages: &[ReduceOp], body: &Body, x: usize) -> bool {
    let Op::Binary(BinaryOp::Sub, a, m) = body.ops[x].0 else {
        return false;
    };
    let Op::Row(k) = body.ops[m].0 else {
        return false;
    };
    let max = &sig.bodies[k];
    stages.get(k) == Some(&ReduceOp::Max) && max.roots == [a] && body.ops.starts_with(&max.ops)
}

/// Stages `k` (max of x) and `k + 1` (sum of exp(x − max)) in one pass over
/// the row, the online softmax normalizer: the running sum is rescaled by
/// exp(old max − new max) whenever the max grows (rarely, past the first
/// elements), so the row is read once instead of twice. Lanes keep their
/// own (max, sum) per block; blocks fold into the row's in order, so the
/// result is deterministic. Guards keep all-−∞ prefixes at a sum of 0.
/// Every exp here is of a value minus a max at least as large.
pub(super) fn online_max_and_exp_sum(e: &Emitter, max: usize, vec4: bool, walk: RowWalk) -> String {
    let sum = max + 1;
    let splat = |x: &str| if vec4 { format!("vec4<f32>({x})") } else { x.to_string() };
    let (zero, one, ninf) = (splat("0.0"), splat("1.0"), splat("f32_bits(0xff800000u)"));
    let mut s = format!("    var s{max} = f32_bits(0xff800000u);\n    var s{sum} = 0.0;\n");
    let block_vars = format!("    var b{max} = {ninf};\n    var b{sum} = {zero};\n");
    row_blocks(&block_vars, walk, &mut s, |fs, s| {
        // The trip's values, then their max: one rescale per trip at most.
        let xs: Vec<String> = fs
            .iter()
            .enumerate()
            .map(|(u, f)| {
                let x = e.body(max, f, &trip_prefix(u), s).remove(0);
                if walk.mask.is_none() {
                    return x;
                }
                *s += &format!("    let x{max}_{u} = {};\n", masked(walk, &ninf, f, x));
                format!("x{max}_{u}")
            })
            .collect();
        let top = xs[1..].iter().fold(xs[0].clone(), |m, x| format!("max({m}, {x})"));
        *s += &format!(
            "    let top{max} = {top};\n    if (any(top{max} > b{max})) {{\n        let grown = max(b{max}, top{max});\n"
        );
        *s += &format!(
            "        b{sum} = b{sum} * select(kiln_exp_no_overflow(b{max} - grown), {one}, b{max} == grown);\n        b{max} = grown;\n    }}\n"
        );
        for x in &xs {
            *s += &format!(
                "    b{sum} = b{sum} + select(kiln_exp_no_overflow({x} - b{max}), {zero}, b{max} == {ninf});\n"
            );
        }
    });
    let block_max =
        if vec4 { format!("max(max(b{max}.x, b{max}.y), max(b{max}.z, b{max}.w))") } else { format!("b{max}") };
    s += &format!("    let row_max = max(s{max}, {block_max});\n");
    let rm = splat("row_max");
    s += &format!("    let lanes = b{sum} * select(kiln_exp_no_overflow(b{max} - {rm}), {one}, b{max} == {rm});\n");
    let lanes = if vec4 { "(lanes.x + lanes.y) + (lanes.z + lanes.w)" } else { "lanes" };
    let old = splat(&format!("s{max} - row_max"));
    let rescale = if vec4 { format!("kiln_exp_no_overflow({old}).x") } else { format!("kiln_exp_no_overflow({old})") };
    s += &format!(
        "    s{sum} = s{sum} * select({rescale}, 1.0, s{max} == row_max) + {lanes};\n    s{max} = row_max;\n    }}\n"
    );
    s
}

pub fn scalar_param(dtype: DType, slot: usize) -> String {
    match dtype {
        DType::F32 | DType::F16 => format!("bitcast<f32>(m({slot}u))"),
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
/// reinterprets the bits (wraps), bool ↔ number is 0/1.
fn cast(from: DType, to: DType, v: &str, ty: &str, lit: &dyn Fn(DType, f64) -> String) -> String {
    if compute_type(from) == compute_type(to) {
        v.to_string()
    } else if to == DType::Bool {
        format!("({v} != {})", lit(from, 0.0))
    } else if from == DType::Bool {
        format!("select({}, {}, {v})", lit(to, 0.0), lit(to, 1.0))
    } else {
        format!("{ty}({v})")
    }
}
