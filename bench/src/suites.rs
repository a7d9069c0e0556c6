//! The kiln figures: matmul, reductions and row kernels, the fused chains,
//! dispatch overhead, training steps, per-example gradients (data
//! parallelism and the GPT have modules of their own). Every timing is a realization (one submit) plus a
//! one-element readback that waits for the device.

use crate::ceilings::Ceilings;
use crate::measure::{Paired, Record, Reps, time, time_paired};
use kiln::core::codegen::matmul::{MatmulConfig, ShapeClass};
use kiln::prelude::*;
use kiln_mnist::per_example::{clipped_mean, ghost_clipped_mean, per_example_grads};
use kiln_mnist::{Config, ModelKind, Trainer};
use kiln_nn::Sequential;
use kiln_nn::data::Mnist;
use kiln_nn::loss::cross_entropy;
use kiln_nn::{Conv2d, Conv2dConfig, ConvAlgorithm};
use std::sync::Arc;

/// The CUDA row of kiln's own matmul kernel at 4096³, cuBLAS off.
pub const KILN_KERNEL_4096: &str = "matmul 4096³ kiln kernel";

/// How a weight matmul row holds its weight (f32 is `None`).
#[derive(Clone, Copy)]
enum WeightFormat {
    /// Integer codes; x stays f32.
    Codes(QuantFormat),
    /// int8 codes, x quantized to int8 too.
    W8A8,
}

/// Compute all of `t`, then wait for the device by reading one element
/// (a lazy read of one element alone would compute just that element).
pub fn wait(t: &Tensor) -> Result<()> {
    kiln::block_on(t.realize())?;
    let first = t.reshape(&[-1])?.narrow(0, 0, 1)?;
    // Read as f32 whatever the dtype (a packed one is cast on the device).
    let first = if first.dtype() == DType::F32 { first } else { first.cast(DType::F32)? };
    kiln::block_on(first.to_vec::<f32>()).map(|_| ())
}

/// A realized f32 tensor of values in [-1, 1) that vary along every axis.
fn input(dev: &Device, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let t = Tensor::arange(dev, 0.0, n as f64, 1.0, DType::F32)?.mul_scalar(0.618034)?;
    let t = t
        .sub(&t.floor()?)?
        .mul_scalar(2.0)?
        .sub_scalar(1.0)?
        .reshape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())?;
    kiln::block_on(t.realize())?;
    Ok(t)
}

pub struct Ctx<'a> {
    pub dev: &'a Device,
    pub adapter: &'a str,
    pub reps: Reps,
    pub ceilings: &'a Ceilings,
    pub only: Option<&'a str>,
    /// After each figure, one more run with kernel profiling on, printed.
    pub profile: bool,
}

