//! naga's IR of a validated kernel, printed as CUDA C++ over the prelude's
//! types. Every expression a statement emits is bound to a typed `const`
//! where naga emits it (`_e{index}`), so evaluation order is naga's;
//! pointers stay lvalues. Buffers and the meta block are fields of one
//! `Globals` value, the kernel's one parameter, which helper functions
//! take first; workgroup variables are `__shared__`.

use super::{CudaBinding, CudaKernel};
use naga::valid::{FunctionInfo, ModuleInfo};
use naga::{
    AddressSpace, ArraySize, BinaryOperator, Binding, BuiltIn, CollectiveOperation, Expression, Function, GatherMode,
    Handle, Literal, MathFunction, Module, RelationalFunction, Scalar, ScalarKind, Statement, SubgroupOperation,
    SwitchValue, TypeInner, UnaryOperator,
};
use std::fmt::Write;

/// The kernel's entry point in the CUDA module.
pub const ENTRY: &str = "kiln_main";

/// Why a kernel has no CUDA form.
pub type Unsupported = String;

type Out<T> = std::result::Result<T, Unsupported>;

pub fn write(module: &Module, info: &ModuleInfo) -> Out<CudaKernel> {
    let entry = module.entry_points.first().ok_or("no entry point")?;
    let w = Writer { module };
    let mut s = String::new();
    let bindings = w.globals(&mut s)?;
    for (h, f) in module.functions.iter() {
        let name = function_name(h, f);
        w.function(&mut s, f, &info[h], &name, None)?;
    }
    let [x, y, z] = entry.workgroup_size;
    w.function(&mut s, &entry.function, info.get_entry_point(0), ENTRY, Some(x * y * z))?;
    Ok(CudaKernel { body: s, workgroup_size: entry.workgroup_size, bindings })
}

fn function_name(h: Handle<Function>, f: &Function) -> String {
    format!("f{}_{}", h.index(), f.name.as_deref().unwrap_or("fn"))
}

struct Writer<'m> {
    module: &'m Module,
}

/// One function being printed.
struct Fun<'a> {
    f: &'a Function,
    info: &'a FunctionInfo,
    /// The names bound to expressions so far.
    baked: Vec<Option<String>>,
    /// How many live expressions and statements read each expression.
    uses: Vec<usize>,
    /// The entry point's builtin arguments, by argument index.
    builtins: Vec<Option<String>>,
    loops: usize,
}

fn scalar_name(s: Scalar) -> Out<&'static str> {
    Ok(match (s.kind, s.width) {
        (ScalarKind::Float, 4) => "f32",
        (ScalarKind::Sint, 4) => "i32",
        (ScalarKind::Uint, 4) => "u32",
        (ScalarKind::Bool, _) => "bool",
        _ => return Err(format!("scalar {s:?}")),
    })
}

impl<'m> Writer<'m> {
    fn type_name(&self, ty: Handle<naga::Type>) -> Out<String> {
        self.inner_name(&self.module.types[ty].inner)
    }

    fn inner_name(&self, inner: &TypeInner) -> Out<String> {
        Ok(match inner {
            TypeInner::Scalar(s) => scalar_name(*s)?.to_string(),
            TypeInner::Vector { size, scalar } => format!("vec<{}, {}>", scalar_name(*scalar)?, *size as u8),
            TypeInner::Array { base, size: ArraySize::Constant(n), .. } => {
                format!("arr<{}, {n}>", self.type_name(*base)?)
            }
            TypeInner::Pointer { base, .. } => format!("{}*", self.type_name(*base)?),
            TypeInner::ValuePointer { size: None, scalar, .. } => format!("{}*", scalar_name(*scalar)?),
            TypeInner::ValuePointer { size: Some(n), scalar, .. } => {
                format!("vec<{}, {}>*", scalar_name(*scalar)?, *n as u8)
            }
            other => return Err(format!("type {other:?}")),
        })
    }

