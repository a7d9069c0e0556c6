//! The fused-op vocabulary: the elementwise operations a kernel computes,
//! over operands of any type. The scheduler's fused values hold them over
//! subexpressions (`Pointwise<Fused>`), lowered bodies over earlier ops
//! (`Pointwise<usize>`), and codegen renders the latter; one enum, one
//! operand traversal, so a new elementwise op is one variant here.

use kiln_ir::ir::{BinaryOp, UnaryOp};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Pointwise<T> {
    Unary(UnaryOp, T),
    Binary(BinaryOp, T, T),
    /// `if cond { x } else { y }`: (cond, x, y).
    Where(T, T, T),
    /// To the dtype of the op that holds it.
    Cast(T),
}

impl<T> Pointwise<T> {
    /// The operands, in order.
    pub fn operands(&self) -> Vec<&T> {
        match self {
            Pointwise::Unary(_, x) | Pointwise::Cast(x) => vec![x],
            Pointwise::Binary(_, x, y) => vec![x, y],
            Pointwise::Where(c, x, y) => vec![c, x, y],
        }
    }

    /// The same op over `f` of each operand; `None` when `f` fails on one.
    pub fn try_map<U>(&self, mut f: impl FnMut(&T) -> Option<U>) -> Option<Pointwise<U>> {
        Some(match self {
            Pointwise::Unary(op, x) => Pointwise::Unary(*op, f(x)?),
            Pointwise::Binary(op, x, y) => Pointwise::Binary(*op, f(x)?, f(y)?),
            Pointwise::Where(c, x, y) => Pointwise::Where(f(c)?, f(x)?, f(y)?),
            Pointwise::Cast(x) => Pointwise::Cast(f(x)?),
        })
    }

    /// The same op over `f` of each operand.
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> Pointwise<U> {
        self.try_map(|x| Some(f(x))).expect("an infallible map")
    }

    /// A short name, for kernel names.
    pub fn name(&self) -> &'static str {
        match self {
            Pointwise::Unary(op, _) => op.name(),
            Pointwise::Binary(op, ..) => op.name(),
            Pointwise::Where(..) => "where",
            Pointwise::Cast(_) => "cast",
        }
    }
}
