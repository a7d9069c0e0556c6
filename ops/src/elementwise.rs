//! Elementwise ops with NumPy broadcasting.

use crate::Tensor;
use crate::tensor::composite;
use kiln_core::error::dtype_mismatch;
use kiln_core::ir::{BinaryOp, UnaryOp};
use kiln_core::shape::broadcast_shapes;
use kiln_core::{DType, Prim, Result};

macro_rules! unary_ops {
    ($($name:ident => $op:ident, $doc:literal;)*) => {
        impl Tensor {
            $(#[doc = $doc] pub fn $name(&self) -> Result<Tensor> { self.unary(UnaryOp::$op) })*
        }
    };
}
unary_ops!(
    neg => Neg, "`-x`, elementwise (floats and i32; also the operator `-x`).";
    abs => Abs, "`|x|`, elementwise (floats, i32, u32).";
    exp => Exp, "`e^x`, elementwise (floats).";
    log => Log, "The natural logarithm `ln x`, elementwise (floats; `-inf` at 0, NaN below).";
    sqrt => Sqrt, "`√x`, elementwise (floats; NaN below 0).";
    rsqrt => Rsqrt, "`1/√x`, elementwise (floats).";
    sin => Sin, "`sin x` (radians), elementwise (floats).";
    cos => Cos, "`cos x` (radians), elementwise (floats).";
    tanh => Tanh, "`tanh x`, elementwise (floats).";
    sigmoid => Sigmoid, "`1 / (1 + e^-x)`, elementwise (floats).";
    relu => Relu, "`max(x, 0)`, elementwise (floats, i32, u32).";
    gelu => Gelu, "GELU, tanh approximation: `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`, as GPT-2 \
                   and `jax.nn.gelu(approximate=True)` (floats).";
    floor => Floor, "`⌊x⌋`, elementwise (floats; the result stays float).";
    round => Round, "`x` rounded to the nearest integer, halves to even as NumPy (floats; stays float).";
    logical_not => Not, "`!x`, elementwise (bool).";
);

macro_rules! binary_ops {
    ($($name:ident => $op:ident, $doc:literal;)*) => {
        impl Tensor {
            $(
                #[doc = $doc]
                #[doc = ""]
                #[doc = "Both operands have one dtype and broadcast together (NumPy's rules)."]
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> { self.binary(BinaryOp::$op, other) }
            )*
        }
    };
}
binary_ops!(
    add => Add, "`self + other`, elementwise (floats, i32, u32; also the operator `+`).";
    sub => Sub, "`self - other`, elementwise (floats, i32, u32; also the operator `-`).";
    mul => Mul, "`self · other`, elementwise (floats, i32, u32; also the operator `*`).";
    pow => Pow, "`self ^ other`, elementwise (floats; NaN for a negative base with a fractional exponent).";
    maximum => Maximum, "`max(self, other)`, elementwise (floats, i32, u32).";
    minimum => Minimum, "`min(self, other)`, elementwise (floats, i32, u32).";
    eq => Eq, "`self == other` as bool, elementwise (any dtype).";
    ne => Ne, "`self != other` as bool, elementwise (any dtype).";
    lt => Lt, "`self < other` as bool, elementwise (floats, i32, u32).";
    le => Le, "`self <= other` as bool, elementwise (floats, i32, u32).";
    gt => Gt, "`self > other` as bool, elementwise (floats, i32, u32).";
    ge => Ge, "`self >= other` as bool, elementwise (floats, i32, u32).";
    logical_and => And, "`self && other`, elementwise (bool).";
    logical_or => Or, "`self || other`, elementwise (bool).";
    logical_xor => Xor, "`self != other` on bools: exclusive or, elementwise (bool).";
    bitwise_and => BitAnd, "`self & other`, bitwise (i32, u32).";
    bitwise_or => BitOr, "`self | other`, bitwise (i32, u32).";
    bitwise_xor => BitXor, "`self ^ other`, bitwise (i32, u32).";
    shift_left => Shl, "`self << other`, by the low 5 bits of `other` as WGSL (i32, u32).";
    shift_right => Shr, "`self >> other`, by the low 5 bits of `other`, arithmetic for i32 (i32, u32).";
);

impl Tensor {
    /// `op` applied elementwise (the methods above name each op).
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        self.op(Prim::Unary(op), &[])
    }

    /// Broadcast both operands to a common shape, then apply `op`.
    pub fn binary(&self, op: BinaryOp, other: &Tensor) -> Result<Tensor> {
        if self.dtype() != other.dtype() {
            return Err(dtype_mismatch(op.name(), (self.dtype(), self.shape()), (other.dtype(), other.shape())));
        }
        let shape = broadcast_shapes(op.name(), self.shape(), other.shape())?;
        composite(op.name(), || {
            let (a, b) = (self.broadcast_to(&shape)?, other.broadcast_to(&shape)?);
            a.op(Prim::Binary(op), &[&b])
        })
    }

    /// `self / other`, elementwise: true division, broadcast (also the
    /// operator `/`). Integer inputs are divided as f32, as NumPy's `/`.
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        if self.dtype().is_float() {
            return self.binary(BinaryOp::Div, other);
        }
        composite("div", || self.cast(DType::F32)?.binary(BinaryOp::Div, &other.cast(DType::F32)?))
    }

    /// `x²`, elementwise (floats, i32, u32).
    pub fn square(&self) -> Result<Tensor> {
        composite("square", || self.mul(self))
    }

    /// `self + v`, `v` in this tensor's dtype (also `&x + v`).
    pub fn add_scalar(&self, v: f64) -> Result<Tensor> {
        composite("add_scalar", || self.add(&self.scalar_like(v)?))
    }
    /// `self - v`, `v` in this tensor's dtype (also `&x - v`).
    pub fn sub_scalar(&self, v: f64) -> Result<Tensor> {
        composite("sub_scalar", || self.sub(&self.scalar_like(v)?))
    }
    /// `self · v`, `v` in this tensor's dtype (also `&x * v`).
    pub fn mul_scalar(&self, v: f64) -> Result<Tensor> {
        composite("mul_scalar", || self.mul(&self.scalar_like(v)?))
    }
    /// `self / v` as [`Tensor::div`] (also `&x / v`).
    pub fn div_scalar(&self, v: f64) -> Result<Tensor> {
        composite("div_scalar", || self.div(&self.scalar_like(v)?))
    }
    /// `self ^ v`, `v` in this tensor's dtype (floats).
    pub fn pow_scalar(&self, v: f64) -> Result<Tensor> {
        composite("pow_scalar", || self.pow(&self.scalar_like(v)?))
    }

    /// `cond ? a : b` elementwise, all three broadcast together.
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        if a.dtype() != b.dtype() {
            return Err(dtype_mismatch("where", (a.dtype(), a.shape()), (b.dtype(), b.shape())));
        }
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