    /// The `Globals` struct (buffers and meta), and `__shared__` variables.
    fn globals(&self, s: &mut String) -> Out<Vec<CudaBinding>> {
        let mut fields = String::new();
        let mut bindings = Vec::new();
        for (h, g) in self.module.global_variables.iter() {
            let name = global_name(h, g);
            match g.space {
                AddressSpace::Uniform | AddressSpace::Storage { .. } => {
                    let read_only = match g.space {
                        AddressSpace::Storage { access } => !access.contains(naga::StorageAccess::STORE),
                        _ => true,
                    };
                    let elem = match &self.module.types[g.ty].inner {
                        TypeInner::Array { base, .. } => self.type_name(*base)?,
                        _ => self.type_name(g.ty)?,
                    };
                    let konst = if read_only { "const " } else { "" };
                    writeln!(fields, "    {konst}{elem}* __restrict__ {name};").unwrap();
                    let binding = g.binding.as_ref().ok_or("a buffer without a binding")?.binding;
                    bindings.push(CudaBinding { binding, read_only, uniform: g.space == AddressSpace::Uniform });
                }
                AddressSpace::WorkGroup => {
                    writeln!(s, "__shared__ {} {name};", self.type_name(g.ty)?).unwrap();
                }
                other => return Err(format!("a global in {other:?}")),
            }
        }
        *s = format!("struct Globals {{\n{fields}}};\n{s}\n");
        Ok(bindings)
    }

    /// A helper function, or the kernel itself given its block's size
    /// (`KILN_ENTRY`: the prelude's `extern "C" __global__`).
    fn function(&self, s: &mut String, f: &Function, info: &FunctionInfo, name: &str, entry: Option<u32>) -> Out<()> {
        let uses = live_uses(f, info);
        let mut fun = Fun { f, info, baked: vec![None; f.expressions.len()], uses, builtins: vec![], loops: 0 };
        if let Some(threads) = entry {
            writeln!(s, "KILN_ENTRY void __launch_bounds__({threads}) {name}(const Globals g) {{").unwrap();
            for (i, a) in f.arguments.iter().enumerate() {
                let Some(Binding::BuiltIn(b)) = a.binding else {
                    return Err("an entry argument without a builtin".into());
                };
                let value = builtin(b)?;
                writeln!(s, "    [[maybe_unused]] const {} k_arg{i} = {value};", self.type_name(a.ty)?).unwrap();
                fun.builtins.push(Some(format!("k_arg{i}")));
            }
        } else {
            let ret = match &f.result {
                Some(r) => self.type_name(r.ty)?,
                None => "void".into(),
            };
            let mut args = vec!["const Globals& g".to_string()];
            for (i, a) in f.arguments.iter().enumerate() {
                args.push(format!("{} a{i}", self.type_name(a.ty)?));
            }
            writeln!(s, "__device__ {ret} {name}({}) {{", args.join(", ")).unwrap();
        }
        for (h, l) in f.local_variables.iter() {
            let ty = self.type_name(l.ty)?;
            match l.init {
                // Some variables are only written (a loop's remainder
                // that no axis is left to read): not worth a warning.
                Some(init) => {
                    writeln!(s, "    [[maybe_unused]] {ty} l{} = {};", h.index(), self.expr(&fun, init)?).unwrap()
                }
                None => writeln!(s, "    [[maybe_unused]] {ty} l{}{{}};", h.index()).unwrap(),
            }
        }
        self.block(s, &mut fun, &f.body, 1)?;
        s.push_str("}\n\n");
        Ok(())
    }

    fn block(&self, s: &mut String, fun: &mut Fun, block: &naga::Block, depth: usize) -> Out<()> {
        for st in block.iter() {
            self.statement(s, fun, st, depth)?;
        }
        Ok(())
    }

