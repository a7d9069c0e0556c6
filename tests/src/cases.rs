//! Every conformance case. Inputs come from fixed seeds; sizes include the
//! odd ones (1, 7, 1023, 4097) and 2^24 for reductions (Mesa ends shader
//! loops after 65,535 iterations, so a reduction with a long per-thread
//! loop would come back wrong at that size); broadcast patterns and
//! non-contiguous views (transposes, strided and reversed slices) appear
//! for every op family.

use crate::rng::Rng;
use crate::{Case, Tol};
use kiln::core::ir::{BinaryOp, UnaryOp};
use kiln::prelude::*;

/// A fixed-seed input tensor with values uniform in [lo, hi) (floats) or
/// [lo, hi] (integers and bool).
pub fn input(dev: &Device, seed: u64, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let n: usize = shape.iter().product();
    let values: Vec<f64> = if dtype.is_float() {
        (0..n).map(|_| rng.uniform(lo, hi)).collect()
    } else {
        (0..n).map(|_| rng.int(lo as i64, hi as i64)).collect()
    };
    Tensor::from_f64(dev, &values, shape, dtype)
}

/// A non-contiguous view with `shape`: the transpose of a fresh tensor.
pub fn transposed(dev: &Device, seed: u64, shape: [usize; 2], dtype: DType, lo: f64, hi: f64) -> Result<Tensor> {
    input(dev, seed, &[shape[1], shape[0]], dtype, lo, hi)?.t()
}

struct Suite(Vec<Case>);

impl Suite {
    fn add(
        &mut self,
        op: &'static str,
        detail: impl Into<String>,
        tol: Tol,
        build: impl Fn(&Device) -> Result<Tensor> + Send + Sync + 'static,
    ) {
        self.0.push(Case { op, detail: detail.into(), tol, build: Box::new(build) });
    }
}

pub fn all() -> Vec<Case> {
    let mut s = Suite(Vec::new());
    creation(&mut s);
    unary(&mut s);
    binary(&mut s);
    where_and_cast(&mut s);
    reductions(&mut s);
    matmul(&mut s);
    views(&mut s);
    joins(&mut s);
    softmax(&mut s);
    indexing(&mut s);
    bitwise(&mut s);
    s.0.extend(crate::nn_cases::cases());
    s.0.extend(crate::transformer_cases::cases());
    s.0.extend(crate::quant_cases::cases());
    s.0
}

fn creation(s: &mut Suite) {
    use DType::*;
    s.add("full", "f32 [7, 1023] = 2.5", Tol::EXACT, |d| Tensor::full(d, &[7, 1023], 2.5, F32));
    s.add("full", "i32 [4097] = -3", Tol::EXACT, |d| Tensor::full(d, &[4097], -3.0, I32));
    for dtype in [F16, BF16] {
        s.add("full", format!("{dtype} [1023] = 0.1"), Tol::storage(dtype), move |d| {
            Tensor::full(d, &[1023], 0.1, dtype)
        });
    }
    s.add("full", "bool [7] = true", Tol::EXACT, |d| Tensor::full(d, &[7], 1.0, Bool));
    s.add("zeros", "f32 [1]", Tol::EXACT, |d| Tensor::zeros(d, &[1], F32));
    s.add("ones", "u32 [7, 3]", Tol::EXACT, |d| Tensor::ones(d, &[7, 3], U32));
    s.add("arange", "f32 0.5..100 step 0.25", Tol::F32, |d| Tensor::arange(d, 0.5, 100.0, 0.25, F32));
    s.add("arange", "i32 -7..4097 step 3", Tol::EXACT, |d| Tensor::arange(d, -7.0, 4097.0, 3.0, I32));
    s.add("arange", "f32 10..0 step -0.5", Tol::F32, |d| Tensor::arange(d, 10.0, 0.0, -0.5, F32));
    s.add("eye", "f32 7×5", Tol::EXACT, |d| Tensor::eye(d, 7, 5, F32));
    let inputs = [(F32, vec![1023]), (F16, vec![1023]), (BF16, vec![1023]), (Bool, vec![7]), (U32, vec![4097])];
    for (dtype, shape) in inputs.into_iter().chain([(I32, vec![7, 7])]) {
        let (lo, hi) = if dtype == Bool { (0.0, 1.0) } else { (-100.0, 100.0) };
        let (lo, hi) = if dtype == U32 { (0.0, 4e9) } else { (lo, hi) };
        s.add("from_slice", format!("{dtype} {shape:?}"), Tol::EXACT, move |d| input(d, 1, &shape, dtype, lo, hi));
    }
    s.add("empty", "add of [0, 5] tensors", Tol::EXACT, |d| {
        input(d, 2, &[0, 5], F32, -1.0, 1.0)?.add(&input(d, 3, &[5], F32, -1.0, 1.0)?)
    });
}

