//! `+ - * /` and unary `-` on tensors, returning `Result<Tensor>` as the
//! methods do: `(&a + &b)?`, `(x.matmul(&w) + &b)?.relu()?`, `(&x * 2.0)?`.
//! Each is its method (`add`, `sub`, `mul`, `div`, `neg`), with NumPy
//! broadcasting, and its errors name that method and both shapes. A scalar
//! (`f64`) takes the tensor's dtype. Rust has no `@`: matmul is a method.
//!
//! Left operands: a `Tensor`, a `&Tensor`, an `f64`, or an op's
//! `Result<Tensor>` (whose error passes through); the right operand of a
//! `Result` must be a tensor (Rust's orphan rules allow no more).

use crate::Tensor;
use kiln_core::Result;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// A right operand of a tensor operator: a tensor, a reference to one, an
/// op's result, or an `f64` scalar of the left operand's dtype.
pub trait Operand {
    /// The operand as a tensor; `like` is the other operand.
    fn into_operand(self, like: &Tensor) -> Result<Tensor>;
}

impl Operand for Tensor {
    fn into_operand(self, _: &Tensor) -> Result<Tensor> {
        Ok(self)
    }
}

impl Operand for &Tensor {
    fn into_operand(self, _: &Tensor) -> Result<Tensor> {
        Ok(self.clone())
    }
}

impl Operand for Result<Tensor> {
    fn into_operand(self, _: &Tensor) -> Result<Tensor> {
        self
    }
}

impl Operand for f64 {
    fn into_operand(self, like: &Tensor) -> Result<Tensor> {
        like.scalar_like(self)
    }
}

macro_rules! binary_operator {
    ($($Trait:ident $method:ident),*) => {$(
        impl<R: Operand> $Trait<R> for &Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: R) -> Result<Tensor> {
                Tensor::$method(self, &rhs.into_operand(self)?)
            }
        }
        impl<R: Operand> $Trait<R> for Tensor {
            type Output = Result<Tensor>;
            fn $method(self, rhs: R) -> Result<Tensor> {
                $Trait::$method(&self, rhs)
            }
        }
        impl $Trait<&Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(&self?, rhs)
            }
        }
        impl $Trait<Tensor> for Result<Tensor> {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(&self?, &rhs)
            }
        }
        impl $Trait<&Tensor> for f64 {
            type Output = Result<Tensor>;
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(&rhs.scalar_like(self)?, rhs)
            }
        }
        impl $Trait<Tensor> for f64 {
            type Output = Result<Tensor>;
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                $Trait::$method(self, &rhs)
            }
        }
    )*};
}
binary_operator!(Add add, Sub sub, Mul mul, Div div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}
