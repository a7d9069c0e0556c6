//! `vmap` against a loop and composed with the other transforms, as checks
//! that the native tests (tests/tests/vmap.rs), docs/CONFORMANCE.md and the
//! browser's conformance page all run: functions that together use every
//! kind of batching rule against `f` applied example by example and
//! stacked, per-example gradients (`vmap(grad)`), `grad(vmap)`, nested
//! `vmap`, `jit(vmap)` and `vmap(jit)` (each captured once), and keys
//! batched into independent streams.

use crate::browser::Browser;
use crate::{Outcome, Tol, compare};
use kiln::prelude::*;

/// What the browser's results name a composition check by: this, then its op.
pub const BROWSER_PREFIX: &str = "vmap composition: ";

/// Values of mapped and looped results: the same arithmetic in other
/// kernels (f16 casts included, whose rounding both share).
const TOL: Tol = Tol { abs: 1e-4, rel: 1e-4 };

type F = fn(&Vec<Tensor>) -> Result<Vec<Tensor>>;

/// A function, its inputs' shapes, their batch axes and the output's.
struct Looped {
    name: &'static str,
    f: F,
    shapes: &'static [&'static [usize]],
    in_axes: &'static [Option<isize>],
    out_axis: isize,
}

fn looped_cases() -> Vec<Looped> {
    let case = |name, f, shapes, in_axes, out_axis| Looped { name, f, shapes, in_axes, out_axis };
    vec![
        case("unary, cast", |x| Ok(vec![x[0].exp()?.neg()?.cast(DType::F16)?]), &[&[5, 3, 4]], &[Some(0)], 0),
        case(
            "binary with a shared operand",
            |x| Ok(vec![x[0].mul(&x[1])?.add(&x[0])?]),
            &[&[5, 6], &[6]],
            &[Some(0), None],
            0,
        ),
        case(
            "where",
            |x| Ok(vec![Tensor::where_cond(&x[0].gt(&x[1])?, &x[0], &x[1])?]),
            &[&[4, 7], &[4, 7]],
            &[Some(0), Some(0)],
            0,
        ),
        case("reductions", |x| Ok(vec![x[0].sum(&[0], false)?, x[0].max(&[-1], true)?]), &[&[5, 3, 4]], &[Some(0)], 0),
        case("argmax", |x| Ok(vec![x[0].argmax(Some(-1), false)?]), &[&[5, 3, 4]], &[Some(0)], 0),
        case("reshape, permute", |x| Ok(vec![x[0].reshape(&[4, 3])?.transpose(0, 1)?]), &[&[6, 3, 4]], &[Some(0)], 0),
        case("slice", |x| Ok(vec![x[0].narrow(1, 1, 2)?]), &[&[4, 3, 5]], &[Some(0)], 0),
        case("expand", |x| Ok(vec![x[0].broadcast_to(&[2, 3, 4])?]), &[&[5, 3, 1]], &[Some(0)], 0),
        case(
            "matmul, shared right operand",
            |x| Ok(vec![x[0].matmul(&x[1])?]),
            &[&[6, 3, 4], &[4, 5]],
            &[Some(0), None],
            0,
        ),
        case(
            "matmul, vector times weights",
            |x| Ok(vec![x[0].unsqueeze(0)?.matmul(&x[1])?.squeeze(0)?]),
            &[&[6, 4], &[4, 5]],
            &[Some(0), None],
            0,
        ),
        case(
            "matmul, both batched",
            |x| Ok(vec![x[0].matmul(&x[1])?]),
            &[&[6, 3, 4], &[6, 4, 2]],
            &[Some(0), Some(0)],
            0,
        ),
        case(
            "matmul, shared left operand",
            |x| Ok(vec![x[0].matmul(&x[1])?]),
            &[&[3, 4], &[6, 4, 2]],
            &[None, Some(0)],
            0,
        ),
        case(
            "concat with a shared part",
            |x| Ok(vec![Tensor::concat(&[&x[0], &x[1]], 0)?]),
            &[&[5, 2, 3], &[4, 3]],
            &[Some(0), None],
            0,
        ),
        case(
            "gather by a batched index",
            |x| Ok(vec![x[0].index_select(0, &x[1].mul_scalar(3.0)?.cast(DType::I32)?)?]),
            &[&[5, 4], &[5, 3]],
            &[None, Some(0)],
            0,
        ),
        case(
            "constants inside",
            |x| Ok(vec![x[0].add(&Tensor::arange(x[0].device(), 0.0, 4.0, 1.0, DType::F32)?)?.mul_scalar(2.0)?]),
            &[&[3, 4]],
            &[Some(0)],
            0,
        ),
        case(
            "batch axis last, output axis 1",
            |x| Ok(vec![x[0].exp()?.sum(&[0], true)?]),
            &[&[2, 3, 5]],
            &[Some(-1)],
            1,
        ),
        case(
            "batch axis 1, output axis last (negative)",
            |x| Ok(vec![x[0].tanh()?.matmul(&x[1])?]),
            &[&[3, 4, 2], &[2, 5]],
            &[Some(1), None],
            -1,
        ),
    ]
}