/// Input range where each unary op is defined and well conditioned.
fn unary_domain(op: UnaryOp) -> (f64, f64) {
    match op {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.01, 10.0),
        UnaryOp::Exp => (-10.0, 10.0),
        UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Gelu => (-20.0, 20.0),
        // WGSL bounds sin and cos errors only on [-π, π].
        UnaryOp::Sin | UnaryOp::Cos => (-std::f64::consts::PI, std::f64::consts::PI),
        _ => (-5.0, 5.0),
    }
}

fn unary_tol(op: UnaryOp) -> Tol {
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Floor | UnaryOp::Round | UnaryOp::Not => Tol::EXACT,
        UnaryOp::Sqrt => Tol::F32,
        // The WGSL spec allows an absolute error of 2^-11 (SwiftShader uses it).
        UnaryOp::Sin | UnaryOp::Cos => Tol { abs: 1.0 / 2048.0, rel: 0.0 },
        _ => Tol::MATH,
    }
}

fn unary(s: &mut Suite) {
    for op in UnaryOp::ALL.into_iter().filter(|&op| op != UnaryOp::Not) {
        let (lo, hi) = unary_domain(op);
        let tol = unary_tol(op);
        for n in [1usize, 7, 1023, 4097] {
            s.add(op.name(), format!("f32 [{n}]"), tol, move |d| {
                input(d, 10 + n as u64, &[n], DType::F32, lo, hi)?.unary(op)
            });
        }
        s.add(op.name(), "f32 [33, 65] transposed view", tol, move |d| {
            transposed(d, 11, [33, 65], DType::F32, lo, hi)?.unary(op)
        });
        for dtype in [DType::F16, DType::BF16] {
            s.add(op.name(), format!("{dtype} [1023]"), tol.max(Tol::storage(dtype)), move |d| {
                input(d, 12, &[1023], dtype, lo, hi)?.unary(op)
            });
        }
    }
    s.add("round", "f32 exact halves (ties to even)", Tol::EXACT, |d| {
        input(d, 13, &[1023], DType::I32, -20.0, 20.0)?.cast(DType::F32)?.mul_scalar(0.5)?.round()
    });
    for op in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu] {
        s.add(op.name(), "i32 [1023]", Tol::EXACT, move |d| {
            input(d, 14, &[1023], DType::I32, -1000.0, 1000.0)?.unary(op)
        });
    }
    s.add("abs", "u32 [7]", Tol::EXACT, |d| input(d, 15, &[7], DType::U32, 0.0, 1e9)?.abs());
    s.add("square", "f32 [1023]", Tol::F32, |d| input(d, 18, &[1023], DType::F32, -3.0, 3.0)?.square());
    s.add("square", "i32 [1023]", Tol::EXACT, |d| input(d, 19, &[1023], DType::I32, -1000.0, 1000.0)?.square());
    s.add("logical_not", "bool [1023]", Tol::EXACT, |d| input(d, 16, &[1023], DType::Bool, 0.0, 1.0)?.logical_not());
    s.add("logical_not", "bool [33, 65] transposed view", Tol::EXACT, |d| {
        transposed(d, 17, [33, 65], DType::Bool, 0.0, 1.0)?.logical_not()
    });
}

fn binary_tol(op: BinaryOp) -> Tol {
    match op {
        BinaryOp::Div => Tol::F32,
        BinaryOp::Pow => Tol::MATH,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => Tol::F32,
        _ => Tol::EXACT,
    }
}

