//! Property test of the public `Tensor` API: random calls with random,
//! often invalid, shapes, axes, dtypes and indices. No call may panic or
//! abort; each returns `Ok` or a `KilnError` that names the op the user
//! called (not a primitive it is built from: softmax on a bad axis says
//! `softmax`, not `max`). Whatever was built then realizes on the device
//! without a kiln bug (`Gpu` or `Shader` errors) or a validation abort.
//!
//! On the CPU reference it runs `KILN_API_CASES` cases (default 10,000,
//! under a second); on every adapter `KILN_API_GPU_CASES` (default 64, about
//! 8 s on the CPU adapters), since each case compiles kernels.

use kiln::core::ir::{BinaryOp, UnaryOp};
use kiln::prelude::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

#[derive(Debug, Clone)]
enum Call {
    Full {
        shape: Vec<usize>,
        dtype: usize,
        value: i8,
    },
    /// A shape whose element count is past any device (or `usize`).
    Huge {
        dims: Vec<u8>,
        dtype: usize,
    },
    Arange {
        start: i8,
        stop: i8,
        step: i8,
        dtype: usize,
    },
    Eye {
        n: usize,
        m: usize,
        dtype: usize,
    },
    FromF64 {
        shape: Vec<usize>,
        extra: usize,
        dtype: usize,
    },
    Unary {
        a: usize,
        op: usize,
    },
    Binary {
        a: usize,
        b: usize,
        op: usize,
    },
    Scalar {
        a: usize,
        op: usize,
        value: i8,
    },
    Where {
        c: usize,
        a: usize,
        b: usize,
    },
    Cast {
        a: usize,
        dtype: usize,
    },
    Reduce {
        a: usize,
        op: usize,
        axes: Vec<i8>,
        keepdim: bool,
    },
    Arg {
        a: usize,
        max: bool,
        axis: Option<i8>,
        keepdim: bool,
    },
    Softmax {
        a: usize,
        log: bool,
        axis: i8,
    },
    Reshape {
        a: usize,
        shape: Vec<i8>,
    },
    Permute {
        a: usize,
        perm: Vec<i8>,
    },
    Transpose {
        a: usize,
        x: i8,
        y: i8,
    },
    T {
        a: usize,
    },
    Slice {
        a: usize,
        axis: i8,
        start: Option<i8>,
        stop: Option<i8>,
        step: i8,
    },
    Narrow {
        a: usize,
        axis: i8,
        start: u8,
        len: u8,
    },
    BroadcastTo {
        a: usize,
        shape: Vec<usize>,
    },
    Unsqueeze {
        a: usize,
        axis: i8,
    },
    Squeeze {
        a: usize,
        axis: i8,
    },
    Flatten {
        a: usize,
        start: i8,
        end: i8,
    },
    Concat {
        parts: Vec<usize>,
        axis: i8,
    },
    Stack {
        parts: Vec<usize>,
        axis: i8,
    },
    Gather {
        a: usize,
        axis: i8,
        index: usize,
    },
    IndexSelect {
        a: usize,
        axis: i8,
        index: usize,
    },
    OneHot {
        a: usize,
        classes: u8,
        dtype: usize,
    },
    Matmul {
        a: usize,
        b: usize,
    },
    QuantMatmul {
        a: usize,
        codes: usize,
        scales: usize,
        int4: bool,
    },
    Quantize {
        a: usize,
        int4: bool,
    },
    Dequantize {
        codes: usize,
        scales: usize,
        int4: bool,
    },
}

/// int8 per channel, or int4 in groups of one word (the pool's axes are short).
fn format(int4: bool) -> QuantFormat {
    if int4 { QuantFormat::int4(8) } else { QuantFormat::INT8 }
}

const SCALAR_OPS: [&str; 5] = ["add_scalar", "sub_scalar", "mul_scalar", "div_scalar", "pow_scalar"];
const REDUCE_OPS: [&str; 5] = ["sum", "prod", "max", "min", "mean"];