impl Ctx<'_> {
    pub fn wants(&self, bench: &str) -> bool {
        self.only.is_none_or(|o| o.split('|').any(|part| bench.contains(part)))
    }

    /// With `profile`, one more `run` with kernel profiling on: its device
    /// time in all and per kernel (summed over launches of one name),
    /// printed under the figure; not part of any figure.
    fn print_profile(&self, run: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        if !self.profile {
            return Ok(());
        }
        if let Err(e) = self.dev.set_kernel_profiling(true) {
            println!("    profile: {e}");
            return Ok(());
        }
        let ran = run();
        let timings = kiln::block_on(self.dev.kernel_profile());
        self.dev.set_kernel_profiling(false)?;
        ran?;
        let timings = timings?;
        let mut per_kernel: Vec<(String, usize, f64)> = Vec::new();
        for t in &timings {
            match per_kernel.iter_mut().find(|k| k.0 == t.name) {
                Some(k) => (k.1, k.2) = (k.1 + 1, k.2 + t.nanos),
                None => per_kernel.push((t.name.clone(), 1, t.nanos)),
            }
        }
        per_kernel.sort_by(|a, b| b.2.total_cmp(&a.2));
        let total: f64 = timings.iter().map(|t| t.nanos).sum();
        println!("    device time {:.3} ms over {} launches:", total / 1e6, timings.len());
        for (name, count, nanos) in per_kernel.iter().take(12) {
            println!("      {:>8.3} ms  {count:>3}×  {name}", nanos / 1e6);
        }
        Ok(())
    }

    /// `run` timed in pairs with the FMA microkernel.
    pub fn against_fma(&self, run: impl FnMut() -> Result<()>) -> Result<Paired> {
        time_paired(self.reps, || (self.ceilings.fma_run)().map_err(KilnError::Gpu), run)
    }

    /// `run` timed in pairs with the copy microkernel.
    pub fn against_copy(&self, run: impl FnMut() -> Result<()>) -> Result<Paired> {
        time_paired(self.reps, || (self.ceilings.copy_run)().map_err(KilnError::Gpu), run)
    }

    /// GFLOP/s of an m×k @ k×n product of `dtype` operands with the tuned
    /// config (or `config`).
    fn matmul(&self, bench: &str, dtype: DType, mkn: [usize; 3], config: Option<MatmulConfig>) -> Result<Record> {
        self.matmul_stored(bench, dtype, mkn, Stored::Rows, config)
    }

    /// [`Ctx::matmul`] with one operand a transposed view, as a backward
    /// pass reads them.
    fn matmul_stored(
        &self,
        bench: &str,
        dtype: DType,
        [m, k, n]: [usize; 3],
        stored: Stored,
        config: Option<MatmulConfig>,
    ) -> Result<Record> {
        let operand = |[rows, cols]: [usize; 2], transposed: bool| -> Result<Tensor> {
            let shape = if transposed { [cols, rows] } else { [rows, cols] };
            let t = input(self.dev, &shape)?.cast(dtype)?;
            kiln::block_on(t.realize())?;
            if transposed { t.t() } else { Ok(t) }
        };
        let a = operand([m, k], stored == Stored::ATransposed)?;
        let b = operand([k, n], stored == Stored::BTransposed)?;
        self.dev.set_matmul_config(config)?;
        wait(&a.matmul(&b)?)?; // tunes this shape class if needed
        let p = self.against_fma(|| wait(&a.matmul(&b)?));
        self.print_profile(&mut || wait(&a.matmul(&b)?))?;
        self.dev.set_matmul_config(None)?;
        let p = p?;
        let chosen = match config {
            Some(c) => c.name(),
            None => {
                let class = ShapeClass::of(dtype, m, n, k).name();
                let tuned = self.dev.matmul_choices().into_iter().find(|(c, _)| *c == class);
                tuned.map_or_else(
                    || format!("default {}", MatmulConfig::default_for(&self.dev.info().caps).name()),
                    |(c, cfg)| format!("{c} tuned: {cfg}"),
                )
            }
        };
        let flops = 2.0 * (m * n * k) as f64;
        let fma = self.ceilings.fma_flops / p.ceiling.median / 1e9;
        Ok(Record::rate(bench, self.adapter, p.timing, flops / 1e9, "GFLOP/s")
            .fraction(p.fraction(flops, self.ceilings.fma_flops))
            .note(format!("{chosen}; FMA ceiling alongside: {fma:.1} GFLOP/s")))
    }

    /// GB/s of `x [batch, k] @ w [k, n]` counting every byte it must read
    /// and write once (w's dominate), with `w` in f32 or held as `format`'s
    /// codes and scales (`quant_matmul`): memory-bound at a small batch,
    /// so against the copy ceiling.
    fn weight_matmul(
        &self,
        bench: &str,
        format: Option<WeightFormat>,
        batch: usize,
        [k, n]: [usize; 2],
    ) -> Result<Record> {
        let x = input(self.dev, &[batch, k])?;
        let w = input(self.dev, &[k, n])?;
        let (f, weight_bytes): (Box<dyn Fn() -> Result<Tensor>>, usize) = match format {
            None => (Box::new(|| x.matmul(&w)), 4 * k * n),
            Some(format) => {
                let quant = match format {
                    WeightFormat::Codes(q) => q,
                    WeightFormat::W8A8 => QuantFormat::INT8,
                };
                let (codes, scales) = w.t()?.quantize(quant)?;
                kiln::block_on(Tensor::realize_all(&[&codes, &scales]))?;
                let bytes = [&codes, &scales].iter().map(|t| t.dtype().storage_bytes(t.numel()) as usize).sum();
                let f: Box<dyn Fn() -> Result<Tensor>> = match format {
                    WeightFormat::Codes(q) => Box::new(move || x.quant_matmul(&codes, &scales, q)),
                    WeightFormat::W8A8 => Box::new(move || x.quant_matmul_w8a8(&codes, &scales)),
                };
                (f, bytes)
            }
        };
        wait(&f()?)?; // tunes the f32 product's shape class if needed
        let p = self.against_copy(|| wait(&f()?))?;
        self.print_profile(&mut || wait(&f()?))?;
        let bytes = (weight_bytes + 4 * batch * (k + n)) as f64;
        let copy = self.ceilings.copy_bytes / p.ceiling.median / 1e9;
        let flops = 2.0 * (batch * k * n) as f64 / p.timing.median / 1e9;
        Ok(Record::rate(bench, self.adapter, p.timing, bytes / 1e9, "GB/s")
            .fraction(p.fraction(bytes, self.ceilings.copy_bytes))
            .page_note(format!(
                "{flops:.1} GFLOP/s; weights {:.1} MiB; copy ceiling alongside: {copy:.2} GB/s",
                weight_bytes as f64 / (1 << 20) as f64
            )))
    }

    /// GB/s of `f(x)` over `shape`, counting `bytes_per_elem` per input element.
    fn memory(
        &self,
        bench: &str,
        shape: &[usize],
        bytes_per_elem: f64,
        f: impl Fn(&Tensor) -> Result<Tensor>,
    ) -> Result<Record> {
        let x = input(self.dev, shape)?;
        let n: usize = shape.iter().product();
        wait(&f(&x)?)?;
        let p = self.against_copy(|| wait(&f(&x)?))?;
        self.print_profile(&mut || wait(&f(&x)?))?;
        let bytes = bytes_per_elem * n as f64;
        let copy = self.ceilings.copy_bytes / p.ceiling.median / 1e9;
        Ok(Record::rate(bench, self.adapter, p.timing, bytes / 1e9, "GB/s")
            .fraction(p.fraction(bytes, self.ceilings.copy_bytes))
            .note(format!("copy ceiling alongside: {copy:.2} GB/s")))
    }
}