fn binary(s: &mut Suite) {
    // Broadcast patterns: row × column, tensor × scalar, rank-3 × rank-2,
    // and equal shapes with one operand a transposed view.
    let patterns: [(&str, Vec<usize>, Vec<usize>); 4] = [
        ("[7, 1] ⊕ [1, 1023]", vec![7, 1], vec![1, 1023]),
        ("[4097] ⊕ []", vec![4097], vec![]),
        ("[3, 1, 5] ⊕ [4, 1]", vec![3, 1, 5], vec![4, 1]),
        ("[1] ⊕ [1]", vec![1], vec![1]),
    ];
    for op in BinaryOp::ALL.into_iter().filter(|op| !op.is_bitwise()) {
        let tol = binary_tol(op);
        let dtype = if op.is_logical() { DType::Bool } else { DType::F32 };
        // Comparisons draw small integers so that ties occur.
        let (lo, hi) = match op {
            _ if op.is_logical() => (0.0, 1.0),
            BinaryOp::Pow => (0.1, 3.0),
            BinaryOp::Div => (0.5, 4.0),
            _ if op.is_comparison() => (-3.0, 3.0),
            _ => (-5.0, 5.0),
        };
        let round = op.is_comparison();
        let make = move |d: &Device, seed: u64, shape: &[usize]| -> Result<Tensor> {
            let t = input(d, seed, shape, dtype, lo, hi)?;
            if round { t.round() } else { Ok(t) }
        };
        for (name, a, b) in patterns.clone() {
            s.add(op.name(), format!("{dtype} {name}"), tol, move |d| make(d, 20, &a)?.binary(op, &make(d, 21, &b)?));
        }
        s.add(op.name(), format!("{dtype} [65, 33]ᵀ ⊕ [33, 65]"), tol, move |d| {
            let a = input(d, 22, &[65, 33], dtype, lo, hi)?;
            let a = if round { a.round()? } else { a };
            a.t()?.binary(op, &make(d, 23, &[33, 65])?)
        });
        // Packed operands: each op on f16 (computed in f16 where the adapter
        // has it) and bf16, rounded to their storage.
        let packed_dtypes = if op.is_logical() { vec![] } else { vec![DType::F16, DType::BF16] };
        for packed in packed_dtypes {
            let tol = if op.is_comparison() || tol == Tol::EXACT { Tol::EXACT } else { Tol::storage(packed) };
            s.add(op.name(), format!("{packed} [7, 1] ⊕ [1, 1023]"), tol, move |d| {
                let (a, b) = (input(d, 30, &[7, 1], packed, lo, hi)?, input(d, 31, &[1, 1023], packed, lo, hi)?);
                let (a, b) = if round { (a.round()?, b.round()?) } else { (a, b) };
                a.binary(op, &b)
            });
        }
        let int_ok = !op.is_logical() && op != BinaryOp::Pow;
        // Integers (u32 subtraction wraps below zero).
        let ints = if int_ok { vec![(DType::I32, -50.0), (DType::U32, 0.0)] } else { vec![] };
        for (int, lo) in ints {
            // Division of integers is true division (f32), as NumPy's `/`.
            let build = move |d: &Device| -> Result<Tensor> {
                let a = input(d, 24, &[1023], int, lo, 50.0)?;
                let b = input(d, 25, &[1023], int, 1.0, 9.0)?;
                if op == BinaryOp::Div { a.div(&b) } else { a.binary(op, &b) }
            };
            let tol = if op == BinaryOp::Div { Tol::F32 } else { Tol::EXACT };
            s.add(op.name(), format!("{int} [1023] ⊕ [1023]"), tol, build);
        }
        if matches!(op, BinaryOp::Eq | BinaryOp::Ne) {
            s.add(op.name(), "bool [7, 1] ⊕ [1, 1023]", Tol::EXACT, move |d| {
                input(d, 32, &[7, 1], DType::Bool, 0.0, 1.0)?
                    .binary(op, &input(d, 33, &[1, 1023], DType::Bool, 0.0, 1.0)?)
            });
        }
    }
    s.add("pow", "negative bases, integer exponents", Tol::MATH, |d| {
        let a = input(d, 26, &[1023], DType::F32, -3.0, 3.0)?;
        let b = input(d, 27, &[1023], DType::I32, -3.0, 4.0)?.cast(DType::F32)?;
        a.pow(&b)
    });
    s.add("add", "u32 wrapping", Tol::EXACT, |d| {
        input(d, 28, &[1023], DType::U32, 3e9, 4e9)?.add(&input(d, 29, &[1023], DType::U32, 1e9, 4e9)?)
    });
}

/// Bitwise ops on i32 and u32: broadcasts, a transposed view, and shift
/// amounts past 31 and negative (their low 5 bits count).
fn bitwise(s: &mut Suite) {
    for op in BinaryOp::ALL.into_iter().filter(|op| op.is_bitwise()) {
        let shift = matches!(op, BinaryOp::Shl | BinaryOp::Shr);
        for dtype in [DType::U32, DType::I32] {
            let (lo, hi) = if dtype == DType::U32 { (0.0, 4.29e9) } else { (-2.1e9, 2.1e9) };
            let (blo, bhi) = match (shift, dtype) {
                (true, DType::U32) => (0.0, 40.0),
                (true, _) => (-40.0, 40.0),
                _ => (lo, hi),
            };
            s.add(op.name(), format!("{dtype} [7, 1] ⊕ [1, 1023]"), Tol::EXACT, move |d| {
                input(d, 50, &[7, 1], dtype, lo, hi)?.binary(op, &input(d, 51, &[1, 1023], dtype, blo, bhi)?)
            });
            s.add(op.name(), format!("{dtype} [65, 33]ᵀ ⊕ [33, 65]"), Tol::EXACT, move |d| {
                transposed(d, 52, [33, 65], dtype, lo, hi)?.binary(op, &input(d, 53, &[33, 65], dtype, blo, bhi)?)
            });
        }
    }
    s.add("mul", "u32 wrapping products of large values", Tol::EXACT, |d| {
        input(d, 54, &[4097], DType::U32, 1e5, 4.29e9)?.mul(&input(d, 55, &[4097], DType::U32, 1e5, 4.29e9)?)
    });
    s.add("mul", "i32 wrapping products of large values", Tol::EXACT, |d| {
        input(d, 56, &[4097], DType::I32, -2.1e9, 2.1e9)?.mul(&input(d, 57, &[4097], DType::I32, -2.1e9, 2.1e9)?)
    });
}

