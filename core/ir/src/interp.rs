//! The CPU reference interpreter: evaluates any graph in f64. It is the oracle
//! of every test, so it is written for obviousness, not speed. Values are
//! stored as their dtype would hold them (`DType::store`): integers wrap and
//! f16 rounds, while f32 keeps f64 precision.

use crate::dtype::DType;
use crate::error::{KilnError, Result};
use crate::ir::{ArgOp, BinaryOp, Node, Prim, Realized, ReduceOp, UnaryOp};
use crate::quant::QuantFormat;
use crate::shape::{Layout, numel, unravel};
use std::sync::Arc;

/// A contiguous row-major array on the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostArray {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl HostArray {
    pub fn new(dtype: DType, shape: Vec<usize>, data: Vec<f64>) -> HostArray {
        let data = data.into_iter().map(|v| dtype.store(v)).collect();
        HostArray { dtype, shape, data }
    }

    /// Read the elements of `layout` (a view into this array's data).
    pub fn view(&self, layout: &Layout) -> Vec<f64> {
        let mut out = Vec::with_capacity(layout.numel());
        for_each_coord(&layout.shape, |_, coords| {
            let at: isize = coords.iter().zip(&layout.strides).map(|(&c, &s)| c as isize * s).sum();
            out.push(self.data[(layout.offset as isize + at) as usize]);
        });
        out
    }
}

/// Call `f(flat_index, coords)` for every element of `shape` in row-major
/// order, stepping the coordinates like an odometer (no allocation each).
fn for_each_coord(shape: &[usize], mut f: impl FnMut(usize, &[usize])) {
    let mut coords = vec![0; shape.len()];
    for i in 0..numel(shape) {
        f(i, &coords);
        for d in (0..shape.len()).rev() {
            coords[d] += 1;
            if coords[d] < shape[d] {
                break;
            }
            coords[d] = 0;
        }
    }
}

