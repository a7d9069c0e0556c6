//! Gradient cases: every differentiable op, with broadcasting and
//! non-contiguous (transposed, sliced, reversed) operands, plus grad of
//! grad and the 784-256-10 MLP. Inputs are contiguous fixed-seed tensors;
//! views are taken inside `f`, so their backward rules are exercised too.

use crate::cases::input;
use crate::{Tol, rng::Rng};
use kiln::core::ir::UnaryOp;
use kiln::prelude::*;

/// How an adapter's gradients must match the reference's.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// Each element within `abs + rel · |reference|`.
    Elementwise(Tol),
    /// Per leaf, `max |g − r| / max |r|` at most this.
    MaxRelative(f64),
}

pub type GradFn = Box<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;

pub struct GradCase {
    pub op: &'static str,
    pub detail: String,
    pub check: Check,
    /// Whether central differences on the reference apply (not through
    /// f16 rounding, not for the 784-256-10 MLP's 200k parameters).
    pub fd: bool,
    /// (shape, lo, hi) of each differentiable f32 input, uniform in [lo, hi).
    pub inputs: Vec<(Vec<usize>, f64, f64)>,
    pub seed: u64,
    pub f: GradFn,
}

impl GradCase {
    pub fn primals(&self, dev: &Device) -> Result<Vec<Tensor>> {
        let spec = self.inputs.iter().enumerate();
        spec.map(|(i, (shape, lo, hi))| input(dev, self.seed + i as u64, shape, DType::F32, *lo, *hi)).collect()
    }
}

/// The fixed cotangent for an output of `shape`: uniform in [-1, 1).
pub fn cotangent(dev: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let mut rng = Rng::new(7);
    let values: Vec<f64> = (0..shape.iter().product()).map(|_| rng.uniform(-1.0, 1.0)).collect();
    Tensor::from_f64(dev, &values, shape, dtype)
}

struct Cases(Vec<GradCase>);

const DEFAULT: Check = Check::Elementwise(Tol { abs: 1e-5, rel: 1e-4 });

impl Cases {
    fn add(
        &mut self,
        op: &'static str,
        detail: impl Into<String>,
        inputs: &[(&[usize], f64, f64)],
        f: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
    ) -> &mut GradCase {
        let inputs = inputs.iter().map(|(s, lo, hi)| (s.to_vec(), *lo, *hi)).collect();
        let seed = 1000 + 10 * self.0.len() as u64;
        self.0.push(GradCase { op, detail: detail.into(), check: DEFAULT, fd: true, inputs, seed, f: Box::new(f) });
        self.0.last_mut().unwrap()
    }
}

pub fn all() -> Vec<GradCase> {
    let mut s = Cases(Vec::new());
    unary(&mut s);
    binary(&mut s);
    select_and_cast(&mut s);
    reductions(&mut s);
    matmul(&mut s);
    views(&mut s);
    joins_and_indexing(&mut s);
    composites(&mut s);
    packed(&mut s);
    s.0.extend(crate::nn_cases::grads());
    s.0.extend(crate::transformer_cases::grads());
    s.0.extend(crate::quant_cases::grads());
    s.0
}

/// A domain away from kinks and poles where finite differences are sound.
fn domain(op: UnaryOp) -> (f64, f64) {
    match op {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => (0.5, 3.0),
        UnaryOp::Sin | UnaryOp::Cos => (-3.0, 3.0),
        _ => (-2.5, 2.5),
    }
}

fn unary(s: &mut Cases) {
    for op in UnaryOp::ALL.into_iter().filter(|&op| op != UnaryOp::Not) {
        let (lo, hi) = domain(op);
        let tol = match op {
            // SwiftShader's sin/cos are off by up to 2^-11 (docs/SHARP_EDGES.md).
            UnaryOp::Sin | UnaryOp::Cos => Check::Elementwise(Tol { abs: 1.0 / 1024.0, rel: 0.0 }),
            _ => DEFAULT,
        };
        s.add(op.name(), "f32 [3, 5]", &[(&[3, 5], lo, hi)], move |x| x[0].unary(op)).check = tol;
        s.add(op.name(), "f32 [5, 3]ᵀ (transposed view)", &[(&[5, 3], lo, hi)], move |x| x[0].t()?.unary(op)).check =
            tol;
    }
}