fn where_and_cast(s: &mut Suite) {
    use DType::*;
    for dtype in [F32, I32, U32, Bool, F16, BF16] {
        let (lo, hi) = match dtype {
            Bool => (0.0, 1.0),
            U32 => (0.0, 9.0),
            _ => (-9.0, 9.0),
        };
        s.add("where", format!("{dtype} cond [7, 1023], a [1023], b [7, 1]"), Tol::EXACT, move |d| {
            let c = input(d, 40, &[7, 1023], Bool, 0.0, 1.0)?;
            Tensor::where_cond(&c, &input(d, 41, &[1023], dtype, lo, hi)?, &input(d, 42, &[7, 1], dtype, lo, hi)?)
        });
    }
    s.add("where", "f32 transposed condition", Tol::EXACT, |d| {
        let c = transposed(d, 43, [33, 65], Bool, 0.0, 1.0)?;
        Tensor::where_cond(&c, &input(d, 44, &[33, 65], F32, -9.0, 9.0)?, &Tensor::scalar(d, 0.5, F32)?)
    });
    let pairs: [(DType, DType, f64, f64); 29] = [
        (F32, I32, -1000.0, 1000.0),
        (F32, U32, 0.0, 1000.0),
        (F32, F16, -100.0, 100.0),
        (F16, F32, -100.0, 100.0),
        (I32, F32, -100000.0, 100000.0),
        (I32, U32, -1000.0, 1000.0),
        (U32, I32, 0.0, 4e9),
        (U32, F32, 0.0, 1e6),
        (Bool, F32, 0.0, 1.0),
        (Bool, I32, 0.0, 1.0),
        (I32, Bool, -2.0, 2.0),
        (F16, I32, -100.0, 100.0),
        (I32, F16, -1000.0, 1000.0),
        (F32, BF16, -1e30, 1e30),
        (BF16, F32, -1e30, 1e30),
        (F16, BF16, -100.0, 100.0),
        (BF16, F16, -100.0, 100.0),
        (BF16, I32, -1e5, 1e5),
        (I32, BF16, -1e6, 1e6),
        (BF16, U32, 0.0, 1e5),
        (U32, BF16, 0.0, 4e9),
        (Bool, BF16, 0.0, 1.0),
        (BF16, Bool, -2.0, 2.0),
        (F16, U32, 0.0, 1000.0),
        (U32, F16, 0.0, 60000.0),
        (F16, Bool, -2.0, 2.0),
        (Bool, F16, 0.0, 1.0),
        (U32, Bool, 0.0, 3.0),
        (Bool, U32, 0.0, 1.0),
    ];
    for (from, to, lo, hi) in pairs {
        let tol = Tol::storage(to);
        s.add("cast", format!("{from} → {to} [1023]"), tol, move |d| input(d, 45, &[1023], from, lo, hi)?.cast(to));
    }
    // Rounding to nearest, ties to even (1 + half an ulp down, 1 + three
    // halves up), overflow to infinity past the largest finite value (a tie
    // above it too), NaN kept: the same on every adapter.
    for (packed, ulp, max, above) in [
        (F16, 2f32.powi(-10), 65504.0, 65520.0),
        (BF16, 2f32.powi(-7), f32::from_bits(0x7f7f_0000), f32::from_bits(0x7f7f_8000)),
    ] {
        s.add("cast", format!("f32 → {packed} ties, overflow, infinities and NaN"), Tol::EXACT, move |d| {
            let tie = ulp / 2.0;
            let values = [
                1.0 + tie,
                1.0 + 3.0 * tie,
                -(1.0 + tie),
                max,
                -max,
                above,
                -above,
                f32::MAX,
                f32::NEG_INFINITY,
                f32::NAN,
            ];
            Tensor::from_slice(d, &values, &[values.len()])?.cast(packed)
        });
    }
    s.add("cast", "f32 → bool with zeros", Tol::EXACT, |d| {
        input(d, 46, &[1023], F32, -2.0, 2.0)?.round()?.cast(Bool)
    });
    s.add("cast", "f32 → i32 transposed view", Tol::EXACT, |d| {
        transposed(d, 47, [33, 65], F32, -50.0, 50.0)?.cast(I32)
    });
}

