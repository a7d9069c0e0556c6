//! Data parallelism in one process: the demo's MLP step with its batch of
//! 64 split over 1 and 2 ranks of the adapter under test (the second rank a
//! second device on the same adapter), and the all-reduce inside the 2-rank
//! steps (`DataParallelTrainer::all_reduce_seconds`).

use crate::measure::{Record, Timing, time};
use crate::suites::{Ctx, mnist_dir};
use kiln::prelude::*;
use kiln_mnist::{DataParallelTrainer, ModelKind};
use kiln_nn::data::Mnist;
use kiln_shard::Mesh;
use std::sync::Arc;

/// A second device on `dev`'s adapter (wgpu adapters only).
fn twin_of(dev: &Device) -> Option<Device> {
    let info = dev.info();
    let backends = kiln::core::wgpu::Backends::VULKAN | kiln::core::wgpu::Backends::GL;
    kiln::block_on(Device::all(backends))
        .into_iter()
        .filter_map(|(_, d)| d.ok())
        .find(|d| d.info().name == info.name && d.info().backend == info.backend)
}

pub fn data_parallel(cx: &Ctx, out: &mut dyn FnMut(Record)) -> Result<()> {
    let (one, two, reduce) =
        ("data-parallel step (1 rank)", "data-parallel step (2 ranks)", "all-reduce of the MLP gradient (2 ranks)");
    if ![one, two, reduce].iter().any(|b| cx.wants(b)) {
        return Ok(());
    }
    let Some(twin) = twin_of(cx.dev) else {
        println!("  {two}: skipped on {} (no second device on its adapter)", cx.adapter);
        return Ok(());
    };
    let data = Arc::new(Mnist::load(mnist_dir())?);
    let config = ModelKind::Mlp.default_config();
    // The step's time, and its all-reduce's in each timed step.
    let step_time = |mesh: &Mesh| -> Result<(Timing, Timing)> {
        let mut t = kiln::block_on(DataParallelTrainer::new(mesh, data.clone(), config))?;
        let step = time(cx.reps, || kiln::block_on(t.step()).map(drop))?;
        let timed = t.all_reduce_seconds();
        Ok((step, Timing::of(timed[timed.len().saturating_sub(cx.reps.0.max(1))..].to_vec())))
    };
    let (single, _) = step_time(&Mesh::local(vec![cx.dev.clone()])?)?;
    let (split, exchange) = step_time(&Mesh::local(vec![cx.dev.clone(), twin])?)?;
    let floats: usize = ModelKind::Mlp.build(cx.dev, Key::new(0))?.leaves().iter().map(Tensor::numel).sum();

    let samples = |t: &Timing| config.batch_size as f64 / t.median;
    out(Record::duration(one, cx.adapter, single, 1e3, "ms").note(format!("{:.0} samples/s", samples(&single))));
    out(Record::duration(two, cx.adapter, split, 1e3, "ms").note(format!(
        "{:.0} samples/s; {:.2}× one rank, scaling efficiency {:.0}%; its all-reduce {:.2} ms",
        samples(&split),
        single.median / split.median,
        50.0 * single.median / split.median,
        exchange.median * 1e3
    )));
    out(Record::duration(reduce, cx.adapter, exchange, 1e3, "ms").note(format!(
        "{floats} f32 ({:.1} MB) per rank, inside the 2-rank steps: the exchange, the sum in rank order, the upload",
        floats as f64 * 4.0 / 1e6
    )));
    Ok(())
}