    /// `const T _eN = value;` for expression `h`, which later uses name.
    fn bind(&self, s: &mut String, fun: &mut Fun, h: Handle<Expression>, value: String, depth: usize) -> Out<()> {
        let ty = self.inner_name(fun.info[h].ty.inner_with(&self.module.types))?;
        let name = format!("_e{}", h.index());
        writeln!(s, "{}const {ty} {name} = {value};", indent(depth)).unwrap();
        fun.baked[h.index()] = Some(name);
        Ok(())
    }

    fn statement(&self, s: &mut String, fun: &mut Fun, st: &Statement, depth: usize) -> Out<()> {
        let pad = indent(depth);
        match st {
            Statement::Emit(range) => {
                for h in range.clone() {
                    let inner = fun.info[h].ty.inner_with(&self.module.types);
                    // Lvalues stay inline; values nothing reads are left out.
                    if matches!(inner, TypeInner::Pointer { .. } | TypeInner::ValuePointer { .. })
                        || fun.uses[h.index()] == 0
                    {
                        continue;
                    }
                    let value = self.expr(fun, h)?;
                    self.bind(s, fun, h, value, depth)?;
                }
            }
            Statement::Block(b) => {
                writeln!(s, "{pad}{{").unwrap();
                self.block(s, fun, b, depth + 1)?;
                writeln!(s, "{pad}}}").unwrap();
            }
            Statement::If { condition, accept, reject } => {
                writeln!(s, "{pad}if ({}) {{", self.expr(fun, *condition)?).unwrap();
                self.block(s, fun, accept, depth + 1)?;
                if !reject.is_empty() {
                    writeln!(s, "{pad}}} else {{").unwrap();
                    self.block(s, fun, reject, depth + 1)?;
                }
                writeln!(s, "{pad}}}").unwrap();
            }
            Statement::Switch { selector, cases } => {
                writeln!(s, "{pad}switch ({}) {{", self.expr(fun, *selector)?).unwrap();
                for c in cases {
                    match c.value {
                        SwitchValue::I32(v) => writeln!(s, "{pad}case {v}: {{").unwrap(),
                        SwitchValue::U32(v) => writeln!(s, "{pad}case {v}u: {{").unwrap(),
                        SwitchValue::Default => writeln!(s, "{pad}default: {{").unwrap(),
                    }
                    self.block(s, fun, &c.body, depth + 1)?;
                    if !c.fall_through {
                        writeln!(s, "{pad}    break;").unwrap();
                    }
                    writeln!(s, "{pad}}}").unwrap();
                }
                writeln!(s, "{pad}}}").unwrap();
            }
            Statement::Loop { body, continuing, break_if } => {
                if continuing.is_empty() && break_if.is_none() {
                    writeln!(s, "{pad}for (;;) {{").unwrap();
                } else {
                    // `continue` in the body goes to the top, which runs
                    // the continuing block first (as naga's other C-like
                    // backends do).
                    let first = format!("k_loop{}", fun.loops);
                    fun.loops += 1;
                    writeln!(s, "{pad}bool {first} = true;\n{pad}for (;;) {{\n{pad}    if (!{first}) {{").unwrap();
                    self.block(s, fun, continuing, depth + 2)?;
                    if let Some(b) = break_if {
                        writeln!(s, "{pad}        if ({}) {{ break; }}", self.expr(fun, *b)?).unwrap();
                    }
                    writeln!(s, "{pad}    }}\n{pad}    {first} = false;").unwrap();
                }
                self.block(s, fun, body, depth + 1)?;
                writeln!(s, "{pad}}}").unwrap();
            }
            Statement::Break => writeln!(s, "{pad}break;").unwrap(),
            Statement::Continue => writeln!(s, "{pad}continue;").unwrap(),
            Statement::Return { value: None } => writeln!(s, "{pad}return;").unwrap(),
            Statement::Return { value: Some(v) } => writeln!(s, "{pad}return {};", self.expr(fun, *v)?).unwrap(),
            Statement::ControlBarrier(b) | Statement::MemoryBarrier(b) => {
                let sync = if b.intersects(naga::Barrier::WORK_GROUP | naga::Barrier::STORAGE) {
                    if matches!(st, Statement::ControlBarrier(_)) { "__syncthreads()" } else { "__threadfence_block()" }
                } else {
                    "__syncwarp()"
                };
                writeln!(s, "{pad}{sync};").unwrap();
            }
            Statement::Store { pointer, value } => {
                writeln!(s, "{pad}{} = {};", self.expr(fun, *pointer)?, self.expr(fun, *value)?).unwrap();
            }
            Statement::WorkGroupUniformLoad { pointer, result } => {
                writeln!(s, "{pad}__syncthreads();").unwrap();
                let value = self.expr(fun, *pointer)?;
                self.bind(s, fun, *result, value, depth)?;
                writeln!(s, "{pad}__syncthreads();").unwrap();
            }
            Statement::Call { function, arguments, result } => {
                let mut args = vec!["g".to_string()];
                for &a in arguments {
                    let inner = fun.info[a].ty.inner_with(&self.module.types);
                    let text = self.expr(fun, a)?;
                    args.push(if matches!(inner, TypeInner::Pointer { .. }) { format!("&({text})") } else { text });
                }
                let call =
                    format!("{}({})", function_name(*function, &self.module.functions[*function]), args.join(", "));
                match result {
                    Some(r) => self.bind(s, fun, *r, call, depth)?,
                    None => writeln!(s, "{pad}{call};").unwrap(),
                }
            }
            Statement::SubgroupGather { mode, argument, result } => {
                let x = self.expr(fun, *argument)?;
                let value = match mode {
                    GatherMode::BroadcastFirst => format!("k_shuffle({x}, 0u)"),
                    GatherMode::Broadcast(i) | GatherMode::Shuffle(i) => {
                        format!("k_shuffle({x}, {})", self.expr(fun, *i)?)
                    }
                    GatherMode::ShuffleXor(m) => format!("k_shuffle_xor({x}, {})", self.expr(fun, *m)?),
                    GatherMode::ShuffleDown(d) => format!("k_shuffle_down({x}, {})", self.expr(fun, *d)?),
                    GatherMode::ShuffleUp(d) => format!("k_shuffle_up({x}, {})", self.expr(fun, *d)?),
                    other => return Err(format!("subgroup gather {other:?}")),
                };
                self.bind(s, fun, *result, value, depth)?;
            }
            Statement::SubgroupCollectiveOperation { op, collective_op, argument, result } => {
                if *collective_op != CollectiveOperation::Reduce {
                    return Err(format!("subgroup {collective_op:?}"));
                }
                let f = match op {
                    SubgroupOperation::All => "k_subgroup_all",
                    SubgroupOperation::Any => "k_subgroup_any",
                    SubgroupOperation::Add => "k_subgroup_add",
                    SubgroupOperation::Mul => "k_subgroup_mul",
                    SubgroupOperation::Min => "k_subgroup_min",
                    SubgroupOperation::Max => "k_subgroup_max",
                    other => return Err(format!("subgroup operation {other:?}")),
                };
                let value = format!("{f}({})", self.expr(fun, *argument)?);
                self.bind(s, fun, *result, value, depth)?;
            }
            other => return Err(format!("statement {other:?}")),
        }
        Ok(())
    }

