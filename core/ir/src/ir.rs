//! The IR: one closed `enum` of primitives and lazy graph nodes.
//!
//! Every consumer of the IR (shape inference `infer.rs`, the CPU reference
//! `interp.rs`, the scheduler's walk in kiln-sched's `walk.rs`, WGSL
//! codegen) is an exhaustive `match` over [`Prim`], so adding a primitive makes the compiler
//! list every place that must learn it.

mod device;
mod infer;
mod node;

pub use device::{DeviceArray, DeviceBuffer, MaybeSendSync, PoolStats, Role, Roles, buffer_id, size_class};
pub use node::{MAX_ELEMENTS, MAX_RANK, Node, Realized, Trace};

use crate::dtype::DType;
use crate::quant::QuantFormat;
use crate::shape::{Shape, SliceSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    /// tanh approximation (as in GPT-2 and `jax.nn.gelu(approximate=True)`).
    Gelu,
    Floor,
    /// Round half to even, as NumPy.
    Round,
    /// Logical not (bool only).
    Not,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 15] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::Floor,
        UnaryOp::Round,
        UnaryOp::Not,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Floor => "floor",
            UnaryOp::Round => "round",
            UnaryOp::Not => "logical_not",
        }
    }

    /// Which input dtypes the op accepts.
    pub fn accepts(self, d: DType) -> bool {
        match self {
            UnaryOp::Neg => d.is_float() || d == DType::I32,
            UnaryOp::Abs | UnaryOp::Relu => d.is_numeric(),
            UnaryOp::Not => d == DType::Bool,
            UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Gelu
            | UnaryOp::Floor
            | UnaryOp::Round => d.is_float(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Xor,
    /// Bitwise ops on i32/u32 (Threefry needs them). Shift amounts use
    /// their low 5 bits, as WGSL's; `Shr` of i32 is arithmetic.
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 21] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Eq,
        BinaryOp::Ne,
        BinaryOp::Lt,
        BinaryOp::Le,
        BinaryOp::Gt,
        BinaryOp::Ge,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::And => "logical_and",
            BinaryOp::Or => "logical_or",
            BinaryOp::Xor => "logical_xor",
            BinaryOp::BitAnd => "bitwise_and",
            BinaryOp::BitOr => "bitwise_or",
            BinaryOp::BitXor => "bitwise_xor",
            BinaryOp::Shl => "shift_left",
            BinaryOp::Shr => "shift_right",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(self, BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge)
    }

    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
    }

    pub fn is_bitwise(self) -> bool {
        matches!(self, BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr)
    }

    /// Which (shared) input dtype the op accepts.
    pub fn accepts(self, d: DType) -> bool {
        match self {
            BinaryOp::Div | BinaryOp::Pow => d.is_float(),
            BinaryOp::Eq | BinaryOp::Ne => true,
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => d == DType::Bool,
            BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => d.is_int(),
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Maximum
            | BinaryOp::Minimum
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => d.is_numeric(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// Whether an empty reduction has a value (NumPy: sum → 0, prod → 1).
    pub fn identity(self) -> Option<f64> {
        match self {
            ReduceOp::Sum => Some(0.0),
            ReduceOp::Prod => Some(1.0),
            ReduceOp::Max | ReduceOp::Min => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgOp {
    ArgMax,
    ArgMin,
}

impl ArgOp {
    pub fn name(self) -> &'static str {
        match self {
            ArgOp::ArgMax => "argmax",
            ArgOp::ArgMin => "argmin",
        }
    }
}

/// The closed set of primitives. Composite ops (softmax, mean, eye, one-hot,
/// stack, ...) are built from these in `kiln-ops`.
#[derive(Debug, Clone, PartialEq)]
pub enum Prim {
    /// Data that is already on its device (uploaded from the host).
    Input {
        shape: Shape,
        dtype: DType,
    },
    /// Every element equals `value`.
    Fill {
        value: f64,
        shape: Shape,
        dtype: DType,
    },
    /// `start + i * step` for `i` in `0..len`.
    Iota {
        start: f64,
        step: f64,
        len: usize,
        dtype: DType,
    },
    Unary(UnaryOp),
    /// Both inputs have the output's shape (broadcasting is an `Expand` view).
    Binary(BinaryOp),
    /// `where(cond, a, b)`, all three of one shape.
    Where,
    Cast {
        to: DType,
    },
    /// Reduce over `axes` (sorted, unique); the output keeps them as size 1
    /// when `keepdim`.
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdim: bool,
    },
    /// Index (i32) of the first extreme value along `axis`.
    ArgReduce {
        op: ArgOp,
        axis: usize,
        keepdim: bool,
    },
    Reshape {
        shape: Shape,
    },
    Permute {
        perm: Vec<usize>,
    },
    Slice {
        specs: Vec<SliceSpec>,
    },
    /// Broadcast to the node's shape: size-1 or leading dims grow.
    Expand {
        shape: Shape,
    },
    /// `[batch.., M, K] @ [batch.., K, N]`, equal batch dims (ops broadcasts).
    Matmul,
    Concat {
        axis: usize,
    },
    /// `out[p] = src[p with p[axis] = index[p]]`; out-of-range indices read 0.
    Gather {
        axis: usize,
    },
    /// `x @ wᵀ` for a weight `w` `[n, k]` stored as integers
    /// ([`QuantFormat`]): inputs `x` (f32, `[.., k]`), the packed codes
    /// (u32, `[n, k / per_word]`) and the scales (a float dtype,
    /// `[n, ⌈k / group⌉]`);
    /// the output is `[.., n]`.
    QuantMatmul {
        format: QuantFormat,
    },
}

impl Prim {
    pub fn name(&self) -> &'static str {
        match self {
            Prim::Input { .. } => "input",
            Prim::Fill { .. } => "full",
            Prim::Iota { .. } => "arange",
            Prim::Unary(op) => op.name(),
            Prim::Binary(op) => op.name(),
            Prim::Where => "where",
            Prim::Cast { .. } => "cast",
            Prim::Reduce { op, .. } => op.name(),
            Prim::ArgReduce { op, .. } => op.name(),
            Prim::Reshape { .. } => "reshape",
            Prim::Permute { .. } => "permute",
            Prim::Slice { .. } => "slice",
            Prim::Expand { .. } => "expand",
            Prim::Matmul => "matmul",
            Prim::Concat { .. } => "concat",
            Prim::Gather { .. } => "gather",
            Prim::QuantMatmul { .. } => "quant_matmul",
        }
    }

    /// Whether each output element comes from the same element of each
    /// input, all of the output's shape (unary and binary ops, `where`,
    /// casts): what fuses into one elementwise expression.
    pub fn is_elementwise(&self) -> bool {
        match self {
            Prim::Unary(_) | Prim::Binary(_) | Prim::Where | Prim::Cast { .. } => true,
            Prim::Input { .. }
            | Prim::Fill { .. }
            | Prim::Iota { .. }
            | Prim::Reduce { .. }
            | Prim::ArgReduce { .. }
            | Prim::Reshape { .. }
            | Prim::Permute { .. }
            | Prim::Slice { .. }
            | Prim::Expand { .. }
            | Prim::Matmul
            | Prim::Concat { .. }
            | Prim::Gather { .. }
            | Prim::QuantMatmul { .. } => false,
        }
    }
}

/// What a node produces: its shape and dtype.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TypeInfo {
    pub shape: Shape,
    pub dtype: DType,
}
