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

fn wait(t: &Tensor) -> Result<()> {
    let first = t.reshape(&[-1])?.narrow(0, 0, 1)?;
    kiln::block_on(first.to_vec::<f32>()).map(|_| ())
}

fn bench(dev: &Device) -> Result<()> {
    let n = 1 << 24;
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