impl Call {
    /// The op a user called, which an error must name.
    fn name(&self) -> &'static str {
        match self {
            Call::Full { .. } | Call::Huge { .. } => "full",
            Call::Arange { .. } => "arange",
            Call::Eye { .. } => "eye",
            Call::FromF64 { .. } => "from_f64",
            Call::Unary { op, .. } => UnaryOp::ALL[*op].name(),
            Call::Binary { op, .. } => BinaryOp::ALL[*op].name(),
            Call::Scalar { op, .. } => SCALAR_OPS[*op],
            Call::Where { .. } => "where",
            Call::Cast { .. } => "cast",
            Call::Reduce { op, .. } => REDUCE_OPS[*op],
            Call::Arg { max: true, .. } => "argmax",
            Call::Arg { max: false, .. } => "argmin",
            Call::Softmax { log: false, .. } => "softmax",
            Call::Softmax { log: true, .. } => "log_softmax",
            Call::Reshape { .. } => "reshape",
            Call::Permute { .. } => "permute",
            Call::Transpose { .. } => "transpose",
            Call::T { .. } => "t",
            Call::Slice { .. } => "slice",
            Call::Narrow { .. } => "narrow",
            Call::BroadcastTo { .. } => "broadcast_to",
            Call::Unsqueeze { .. } => "unsqueeze",
            Call::Squeeze { .. } => "squeeze",
            Call::Flatten { .. } => "flatten",
            Call::Concat { .. } => "concat",
            Call::Stack { .. } => "stack",
            Call::Gather { .. } => "gather",
            Call::IndexSelect { .. } => "index_select",
            Call::OneHot { .. } => "one_hot",
            Call::Matmul { .. } => "matmul",
            Call::QuantMatmul { .. } => "quant_matmul",
            Call::Quantize { .. } => "quantize",
            Call::Dequantize { .. } => "dequantize",
        }
    }
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..5)
}

fn axis() -> impl Strategy<Value = i8> {
    -6i8..6
}

fn dtype() -> impl Strategy<Value = usize> {
    0..DType::ALL.len()
}

fn call() -> impl Strategy<Value = Call> {
    let t = any::<usize>;
    prop_oneof![
        (shape(), dtype(), any::<i8>()).prop_map(|(shape, dtype, value)| Call::Full { shape, dtype, value }),
        (prop::collection::vec(any::<u8>(), 1..5), dtype()).prop_map(|(dims, dtype)| Call::Huge { dims, dtype }),
        (any::<i8>(), any::<i8>(), -3i8..4, dtype()).prop_map(|(start, stop, step, dtype)| Call::Arange {
            start,
            stop,
            step,
            dtype
        }),
        (0usize..5, 0usize..5, dtype()).prop_map(|(n, m, dtype)| Call::Eye { n, m, dtype }),
        (shape(), 0usize..2, dtype()).prop_map(|(shape, extra, dtype)| Call::FromF64 { shape, extra, dtype }),
        (t(), 0..UnaryOp::ALL.len()).prop_map(|(a, op)| Call::Unary { a, op }),
        (t(), t(), 0..BinaryOp::ALL.len()).prop_map(|(a, b, op)| Call::Binary { a, b, op }),
        (t(), 0..SCALAR_OPS.len(), any::<i8>()).prop_map(|(a, op, value)| Call::Scalar { a, op, value }),
        (t(), t(), t()).prop_map(|(c, a, b)| Call::Where { c, a, b }),
        (t(), dtype()).prop_map(|(a, dtype)| Call::Cast { a, dtype }),
        (t(), 0..REDUCE_OPS.len(), prop::collection::vec(axis(), 0..4), any::<bool>())
            .prop_map(|(a, op, axes, keepdim)| Call::Reduce { a, op, axes, keepdim }),
        (t(), any::<bool>(), prop::option::of(axis()), any::<bool>()).prop_map(|(a, max, axis, keepdim)| Call::Arg {
            a,
            max,
            axis,
            keepdim
        }),
        (t(), any::<bool>(), axis()).prop_map(|(a, log, axis)| Call::Softmax { a, log, axis }),
        (t(), prop::collection::vec(-2i8..7, 0..5)).prop_map(|(a, shape)| Call::Reshape { a, shape }),
        (t(), prop::collection::vec(axis(), 0..5)).prop_map(|(a, perm)| Call::Permute { a, perm }),
        (t(), axis(), axis()).prop_map(|(a, x, y)| Call::Transpose { a, x, y }),
        t().prop_map(|a| Call::T { a }),
        (t(), axis(), prop::option::of(axis()), prop::option::of(axis()), -3i8..4)
            .prop_map(|(a, axis, start, stop, step)| Call::Slice { a, axis, start, stop, step }),
        (t(), axis(), 0u8..5, 0u8..5).prop_map(|(a, axis, start, len)| Call::Narrow { a, axis, start, len }),
        (t(), shape()).prop_map(|(a, shape)| Call::BroadcastTo { a, shape }),
        (t(), axis()).prop_map(|(a, axis)| Call::Unsqueeze { a, axis }),
        (t(), axis()).prop_map(|(a, axis)| Call::Squeeze { a, axis }),
        (t(), axis(), axis()).prop_map(|(a, start, end)| Call::Flatten { a, start, end }),
        (prop::collection::vec(t(), 0..4), axis()).prop_map(|(parts, axis)| Call::Concat { parts, axis }),
        (prop::collection::vec(t(), 0..4), axis()).prop_map(|(parts, axis)| Call::Stack { parts, axis }),
        (t(), axis(), t()).prop_map(|(a, axis, index)| Call::Gather { a, axis, index }),
        (t(), axis(), t()).prop_map(|(a, axis, index)| Call::IndexSelect { a, axis, index }),
        (t(), 0u8..6, dtype()).prop_map(|(a, classes, dtype)| Call::OneHot { a, classes, dtype }),
        (t(), t()).prop_map(|(a, b)| Call::Matmul { a, b }),
        (t(), t(), t(), any::<bool>()).prop_map(|(a, codes, scales, int4)| Call::QuantMatmul {
            a,
            codes,
            scales,
            int4
        }),
        (t(), any::<bool>()).prop_map(|(a, int4)| Call::Quantize { a, int4 }),
        (t(), t(), any::<bool>()).prop_map(|(codes, scales, int4)| Call::Dequantize { codes, scales, int4 }),
    ]
}