/// What a check runs.
enum Kind {
    /// `vmap` of a [`Looped`] case against the loop.
    Loop(usize),
    PerExampleGradients,
    GradOfVmap,
    NestedScalar,
    NestedMatmul,
    JitOfVmap,
    VmapOfJit,
    VmapOfTrace,
    Keys,
}

/// One check: rows of docs/CONFORMANCE.md are its op and detail.
pub struct Check {
    pub op: &'static str,
    pub detail: String,
    kind: Kind,
}

/// Every check, in the order of the page.
pub fn all() -> Vec<Check> {
    let check = |op, detail: &str, kind| Check { op, detail: detail.into(), kind };
    let mut all: Vec<Check> =
        looped_cases().iter().enumerate().map(|(k, c)| check("vmap against a loop", c.name, Kind::Loop(k))).collect();
    all.extend([
        check("vmap(grad)", "a dense layer's gradient, each example's", Kind::PerExampleGradients),
        check("grad(vmap)", "of the summed per-example losses: the batched gradient", Kind::GradOfVmap),
        check("vmap(vmap)", "a scalar function over a grid", Kind::NestedScalar),
        check("vmap(vmap)", "a matmul with a shared operand, then a sum", Kind::NestedMatmul),
        check("jit(vmap)", "captured once, replayed on new inputs", Kind::JitOfVmap),
        check("vmap(jit)", "captured once, equals the jit per example", Kind::VmapOfJit),
        check("vmap(jit.trace)", "a jit'd function mapped through its trace", Kind::VmapOfTrace),
        check("vmap over keys", "each example draws from its own key, bit for bit", Kind::Keys),
    ]);
    all
}

impl Check {
    /// The check on `dev`; an error on the way is a failure naming it.
    pub async fn run(&self, dev: &Device) -> Outcome {
        let mut v = Verdict::default();
        match self.run_into(dev, &mut v).await {
            Ok(()) => v.outcome(),
            Err(e) => Outcome::failed(e.to_string()),
        }
    }