/// Evaluate `roots` (and every unrealized node they need) on the CPU.
pub fn realize(roots: &[Node]) -> Result<()> {
    for node in Node::topo_unrealized(roots) {
        let inputs = node
            .inputs()
            .iter()
            .map(|n| match n.realized_value() {
                Some(Realized::Host(h)) => Ok(h),
                _ => Err(KilnError::Invalid {
                    op: node.prim().name(),
                    detail: "an input was computed on a GPU device; the CPU reference needs CPU tensors".into(),
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        let out = eval(&node, &inputs);
        node.set_realized(Realized::Host(Arc::new(out)));
    }
    Ok(())
}

fn eval(node: &Node, x: &[Arc<HostArray>]) -> HostArray {
    let info = node.info();
    let (shape, dtype) = (info.shape.clone(), info.dtype);
    let n = numel(&shape);
    let data: Vec<f64> = match node.prim() {
        Prim::Input { .. } => unreachable!("input nodes are created realized"),
        Prim::Fill { value, .. } => vec![*value; n],
        Prim::Iota { start, step, .. } => (0..n).map(|i| start + i as f64 * step).collect(),
        Prim::Unary(op) => x[0].data.iter().map(|&v| unary(*op, v)).collect(),
        Prim::Binary(op) => {
            let d = x[0].dtype;
            x[0].data.iter().zip(&x[1].data).map(|(&a, &b)| binary(*op, d, a, b)).collect()
        }
        Prim::Where => (0..n).map(|i| if x[0].data[i] != 0.0 { x[1].data[i] } else { x[2].data[i] }).collect(),
        Prim::Cast { to } => cast(&x[0], *to),
        Prim::Reduce { op, axes, .. } => reduce(&x[0], *op, axes),
        Prim::ArgReduce { op, axis, .. } => arg_reduce(&x[0], *op, *axis),
        Prim::Reshape { .. } => x[0].data.clone(),
        Prim::Permute { perm } => x[0].view(&Layout::contiguous(&x[0].shape).permute(perm)),
        Prim::Slice { specs } => x[0].view(&Layout::contiguous(&x[0].shape).slice(specs)),
        Prim::Expand { shape } => x[0].view(&Layout::contiguous(&x[0].shape).expand(shape)),
        Prim::Matmul => matmul(&x[0], &x[1]),
        Prim::Concat { axis } => concat(x, *axis, &shape),
        Prim::Gather { axis } => gather(&x[0], &x[1], *axis),
        Prim::QuantMatmul { format } => quant_matmul(*format, &x[0], &x[1], &x[2]),
    };
    HostArray::new(dtype, shape, data)
}

pub fn gelu(v: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
}

fn unary(op: UnaryOp, v: f64) -> f64 {
    match op {
        UnaryOp::Neg => -v,
        UnaryOp::Abs => v.abs(),
        UnaryOp::Exp => v.exp(),
        UnaryOp::Log => v.ln(),
        UnaryOp::Sqrt => v.sqrt(),
        UnaryOp::Rsqrt => 1.0 / v.sqrt(),
        UnaryOp::Sin => v.sin(),
        UnaryOp::Cos => v.cos(),
        UnaryOp::Tanh => v.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-v).exp()),
        UnaryOp::Relu => v.max(0.0),
        UnaryOp::Gelu => gelu(v),
        UnaryOp::Floor => v.floor(),
        UnaryOp::Round => v.round_ties_even(),
        UnaryOp::Not => (v == 0.0) as u8 as f64,
    }
}

fn binary(op: BinaryOp, d: DType, a: f64, b: f64) -> f64 {
    let flag = |c: bool| c as u8 as f64;
    if d.is_int()
        && let Some(r) = int_binary(op, d, a as i64 as u32, b as i64 as u32)
    {
        return r;
    }
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        BinaryOp::Maximum => a.max(b),
        BinaryOp::Minimum => a.min(b),
        BinaryOp::Eq => flag(a == b),
        BinaryOp::Ne => flag(a != b),
        BinaryOp::Lt => flag(a < b),
        BinaryOp::Le => flag(a <= b),
        BinaryOp::Gt => flag(a > b),
        BinaryOp::Ge => flag(a >= b),
        BinaryOp::And => flag(a != 0.0 && b != 0.0),
        BinaryOp::Or => flag(a != 0.0 || b != 0.0),
        BinaryOp::Xor => flag((a != 0.0) != (b != 0.0)),
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => {
            unreachable!("bitwise ops take integers (checked by inference)")
        }
    }
}

/// Integer arithmetic and bit ops on the 32-bit patterns, exactly (f64
/// would lose the low bits of a product): results wrap mod 2^32 as WGSL's.
/// `None` for ops whose f64 evaluation is already exact.
fn int_binary(op: BinaryOp, d: DType, x: u32, y: u32) -> Option<f64> {
    let bits = match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::BitAnd => x & y,
        BinaryOp::BitOr => x | y,
        BinaryOp::BitXor => x ^ y,
        BinaryOp::Shl => x << (y & 31),
        BinaryOp::Shr if d == DType::I32 => ((x as i32) >> (y & 31)) as u32,
        BinaryOp::Shr => x >> (y & 31),
        BinaryOp::Div
        | BinaryOp::Pow
        | BinaryOp::Maximum
        | BinaryOp::Minimum
        | BinaryOp::Eq
        | BinaryOp::Ne
        | BinaryOp::Lt
        | BinaryOp::Le
        | BinaryOp::Gt
        | BinaryOp::Ge
        | BinaryOp::And
        | BinaryOp::Or
        | BinaryOp::Xor => return None,
    };
    Some(if d == DType::I32 { bits as i32 as f64 } else { bits as f64 })
}

/// Float to integer truncates toward zero and saturates (NaN → 0), as
/// WGSL's conversions do; integer to integer wraps (in `DType::store`);
/// between floats NaN stays NaN, and to bool it is true (nonzero).
fn cast(x: &HostArray, to: DType) -> Vec<f64> {
    let saturate = |v: f64| match to {
        _ if v.is_nan() && to.is_int() => 0.0,
        DType::I32 => v.trunc().clamp(i32::MIN as f64, i32::MAX as f64),
        DType::U32 => v.trunc().clamp(0.0, u32::MAX as f64),
        _ => v,
    };
    x.data.iter().map(|&v| if x.dtype.is_float() { saturate(v) } else { v }).collect()
}

/// Split coordinates into (kept index, reduced index) for a reduction.
fn split_index(coords: &[usize], shape: &[usize], axes: &[usize]) -> (usize, usize) {
    let (mut kept, mut red) = (0, 0);
    for (d, (&c, &s)) in coords.iter().zip(shape).enumerate() {
        if axes.contains(&d) {
            red = red * s + c;
        } else {
            kept = kept * s + c;
        }
    }
    (kept, red)
}