type Op<'a> = &'a dyn Fn(&Tensor) -> Result<Tensor>;

/// Apply `ops` in turn, realizing each result at once when `eager`.
fn chain(x: &Tensor, ops: &[Op], eager: bool) -> Result<Tensor> {
    let mut t = x.clone();
    for op in ops {
        t = op(&t)?;
        if eager {
            kiln::block_on(t.realize())?;
        }
    }
    Ok(t)
}

pub fn layer_norm(x: &Tensor) -> Result<Tensor> {
    let d = x.sub(&x.mean(&[-1], true)?)?;
    d.mul(&d.mul(&d)?.mean(&[-1], true)?.add_scalar(1e-5)?.rsqrt()?)
}

/// How a matmul's operands are stored: both row-major, or one of them a
/// transposed view (its columns contiguous).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stored {
    Rows,
    ATransposed,
    BTransposed,
}

pub fn run(cx: &Ctx, quick: bool, out: &mut dyn FnMut(Record)) -> Result<()> {
    for (bench, m, k, n) in [
        ("matmul 256³", 256, 256, 256),
        ("matmul 1024³", 1024, 1024, 1024),
        ("matmul 2048³", 2048, 2048, 2048),
        ("matmul 8192×256×256", 8192, 256, 256),
    ] {
        if cx.wants(bench) {
            out(cx.matmul(bench, DType::F32, [m, k, n], None)?);
        }
    }
    // The demo GPT's MLP (rows 16×128, width 128, hidden 512): its forward
    // product, and its backward ones, which read a weight or an activation
    // transposed: x's gradient g @ wᵀ, and w's gradient xᵀ @ g (each
    // beside the same product stored row-major).
    for (bench, mkn, stored) in [
        ("matmul 2048×128×512", [2048, 128, 512], Stored::Rows),
        ("matmul 2048×512×128", [2048, 512, 128], Stored::Rows),
        ("matmul 2048×512×128 Bᵀ", [2048, 512, 128], Stored::BTransposed),
        ("matmul 128×2048×512", [128, 2048, 512], Stored::Rows),
        ("matmul 128×2048×512 Aᵀ", [128, 2048, 512], Stored::ATransposed),
    ] {
        if cx.wants(bench) {
            out(cx.matmul_stored(bench, DType::F32, mkn, stored, None)?);
        }
    }
    // Too slow for the CPU adapters; the size cuBLAS is measured at.
    if cx.wants("matmul 4096³") && !cx.dev.info().is_cpu_adapter() {
        out(cx.matmul("matmul 4096³", DType::F32, [4096; 3], None)?);
    }
    // On CUDA a plain product is a cuBLAS call; kiln's own kernel (pinning a
    // config keeps cuBLAS out) is what the goal against cuBLAS measures.
    if cx.wants(KILN_KERNEL_4096) && cx.dev.info().backend == "cuda" {
        let own = MatmulConfig::default_for(&cx.dev.info().caps);
        out(cx.matmul(KILN_KERNEL_4096, DType::F32, [4096; 3], Some(own))?);
    }
    // Packed operands, unpacked in registers and multiplied in f32: against
    // the f32 row above, what reading half the bytes is worth.
    for dtype in [DType::F16, DType::BF16] {
        let bench = format!("matmul 2048³ {dtype}");
        if cx.wants(&bench) {
            out(cx.matmul(&bench, dtype, [2048; 3], None)?);
        }
    }
    // A decoder's weight matmul at batch 1 (memory-bound: the weights are
    // read once per row of x) and 64, in f32 and with integer weights.
    // int8 w8a8: x quantized too, the products summed by dot4I8Packed.
    let formats = [
        (None, "f32"),
        (Some(WeightFormat::Codes(QuantFormat::INT8)), "int8"),
        (Some(WeightFormat::Codes(QuantFormat::int4(32))), "int4/32"),
        (Some(WeightFormat::W8A8), "int8 w8a8"),
    ];
    for batch in [1, 64] {
        for (format, name) in formats {
            let bench = format!("weight matmul 4096² {name} batch {batch}");
            if cx.wants(&bench) {
                out(cx.weight_matmul(&bench, format, batch, [4096, 4096])?);
            }
        }
    }
    // Every kernel version at one size, so progress is visible.
    if !quick {
        let info = cx.dev.info();
        let usable = MatmulConfig::CANDIDATES.into_iter().filter(|c| c.runs_on(&info.caps));
        for c in usable.filter(|c| cx.wants(&format!("matmul 1024³ {}", c.name()))) {
            out(cx.matmul(&format!("matmul 1024³ {}", c.name()), DType::F32, [1024; 3], Some(c))?);
        }
    }
    let n = 1 << 24;
    if cx.wants("sum 16M f32") {
        out(cx.memory("sum 16M f32", &[n], 4.0, |x| x.sum(&[], false))?);
    }
    // Over columns: a gradient's sum over a batch, and over a long one.
    for (bench, shape) in
        [("sum [64,262144] over axis 0", [64, 1 << 18]), ("sum [16384,1024] over axis 0", [1 << 14, 1024])]
    {
        if cx.wants(bench) {
            out(cx.memory(bench, &shape, 4.0, |x| x.sum(&[0], false))?);
        }
    }
    // 4 bytes read and 2 written per element.
    for dtype in [DType::F16, DType::BF16] {
        let bench = format!("cast 16M f32 → {dtype}");
        if cx.wants(&bench) {
            out(cx.memory(&bench, &[n], 6.0, |x| x.cast(dtype))?);
        }
    }
    // Draws: 4 bytes written per element (the input only gives the shape).
    // Each element hashes its counter through Threefry's 20 rounds.
    for (bench, mean) in [("uniform 16M f32 draw", false), ("normal 16M f32 draw", true)] {
        if cx.wants(bench) {
            let key = Key::new(7);
            out(cx.memory(bench, &[n], 4.0, |x| match mean {
                false => kiln::random::uniform(x.device(), key, x.shape(), DType::F32, 0.0, 1.0),
                true => kiln::random::normal(x.device(), key, x.shape(), DType::F32, 0.0, 1.0),
            })?);
        }
    }
    if cx.wants("softmax [4096,1024]") {
        out(cx.memory("softmax [4096,1024]", &[4096, 1024], 8.0, |x| x.softmax(-1))?);
    }
    // Rows too long for the row kernel (a vocabulary's logits): tree
    // reductions, then an elementwise pass that reads their values per row.
    if cx.wants("softmax [16,262144]") {
        out(cx.memory("softmax [16,262144]", &[16, 262144], 8.0, |x| x.softmax(-1))?);
    }
    // A real vocabulary's length (GPT-2's), odd: rows that split into
    // neither vec4s nor eighths, so every pass reads one element at a time.
    if cx.wants("softmax [64,50257]") {
        out(cx.memory("softmax [64,50257]", &[64, 50257], 8.0, |x| x.softmax(-1))?);
    }
    if cx.wants("layer norm [4096,1024]") {
        out(cx.memory("layer norm [4096,1024]", &[4096, 1024], 8.0, layer_norm)?);
    }
    if cx.wants("8-op") {
        chains(cx, out)?;
    }
    if !cx.wants("dispatch overhead") {
        return training_steps(cx, out);
    }
    // Dispatch overhead: tiny ops realized one by one (one kernel and one
    // submit each), one readback at the end.
    let x = input(cx.dev, &[64])?;
    let ops = 50;
    let t = time(cx.reps, || {
        let mut y = x.clone();
        for _ in 0..ops {
            y = y.add_scalar(1.0)?;
            kiln::block_on(y.realize())?;
        }
        wait(&y)
    })?;
    out(Record::duration("dispatch overhead", cx.adapter, t, 1e6 / ops as f64, "µs/op"));
    training_steps(cx, out)
}