fn binary(s: &mut Cases) {
    use kiln::core::ir::BinaryOp::*;
    for op in [Add, Sub, Mul, Div, Pow, Maximum, Minimum] {
        let (alo, ahi, blo, bhi) = match op {
            Pow => (0.5, 2.0, -1.5, 2.0),
            Div => (-2.0, 2.0, 0.5, 2.0),
            _ => (-2.0, 2.0, -2.0, 2.0),
        };
        s.add(op.name(), "f32 [3, 1] ⊕ [1, 4] (broadcast)", &[(&[3, 1], alo, ahi), (&[1, 4], blo, bhi)], move |x| {
            x[0].binary(op, &x[1])
        });
        s.add(
            op.name(),
            "f32 [4, 3]ᵀ ⊕ [4] (transposed, broadcast)",
            &[(&[4, 3], alo, ahi), (&[4], blo, bhi)],
            move |x| x[0].t()?.binary(op, &x[1]),
        );
        s.add(op.name(), "f32 [] ⊕ [2, 3] (scalar)", &[(&[], alo, ahi), (&[2, 3], blo, bhi)], move |x| {
            x[0].binary(op, &x[1])
        });
    }
}

fn select_and_cast(s: &mut Cases) {
    s.add("where", "cond [3, 4], a [4], b [3, 1]", &[(&[4], -2.0, 2.0), (&[3, 1], -2.0, 2.0)], |x| {
        let c = input(x[0].device(), 5, &[3, 4], DType::Bool, 0.0, 1.0)?;
        Tensor::where_cond(&c, &x[0], &x[1])
    });
    s.add("where", "transposed cond and a, scalar b", &[(&[4, 3], -2.0, 2.0), (&[], -2.0, 2.0)], |x| {
        let c = input(x[0].device(), 6, &[4, 3], DType::Bool, 0.0, 1.0)?.t()?;
        Tensor::where_cond(&c, &x[0].t()?, &x[1])
    });
    // Rounding to a packed dtype is a step function, so no finite
    // differences here.
    for packed in [DType::F16, DType::BF16] {
        let case = s.add("cast", format!("f32 → {packed} → exp → f32"), &[(&[3, 5], -2.0, 2.0)], move |x| {
            x[0].cast(packed)?.exp()?.cast(DType::F32)
        });
        case.fd = false;
        case.check = Check::Elementwise(Tol { abs: 1e-2, rel: 1e-2 });
    }
}

/// Ops computed in f16 and bf16 (their gradients in the same dtype), against
/// the reference's gradients: rounding to a packed dtype is a step function,
/// so no finite differences. A bf16 ulp is 2⁻⁸ relative.
fn packed(s: &mut Cases) {
    for packed in [DType::F16, DType::BF16] {
        let tol = Check::Elementwise(Tol { abs: 2e-2, rel: 2e-2 });
        let case = s.add(
            "matmul",
            format!("{packed} [4, 6] @ [6, 5]"),
            &[(&[4, 6], -1.0, 1.0), (&[6, 5], -1.0, 1.0)],
            move |x| x[0].cast(packed)?.matmul(&x[1].cast(packed)?)?.cast(DType::F32),
        );
        (case.fd, case.check) = (false, tol);
        let inputs: &[(&[usize], f64, f64)] = &[(&[3, 8], -1.0, 1.0), (&[8], -1.0, 1.0)];
        let case = s.add("sum", format!("{packed} (x · b) over the last axis"), inputs, move |x| {
            x[0].cast(packed)?.mul(&x[1].cast(packed)?)?.sum(&[-1], false)?.cast(DType::F32)
        });
        (case.fd, case.check) = (false, tol);
        // The elementwise ops' backward rules in the packed dtype:
        // exp(max((a − b) / (b·b + 1.5), a / 2)).
        let inputs: &[(&[usize], f64, f64)] = &[(&[3, 5], -1.0, 1.0), (&[3, 5], -1.0, 1.0)];
        let case =
            s.add("elementwise", format!("{packed} exp(max((a − b) / (b·b + 1.5), a / 2))"), inputs, move |x| {
                let (a, b) = (x[0].cast(packed)?, x[1].cast(packed)?);
                let ratio = a.sub(&b)?.div(&b.mul(&b)?.add_scalar(1.5)?)?;
                ratio.maximum(&a.mul_scalar(0.5)?)?.exp()?.cast(DType::F32)
            });
        (case.fd, case.check) = (false, tol);
    }
}