/// Make the call on tensors picked from `pool` (by index, modulo its size).
fn make(dev: &Device, pool: &[Tensor], call: &Call) -> Result<Tensor> {
    let pick = |i: usize| &pool[i % pool.len()];
    let dt = |i: usize| DType::ALL[i];
    let opt = |v: Option<i8>| v.map(isize::from);
    match call {
        Call::Full { shape, dtype, value } => Tensor::full(dev, shape, f64::from(*value), dt(*dtype)),
        Call::Huge { dims, dtype } => {
            let shape: Vec<usize> = dims.iter().map(|&d| 1usize << (d % 64).max(33)).collect();
            Tensor::full(dev, &shape, 0.0, dt(*dtype))
        }
        Call::Arange { start, stop, step, dtype } => {
            Tensor::arange(dev, f64::from(*start), f64::from(*stop), f64::from(*step), dt(*dtype))
        }
        Call::Eye { n, m, dtype } => Tensor::eye(dev, *n, *m, dt(*dtype)),
        Call::FromF64 { shape, extra, dtype } => {
            let len = shape.iter().product::<usize>() + extra;
            let values: Vec<f64> = (0..len).map(|i| (i % 3) as f64).collect();
            Tensor::from_f64(dev, &values, shape, dt(*dtype))
        }
        Call::Unary { a, op } => pick(*a).unary(UnaryOp::ALL[*op]),
        Call::Binary { a, b, op } => pick(*a).binary(BinaryOp::ALL[*op], pick(*b)),
        Call::Scalar { a, op, value } => {
            let (x, v) = (pick(*a), f64::from(*value));
            match op {
                0 => x.add_scalar(v),
                1 => x.sub_scalar(v),
                2 => x.mul_scalar(v),
                3 => x.div_scalar(v),
                _ => x.pow_scalar(v),
            }
        }
        Call::Where { c, a, b } => Tensor::where_cond(pick(*c), pick(*a), pick(*b)),
        Call::Cast { a, dtype } => pick(*a).cast(dt(*dtype)),
        Call::Reduce { a, op, axes, keepdim } => {
            let axes: Vec<isize> = axes.iter().map(|&x| isize::from(x)).collect();
            let x = pick(*a);
            match op {
                0 => x.sum(&axes, *keepdim),
                1 => x.prod(&axes, *keepdim),
                2 => x.max(&axes, *keepdim),
                3 => x.min(&axes, *keepdim),
                _ => x.mean(&axes, *keepdim),
            }
        }
        Call::Arg { a, max, axis, keepdim } => {
            let x = pick(*a);
            if *max { x.argmax(opt(*axis), *keepdim) } else { x.argmin(opt(*axis), *keepdim) }
        }
        Call::Softmax { a, log, axis } => {
            let x = pick(*a);
            if *log { x.log_softmax(isize::from(*axis)) } else { x.softmax(isize::from(*axis)) }
        }
        Call::Reshape { a, shape } => {
            let shape: Vec<isize> = shape.iter().map(|&d| isize::from(d)).collect();
            pick(*a).reshape(&shape)
        }
        Call::Permute { a, perm } => {
            let perm: Vec<isize> = perm.iter().map(|&d| isize::from(d)).collect();
            pick(*a).permute(&perm)
        }
        Call::Transpose { a, x, y } => pick(*a).transpose(isize::from(*x), isize::from(*y)),
        Call::T { a } => pick(*a).t(),
        Call::Slice { a, axis, start, stop, step } => {
            pick(*a).slice(isize::from(*axis), opt(*start), opt(*stop), isize::from(*step))
        }
        Call::Narrow { a, axis, start, len } => pick(*a).narrow(isize::from(*axis), *start as usize, *len as usize),
        Call::BroadcastTo { a, shape } => pick(*a).broadcast_to(shape),
        Call::Unsqueeze { a, axis } => pick(*a).unsqueeze(isize::from(*axis)),
        Call::Squeeze { a, axis } => pick(*a).squeeze(isize::from(*axis)),
        Call::Flatten { a, start, end } => pick(*a).flatten(isize::from(*start), isize::from(*end)),
        Call::Concat { parts, axis } => {
            let parts: Vec<&Tensor> = parts.iter().map(|&i| pick(i)).collect();
            Tensor::concat(&parts, isize::from(*axis))
        }
        Call::Stack { parts, axis } => {
            let parts: Vec<&Tensor> = parts.iter().map(|&i| pick(i)).collect();
            Tensor::stack(&parts, isize::from(*axis))
        }
        Call::Gather { a, axis, index } => pick(*a).gather(isize::from(*axis), pick(*index)),
        Call::IndexSelect { a, axis, index } => pick(*a).index_select(isize::from(*axis), pick(*index)),
        Call::OneHot { a, classes, dtype } => pick(*a).one_hot(*classes as usize, dt(*dtype)),
        Call::Matmul { a, b } => pick(*a).matmul(pick(*b)),
        Call::QuantMatmul { a, codes, scales, int4 } => {
            pick(*a).quant_matmul(pick(*codes), pick(*scales), format(*int4))
        }
        Call::Quantize { a, int4 } => pick(*a).quantize(format(*int4)).map(|(codes, _)| codes),
        Call::Dequantize { codes, scales, int4 } => Tensor::dequantize(pick(*codes), pick(*scales), format(*int4)),
    }
}