fn reductions(s: &mut Suite) {
    use kiln::core::ir::ReduceOp;
    let ops: [(&str, Option<ReduceOp>); 7] = [
        ("sum", Some(ReduceOp::Sum)),
        ("mean", None),
        ("max", Some(ReduceOp::Max)),
        ("min", Some(ReduceOp::Min)),
        ("prod", Some(ReduceOp::Prod)),
        ("argmax", None),
        ("argmin", None),
    ];
    for (name, op) in ops {
        let apply = move |t: &Tensor, axes: &[isize], keepdim: bool| -> Result<Tensor> {
            match (name, op) {
                ("mean", _) => t.mean(axes, keepdim),
                ("argmax", _) => t.argmax(axes.first().copied(), keepdim),
                ("argmin", _) => t.argmin(axes.first().copied(), keepdim),
                (_, Some(op)) => t.reduce(op, axes, keepdim),
                _ => unreachable!("every op is listed above"),
            }
        };
        // prod stays well scaled with factors near 1.
        let (lo, hi) = if name == "prod" { (0.9, 1.1) } else { (-1.0, 1.0) };
        let is_arg = name.starts_with("arg");
        let tol = if is_arg { Tol::EXACT } else { Tol { abs: 1e-5, rel: 1e-5 } };
        // Reductions over leading or middle axes run over columns: a row
        // or four at a time, in one chunk or many.
        let cases: [(&str, Vec<usize>, Vec<isize>, bool); 9] = [
            ("[7, 1023] over axis -1", vec![7, 1023], vec![-1], false),
            ("[7, 1023] over axis 0, keepdim", vec![7, 1023], vec![0], true),
            ("[4097] over all", vec![4097], vec![], false),
            ("[3, 5, 7, 9] over axes (0, 2), keepdim", vec![3, 5, 7, 9], vec![0, 2], true),
            ("[1] over all", vec![1], vec![], false),
            ("[65, 4097] over axis 1", vec![65, 4097], vec![1], false),
            ("[2048, 64] over axis 0", vec![2048, 64], vec![0], false),
            ("[131072, 6] over axis 0", vec![131072, 6], vec![0], false),
            ("[16, 3, 4096] over axis 1", vec![16, 3, 4096], vec![1], false),
        ];
        for (detail, shape, axes, keepdim) in cases {
            if is_arg && axes.len() > 1 {
                continue;
            }
            s.add(name, format!("f32 {detail}"), tol, move |d| {
                apply(&input(d, 50, &shape, DType::F32, lo, hi)?, &axes, keepdim)
            });
        }
        s.add(name, "f32 [33, 65] transposed, over axis 1", tol, move |d| {
            apply(&transposed(d, 51, [33, 65], DType::F32, lo, hi)?, &[1], false)
        });
        // 2^24 elements: past Mesa's 65,535-iteration loop cap per invocation.
        let big_tol = if name == "sum" { Tol { abs: 2e-2, rel: 1e-5 } } else { tol };
        if name != "prod" {
            s.add(name, "f32 [2^24] over all", big_tol, move |d| {
                apply(&input(d, 52, &[1 << 24], DType::F32, lo, hi)?, &[], false)
            });
        }
        // A row reduction that each element then reads: the row kernel, in
        // the subgroup-lanes layout where the adapter's subgroups have a
        // fixed width (up to 64 vec4s per lane; 2048 on an 8-wide
        // subgroup, and past that on a 4-wide one, where the
        // row-per-invocation layout runs instead).
        if !is_arg {
            for len in [1024, 2048] {
                s.add(name, format!("f32 [33, {len}] over axis -1, keepdim, each element minus it"), tol, move |d| {
                    let x = input(d, 56, &[33, len], DType::F32, lo, hi)?;
                    x.sub(&apply(&x, &[-1], true)?)
                });
            }
        }
        if name != "mean" && !is_arg {
            s.add(name, "i32 [33, 1024] with ties over axis -1, each element minus it", Tol::EXACT, move |d| {
                let hi = if name == "prod" { 1.0 } else { 3.0 };
                let x = input(d, 57, &[33, 1024], DType::I32, -1.0, hi)?;
                x.sub(&apply(&x, &[-1], true)?)
            });
        }
        if name != "mean" {
            s.add(name, "i32 [7, 1023] with ties over axis -1", Tol::EXACT, move |d| {
                let hi = if name == "prod" { 1.0 } else { 3.0 };
                apply(&input(d, 53, &[7, 1023], DType::I32, -1.0, hi)?, &[-1], false)
            });
            // Ties across a column's chunks: arg reductions keep the first.
            s.add(name, "i32 [2048, 64] with ties over axis 0", Tol::EXACT, move |d| {
                let hi = if name == "prod" { 1.0 } else { 3.0 };
                apply(&input(d, 58, &[2048, 64], DType::I32, -1.0, hi)?, &[0], false)
            });
        }
        for dtype in [DType::F16, DType::BF16] {
            let tol = if is_arg { Tol::EXACT } else { Tol { abs: 2e-2, rel: Tol::storage(dtype).rel } };
            s.add(name, format!("{dtype} [7, 1023] over axis -1"), tol, move |d| {
                apply(&input(d, 54, &[7, 1023], dtype, lo, hi)?, &[-1], false)
            });
            s.add(name, format!("{dtype} [1023, 8] over axis 0"), tol, move |d| {
                apply(&input(d, 54, &[1023, 8], dtype, lo, hi)?, &[0], false)
            });
        }
    }
    s.add("sum", "zero-size axis [3, 0] → zeros", Tol::EXACT, |d| {
        input(d, 66, &[3, 0], DType::F32, -1.0, 1.0)?.sum(&[1], false)
    });
    s.add("prod", "zero-size axis [3, 0] → ones", Tol::EXACT, |d| {
        input(d, 67, &[3, 0], DType::F32, -1.0, 1.0)?.prod(&[1], false)
    });
    s.add("sum", "zero rows [0, 5] over the last axis → [0]", Tol::EXACT, |d| {
        input(d, 70, &[0, 5], DType::F32, -1.0, 1.0)?.sum(&[1], false)
    });
    s.add("sum", "bool counts as i32", Tol::EXACT, |d| {
        input(d, 55, &[7, 1023], DType::Bool, 0.0, 1.0)?.sum(&[-1], false)
    });
}