    /// Expression `h` as C++: its name where bound, else inline.
    fn expr(&self, fun: &Fun, h: Handle<Expression>) -> Out<String> {
        if let Some(name) = &fun.baked[h.index()] {
            return Ok(name.clone());
        }
        let types = &self.module.types;
        let e = |x: Handle<Expression>| self.expr(fun, x);
        Ok(match &fun.f.expressions[h] {
            Expression::Literal(l) => literal(l)?,
            Expression::Constant(c) => self.global_expr(self.module.constants[*c].init)?,
            Expression::ZeroValue(ty) => format!("{}{{}}", self.type_name(*ty)?),
            Expression::Compose { ty, components } => {
                let parts: Vec<String> = components.iter().map(|&c| self.flattened(fun, c)).collect::<Out<Vec<_>>>()?;
                format!("{}{{{{{}}}}}", self.type_name(*ty)?, parts.join(", "))
            }
            Expression::Access { base, index } => format!("{}[{}]", e(*base)?, e(*index)?),
            Expression::AccessIndex { base, index } => format!("{}[{index}u]", e(*base)?),
            Expression::Splat { size, value } => {
                let scalar = match fun.info[h].ty.inner_with(types) {
                    TypeInner::Vector { scalar, .. } => scalar_name(*scalar)?,
                    other => return Err(format!("a splat to {other:?}")),
                };
                format!("splat<{scalar}, {}>({})", *size as u8, e(*value)?)
            }
            Expression::Swizzle { size, vector, pattern } => {
                let v = e(*vector)?;
                let parts: Vec<String> =
                    pattern[..*size as usize].iter().map(|&c| format!("{v}[{}u]", c as u8)).collect();
                format!("{}{{{{{}}}}}", self.inner_name(fun.info[h].ty.inner_with(types))?, parts.join(", "))
            }
            Expression::FunctionArgument(i) => match fun.builtins.get(*i as usize) {
                Some(Some(name)) => name.clone(),
                _ => {
                    let ty = &types[fun.f.arguments[*i as usize].ty].inner;
                    if matches!(ty, TypeInner::Pointer { .. }) { format!("(*a{i})") } else { format!("a{i}") }
                }
            },
            Expression::GlobalVariable(g) => {
                let var = &self.module.global_variables[*g];
                let name = global_name(*g, var);
                match (var.space, &types[var.ty].inner) {
                    (AddressSpace::WorkGroup, _) => name,
                    (_, TypeInner::Array { .. }) => format!("g.{name}"),
                    _ => format!("(*g.{name})"),
                }
            }
            Expression::LocalVariable(l) => format!("l{}", l.index()),
            Expression::Load { pointer } => e(*pointer)?,
            Expression::Unary { op, expr } => {
                let f = match op {
                    UnaryOperator::Negate => "neg",
                    UnaryOperator::LogicalNot => "logical_not",
                    UnaryOperator::BitwiseNot => "bit_not",
                };
                format!("{f}({})", e(*expr)?)
            }
            Expression::Binary { op, left, right } => {
                let (l, r) = (e(*left)?, e(*right)?);
                match op {
                    BinaryOperator::ShiftLeft => format!("k_shl({l}, {r})"),
                    BinaryOperator::ShiftRight => format!("k_shr({l}, {r})"),
                    _ => format!("({l} {} {r})", binary_op(*op)),
                }
            }
            Expression::Select { condition, accept, reject } => {
                format!("k_select({}, {}, {})", e(*reject)?, e(*accept)?, e(*condition)?)
            }
            Expression::Relational { fun: f, argument } => {
                let name = match f {
                    RelationalFunction::All => "k_all",
                    RelationalFunction::Any => "k_any",
                    RelationalFunction::IsNan => "k_is_nan",
                    RelationalFunction::IsInf => "k_is_inf",
                };
                format!("{name}({})", e(*argument)?)
            }
            Expression::Math { fun: f, arg, arg1, arg2, arg3 } => {
                let args: Vec<String> =
                    [Some(*arg), *arg1, *arg2, *arg3].into_iter().flatten().map(e).collect::<Out<Vec<_>>>()?;
                format!("{}({})", math_name(*f)?, args.join(", "))
            }
            Expression::As { expr, kind, convert } => {
                let from = fun.info[*expr].ty.inner_with(types);
                let width = convert.unwrap_or_else(|| from.scalar_width().unwrap_or(4));
                let to = scalar_name(Scalar { kind: *kind, width })?;
                let f = if convert.is_some() { "convert" } else { "bitcast" };
                format!("{f}<{to}>({})", e(*expr)?)
            }
            other => return Err(format!("expression {other:?}")),
        })
    }

