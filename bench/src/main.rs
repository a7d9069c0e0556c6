//! First benchmark figures for the foundation's kernels on each adapter:
//! median of 7 timed runs after a warm-up, each a full realization (one
//! submit) plus a one-element readback to wait for the GPU. The full suite
//! (ceilings, JSON output, autotuned kernels) is the benchmark issue's work.

use kiln::prelude::*;
use std::time::Instant;

fn median_secs(mut run: impl FnMut() -> Result<()>) -> Result<f64> {
    run()?;
    let mut times = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        run()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Compute all of `t`, then wait for the GPU by reading one element (a
/// lazy read of one element alone would compute just that element).
fn wait(t: &Tensor) -> Result<()> {
    kiln::block_on(t.realize())?;
    let first = t.reshape(&[-1])?.narrow(0, 0, 1)?;
    kiln::block_on(first.to_vec::<f32>()).map(|_| ())
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

fn bench(dev: &Device) -> Result<()> {
    let n = 1 << 24;
    let m = Tensor::ones(dev, &[4096, 4096], DType::F32)?.mul_scalar(0.25)?;
    let b = Tensor::ones(dev, &[4096], DType::F32)?;
    kiln::block_on(Tensor::realize_all(&[&m, &b]))?;
    // The ceiling: a vec4 WGSL kernel that reads and writes each element once.
    let copy = median_secs(|| wait(&m.neg()?))?;
    let copy_gbs = 8.0 * n as f64 / copy / 1e9;
    println!("  copy 16M f32:        {:8.2} ms  {copy_gbs:6.2} GB/s (ceiling)", copy * 1e3);
    // Two 8-op chains with a broadcast add: cheap arithmetic (memory-bound
    // on any adapter) and one with three transcendentals (compute-bound on
    // CPU adapters, whose tanh/exp/sqrt are long instruction sequences).
    let cheap: [Op; 8] = [
        &|t| t.add(&b),
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
    for (name, ops) in [("arithmetic", &cheap), ("transcendental", &transcendental)] {
        let fused = median_secs(|| wait(&chain(&m, ops, false)?))?;
        let fused_gbs = 8.0 * n as f64 / fused / 1e9;
        let unfused = median_secs(|| wait(&chain(&m, ops, true)?))?;
        println!(
            "  8-op {name:<14} fused {:7.2} ms {fused_gbs:6.2} GB/s = {:.2} of copy; unfused {:7.2} ms ({:.1}x)",
            fused * 1e3,
            fused_gbs / copy_gbs,
            unfused * 1e3,
            unfused / fused
        );
    }
    let x = Tensor::ones(dev, &[n], DType::F32)?.mul_scalar(0.5)?;
    let y = Tensor::ones(dev, &[n], DType::F32)?;
    kiln::block_on(Tensor::realize_all(&[&x, &y]))?;
    let add = median_secs(|| wait(&x.add(&y)?))?;
    println!("  add 16M f32:         {:8.2} ms  {:6.2} GB/s", add * 1e3, 12.0 * n as f64 / add / 1e9);
    let sum = median_secs(|| wait(&x.sum(&[], false)?))?;
    println!("  sum 16M f32:         {:8.2} ms  {:6.2} GB/s", sum * 1e3, 4.0 * n as f64 / sum / 1e9);
    let s = 1024;
    let a = Tensor::ones(dev, &[s, s], DType::F32)?.mul_scalar(0.5)?;
    kiln::block_on(a.realize())?;
    let mm = median_secs(|| wait(&a.matmul(&a)?))?;
    println!("  matmul 1024³ f32:    {:8.2} ms  {:6.2} GFLOP/s", mm * 1e3, 2.0 * (s * s * s) as f64 / mm / 1e9);
    Ok(())
}

fn main() -> Result<()> {
    let backends = kiln::core::wgpu::Backends::VULKAN | kiln::core::wgpu::Backends::GL;
    for (name, dev) in kiln::block_on(Device::all(backends)) {
        println!("{name}");
        match dev {
            Ok(dev) => bench(&dev)?,
            Err(e) => println!("  skipped: {e}"),
        }
    }
    Ok(())
}