fn matmul(s: &mut Suite) {
    use DType::*;
    let shapes: [(&str, Vec<usize>, Vec<usize>); 8] = [
        ("[1, 1] @ [1, 1]", vec![1, 1], vec![1, 1]),
        ("[7, 33] @ [33, 5]", vec![7, 33], vec![33, 5]),
        ("[65, 129] @ [129, 31]", vec![65, 129], vec![129, 31]),
        ("[3, 7, 9] @ [3, 9, 5]", vec![3, 7, 9], vec![3, 9, 5]),
        ("[2, 1, 7, 9] @ [3, 9, 5] (broadcast batch)", vec![2, 1, 7, 9], vec![3, 9, 5]),
        ("[33] @ [33, 7]", vec![33], vec![33, 7]),
        ("[7, 33] @ [33]", vec![7, 33], vec![33]),
        ("[2, 20000] @ [20000, 3] (k split over dispatches)", vec![2, 20000], vec![20000, 3]),
    ];
    for (detail, a, b) in shapes {
        let k = a[a.len() - 1] as f64;
        let tol = Tol { abs: 1e-6 * k, rel: 1e-5 };
        s.add("matmul", format!("f32 {detail}"), tol, move |d| {
            input(d, 60, &a, F32, -1.0, 1.0)?.matmul(&input(d, 61, &b, F32, -1.0, 1.0)?)
        });
    }
    s.add("matmul", "f32 [65, 33] @ [31, 33]ᵀ (transposed operand)", Tol { abs: 4e-5, rel: 1e-5 }, |d| {
        input(d, 62, &[65, 33], F32, -1.0, 1.0)?.matmul(&input(d, 63, &[31, 33], F32, -1.0, 1.0)?.t()?)
    });
    for dtype in [F16, BF16] {
        let tol = Tol { abs: 2e-2, rel: Tol::storage(dtype).rel };
        s.add("matmul", format!("{dtype} [7, 33] @ [33, 5]"), tol, move |d| {
            input(d, 64, &[7, 33], dtype, -1.0, 1.0)?.matmul(&input(d, 65, &[33, 5], dtype, -1.0, 1.0)?)
        });
    }
    s.add("matmul", "f32 [3, 0] @ [0, 4] → zeros", Tol::EXACT, |d| {
        input(d, 68, &[3, 0], F32, -1.0, 1.0)?.matmul(&input(d, 69, &[0, 4], F32, -1.0, 1.0)?)
    });
}

