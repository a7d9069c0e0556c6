//! The vjp rule of every primitive: one exhaustive `match` over `Prim` (and
//! over its op enums), so a new primitive does not compile until it has a
//! rule or an explicit "not differentiable" arm.
//!
//! Each rule maps the cotangent `g` of a node's output `y` to cotangents of
//! its inputs `x`, built from ordinary differentiable ops so that the
//! backward graph can be differentiated again. `None` means zero (or not
//! differentiable); a rule skips inputs whose `wants` is false.
//!
//! Subgradient conventions (where the derivative does not exist):
//! relu'(0) = 0; abs'(0) = 0 (sign); floor and round have derivative 0;
//! maximum/minimum split a tie evenly (½ each); max/min reductions split
//! `g` evenly among the tied extreme elements; `where` sends all of `g` to
//! the selected branch and exactly 0 to the other.

use kiln_core::ir::{BinaryOp, ReduceOp, UnaryOp};
use kiln_core::{DType, Prim, QuantFormat, Result};
use kiln_ops::Tensor;

type Cotangents = Vec<Option<Tensor>>;

/// Build a cotangent only if the input wants one.
fn want(wants: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if wants { f().map(Some) } else { Ok(None) }
}

/// The cotangents of `x` for the node `prim(x) = y` with output cotangent `g`.
pub(crate) fn vjp(prim: &Prim, x: &[Tensor], y: &Tensor, g: &Tensor, wants: &[bool]) -> Result<Cotangents> {
    let w = |i: usize| wants[i];
    let shape = |i: usize| x[i].shape().to_vec();
    match prim {
        Prim::Input { .. } | Prim::Fill { .. } | Prim::Iota { .. } => Ok(vec![]),
        Prim::Unary(op) => Ok(vec![if w(0) { unary(*op, &x[0], y, g)? } else { None }]),
        Prim::Binary(op) => binary(*op, &x[0], &x[1], y, g, wants),
        Prim::Where => {
            let zero = g.scalar_like(0.0)?;
            Ok(vec![
                None,
                want(w(1), || Tensor::where_cond(&x[0], g, &zero))?,
                want(w(2), || Tensor::where_cond(&x[0], &zero, g))?,
            ])
        }
        // Only float → float casts carry a gradient (f32 ↔ f16).
        Prim::Cast { to } if to.is_float() && x[0].dtype().is_float() => Ok(vec![want(w(0), || g.cast(x[0].dtype()))?]),
        Prim::Cast { .. } => Ok(vec![None]),
        Prim::Reduce { op, axes, keepdim } => Ok(vec![want(w(0), || reduce(*op, axes, *keepdim, &x[0], y, g))?]),
        Prim::ArgReduce { .. } => Ok(vec![None]),
        Prim::Reshape { .. } => {
            let dims: Vec<isize> = shape(0).iter().map(|&d| d as isize).collect();
            Ok(vec![want(w(0), || g.reshape(&dims))?])
        }
        Prim::Permute { perm } => {
            let mut inverse = vec![0isize; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i as isize;
            }
            Ok(vec![want(w(0), || g.permute(&inverse))?])
        }
        Prim::Slice { specs } => Ok(vec![want(w(0), || g.unslice(specs, &shape(0)))?]),
        Prim::Expand { .. } => Ok(vec![want(w(0), || g.sum_to_shape(&shape(0)))?]),
        // [.., M, K] @ [.., K, N]: batch dims are equal (ops inserts Expand).
        Prim::Matmul => Ok(vec![want(w(0), || g.matmul(&x[1].t()?))?, want(w(1), || x[0].t()?.matmul(g))?]),
        Prim::Concat { axis } => {
            let mut start = 0;
            let mut out = Vec::with_capacity(x.len());
            for (i, part) in x.iter().enumerate() {
                let len = part.shape()[*axis];
                out.push(want(w(i), || g.narrow(*axis as isize, start, len))?);
                start += len;
            }
            Ok(out)
        }
        // A deterministic scatter-add; out-of-range indices read 0 forward,
        // so they receive nothing backward.
        Prim::Gather { axis } => Ok(vec![want(w(0), || g.scatter_add(*axis, &x[1], &shape(0)))?, None]),
        // y = x @ wᵀ with w = scale · code: x gets g @ w; each scale the sum
        // of g · x · code over its group (the codes are integers).
        // x may be int8 codes (u32, four per word): integers, so no dx.
        Prim::QuantMatmul { format } => {
            let (codes, scales) = (&x[1], &x[2]);
            let dx = want(w(0), || g.matmul(&Tensor::dequantize(codes, scales, *format)?))?;
            let dscales = want(w(2), || {
                let n = codes.shape()[0] as isize;
                let rows = x[0].reshape(&[-1, *shape(0).last().expect("rank ≥ 1") as isize])?;
                let x_rows = match x[0].dtype() {
                    DType::U32 => {
                        let ones = Tensor::ones(x[0].device(), &[rows.shape()[0], 1], DType::F32)?;
                        Tensor::dequantize(&rows, &ones, QuantFormat::INT8)?
                    }
                    _ => rows,
                };
                let per_product = g.reshape(&[-1, n])?.t()?.matmul(&x_rows)?;
                let unit = Tensor::dequantize(codes, &scales.ones_like()?, *format)?;
                per_product.mul(&unit)?.per_group(*format)?.sum(&[-1], false)?.cast(scales.dtype())
            })?;
            Ok(vec![dx, None, dscales])
        }
    }
}