fn reductions(s: &mut Cases) {
    for name in ["sum", "mean", "max", "min", "prod"] {
        let apply = move |t: &Tensor, axes: &[isize], keep: bool| match name {
            "sum" => t.sum(axes, keep),
            "mean" => t.mean(axes, keep),
            "max" => t.max(axes, keep),
            "min" => t.min(axes, keep),
            _ => t.prod(axes, keep),
        };
        let (lo, hi) = if name == "prod" { (0.5, 1.5) } else { (-2.0, 2.0) };
        s.add(name, "f32 [3, 4, 5] over axes (0, 2)", &[(&[3, 4, 5], lo, hi)], move |x| apply(&x[0], &[0, 2], false));
        s.add(name, "f32 [5, 4]ᵀ over axis -1, keepdim", &[(&[5, 4], lo, hi)], move |x| {
            apply(&x[0].t()?, &[-1], true)
        });
        s.add(name, "f32 [6] over all", &[(&[6], lo, hi)], move |x| apply(&x[0], &[], false));
    }
    s.add("prod", "f32 [4, 3] with signs over axis 0", &[(&[4, 3], -1.5, 1.5)], |x| x[0].prod(&[0], false));
}

fn matmul(s: &mut Cases) {
    let mm: [(&str, &[usize], &[usize]); 3] = [
        ("[3, 4] @ [4, 5]", &[3, 4], &[4, 5]),
        ("[2, 3, 4] @ [2, 4, 5] (batched)", &[2, 3, 4], &[2, 4, 5]),
        ("[2, 3, 4] @ [4, 5] (broadcast batch)", &[2, 3, 4], &[4, 5]),
    ];
    for (detail, a, b) in mm {
        s.add("matmul", format!("f32 {detail}"), &[(a, -1.0, 1.0), (b, -1.0, 1.0)], |x| x[0].matmul(&x[1]));
    }
    s.add(
        "matmul",
        "f32 [4, 3]ᵀ @ [5, 4]ᵀ (transposed views)",
        &[(&[4, 3], -1.0, 1.0), (&[5, 4], -1.0, 1.0)],
        |x| x[0].t()?.matmul(&x[1].t()?),
    );
    s.add("matmul", "f32 [4] @ [4, 5] (vector)", &[(&[4], -1.0, 1.0), (&[4, 5], -1.0, 1.0)], |x| x[0].matmul(&x[1]));
    s.add("matmul", "f32 [5, 4] @ [4] (vector)", &[(&[5, 4], -1.0, 1.0), (&[4], -1.0, 1.0)], |x| x[0].matmul(&x[1]));
}