    /// A component of a `Compose`: vectors spread into their components.
    fn flattened(&self, fun: &Fun, c: Handle<Expression>) -> Out<String> {
        let text = self.expr(fun, c)?;
        Ok(match fun.info[c].ty.inner_with(&self.module.types) {
            TypeInner::Vector { size, .. } => {
                (0..*size as u8).map(|i| format!("{text}[{i}u]")).collect::<Vec<_>>().join(", ")
            }
            _ => text,
        })
    }

    /// A constant's value, from the module's global expressions.
    fn global_expr(&self, h: Handle<Expression>) -> Out<String> {
        Ok(match &self.module.global_expressions[h] {
            Expression::Literal(l) => literal(l)?,
            Expression::Constant(c) => self.global_expr(self.module.constants[*c].init)?,
            Expression::ZeroValue(ty) => format!("{}{{}}", self.type_name(*ty)?),
            Expression::Compose { ty, components } => {
                let parts = components.iter().map(|&c| self.global_expr(c)).collect::<Out<Vec<_>>>()?;
                format!("{}{{{{{}}}}}", self.type_name(*ty)?, parts.join(", "))
            }
            other => return Err(format!("constant expression {other:?}")),
        })
    }
}

/// Each expression's readers, not counting values that nothing live reads
/// (an expression's operands come before it, so one pass from the end
/// settles chains of them).
fn live_uses(f: &Function, info: &FunctionInfo) -> Vec<usize> {
    let mut uses: Vec<usize> = f.expressions.iter().map(|(h, _)| info[h].ref_count).collect();
    for (h, e) in f.expressions.iter().rev() {
        if uses[h.index()] == 0 {
            for o in operands(e) {
                uses[o.index()] -= 1;
            }
        }
    }
    uses
}