/// A bool mask as 0/1 in `dtype`.
fn mask(m: &Tensor, dtype: DType) -> Result<Tensor> {
    m.cast(dtype)
}

/// `None` for ops whose derivative is zero almost everywhere (or that are
/// not defined on floats).
fn unary(op: UnaryOp, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Option<Tensor>> {
    let dt = g.dtype();
    let d = match op {
        UnaryOp::Neg => return g.neg().map(Some),
        UnaryOp::Abs => mask(&x.gt(&x.scalar_like(0.0)?)?, dt)?.sub(&mask(&x.lt(&x.scalar_like(0.0)?)?, dt)?)?,
        UnaryOp::Exp => y.clone(),
        UnaryOp::Log => return g.div(x).map(Some),
        UnaryOp::Sqrt => return g.div(&y.mul_scalar(2.0)?).map(Some),
        UnaryOp::Rsqrt => y.mul(y)?.mul(y)?.mul_scalar(-0.5)?,
        UnaryOp::Sin => x.cos()?,
        UnaryOp::Cos => x.sin()?.neg()?,
        UnaryOp::Tanh => y.mul(y)?.neg()?.add_scalar(1.0)?,
        UnaryOp::Sigmoid => y.mul(&y.neg()?.add_scalar(1.0)?)?,
        UnaryOp::Relu => mask(&x.gt(&x.scalar_like(0.0)?)?, dt)?,
        UnaryOp::Gelu => gelu_derivative(x)?,
        UnaryOp::Floor | UnaryOp::Round | UnaryOp::Not => return Ok(None),
    };
    g.mul(&d).map(Some)
}

/// d/dx of the tanh approximation 0.5·x·(1 + tanh(u)), u = c·(x + k·x³).
fn gelu_derivative(x: &Tensor) -> Result<Tensor> {
    let (c, k) = ((2.0 / std::f64::consts::PI).sqrt(), 0.044715);
    let x2 = x.mul(x)?;
    let t = x.mul(&x2.mul_scalar(k)?.add_scalar(1.0)?)?.mul_scalar(c)?.tanh()?;
    let du = x2.mul_scalar(3.0 * k)?.add_scalar(1.0)?.mul_scalar(c)?;
    let sech2 = t.mul(&t)?.neg()?.add_scalar(1.0)?;
    t.add_scalar(1.0)?.mul_scalar(0.5)?.add(&x.mul(&sech2)?.mul(&du)?.mul_scalar(0.5)?)
}

fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, y: &Tensor, g: &Tensor, wants: &[bool]) -> Result<Cotangents> {
    let dt = g.dtype();
    let (wa, wb) = (wants[0], wants[1]);
    let pair = |ga: Option<Tensor>, gb: Option<Tensor>| Ok(vec![ga, gb]);
    match op {
        BinaryOp::Add => pair(want(wa, || Ok(g.clone()))?, want(wb, || Ok(g.clone()))?),
        BinaryOp::Sub => pair(want(wa, || Ok(g.clone()))?, want(wb, || g.neg())?),
        BinaryOp::Mul => pair(want(wa, || g.mul(b))?, want(wb, || g.mul(a))?),
        BinaryOp::Div => pair(want(wa, || g.div(b))?, want(wb, || g.mul(y)?.div(b)?.neg())?),
        // d/db uses log(a) with log(0) taken as 0 (as JAX), and the zero
        // replaced before the log so that its own derivative stays finite.
        BinaryOp::Pow => pair(
            want(wa, || g.mul(b)?.mul(&a.pow(&b.sub_scalar(1.0)?)?))?,
            want(wb, || {
                let at_zero = a.eq(&a.scalar_like(0.0)?)?;
                let safe = Tensor::where_cond(&at_zero, &a.scalar_like(1.0)?, a)?;
                g.mul(y)?.mul(&safe.log()?)
            })?,
        ),
        // A tie sends half of g to each side.
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let (a_wins, b_wins) = if op == BinaryOp::Maximum { (a.gt(b)?, a.lt(b)?) } else { (a.lt(b)?, a.gt(b)?) };
            let half_tie = mask(&a.eq(b)?, dt)?.mul_scalar(0.5)?;
            pair(
                want(wa, || g.mul(&mask(&a_wins, dt)?.add(&half_tie)?))?,
                want(wb, || g.mul(&mask(&b_wins, dt)?.add(&half_tie)?))?,
            )
        }
        // Bool results carry no gradient.
        BinaryOp::Eq
        | BinaryOp::Ne
        | BinaryOp::Lt
        | BinaryOp::Le
        | BinaryOp::Gt
        | BinaryOp::Ge
        | BinaryOp::And
        | BinaryOp::Or
        | BinaryOp::Xor
        | BinaryOp::BitAnd
        | BinaryOp::BitOr
        | BinaryOp::BitXor
        | BinaryOp::Shl
        | BinaryOp::Shr => pair(None, None),
    }
}

