//! Generated elementwise kernels: every output element is an expression of
//! input elements at the same logical index (inputs are strided views, so
//! broadcasting, permutes and slices cost index arithmetic, not copies).
//! One thread computes one element, or one packed pair for f16 output.

use super::{META_DECL, WG, compute_type, literal, load_expr, storage_type, store_expr, strided_index, unravel};
use crate::dtype::DType;
use crate::ir::{BinaryOp, UnaryOp};

/// An expression over a kernel's inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Input(usize),
    /// A scalar of the output dtype, read from meta parameter slot `0`.
    Fill,
    /// `start + i * step` (meta parameter slots 0 and 1).
    Iota,
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    Where(Box<Expr>, Box<Expr>, Box<Expr>),
    Cast(Box<Expr>, DType),
    /// `src[coords with coords[axis] = index[coords]]` with input 0 the
    /// source and input 1 the index; the source's axis length is meta
    /// parameter slot 0. Out-of-range indices read 0.
    Gather {
        axis: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct EwKernel {
    pub out: DType,
    /// Write into a strided region of the output (used by concat) instead
    /// of element `i`; never with f16 output.
    pub out_strided: bool,
    pub rank: usize,
    /// Each input's dtype and whether it is contiguous (read as `off + i`).
    pub inputs: Vec<(DType, bool)>,
    pub expr: Expr,
}

impl EwKernel {
    /// Meta word where input `k`'s layout (offset, strides) starts.
    pub fn input_base(&self, k: usize) -> usize {
        2 + self.rank + k * (self.rank + 1)
    }
    pub fn out_base(&self) -> usize {
        self.input_base(self.inputs.len())
    }
    /// Meta word of the first scalar parameter.
    pub fn param_base(&self) -> usize {
        self.out_base() + if self.out_strided { self.rank + 1 } else { 0 }
    }
    /// Elements (or f16 pairs) one invocation writes.
    pub fn per_thread(&self) -> usize {
        if self.out == DType::F16 { 2 } else { 1 }
    }

    pub fn wgsl(&self) -> String {
        let mut s = String::from(META_DECL);
        s += &format!("@group(0) @binding(1) var<storage, read_write> out: array<{}>;\n", storage_type(self.out));
        for (k, (d, _)) in self.inputs.iter().enumerate() {
            s += &format!("@group(0) @binding({}) var<storage, read> in{k}: array<{}>;\n", k + 2, storage_type(*d));
        }
        if contains_pow(&self.expr) {
            s += POW_FN;
        }
        s += &self.value_fn();
        s += &self.main_fn();
        s
    }

    fn value_fn(&self) -> String {
        let mut body = String::new();
        let needs_coords = self.out_strided
            || matches!(self.expr, Expr::Gather { .. })
            || self.inputs.iter().any(|&(_, contiguous)| !contiguous);
        if needs_coords {
            body += &unravel(self.rank, 2, "i");
        }
        let mut lets = Vec::new();
        let v = self.emit(&self.expr, &mut lets);
        for l in lets {
            body += &format!("    {l}\n");
        }
        let result_ty = self.expr_dtype(&self.expr);
        let mut s = format!("fn value(i: u32) -> {} {{\n{body}    return {v};\n}}\n", compute_type(result_ty));
        if self.out_strided {
            s += &format!(
                "fn out_index(i: u32) -> u32 {{\n{}{}    return u32(at_out);\n}}\n",
                unravel(self.rank, 2, "i"),
                strided_index("out", self.rank, self.out_base())
            );
        }
        s
    }

    fn main_fn(&self) -> String {
        let head = format!(
            "@compute @workgroup_size({WG})\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n    let t = gid.y * m(1u) + gid.x;\n"
        );
        let body = if self.out == DType::F16 {
            "    let i0 = 2u * t;\n    if (i0 >= m(0u)) { return; }\n    var v1 = 0.0;\n    if (i0 + 1u < m(0u)) { v1 = value(i0 + 1u); }\n    out[t] = pack2x16float(vec2<f32>(value(i0), v1));\n".to_string()
        } else {
            let at = if self.out_strided { "out_index(t)" } else { "t" };
            format!("    if (t >= m(0u)) {{ return; }}\n    out[{at}] = {};\n", store_expr(self.out, "value(t)"))
        };
        format!("{head}{body}}}\n")
    }

    fn expr_dtype(&self, e: &Expr) -> DType {
        match e {
            Expr::Input(k) => self.inputs[*k].0,
            Expr::Fill | Expr::Iota => self.out,
            Expr::Unary(_, x) => self.expr_dtype(x),
            Expr::Binary(op, x, _) => {
                if op.is_comparison() {
                    DType::Bool
                } else {
                    self.expr_dtype(x)
                }
            }
            Expr::Where(_, a, _) => self.expr_dtype(a),
            Expr::Cast(_, to) => *to,
            Expr::Gather { .. } => self.inputs[0].0,
        }
    }

    /// Load of input `k` at the current element.
    fn load_input(&self, k: usize, lets: &mut Vec<String>) -> String {
        let (dtype, contiguous) = self.inputs[k];
        let base = self.input_base(k);
        let name = format!("x{k}");
        if contiguous {
            lets.push(format!("let {name} = {};", load_expr(dtype, &format!("in{k}"), &format!("m({base}u) + i"))));
        } else {
            for line in strided_index(&format!("{k}"), self.rank, base).lines() {
                lets.push(line.trim().to_string());
            }
            lets.push(format!("let {name} = {};", load_expr(dtype, &format!("in{k}"), &format!("u32(at_{k})"))));
        }
        name
    }

    /// Emit `let` statements for `e`; returns the name or literal holding it.
    fn emit(&self, e: &Expr, lets: &mut Vec<String>) -> String {
        let id = lets.len();
        let (value, ty) = match e {
            Expr::Input(k) => return self.load_input(*k, lets),
            Expr::Fill => (scalar_param(self.out, self.param_base()), self.out),
            Expr::Iota => {
                let (p, ct) = (self.param_base(), compute_type(self.out));
                (format!("{} + {ct}(i) * {}", scalar_param(self.out, p), scalar_param(self.out, p + 1)), self.out)
            }
            Expr::Unary(op, x) => {
                let d = self.expr_dtype(x);
                let v = self.emit(x, lets);
                (unary(*op, d, &v), d)
            }
            Expr::Binary(op, x, y) => {
                let d = self.expr_dtype(x);
                let (a, b) = (self.emit(x, lets), self.emit(y, lets));
                (binary(*op, &a, &b), if op.is_comparison() { DType::Bool } else { d })
            }
            Expr::Where(c, a, b) => {
                let (c, a2, b) = (self.emit(c, lets), self.emit(a, lets), self.emit(b, lets));
                (format!("select({b}, {a2}, {c})"), self.expr_dtype(a))
            }
            Expr::Cast(x, to) => {
                let from = self.expr_dtype(x);
                let v = self.emit(x, lets);
                (cast(from, *to, &v), *to)
            }
            Expr::Gather { axis } => return self.gather(*axis, lets),
        };
        let name = format!("v{id}");
        lets.push(format!("let {name}: {} = {value};", compute_type(ty)));
        name
    }

    fn gather(&self, axis: usize, lets: &mut Vec<String>) -> String {
        let j = self.load_input(1, lets);
        let ji = if self.inputs[1].0 == DType::U32 { format!("bitcast<i32>({j})") } else { j };
        let (src, base) = (self.inputs[0].0, self.input_base(0));
        lets.push(format!("let ji = {ji};"));
        lets.push(format!("var g: {} = {};", compute_type(src), literal(src, 0.0)));
        lets.push(format!("if (ji >= 0 && u32(ji) < m({}u)) {{", self.param_base()));
        let mut at = format!("i32(m({base}u))");
        for d in 0..self.rank {
            let c = if d == axis { "ji".to_string() } else { format!("i32(c{d})") };
            at += &format!(" + {c} * bitcast<i32>(m({}u))", base + 1 + d);
        }
        lets.push(format!("    g = {};", load_expr(src, "in0", &format!("u32({at})"))));
        lets.push("}".into());
        "g".into()
    }
}

fn contains_pow(e: &Expr) -> bool {
    match e {
        Expr::Binary(op, a, b) => *op == BinaryOp::Pow || contains_pow(a) || contains_pow(b),
        Expr::Unary(_, a) | Expr::Cast(a, _) => contains_pow(a),
        Expr::Where(c, a, b) => contains_pow(c) || contains_pow(a) || contains_pow(b),
        Expr::Input(_) | Expr::Fill | Expr::Iota | Expr::Gather { .. } => false,
    }
}

/// WGSL's `pow` is undefined for negative bases; NumPy's is defined when
/// the exponent is an integer.
const POW_FN: &str = "fn kiln_pow(a: f32, b: f32) -> f32 {
    if (b == 0.0) { return 1.0; }
    let p = pow(abs(a), b);
    if (a >= 0.0) { return p; }
    if (floor(b) != b) { return bitcast<f32>(0x7fc00000u); }
    return select(p, -p, floor(b * 0.5) * 2.0 != b);
}
";