    async fn run_into(&self, dev: &Device, v: &mut Verdict) -> Result<()> {
        let rng = |s: &[usize], seed| crate::rng::tensor(dev, s, seed, -1.0, 1.0);
        match self.kind {
            Kind::Loop(k) => against_the_loop(&looped_cases()[k], dev, v).await,
            Kind::PerExampleGradients => {
                let (w, bias, xs, ys) = (rng(&[4, 3], 1), rng(&[3], 2), rng(&[8, 4], 3), rng(&[8, 3], 4));
                let grads = per_example_gradients(&w, &bias, &xs, &ys)?;
                v.expect("gradients", grads.len() == 2, format!("{} gradients for 2 leaves", grads.len()));
                for i in 0..8 {
                    let (x, y) = (xs.narrow(0, i, 1)?.squeeze(0)?, ys.narrow(0, i, 1)?.squeeze(0)?);
                    let want = kiln::grad(|p: &Vec<Tensor>| loss(p, &x, &y))(&vec![w.clone(), bias.clone()])?;
                    for (g, want) in grads.iter().zip(&want) {
                        v.close(&format!("example {i}"), &g.narrow(0, i, 1)?.squeeze(0)?, want).await?;
                    }
                }
                Ok(())
            }
            Kind::GradOfVmap => {
                let (w, bias, xs, ys) = (rng(&[4, 3], 1), rng(&[3], 2), rng(&[8, 4], 3), rng(&[8, 3], 4));
                let total = |p: &Vec<Tensor>| {
                    let each = |d: &Vec<Tensor>| Ok(vec![loss(p, &d[0], &d[1])?]);
                    kiln::vmap(each, vec![Some(0)], vec![0])(&vec![xs.clone(), ys.clone()])?[0].sum(&[], false)
                };
                let g = kiln::grad(total)(&vec![w.clone(), bias.clone()])?;
                let each = per_example_gradients(&w, &bias, &xs, &ys)?;
                v.expect("gradients", g.len() == 2 && each.len() == 2, format!("{} and {}", g.len(), each.len()));
                for (k, (summed, each)) in g.iter().zip(&each).enumerate() {
                    v.close(&format!("leaf {k}"), summed, &each.sum(&[0], false)?).await?;
                }
                Ok(())
            }
            Kind::NestedScalar => {
                // Each column's values squared plus one, plus the column's
                // sum: mapping along rows instead would add the rows' sums.
                let inner = |x: &Vec<Tensor>| Ok(vec![x[0].mul(&x[0])?.add_scalar(1.0)?]);
                let grid = rng(&[3, 5], 5);
                let outer = |x: &Vec<Tensor>| {
                    let squares = kiln::vmap(inner, vec![Some(0)], vec![0])(x)?;
                    Ok(vec![squares[0].add(&x[0].sum(&[], false)?)?])
                };
                let twice = kiln::vmap(outer, vec![Some(1)], vec![1])(&vec![grid.clone()])?;
                let want = grid.mul(&grid)?.add_scalar(1.0)?.add(&grid.sum(&[0], true)?)?;
                v.close("grid", &twice[0], &want).await
            }
            Kind::NestedMatmul => {
                let (rows, shared) = (rng(&[3, 5, 4], 6), rng(&[4, 2], 7));
                let inner = |x: &Vec<Tensor>| Ok(vec![x[0].unsqueeze(0)?.matmul(&x[1])?.sum(&[], false)?]);
                let outer = |x: &Vec<Tensor>| kiln::vmap(inner, vec![Some(0), None], vec![0])(x);
                let twice = kiln::vmap(outer, vec![Some(0), None], vec![0])(&vec![rows.clone(), shared.clone()])?;
                v.close("sums", &twice[0], &rows.matmul(&shared)?.sum(&[2], false)?).await
            }
            Kind::JitOfVmap => {
                let f = |x: &Vec<Tensor>| Ok(vec![x[0].exp()?.sum(&[-1], false)?]);
                let step = kiln::jit_flat(move |xs: &[Tensor]| kiln::vmap(f, vec![Some(0)], vec![0])(&xs.to_vec()));
                for seed in 0..3 {
                    let x = crate::rng::tensor(dev, &[16, 32], seed, 0.0, 1.0);
                    let out = step.call(std::slice::from_ref(&x)).await?;
                    v.close(&format!("call {seed}"), &out[0], &x.exp()?.sum(&[-1], false)?).await?;
                }
                let captures = step.captures();
                v.expect("captures", captures == captured_once(dev), format!("captured {captures} times"));
                Ok(())
            }
            Kind::VmapOfJit => {
                let f = |x: &[Tensor]| Ok(vec![x[0].matmul(&x[1])?.tanh()?.sum(&[-1], false)?]);
                let (per_example, batched) = (kiln::jit_flat(f), kiln::jit_flat(f).vmap(vec![Some(0), None], vec![0]));
                let w = rng(&[8, 6], 7);
                for seed in 0..3 {
                    let xs = rng(&[5, 3, 8], seed);
                    let out = batched.call(&[xs.clone(), w.clone()]).await?;
                    let mut each = Vec::new();
                    for i in 0..5 {
                        each.push(per_example.call(&[xs.narrow(0, i, 1)?.squeeze(0)?, w.clone()]).await?.remove(0));
                    }
                    v.close(&format!("call {seed}"), &out[0], &Tensor::stack(&each.iter().collect::<Vec<_>>(), 0)?)
                        .await?;
                }
                let captures = batched.captures();
                let once = captures == captured_once(dev);
                v.expect("captures", once, format!("the batched function was captured {captures} times"));
                Ok(())
            }
            Kind::VmapOfTrace => {
                let jitted = kiln::jit_flat(|x: &[Tensor]| Ok(vec![x[0].exp()?.mul(&x[1])?]));
                let (xs, w) = (rng(&[6, 4], 1), rng(&[4], 2));
                let mapped = kiln::vmap(|x: &Vec<Tensor>| jitted.trace(x), vec![Some(0), None], vec![0])(&vec![
                    xs.clone(),
                    w.clone(),
                ])?;
                v.close("values", &mapped[0], &xs.exp()?.mul(&w)?).await?;
                v.expect("captures", jitted.captures() == 0, "tracing captured".into());
                Ok(())
            }
            Kind::Keys => batched_keys(dev, v).await,
        }
    }
}