fn views(s: &mut Cases) {
    let cube: &[(&[usize], f64, f64)] = &[(&[2, 3, 4], -2.0, 2.0)];
    s.add("reshape", "[2, 3, 4] → [6, 4]", cube, |x| x[0].reshape(&[6, 4]));
    s.add("reshape", "transposed view → [-1] (copies)", &[(&[3, 4], -2.0, 2.0)], |x| x[0].t()?.reshape(&[-1]));
    s.add("permute", "[2, 3, 4] by (2, 0, 1)", cube, |x| x[0].permute(&[2, 0, 1]));
    s.add("transpose", "[2, 3, 4] axes (0, 2)", cube, |x| x[0].transpose(0, 2));
    s.add("slice", "[5, 7] axis 1, 1..6 step 2", &[(&[5, 7], -2.0, 2.0)], |x| x[0].slice(1, Some(1), Some(6), 2));
    s.add("slice", "[5, 7] axis 0 reversed, then axis 1 -2.. step -3", &[(&[5, 7], -2.0, 2.0)], |x| {
        x[0].slice(0, None, None, -1)?.slice(1, Some(-2), None, -3)
    });
    s.add("slice", "slice of a transpose", &[(&[7, 5], -2.0, 2.0)], |x| x[0].t()?.slice(1, Some(2), None, 3));
    s.add("slice", "[5, 7] rows 1..4, then columns 2.. (unit steps)", &[(&[5, 7], -2.0, 2.0)], |x| {
        x[0].slice(0, Some(1), Some(4), 1)?.slice(1, Some(2), None, 1)
    });
    s.add("narrow", "[2, 3, 4] axis 2, 1..3", cube, |x| x[0].narrow(2, 1, 2));
    s.add("expand", "[3, 1] → [2, 3, 4]", &[(&[3, 1], -2.0, 2.0)], |x| x[0].expand(&[2, 3, 4]));
    s.add("expand", "[3, 1]ᵀ → [4, 1, 3]", &[(&[3, 1], -2.0, 2.0)], |x| x[0].t()?.expand(&[4, 1, 3]));
    s.add("unsqueeze", "[2, 3, 4] at 1", cube, |x| x[0].unsqueeze(1));
    s.add("squeeze", "[3, 1, 4] axis 1", &[(&[3, 1, 4], -2.0, 2.0)], |x| x[0].squeeze(1));
    s.add("flatten", "permuted [2, 3, 4], axes 1..=2", cube, |x| x[0].permute(&[1, 0, 2])?.flatten(1, 2));
}

fn joins_and_indexing(s: &mut Cases) {
    s.add(
        "concat",
        "[3, 2] ‖ [4, 3]ᵀ ‖ [3, 1] on axis 1",
        &[(&[3, 2], -2.0, 2.0), (&[4, 3], -2.0, 2.0), (&[3, 1], -2.0, 2.0)],
        |x| Tensor::concat(&[&x[0], &x[1].t()?, &x[2]], 1),
    );
    s.add(
        "stack",
        "three [2, 3] on axis 1",
        &[(&[2, 3], -2.0, 2.0), (&[2, 3], -2.0, 2.0), (&[2, 3], -2.0, 2.0)],
        |x| Tensor::stack(&[&x[0], &x[1], &x[2]], 1),
    );
    s.add("gather", "[3, 5] axis 1, index [3, 7] with repeats and out-of-range", &[(&[3, 5], -2.0, 2.0)], |x| {
        x[0].gather(1, &input(x[0].device(), 8, &[3, 7], DType::I32, -2.0, 6.0)?)
    });
    s.add("gather", "[5, 4]ᵀ axis 0, u32 index [2, 3] (smaller)", &[(&[5, 4], -2.0, 2.0)], |x| {
        x[0].t()?.gather(0, &input(x[0].device(), 9, &[2, 3], DType::U32, 0.0, 3.0)?)
    });
    s.add("index_select", "[6, 3] axis 0, indices with repeats", &[(&[6, 3], -2.0, 2.0)], |x| {
        let idx = Tensor::from_slice(x[0].device(), &[4i32, 0, 4, 2, 4], &[5])?;
        x[0].index_select(0, &idx)
    });
    for (name, log) in [("softmax", false), ("log_softmax", true)] {
        let f = move |t: Tensor, axis: isize| if log { t.log_softmax(axis) } else { t.softmax(axis) };
        s.add(name, "[3, 5] axis -1", &[(&[3, 5], -3.0, 3.0)], move |x| f(x[0].clone(), -1));
        s.add(name, "[5, 3]ᵀ axis 0", &[(&[5, 3], -3.0, 3.0)], move |x| f(x[0].t()?, 0));
        s.add(name, "logits near 1000 (stability)", &[(&[2, 4], 995.0, 1005.0)], move |x| f(x[0].clone(), -1));
    }
}