/// The two 8-op chains on [4096, 4096] with a broadcast add, fused (one
/// kernel) and unfused (one kernel per op): ms per chain.
fn chains(cx: &Ctx, out: &mut dyn FnMut(Record)) -> Result<()> {
    let m = input(cx.dev, &[4096, 4096])?;
    let b = input(cx.dev, &[4096])?;
    let b16 = b.cast(DType::F16)?;
    wait(&b16)?;
    let cheap: [Op; 8] = [
        // The bias in the chain's dtype (f16 for the f16 row below).
        &|t| t.add(if t.dtype() == DType::F16 { &b16 } else { &b }),
        &|t| t.mul_scalar(0.5),
        &|t| t.sub_scalar(1.0),
        &|t| t.abs(),
        &|t| t.relu(),
        &|t| t.neg(),
        &|t| t.add_scalar(2.0),
        &|t| t.mul_scalar(3.0),
    ];
    let transcendental: [Op; 8] = [
        &|t| t.add(&b),
        &|t| t.mul_scalar(0.5),
        &|t| t.tanh(),
        &|t| t.exp(),
        &|t| t.sub_scalar(1.0),
        &|t| t.abs(),
        &|t| t.sqrt(),
        &|t| t.neg(),
    ];
    // Fraction: the copy ceiling's time for the same 8 B/element over the
    // figure's, the two timed in pairs.
    let timed = |bench: &str, bytes_per_element: f64, run: &dyn Fn() -> Result<Tensor>| -> Result<Record> {
        wait(&run()?)?;
        let p = cx.against_copy(|| wait(&run()?))?;
        cx.print_profile(&mut || wait(&run()?))?;
        let fraction = p.fraction(bytes_per_element * (4096.0 * 4096.0), cx.ceilings.copy_bytes);
        Ok(Record::duration(bench, cx.adapter, p.timing, 1e3, "ms").fraction(fraction))
    };
    // kiln's own generated kernel for one op: what the code generator costs
    // before any chain.
    out(timed("1-op kernel (neg) generated", 8.0, &|| m.neg())?);
    for (name, ops) in [("arithmetic", &cheap), ("transcendental", &transcendental)] {
        for (how, eager) in [("fused", false), ("unfused", true)] {
            out(timed(&format!("8-op {name} chain {how}"), 8.0, &|| chain(&m, ops, eager))?);
        }
    }
    // The arithmetic chain on f16 values (4 bytes an element): computed in
    // f16 where the adapter has `shader-f16`, else unpacked to f32.
    let m16 = m.cast(DType::F16)?;
    wait(&m16)?;
    let record = timed("8-op arithmetic chain fused f16", 4.0, &|| chain(&m16, &cheap, false))?;
    out(record.note(cx.dev.info().f16_path().to_string()));
    Ok(())
}