/// What a function jit'd on `dev` is captured as over several calls:
/// once, or never on the CPU reference (nothing to capture; it runs the
/// function each time).
fn captured_once(dev: &Device) -> usize {
    usize::from(!dev.is_cpu())
}

/// `vmap` of `c` against `f` applied to each example, stacked.
async fn against_the_loop(c: &Looped, dev: &Device, v: &mut Verdict) -> Result<()> {
    let xs: Vec<Tensor> =
        c.shapes.iter().enumerate().map(|(i, s)| crate::rng::tensor(dev, s, 10 + i as u64, 0.0, 1.0)).collect();
    let b = c
        .shapes
        .iter()
        .zip(c.in_axes)
        .find_map(|(s, a)| a.map(|a| s[a.rem_euclid(s.len() as isize) as usize]))
        .expect("a batched input");
    let mapped = kiln::vmap(c.f, c.in_axes.to_vec(), vec![c.out_axis])(&xs)?;
    let mut per: Vec<Vec<Tensor>> = Vec::with_capacity(b);
    for i in 0..b {
        let example = xs
            .iter()
            .zip(c.in_axes)
            .map(|(x, a)| match a {
                Some(a) => x.narrow(*a, i, 1)?.squeeze(*a),
                None => Ok(x.clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        per.push((c.f)(&example)?);
    }
    let outputs = per[0].len();
    v.expect("outputs", mapped.len() == outputs, format!("vmap gave {} outputs, the loop {outputs}", mapped.len()));
    for (k, got) in mapped.iter().enumerate().take(outputs) {
        let want = Tensor::stack(&per.iter().map(|o| &o[k]).collect::<Vec<_>>(), c.out_axis)?;
        v.close(&format!("output {k}"), got, &want).await?;
    }
    Ok(())
}

/// A dense layer's squared error for one example (a row vector through it).
fn loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let d = x.unsqueeze(0)?.matmul(&p[0])?.add(&p[1])?.tanh()?.squeeze(0)?.sub(y)?;
    d.mul(&d)?.sum(&[], false)
}

/// Each example's gradient of [`loss`] by `vmap(grad)`: the weight's and the bias's.
fn per_example_gradients(w: &Tensor, bias: &Tensor, xs: &Tensor, ys: &Tensor) -> Result<Vec<Tensor>> {
    let per_example = |inputs: &Vec<Tensor>| {
        let (params, x, y) = (inputs[..2].to_vec(), &inputs[2], &inputs[3]);
        kiln::grad(|p: &Vec<Tensor>| loss(p, x, y))(&params)
    };
    let inputs = vec![w.clone(), bias.clone(), xs.clone(), ys.clone()];
    kiln::vmap(per_example, vec![None, None, Some(0), Some(0)], vec![0])(&inputs)
}

/// A key tensor gives the numbers its `Key` gives, and `vmap` over a
/// tensor of keys draws each example from its own key (JAX's
/// `vmap(random.normal)`), bit for bit, in one batched graph.
async fn batched_keys(dev: &Device, v: &mut Verdict) -> Result<()> {
    use kiln::random;
    let keys = Key::new(42).split(5);
    let draw = |key: &Tensor| -> Result<Vec<Tensor>> {
        let dev = key.device();
        let z = random::normal(dev, key, &[3, 4], DType::F32, 0.0, 1.0)?;
        let u = random::uniform(dev, key, &[7], DType::F32, -1.0, 1.0)?;
        let n = random::randint(dev, key, &[6], -3, 9)?.cast(DType::F32)?;
        Ok(vec![z, u, n])
    };
    let mapped = kiln::vmap(|k: &Vec<Tensor>| draw(&k[0]), vec![Some(0)], vec![0])(&vec![random::keys(dev, &keys)?])?;
    v.expect("shape", mapped[0].shape() == [5, 3, 4], format!("the batch axis leads: {:?}", mapped[0].shape()));
    for (i, key) in keys.iter().enumerate() {
        let from_key = [
            random::normal(dev, *key, &[3, 4], DType::F32, 0.0, 1.0)?,
            random::uniform(dev, *key, &[7], DType::F32, -1.0, 1.0)?,
            random::randint(dev, *key, &[6], -3, 9)?.cast(DType::F32)?,
        ];
        let from_tensor = draw(&key.to_tensor(dev)?)?;
        for (k, want) in from_key.iter().enumerate() {
            v.same(&format!("draw {k} from key {i} as a tensor"), &from_tensor[k], want).await?;
            v.same(&format!("draw {k} of example {i} under vmap"), &mapped[k].narrow(0, i, 1)?.squeeze(0)?, want)
                .await?;
        }
    }
    let (first, second) =
        (mapped[0].narrow(0, 0, 1)?.to_vec::<f32>().await?, mapped[0].narrow(0, 1, 1)?.to_vec::<f32>().await?);
    v.expect("streams", first != second, "examples 0 and 1 drew the same numbers".into());
    Ok(())
}

/// Comparisons folded into one outcome: the largest error, and the first
/// failure, named.
#[derive(Default)]
struct Verdict {
    max_abs_err: f64,
    failure: Option<String>,
}

impl Verdict {
    fn expect(&mut self, what: &str, ok: bool, detail: String) {
        if !ok && self.failure.is_none() {
            self.failure = Some(format!("{what}: {detail}"));
        }
    }

    /// `got` within [`TOL`] of `want`, of the same shape and dtype.
    async fn close(&mut self, what: &str, got: &Tensor, want: &Tensor) -> Result<()> {
        if got.shape() != want.shape() || got.dtype() != want.dtype() {
            let (gs, ws) = (got.shape(), want.shape());
            self.expect(what, false, format!("{} {gs:?}, the loop's {} {ws:?}", got.dtype(), want.dtype()));
            return Ok(());
        }
        let o = compare(&values(got).await?, &values(want).await?, TOL);
        self.max_abs_err = self.max_abs_err.max(o.max_abs_err);
        self.expect(what, o.passed, o.failure.unwrap_or_default());
        Ok(())
    }

    /// `got` and `want` bit for bit.
    async fn same(&mut self, what: &str, got: &Tensor, want: &Tensor) -> Result<()> {
        let bits = |v: Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let (g, w) = (bits(got.to_vec::<f32>().await?), bits(want.to_vec::<f32>().await?));
        self.expect(what, g == w, "the bits differ".into());
        Ok(())
    }

    fn outcome(self) -> Outcome {
        Outcome { max_abs_err: self.max_abs_err, passed: self.failure.is_none(), failure: self.failure }
    }
}

async fn values(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.cast(DType::F32)?.to_host().await?.data)
}

/// Every check on the CPU reference and each adapter, the devices at once.
#[cfg(not(target_arch = "wasm32"))]
pub fn run(found: &[crate::adapters::Found]) -> Vec<crate::batch_check::BatchRow> {
    let checks = all();
    let name = |c: &Check| (c.op, c.detail.clone());
    crate::batch_check::rows_on(found, &checks, name, |c, device| Some(pollster::block_on(c.run(device))))
}

/// The "vmap compositions" section of docs/CONFORMANCE.md.
pub fn markdown(rows: &[crate::batch_check::BatchRow], columns: &[String], browser: Option<&Browser>) -> String {
    let about = "`vmap` of functions that together use every kind of batching rule, against the function applied \
                 to each example and stacked (within 1e-4), and composed with the other transforms: per-example \
                 gradients (`vmap(grad)`) against each example's gradient, `grad(vmap)` against the sum of the \
                 per-example gradients, `vmap` of `vmap`, `jit(vmap)` and `vmap(jit)` each captured once over \
                 three calls, and a batch of keys drawing each example's numbers bit for bit as its own key does \
                 (`tests/src/vmap_checks.rs`).";
    crate::batch_check::section("vmap compositions", about, BROWSER_PREFIX, rows, columns, browser)
}