fn views(s: &mut Suite) {
    use DType::*;
    let x = |d: &Device| input(d, 70, &[7, 1023], F32, -9.0, 9.0);
    let cube = |d: &Device| input(d, 71, &[3, 5, 7], F32, -9.0, 9.0);
    s.add("reshape", "contiguous [7, 1023] → [1023, 7]", Tol::EXACT, move |d| x(d)?.reshape(&[1023, 7]));
    s.add("reshape", "transposed view → [-1] (copies)", Tol::EXACT, move |d| x(d)?.t()?.reshape(&[-1]));
    s.add("permute", "[3, 5, 7] by (2, 0, 1)", Tol::EXACT, move |d| cube(d)?.permute(&[2, 0, 1]));
    s.add("transpose", "[7, 1023] axes (0, 1)", Tol::EXACT, move |d| x(d)?.transpose(0, 1));
    s.add("slice", "[7, 1023] axis 1, 3..1000 step 7", Tol::EXACT, move |d| x(d)?.slice(1, Some(3), Some(1000), 7));
    s.add("slice", "[7, 1023] axis 0 reversed (step -1)", Tol::EXACT, move |d| x(d)?.slice(0, None, None, -1));
    s.add("slice", "[7, 1023] axis 1, -10.. step -3", Tol::EXACT, move |d| x(d)?.slice(1, Some(-10), None, -3));
    for dtype in [F16, BF16] {
        s.add("slice", format!("{dtype} [1023] from odd offset 1.."), Tol::EXACT, move |d| {
            input(d, 72, &[1023], dtype, -9.0, 9.0)?.slice(0, Some(1), None, 1)
        });
    }
    s.add("narrow", "[3, 5, 7] axis 1, 1..4", Tol::EXACT, move |d| cube(d)?.narrow(1, 1, 3));
    s.add("expand", "[1, 7] → [5, 7]", Tol::EXACT, |d| input(d, 73, &[1, 7], F32, -9.0, 9.0)?.expand(&[5, 7]));
    s.add("expand", "[3, 1] → [2, 3, 4]", Tol::EXACT, |d| input(d, 74, &[3, 1], I32, -9.0, 9.0)?.expand(&[2, 3, 4]));
    s.add("unsqueeze", "[3, 5, 7] at -1", Tol::EXACT, move |d| cube(d)?.unsqueeze(-1));
    s.add("squeeze", "[3, 1, 7] axis 1", Tol::EXACT, |d| input(d, 75, &[3, 1, 7], F32, -9.0, 9.0)?.squeeze(1));
    s.add("flatten", "[3, 5, 7] axes 1..=2 of a permuted view", Tol::EXACT, move |d| {
        cube(d)?.permute(&[1, 0, 2])?.flatten(1, 2)
    });
    s.add("slice", "slice of a slice of a transpose, then add", Tol::F32, move |d| {
        let v = x(d)?.t()?.slice(0, Some(5), Some(900), 3)?.slice(1, None, None, -2)?;
        v.add(&v)
    });
}

fn joins(s: &mut Suite) {
    use DType::*;
    s.add("concat", "f32 [7, 5] ‖ [7, 33] (transposed view) ‖ [7, 1023] on axis 1", Tol::EXACT, |d| {
        let a = input(d, 80, &[7, 5], F32, -9.0, 9.0)?;
        let b = transposed(d, 81, [7, 33], F32, -9.0, 9.0)?;
        let c = input(d, 82, &[7, 1023], F32, -9.0, 9.0)?;
        Tensor::concat(&[&a, &b, &c], 1)
    });
    s.add("concat", "i32 [3, 4] ‖ [1, 4] on axis 0", Tol::EXACT, |d| {
        Tensor::concat(&[&input(d, 83, &[3, 4], I32, -9.0, 9.0)?, &input(d, 84, &[1, 4], I32, -9.0, 9.0)?], 0)
    });
    for dtype in [F16, BF16] {
        s.add("concat", format!("{dtype} [7] ‖ [1023] ‖ [3]"), Tol::EXACT, move |d| {
            let parts = [
                input(d, 85, &[7], dtype, -9.0, 9.0)?,
                input(d, 86, &[1023], dtype, -9.0, 9.0)?,
                input(d, 87, &[3], dtype, -9.0, 9.0)?,
            ];
            Tensor::concat(&[&parts[0], &parts[1], &parts[2]], 0)
        });
    }
    s.add("stack", "three f32 [5, 7] on axis 1", Tol::EXACT, |d| {
        let p: Vec<Tensor> = (0..3).map(|i| input(d, 88 + i, &[5, 7], F32, -9.0, 9.0)).collect::<Result<_>>()?;
        Tensor::stack(&[&p[0], &p[1], &p[2]], 1)
    });
}