fn reduce(op: ReduceOp, axes: &[usize], keepdim: bool, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    let shape = x.shape();
    let gb = g.unreduce(axes, keepdim, shape)?;
    let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
    let dt = g.dtype();
    match op {
        ReduceOp::Sum => Ok(gb),
        // Ties split g evenly among the extreme elements.
        ReduceOp::Max | ReduceOp::Min => {
            let hit = mask(&x.eq(&y.unreduce(axes, keepdim, shape)?)?, dt)?;
            gb.mul(&hit)?.div(&hit.sum(&ax, true)?)
        }
        // The product of the other elements, exact with zeros: with no zero
        // it is p / x; with one zero, the zero's entry gets the product of
        // the rest and the others 0; with two or more zeros, all 0.
        ReduceOp::Prod => {
            let zero = x.scalar_like(0.0)?;
            let is_zero = x.eq(&zero)?;
            let nonzero = Tensor::where_cond(&is_zero, &x.scalar_like(1.0)?, x)?;
            let p = nonzero.prod(&ax, true)?;
            let zeros = mask(&is_zero, dt)?.sum(&ax, true)?;
            let no_zero = zeros.eq(&zeros.scalar_like(0.0)?)?;
            let one_zero = zeros.eq(&zeros.scalar_like(1.0)?)?;
            let at_zero = Tensor::where_cond(&one_zero, &p, &zero)?;
            let elsewhere = Tensor::where_cond(&no_zero, &p.div(&nonzero)?, &zero)?;
            gb.mul(&Tensor::where_cond(&is_zero, &at_zero, &elsewhere)?)
        }
    }
}
