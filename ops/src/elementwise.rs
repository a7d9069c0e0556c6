//! Elementwise ops with NumPy broadcasting.

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::ir::{BinaryOp, UnaryOp};
use kiln_core::shape::broadcast_shapes;
use kiln_core::{DType, Prim, Result};

macro_rules! unary_ops {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(pub fn $name(&self) -> Result<Tensor> { self.unary(UnaryOp::$op) })*
        }
    };
}
unary_ops!(
    neg => Neg, abs => Abs, exp => Exp, log => Log, sqrt => Sqrt, rsqrt => Rsqrt, sin => Sin, cos => Cos,
    tanh => Tanh, sigmoid => Sigmoid, relu => Relu, gelu => Gelu, floor => Floor, round => Round,
    logical_not => Not,
);

macro_rules! binary_ops {
    ($($name:ident => $op:ident),* $(,)?) => {
        impl Tensor {
            $(pub fn $name(&self, other: &Tensor) -> Result<Tensor> { self.binary(BinaryOp::$op, other) })*
        }
    };
}
binary_ops!(
    add => Add, sub => Sub, mul => Mul, pow => Pow, maximum => Maximum, minimum => Minimum,
    eq => Eq, ne => Ne, lt => Lt, le => Le, gt => Gt, ge => Ge,
    logical_and => And, logical_or => Or, logical_xor => Xor,
    bitwise_and => BitAnd, bitwise_or => BitOr, bitwise_xor => BitXor, shift_left => Shl, shift_right => Shr,
);

impl Tensor {
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        self.op(Prim::Unary(op), &[])
    }

    /// Broadcast both operands to a common shape, then apply `op`.
    pub fn binary(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        let shape = broadcast_shapes(op.name(), self.shape(), other.shape())?;
        composite(op.name(), || {
            let (a, b) = (self.broadcast_to(&shape)?, other.broadcast_to(&shape)?);
            a.op(Prim::Binary(op), &[&b])
        })
    }

    /// True division. Integer inputs are divided as f32, as NumPy's `/`.
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        if self.dtype().is_float() {
            return self.binary(BinaryOp::Div, other);
        }
        composite("div", || self.cast(DType::F32)?.binary(BinaryOp::Div, &other.cast(DType::F32)?))
    }

    pub fn add_scalar(&self, v: f64) -> Result<Tensor> {
        composite("add_scalar", || self.add(&self.scalar_like(v)?))
    }
    pub fn sub_scalar(&self, v: f64) -> Result<Tensor> {
        composite("sub_scalar", || self.sub(&self.scalar_like(v)?))
    }
    pub fn mul_scalar(&self, v: f64) -> Result<Tensor> {
        composite("mul_scalar", || self.mul(&self.scalar_like(v)?))
    }
    pub fn div_scalar(&self, v: f64) -> Result<Tensor> {
        composite("div_scalar", || self.div(&self.scalar_like(v)?))
    }
    pub fn pow_scalar(&self, v: f64) -> Result<Tensor> {
        composite("pow_scalar", || self.pow(&self.scalar_like(v)?))
    }

    /// `cond ? a : b` elementwise, all three broadcast together.
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let shape = broadcast_shapes("where", cond.shape(), a.shape())?;
        let shape = broadcast_shapes("where", &shape, b.shape())?;
        composite("where", || {
            let (c, a, b) = (cond.broadcast_to(&shape)?, a.broadcast_to(&shape)?, b.broadcast_to(&shape)?);
            c.op(Prim::Where, &[&a, &b])
        })
    }

    /// Convert to `dtype`: floats truncate toward zero and saturate into
    /// integers, i32 ↔ u32 wrap, bool is 0/1.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        self.op(Prim::Cast { to: dtype }, &[])
    }
}