/// The expressions `e` reads, as naga counts them.
fn operands(e: &Expression) -> Vec<Handle<Expression>> {
    match e {
        Expression::Access { base, index } => vec![*base, *index],
        Expression::AccessIndex { base, .. } => vec![*base],
        Expression::Splat { value, .. } => vec![*value],
        Expression::Swizzle { vector, .. } => vec![*vector],
        Expression::Compose { components, .. } => components.clone(),
        Expression::Load { pointer } => vec![*pointer],
        Expression::Unary { expr, .. } | Expression::As { expr, .. } => vec![*expr],
        Expression::Binary { left, right, .. } => vec![*left, *right],
        Expression::Select { condition, accept, reject } => vec![*condition, *accept, *reject],
        Expression::Relational { argument, .. } => vec![*argument],
        Expression::Math { arg, arg1, arg2, arg3, .. } => {
            [Some(*arg), *arg1, *arg2, *arg3].into_iter().flatten().collect()
        }
        _ => vec![],
    }
}

fn global_name(h: Handle<naga::GlobalVariable>, g: &naga::GlobalVariable) -> String {
    format!("v{}_{}", h.index(), g.name.as_deref().unwrap_or("global"))
}

fn indent(depth: usize) -> String {
    "    ".repeat(depth)
}

/// A builtin input's value in a CUDA kernel (a warp is a subgroup).
fn builtin(b: BuiltIn) -> Out<String> {
    let local_index = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))";
    let v3 = |x: &str, y: &str, z: &str| format!("vec<u32, 3>{{{{{x}, {y}, {z}}}}}");
    Ok(match b {
        BuiltIn::GlobalInvocationId => v3(
            "blockIdx.x * blockDim.x + threadIdx.x",
            "blockIdx.y * blockDim.y + threadIdx.y",
            "blockIdx.z * blockDim.z + threadIdx.z",
        ),
        BuiltIn::LocalInvocationId => v3("threadIdx.x", "threadIdx.y", "threadIdx.z"),
        BuiltIn::WorkGroupId => v3("blockIdx.x", "blockIdx.y", "blockIdx.z"),
        BuiltIn::NumWorkGroups => v3("gridDim.x", "gridDim.y", "gridDim.z"),
        BuiltIn::LocalInvocationIndex => local_index.into(),
        BuiltIn::SubgroupInvocationId => format!("({local_index} & 31u)"),
        BuiltIn::SubgroupSize => "32u".into(),
        BuiltIn::SubgroupId => format!("({local_index} >> 5u)"),
        BuiltIn::NumSubgroups => "((blockDim.x * blockDim.y * blockDim.z + 31u) >> 5u)".into(),
        other => return Err(format!("builtin {other:?}")),
    })
}