/// One epoch as native-demo runs it: steps ten at a time with their
/// losses read back together, then the evaluation on the test set. Beside
/// the step's row, it shows what the loop around the steps costs. At most
/// three repetitions (an epoch takes seconds on CPU adapters).
fn demo_epoch(cx: &Ctx, bench: &str, trainer: &mut Trainer) -> Result<Record> {
    let per_epoch = trainer.steps_per_epoch() as usize;
    let batch = trainer.config().batch_size;
    let mut epoch = || -> Result<()> {
        let mut left = per_epoch;
        while left > 0 {
            let n = left.min(10);
            if kiln::block_on(trainer.run(n))?.len() != n {
                return Err(KilnError::Invalid { op: "bench", detail: "the run ended before the epoch".into() });
            }
            left -= n;
        }
        kiln::block_on(trainer.evaluate()).map(|_| ())
    };
    let t = time(Reps(cx.reps.0.min(3)), &mut epoch)?;
    let rate = (per_epoch * batch) as f64 / t.median;
    let note = format!("{per_epoch} steps of {batch} and a test evaluation; {rate:.0} samples/s");
    Ok(Record::duration(bench, cx.adapter, t, 1.0, "s").note(note))
}

/// The bundled MNIST subset, or env KILN_MNIST_DIR for a binary run away
/// from its checkout (scripts/device-check).
pub fn mnist_dir() -> String {
    std::env::var("KILN_MNIST_DIR").unwrap_or(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k").into())
}

/// The demo's training steps (jit-captured, one submit each; batch 64; the
/// MLP's in mixed precision too: f16 with loss scaling, bf16) and one conv
/// layer both ways (forward, and forward with its gradients): ms per step,
/// and kernels per training step in the note.
fn training_steps(cx: &Ctx, out: &mut dyn FnMut(Record)) -> Result<()> {
    let data = || Mnist::load(mnist_dir());
    let runs = [(ModelKind::Mlp, DType::F32), (ModelKind::Mlp, DType::F16), (ModelKind::Mlp, DType::BF16)];
    for (model, precision) in runs.into_iter().chain([(ModelKind::Cnn, DType::F32)]) {
        let bench = match precision {
            DType::F32 => format!("{model} train step (batch 64)"),
            _ => format!("{model} train step {precision} (batch 64)"),
        };
        if !cx.wants(&bench) {
            continue;
        }
        let config = Config { precision, ..model.default_config() };
        let mut trainer = Trainer::new(cx.dev, Arc::new(data()?), config)?;
        wait(&kiln::block_on(trainer.step())?)?; // captures the step
        let before = cx.dev.stats().kernels_launched;
        wait(&kiln::block_on(trainer.step())?)?;
        let kernels = cx.dev.stats().kernels_launched - before;
        let t = time(cx.reps, || wait(&kiln::block_on(trainer.step())?))?;
        cx.print_profile(&mut || wait(&kiln::block_on(trainer.step())?))?;
        out(Record::duration(&bench, cx.adapter, t, 1e3, "ms").page_note(format!("{kernels} kernels per step")));
        let bench = format!("{model} epoch (demo loop)");
        if model == ModelKind::Mlp && precision == DType::F32 && cx.wants(&bench) {
            out(demo_epoch(cx, &bench, &mut trainer)?);
        }
    }
    // The CNN's second layer: [64, 16, 12, 12] * [32, 16, 5, 5].
    for algorithm in [ConvAlgorithm::Im2col, ConvAlgorithm::Direct] {
        let name = format!("{algorithm:?}").to_lowercase();
        let x = input(cx.dev, &[64, 16, 12, 12])?;
        let conv = Conv2d {
            weight: input(cx.dev, &[32, 16, 5, 5])?,
            bias: Some(input(cx.dev, &[32])?),
            config: Conv2dConfig { algorithm, ..Conv2dConfig::default() },
        };
        let bench = format!("conv2d {name} [64,16,12,12]*[32,16,5,5]");
        if cx.wants(&bench) {
            let t = time(cx.reps, || wait(&conv.forward(&x)?))?;
            out(Record::duration(&bench, cx.adapter, t, 1e3, "ms"));
        }
        let bench = format!("conv2d {name} with gradients");
        if cx.wants(&bench) {
            let step = || {
                let (loss, g) = value_and_grad(|c: &Conv2d| c.forward(&x)?.sum(&[], false))(&conv)?;
                kiln::block_on(Tensor::realize_all(&[&loss, &g.weight]))?;
                wait(&g.weight)
            };
            let t = time(cx.reps, step)?;
            out(Record::duration(&bench, cx.adapter, t, 1e3, "ms"));
        }
    }
    per_example(cx, out)?;
    crate::data_parallel::data_parallel(cx, out)?;
    crate::gpt::gpt(cx, out)?;
    if crate::hf_rows::wanted(cx) {
        crate::hf_rows::rows(cx, out)?;
    }
    Ok(())
}

/// Per-example gradients of the demo's MLP for a batch of 64: `vmap(grad)`
/// against a loop of 64 `grad` calls (realized together: one submit, as
/// the vmap's), with one ordinary batched gradient for scale in the note;
/// and DP-SGD's clipped mean of them (`kiln_mnist::per_example`): from
/// the per-example gradients, and by ghost clipping, without them.
fn per_example(cx: &Ctx, out: &mut dyn FnMut(Record)) -> Result<()> {
    let (vmapped, looped) = ("per-example grads (vmap)", "per-example grads (loop)");
    let clipped = "per-example clipped mean (vmap)";
    let ghost = "per-example clipped mean (ghost)";
    if ![vmapped, looped, clipped, ghost].iter().any(|b| cx.wants(b)) {
        return Ok(());
    }
    let batch = 64;
    let model = ModelKind::Mlp.build(cx.dev, Key::new(7))?;
    let x = input(cx.dev, &[batch, 784])?;
    let labels: Vec<i32> = (0..batch as i32).map(|i| i % 10).collect();
    let y = Tensor::from_slice(cx.dev, &labels, &[batch])?;
    let leaves = model.leaves();
    kiln::block_on(Tensor::realize_all(&leaves.iter().chain([&x, &y]).collect::<Vec<_>>()))?;
    let realize = |ts: Vec<Tensor>| -> Result<()> {
        kiln::block_on(Tensor::realize_all(&ts.iter().collect::<Vec<_>>()))?;
        wait(&ts[0])
    };
    let loss = |m: &Sequential, x: &Tensor, y: &Tensor| cross_entropy(&m.forward(x)?, y);
    if cx.wants(clipped) {
        let mut step = || {
            let (mean, norms) = clipped_mean(&per_example_grads(&model, &x, &y)?, 1.0)?;
            realize(mean.leaves().into_iter().chain([norms]).collect())
        };
        let t = time(cx.reps, &mut step)?;
        cx.print_profile(&mut step)?;
        out(Record::duration(clipped, cx.adapter, t, 1e3, "ms").note("norms and the clipped mean, one submit"));
    }
    if cx.wants(ghost) {
        let mut step = || {
            let (mean, norms) = ghost_clipped_mean(&model, &x, &y, 1.0)?;
            realize(mean.leaves().into_iter().chain([norms]).collect())
        };
        let t = time(cx.reps, &mut step)?;
        cx.print_profile(&mut step)?;
        out(Record::duration(ghost, cx.adapter, t, 1e3, "ms")
            .note("the same, from per-layer norms: no per-example gradients"));
    }
    if !cx.wants(vmapped) && !cx.wants(looped) {
        return Ok(());
    }
    let batched = time(cx.reps, || realize(kiln::grad(|m: &Sequential| loss(m, &x, &y))(&model)?.leaves()))?;
    let v = time(cx.reps, || realize(per_example_grads(&model, &x, &y)?.leaves()))?;
    cx.print_profile(&mut || realize(per_example_grads(&model, &x, &y)?.leaves()))?;
    let each = || {
        let mut all = Vec::new();
        for i in 0..batch {
            let (xi, yi) = (x.narrow(0, i, 1)?, y.narrow(0, i, 1)?);
            all.extend(kiln::grad(|m: &Sequential| loss(m, &xi, &yi))(&model)?.leaves());
        }
        realize(all)
    };
    let l = time(Reps(cx.reps.0.min(3)), each)?;
    let note = format!(
        "{:.1}× as fast as the loop; {:.2}× one batched gradient ({:.2} ms)",
        l.median / v.median,
        v.median / batched.median,
        batched.median * 1e3
    );
    out(Record::duration(vmapped, cx.adapter, v, 1e3, "ms").page_note(note));
    out(Record::duration(looped, cx.adapter, l, 1e3, "ms").note(format!("{batch} grad calls, realized together")));
    Ok(())
}
