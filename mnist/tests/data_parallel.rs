//! The training step split across a mesh of devices in one process gives
//! the losses of the whole-batch step, and repeats bit for bit.

use kiln::prelude::*;
use kiln_mnist::{Config, DataParallelTrainer, ModelKind, Trainer};
use kiln_nn::data::Mnist;
use kiln_shard::Mesh;
use std::sync::Arc;

const STEPS: usize = 100;

fn data() -> Arc<Mnist> {
    Arc::new(Mnist::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k")).unwrap())
}

fn config() -> Config {
    Config { model: ModelKind::Mlp, epochs: 2, batch_size: 32, lr: 2e-3, seed: 5, precision: DType::F32 }
}

fn sharded_losses(mesh: &Mesh, n: usize) -> Vec<f32> {
    kiln::block_on(async {
        let mut t = DataParallelTrainer::new(mesh, data(), config()).await?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(t.step().await?);
        }
        Ok::<_, KilnError>(out)
    })
    .unwrap()
}

fn whole_batch_losses(device: &Device, n: usize) -> Vec<f32> {
    let mut t = Trainer::new(device, data(), config()).unwrap();
    kiln::block_on(async { t.run(n).await }).unwrap()
}

fn largest_relative_difference(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / y.abs().max(1e-6)).fold(0.0, f32::max)
}

/// A fresh device per adapter (Vulkan and GL), not the shared ones: a mesh
/// needs devices of its own, and a same-adapter mesh needs two.
fn fresh_devices() -> Vec<Device> {
    kiln_conformance::validation::env_for_adapters();
    let backends = kiln::core::wgpu::Backends::VULKAN | kiln::core::wgpu::Backends::GL;
    kiln::block_on(Device::all(backends)).into_iter().filter_map(|(_, d)| d.ok()).collect()
}

#[test]
fn a_step_split_across_devices_gives_the_whole_batch_losses_and_repeats_bit_for_bit() {
    let mut devices = fresh_devices();
    // lavapipe first where it is: the fastest of the CPU adapters here.
    devices.sort_by_key(|d| !(d.info().name.contains("llvmpipe") && d.info().backend == "vulkan"));
    let Some(first) = devices.first() else {
        return kiln_conformance::require::skip(kiln_conformance::require::ANY_ADAPTER, "no adapter found");
    };
    let name = |d: &Device| format!("{} ({})", d.info().name, d.info().backend);
    let whole = whole_batch_losses(first, STEPS);

    // Two devices on one adapter compute the same bits as it does alone.
    let twin = fresh_devices().into_iter().find(|d| name(d) == name(first)).expect("the same adapter again");
    let pair = Mesh::local(vec![first.clone(), twin]).unwrap();
    let split = sharded_losses(&pair, STEPS);
    let worst = largest_relative_difference(&split, &whole);
    eprintln!("2 ranks on {}: largest relative loss difference over {STEPS} steps {worst:e}", name(first));
    assert!(worst <= 1e-5, "{worst:e} relative over {STEPS} steps\nsplit {split:?}\nwhole {whole:?}");
    assert_eq!(sharded_losses(&pair, 10), split[..10], "a second run with the same world size differs");

    // Every adapter as one mesh: they round differently, so report the figure.
    if devices.len() > 1 {
        let labels: Vec<String> = devices.iter().map(name).collect();
        let all = sharded_losses(&Mesh::local(devices).unwrap(), STEPS);
        let worst = largest_relative_difference(&all, &whole);
        eprintln!(
            "{} ranks on {labels:?}: largest relative loss difference over {STEPS} steps {worst:e}",
            labels.len()
        );
        assert!(worst <= 1e-3, "{worst:e} relative over {STEPS} steps on {labels:?}");
    }
}

#[test]
fn a_step_submits_once_per_device_and_stops_allocating() {
    let mut devices = fresh_devices();
    devices.sort_by_key(|d| !(d.info().name.contains("llvmpipe") && d.info().backend == "vulkan"));
    let Some(first) = devices.first().cloned() else {
        return kiln_conformance::require::skip(kiln_conformance::require::ANY_ADAPTER, "no adapter found");
    };
    let twin = fresh_devices()
        .into_iter()
        .find(|d| d.info().name == first.info().name && d.info().backend == first.info().backend);
    let mesh = Mesh::local(vec![first, twin.expect("the same adapter again")]).unwrap();
    kiln::block_on(async {
        let mut t = DataParallelTrainer::new(&mesh, data(), config()).await?;
        t.run(5).await?;
        let before: Vec<_> = mesh.devices().iter().map(Device::stats).collect();
        for _ in 0..10 {
            t.step().await?;
        }
        assert_eq!(t.captures(), 4, "the first and the steady step, once on each device");
        for (d, b) in mesh.devices().iter().zip(before) {
            let now = d.stats();
            // The captured step, its part's copy for reading included.
            assert_eq!(now.submits - b.submits, 10, "submits over 10 steps");
            assert_eq!(now.pool.buffers_created, b.pool.buffers_created, "buffers created over 10 steps");
        }
        Ok::<_, KilnError>(())
    })
    .unwrap();
}

#[test]
fn runs_that_cannot_be_split_are_errors() {
    let cpu = Mesh::local(vec![Device::cpu(), Device::cpu(), Device::cpu()]).unwrap();
    let small = Config { batch_size: 2, ..config() };
    let e = kiln::block_on(DataParallelTrainer::new(&cpu, data(), small)).err().unwrap().to_string();
    assert!(e.contains("batch size 2 is smaller than the 3 ranks"), "{e}");
}