fn literal(l: &Literal) -> Out<String> {
    Ok(match *l {
        Literal::F32(v) if v.is_finite() && v.is_sign_negative() => format!("({v:?}f)"),
        Literal::F32(v) if v.is_finite() => format!("{v:?}f"),
        Literal::F32(v) => format!("__int_as_float({:#010x})", v.to_bits() as i32),
        Literal::I32(i32::MIN) => "(-2147483647 - 1)".into(),
        Literal::I32(v) if v < 0 => format!("({v})"),
        Literal::I32(v) => format!("{v}"),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(b) => format!("{b}"),
        other => return Err(format!("literal {other:?}")),
    })
}

fn binary_op(op: BinaryOperator) -> &'static str {
    match op {
        BinaryOperator::Add => "+",
        BinaryOperator::Subtract => "-",
        BinaryOperator::Multiply => "*",
        BinaryOperator::Divide => "/",
        BinaryOperator::Modulo => "%",
        BinaryOperator::Equal => "==",
        BinaryOperator::NotEqual => "!=",
        BinaryOperator::Less => "<",
        BinaryOperator::LessEqual => "<=",
        BinaryOperator::Greater => ">",
        BinaryOperator::GreaterEqual => ">=",
        BinaryOperator::And => "&",
        BinaryOperator::ExclusiveOr => "^",
        BinaryOperator::InclusiveOr => "|",
        BinaryOperator::LogicalAnd => "&&",
        BinaryOperator::LogicalOr => "||",
        BinaryOperator::ShiftLeft => "<<",
        BinaryOperator::ShiftRight => ">>",
    }
}

fn math_name(f: MathFunction) -> Out<&'static str> {
    use MathFunction as M;
    Ok(match f {
        M::Abs => "k_abs",
        M::Min => "k_min",
        M::Max => "k_max",
        M::Clamp => "k_clamp",
        M::Fma => "k_fma",
        M::Sqrt => "k_sqrt",
        M::InverseSqrt => "k_inverse_sqrt",
        M::Floor => "k_floor",
        M::Ceil => "k_ceil",
        M::Trunc => "k_trunc",
        M::Round => "k_round",
        M::Fract => "k_fract",
        M::Exp => "k_exp",
        M::Exp2 => "k_exp2",
        M::Log => "k_log",
        M::Log2 => "k_log2",
        M::Pow => "k_pow",
        M::Sin => "k_sin",
        M::Cos => "k_cos",
        M::Tan => "k_tan",
        M::Tanh => "k_tanh",
        M::Atan2 => "k_atan2",
        M::Sign => "k_sign",
        M::Ldexp => "k_ldexp",
        M::Dot => "k_dot",
        M::CountOneBits => "k_count_one_bits",
        M::FirstLeadingBit => "k_first_leading_bit",
        M::Pack2x16float => "k_pack2x16float",
        M::Unpack2x16float => "k_unpack2x16float",
        M::Dot4I8Packed => "k_dot4_i8_packed",
        other => return Err(format!("math function {other:?}")),
    })
}