fn reduce(x: &HostArray, op: ReduceOp, axes: &[usize]) -> Vec<f64> {
    let kept: usize = x.shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &s)| s).product();
    let init = match op {
        ReduceOp::Sum => 0.0,
        ReduceOp::Prod => 1.0,
        ReduceOp::Max => f64::NEG_INFINITY,
        ReduceOp::Min => f64::INFINITY,
    };
    let mut out = vec![init; kept];
    for_each_coord(&x.shape, |i, coords| {
        let v = x.data[i];
        let (k, _) = split_index(coords, &x.shape, axes);
        out[k] = match op {
            ReduceOp::Sum => out[k] + v,
            ReduceOp::Prod => out[k] * v,
            ReduceOp::Max => out[k].max(v),
            ReduceOp::Min => out[k].min(v),
        };
    });
    out
}

fn arg_reduce(x: &HostArray, op: ArgOp, axis: usize) -> Vec<f64> {
    let kept = numel(&x.shape) / x.shape[axis].max(1);
    let mut best: Vec<Option<(f64, usize)>> = vec![None; kept];
    for_each_coord(&x.shape, |i, coords| {
        let v = x.data[i];
        let (k, r) = split_index(coords, &x.shape, &[axis]);
        let better = match best[k] {
            None => true,
            Some((b, _)) => match op {
                ArgOp::ArgMax => v > b,
                ArgOp::ArgMin => v < b,
            },
        };
        if better {
            best[k] = Some((v, r));
        }
    });
    best.into_iter().map(|b| b.map_or(0.0, |(_, r)| r as f64)).collect()
}

fn matmul(a: &HostArray, b: &HostArray) -> Vec<f64> {
    let r = a.shape.len();
    let (m, k, n) = (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1]);
    let batch: usize = a.shape[..r - 2].iter().product();
    let mut out = vec![0.0; batch * m * n];
    for bi in 0..batch {
        let (ab, bb, ob) = (bi * m * k, bi * k * n, bi * m * n);
        for i in 0..m {
            for j in 0..n {
                out[ob + i * n + j] = (0..k).map(|p| a.data[ab + i * k + p] * b.data[bb + p * n + j]).sum();
            }
        }
    }
    out
}

/// Each output `[row, j]` is the sum over k of `x[row, k] · scale · code`.
fn quant_matmul(format: QuantFormat, x: &HostArray, codes: &HostArray, scales: &HostArray) -> Vec<f64> {
    // x packed as int8 codes (u32 words): its values are the codes.
    let (packed_x, per_word) = (x.dtype == DType::U32, QuantFormat::INT8.per_word());
    let x_values: Vec<f64> = if packed_x {
        let code = |i: usize| QuantFormat::INT8.code(x.data[i / per_word] as u32, i % per_word) as f64;
        (0..x.data.len() * per_word).map(code).collect()
    } else {
        x.data.clone()
    };
    let k = x.shape.last().expect("inference checked the rank") * if packed_x { per_word } else { 1 };
    let (n, rows) = (codes.shape[0], x_values.len() / k);
    let (words, groups, group) = (codes.shape[1], scales.shape[1], format.group_len(k));
    let weight = |j: usize, p: usize| {
        let word = codes.data[j * words + p / format.per_word()] as u32;
        scales.data[j * groups + p / group] * format.code(word, p % format.per_word()) as f64
    };
    let mut out = Vec::with_capacity(rows * n);
    for r in 0..rows {
        out.extend((0..n).map(|j| (0..k).map(|p| x_values[r * k + p] * weight(j, p)).sum::<f64>()));
    }
    out
}

fn concat(x: &[Arc<HostArray>], axis: usize, shape: &[usize]) -> Vec<f64> {
    let mut out = vec![0.0; numel(shape)];
    let out_strides = Layout::contiguous(shape).strides;
    let mut start = 0;
    for part in x {
        for (i, &v) in part.data.iter().enumerate() {
            let mut coords = unravel(i, &part.shape);
            coords[axis] += start;
            let at: isize = coords.iter().zip(&out_strides).map(|(&c, &s)| c as isize * s).sum();
            out[at as usize] = v;
        }
        start += part.shape[axis];
    }
    out
}

fn gather(src: &HostArray, idx: &HostArray, axis: usize) -> Vec<f64> {
    let strides = Layout::contiguous(&src.shape).strides;
    idx.data
        .iter()
        .enumerate()
        .map(|(i, &j)| {
            let mut coords = unravel(i, &idx.shape);
            if j < 0.0 || j as usize >= src.shape[axis] {
                return 0.0;
            }
            coords[axis] = j as usize;
            let at: isize = coords.iter().zip(&strides).map(|(&c, &s)| c as isize * s).sum();
            src.data[at as usize]
        })
        .collect()
}