/// Mean cross-entropy of `logits` [B, C] against fixed-seed labels.
pub fn cross_entropy(logits: &Tensor, seed: u64) -> Result<Tensor> {
    let (b, c) = (logits.shape()[0], logits.shape()[1]);
    let labels = input(logits.device(), seed, &[b], DType::I32, 0.0, c as f64 - 1.0)?;
    let picked = logits.log_softmax(-1)?.mul(&labels.one_hot(c, DType::F32)?)?.sum(&[-1], false)?;
    picked.mean(&[], false)?.neg()
}

/// `relu(x @ w1 + b1) @ w2 + b2` on fixed-seed inputs `x` [B, w1 rows].
pub fn mlp_logits(p: &[Tensor], batch: usize, seed: u64) -> Result<Tensor> {
    let x = input(p[0].device(), seed, &[batch, p[0].shape()[0]], DType::F32, 0.0, 1.0)?;
    x.matmul(&p[0])?.add(&p[1])?.relu()?.matmul(&p[2])?.add(&p[3])
}

fn composites(s: &mut Cases) {
    s.add("square", "[5, 7]", &[(&[5, 7], -2.0, 2.0)], |x| x[0].square());
    let grad_tanh = |x: &Tensor| grad(|x: &Tensor| x.tanh()?.sum(&[], false))(x);
    s.add("grad of grad", "tanh'' of [7] (vjp of grad)", &[(&[7], -2.0, 2.0)], move |x| grad_tanh(&x[0]));
    let small: &[(&[usize], f64, f64)] =
        &[(&[6, 5], -0.5, 0.5), (&[5], -0.5, 0.5), (&[5, 3], -0.5, 0.5), (&[3], -0.5, 0.5)];
    s.add("grad of grad", "Hessian of a 6-5-3 MLP loss along the cotangent", small, |p| {
        let loss = |p: &Vec<Tensor>| cross_entropy(&mlp_logits(p, 4, 11)?.tanh()?, 12);
        let g = grad(loss)(&p.to_vec())?;
        let flat: Vec<Tensor> = g.iter().map(|t| t.reshape(&[-1])).collect::<Result<_>>()?;
        Tensor::concat(&flat.iter().collect::<Vec<_>>(), 0)
    });
    // Realizing inside f must not cut the graph (nodes keep their inputs
    // while a grad traces them).
    s.add("realized intermediate", "exp(x) realized inside f, then · x", &[(&[3, 4], -2.0, 2.0)], |x| {
        let y = x[0].exp()?;
        // pollster, not kiln::block_on: this module also builds for wasm
        // (the browser conformance page), where GPU realization never waits.
        pollster::block_on(y.realize())?;
        y.mul(&x[0])
    });
    s.add("mlp", "6-5-3 mean cross-entropy", small, |p| cross_entropy(&mlp_logits(p, 4, 11)?, 12));
    let big: &[(&[usize], f64, f64)] =
        &[(&[784, 256], -0.05, 0.05), (&[256], -0.1, 0.1), (&[256, 10], -0.1, 0.1), (&[10], -0.1, 0.1)];
    let case =
        s.add("mlp", "784-256-10 mean cross-entropy, batch 64", big, |p| cross_entropy(&mlp_logits(p, 64, 21)?, 22));
    case.fd = false;
    case.check = Check::MaxRelative(1e-4);
}