/// The op an error names, when it is one a user can cause.
fn user_op(e: &KilnError) -> Option<&'static str> {
    match e {
        KilnError::Shape { op, .. }
        | KilnError::DType { op, .. }
        | KilnError::Axis { op, .. }
        | KilnError::Invalid { op, .. }
        | KilnError::TooLarge { op, .. }
        | KilnError::DeviceMismatch { op, .. } => Some(op),
        _ => None,
    }
}

/// The starting tensors: small, of every dtype, one empty.
fn seeds(dev: &Device) -> Vec<Tensor> {
    let specs: [(&[usize], DType); 5] = [
        (&[2, 3], DType::F32),
        (&[3], DType::I32),
        (&[2, 1, 3], DType::Bool),
        (&[], DType::F16),
        (&[0, 2], DType::U32),
    ];
    specs
        .iter()
        .map(|(shape, dtype)| {
            let values: Vec<f64> = (0..shape.iter().product()).map(|i: usize| (i % 3) as f64).collect();
            Tensor::from_f64(dev, &values, shape, *dtype).expect("a valid seed tensor")
        })
        .collect()
}

/// Make every call in turn, keeping what succeeds; then realize it all.
fn check_calls(dev: &Device, calls: &[Call]) -> std::result::Result<(), TestCaseError> {
    let mut pool = seeds(dev);
    for call in calls {
        match make(dev, &pool, call) {
            Ok(t) => pool.push(t),
            Err(e) => prop_assert_eq!(user_op(&e), Some(call.name()), "{:?} failed with: {}", call, e),
        }
    }
    let all: Vec<&Tensor> = pool.iter().collect();
    if let Err(e) = kiln::block_on(Tensor::realize_all(&all)) {
        prop_assert!(
            matches!(e, KilnError::TooLarge { .. } | KilnError::OutOfMemory(_)),
            "realizing {} tensors failed with a kiln bug: {}",
            all.len(),
            e
        );
        return Ok(());
    }
    for t in &pool {
        let host = kiln::block_on(t.to_host());
        prop_assert!(host.is_ok(), "reading {:?} {:?} failed: {:?}", t.dtype(), t.shape(), host.err());
    }
    Ok(())
}

fn cases(var: &str, default: u32) -> u32 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn run_on(dev: &Device, label: &str, cases: u32) {
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(0x006b_696c_6e61_7069),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&prop::collection::vec(call(), 1..24), |calls| check_calls(dev, &calls));
    if let Err(e) = outcome {
        panic!("{label}: {e}");
    }
}

#[test]
fn every_call_on_the_cpu_reference_returns_ok_or_names_its_op() {
    run_on(&Device::cpu(), "CPU reference", cases("KILN_API_CASES", 10_000));
}

#[test]
fn every_call_on_each_adapter_realizes_without_a_kiln_bug() {
    let devices = kiln_conformance::adapters::shared();
    for (label, dev) in devices.iter() {
        run_on(dev, label, cases("KILN_API_GPU_CASES", 64));
    }
}
