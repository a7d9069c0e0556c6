//! Data parallelism in one process: the demo's MLP step with its batch of
//! 64 split over 1 and 2 ranks of the adapter under test (the second rank a
//! second device on the same adapter), and the all-reduce of its gradient
//! alone.

use crate::measure::{Record, Timing, time};
use crate::suites::{Ctx, mnist_dir};
use kiln::prelude::*;
use kiln_mnist::{DataParallelTrainer, ModelKind};
use kiln_nn::data::Mnist;
use kiln_shard::{Mesh, Replicas};
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
    let step_time = |mesh: &Mesh| -> Result<Timing> {
        let mut t = kiln::block_on(DataParallelTrainer::new(mesh, data.clone(), config))?;
        time(cx.reps, || kiln::block_on(t.step()).map(drop))
    };
    let single = step_time(&Mesh::local(vec![cx.dev.clone()])?)?;
    let pair = Mesh::local(vec![cx.dev.clone(), twin])?;
    let split = step_time(&pair)?;

    let model = ModelKind::Mlp.build(cx.dev, Key::new(0))?;
    let floats: usize = model.leaves().iter().map(Tensor::numel).sum();
    let grads = kiln::block_on(Replicas::new(&pair, &model))?;
    let exchange = time(cx.reps, || {
        let total = kiln::block_on(grads.sum_over_ranks())?;
        let first = total.local().leaves()[0].reshape(&[-1])?.narrow(0, 0, 1)?;
        kiln::block_on(first.to_vec::<f32>()).map(drop)
    })?;

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
        "{floats} f32 ({:.1} MB) per rank: readback, sum in rank order, upload",
        floats as f64 * 4.0 / 1e6
    )));
    Ok(())
}