fn softmax(s: &mut Suite) {
    for (name, log) in [("softmax", false), ("log_softmax", true)] {
        let f = move |t: Tensor, axis: isize| if log { t.log_softmax(axis) } else { t.softmax(axis) };
        let tol = if log { Tol { abs: 1e-4, rel: 1e-5 } } else { Tol { abs: 1e-6, rel: 1e-4 } };
        s.add(name, "f32 [7, 1023] axis -1", tol, move |d| f(input(d, 90, &[7, 1023], DType::F32, -5.0, 5.0)?, -1));
        s.add(name, "f32 [7, 1023] axis 0", tol, move |d| f(input(d, 91, &[7, 1023], DType::F32, -5.0, 5.0)?, 0));
        s.add(name, "f32 logits near ±1000 (stability)", tol, move |d| {
            f(input(d, 92, &[7, 65], DType::F32, 990.0, 1010.0)?.mul(&Tensor::scalar(d, -1.0, DType::F32)?)?, -1)
        });
        s.add(name, "f32 [33, 65] transposed, axis -1", tol, move |d| {
            f(transposed(d, 93, [33, 65], DType::F32, -5.0, 5.0)?, -1)
        });
        s.add(name, "f32 [0, 5] (no rows) axis -1", tol, move |d| f(input(d, 98, &[0, 5], DType::F32, -5.0, 5.0)?, -1));
        // Per example a row vector, squeezed after (as `vmap` of a function
        // of one example builds it): the row kernel seen through a reshape.
        s.add(name, "f32 [7, 1, 65] axis -1, then squeezed", tol, move |d| {
            f(input(d, 99, &[7, 1, 65], DType::F32, -5.0, 5.0)?, -1)?.squeeze(1)
        });
        for dtype in [DType::F16, DType::BF16] {
            s.add(name, format!("{dtype} [7, 1023] axis -1"), Tol { abs: 2e-3, rel: 1e-2 }, move |d| {
                f(input(d, 94, &[7, 1023], dtype, -5.0, 5.0)?, -1)
            });
        }
        // The online max/sum pass must skip −∞ (a mask), also as a row's
        // first elements; [33, 1024] takes the row kernel (at least 32
        // rows) and its vec4 path.
        s.add(name, "f32 [33, 1024] masked to −∞ (first 8 and values < −3)", tol, move |d| {
            let x = input(d, 95, &[33, 1024], DType::F32, -5.0, 5.0)?;
            let col = Tensor::arange(d, 0.0, 1024.0, 1.0, DType::F32)?;
            let below = |t: &Tensor, v: f64| t.lt(&Tensor::scalar(d, v, DType::F32)?);
            let masked = below(&x, -3.0)?.logical_or(&below(&col, 8.0)?)?;
            f(Tensor::where_cond(&masked, &Tensor::scalar(d, f64::NEG_INFINITY, DType::F32)?, &x)?, -1)
        });
        // Rows too long for the row kernel, 2^24 elements in all: tree
        // reductions whose prologue loads the row max once per span, and a
        // last pass walking eighths of rows (`Walk::Vec4Segments`).
        s.add(name, "f32 [16, 2^20] axis -1 (long rows)", tol, move |d| {
            f(input(d, 97, &[16, 1 << 20], DType::F32, -5.0, 5.0)?, -1)
        });
        // Long rows that do not split into vec4s: streamed on CPU adapters
        // (rows over 16,384 on all of them) in the vec4s covering each row,
        // the vec4s two rows share written component by component.
        s.add(name, "f32 [16, 16387] axis -1 (long rows straddling vec4s)", tol, move |d| {
            f(input(d, 98, &[16, 16387], DType::F32, -5.0, 5.0)?, -1)
        });
        // A costly input computed in the row kernel: the kernel may keep
        // tanh(x) (or exp(tanh(x) − max)) in the output for the last pass.
        for shape in [[33, 1024], [33, 1023]] {
            s.add(name, format!("tanh of f32 {shape:?} computed in the kernel, axis -1"), tol, move |d| {
                f(input(d, 96, &shape, DType::F32, -3.0, 3.0)?.tanh()?, -1)
            });
        }
    }
}

fn indexing(s: &mut Suite) {
    use DType::*;
    s.add("gather", "f32 [7, 33] axis 1, index [7, 5] with out-of-range entries", Tol::EXACT, |d| {
        input(d, 100, &[7, 33], F32, -9.0, 9.0)?.gather(1, &input(d, 101, &[7, 5], I32, -2.0, 40.0)?)
    });
    for dtype in [F16, BF16] {
        s.add("gather", format!("{dtype} [33, 7]ᵀ axis 0, u32 index [3, 33]"), Tol::EXACT, move |d| {
            let src = input(d, 102, &[33, 7], dtype, -9.0, 9.0)?.t()?;
            src.gather(0, &input(d, 103, &[3, 33], U32, 0.0, 6.0)?)
        });
    }
    s.add("index_select", "f32 [33, 7] axis 0, 5 indices", Tol::EXACT, |d| {
        input(d, 104, &[33, 7], F32, -9.0, 9.0)?.index_select(0, &input(d, 105, &[5], I32, 0.0, 32.0)?)
    });
    s.add("index_select", "i32 [7, 1023] axis 1, 9 indices", Tol::EXACT, |d| {
        input(d, 106, &[7, 1023], I32, -9.0, 9.0)?.index_select(1, &input(d, 107, &[9], U32, 0.0, 1022.0)?)
    });
    s.add("one_hot", "i32 [1023] → f32 [1023, 10]", Tol::EXACT, |d| {
        input(d, 108, &[1023], I32, 0.0, 9.0)?.one_hot(10, F32)
    });
    s.add("one_hot", "u32 [7, 3] → i32 [7, 3, 4]", Tol::EXACT, |d| {
        input(d, 109, &[7, 3], U32, 0.0, 3.0)?.one_hot(4, I32)
    });
}