fn scalar_param(dtype: DType, slot: usize) -> String {
    match dtype {
        DType::F32 | DType::F16 => format!("bitcast<f32>(m({slot}u))"),
        DType::I32 => format!("bitcast<i32>(m({slot}u))"),
        DType::U32 => format!("m({slot}u)"),
        DType::Bool => format!("(m({slot}u) != 0u)"),
    }
}

/// tanh is clamped because some drivers compute it as a ratio of exps that
/// overflows to NaN for |x| > ~44; tanh(±15) is ±1 in f32 anyway.
fn unary(op: UnaryOp, d: DType, v: &str) -> String {
    match op {
        UnaryOp::Neg => format!("-{v}"),
        UnaryOp::Abs | UnaryOp::Relu if d == DType::U32 => v.to_string(),
        UnaryOp::Abs => format!("abs({v})"),
        UnaryOp::Relu => format!("max({v}, {})", literal(d, 0.0)),
        UnaryOp::Exp => format!("exp({v})"),
        UnaryOp::Log => format!("log({v})"),
        UnaryOp::Sqrt => format!("sqrt({v})"),
        UnaryOp::Rsqrt => format!("inverseSqrt({v})"),
        UnaryOp::Sin => format!("sin({v})"),
        UnaryOp::Cos => format!("cos({v})"),
        UnaryOp::Tanh => format!("tanh(clamp({v}, -15.0, 15.0))"),
        UnaryOp::Sigmoid => format!("1.0 / (1.0 + exp(-{v}))"),
        UnaryOp::Gelu => format!(
            "0.5 * {v} * (1.0 + tanh(clamp(0.7978845608028654 * ({v} + 0.044715 * {v} * {v} * {v}), -15.0, 15.0)))"
        ),
        UnaryOp::Floor => format!("floor({v})"),
        UnaryOp::Round => format!("round({v})"),
        UnaryOp::Not => format!("!{v}"),
    }
}

fn binary(op: BinaryOp, a: &str, b: &str) -> String {
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
        BinaryOp::And => infix("&&"),
        BinaryOp::Or => infix("||"),
    }
}

/// WGSL conversions: float → int truncates and saturates, i32 ↔ u32
/// reinterprets the bits (wraps), bool ↔ number is 0/1.
fn cast(from: DType, to: DType, v: &str) -> String {
    let (cf, ct) = (compute_type(from), compute_type(to));
    if cf == ct {
        v.to_string()
    } else if to == DType::Bool {
        format!("({v} != {})", literal(from, 0.0))
    } else if from == DType::Bool {
        format!("select({}, {}, {v})", literal(to, 0.0), literal(to, 1.0))
    } else {
        format!("{ct}({v})")
    }
}
