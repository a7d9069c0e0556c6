//! Kernel profiling: on every adapter with timestamp queries, and on the
//! CUDA runtime (here on the host engine), each launch (plain
//! realizations and jit replays alike) comes back timed, by name, in
//! launch order, with the same results as unprofiled; adapters without
//! timestamps refuse by name, and are reported as skipped. And
//! `Device::synchronize`, which waits for realized work on every device.

use kiln::prelude::*;

fn random(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    kiln_conformance::rng::tensor(dev, shape, seed, -2.0, 2.0)
}

/// A few kernels: a matmul with its epilogue, a softmax row kernel and a
/// tree reduction.
fn work(x: &Tensor, w: &Tensor) -> Result<Vec<Tensor>> {
    let h = x.matmul(w)?.relu()?;
    Ok(vec![h.softmax(-1)?, h.sum(&[], false)?])
}

fn values(ts: &[Tensor]) -> Vec<Vec<f32>> {
    ts.iter().map(|t| kiln::block_on(t.to_vec::<f32>()).unwrap()).collect()
}

#[test]
fn every_launch_is_timed_where_the_adapter_has_timestamps() {
    let mut profiled = 0;
    let cuda = ("CUDA on the host".to_string(), Device::cuda_on_host());
    for (label, dev) in kiln_conformance::adapters::shared().iter().chain([&cuda]) {
        let (x, w) = (random(dev, &[64, 96], 1), random(dev, &[96, 300], 2));
        let plain = values(&work(&x, &w).unwrap());
        if let Err(e) = dev.set_kernel_profiling(true) {
            let message = e.to_string();
            assert!(message.contains("timestamp") && message.contains(&dev.info().name), "{label}: {message}");
            eprintln!("skipped on {label}: {message}");
            continue;
        }
        let before = dev.stats().kernels_launched;
        let outs = work(&x, &w).unwrap();
        kiln::block_on(Tensor::realize_all(&outs.iter().collect::<Vec<_>>())).unwrap();
        let launched = dev.stats().kernels_launched - before;
        assert_eq!(values(&outs), plain, "{label}: profiling changed the results");
        let timings = kiln::block_on(dev.kernel_profile()).unwrap();
        // The readback copies of `values` launch nothing.
        assert_eq!(timings.len() as u64, launched, "{label}: one timing per launch: {timings:?}");
        // On CUDA the product is a cuBLAS call, its epilogue a pass after.
        let first = &timings[0].name;
        assert!(first.starts_with("matmul") || first.starts_with("cublas"), "{label}: launch order: {timings:?}");
        assert!(timings.iter().all(|t| t.nanos.is_finite() && t.nanos >= 0.0), "{label}: {timings:?}");
        assert!(timings.iter().map(|t| t.nanos).sum::<f64>() > 0.0, "{label}: no time at all: {timings:?}");

        // A jit replay's launches, then nothing once profiling is off.
        let step = kiln::jit_flat(|inputs: &[Tensor]| work(&inputs[0], &inputs[1]));
        let inputs = [x.clone(), w.clone()];
        let outs = kiln::block_on(step.call(&inputs)).unwrap();
        let _ = kiln::block_on(dev.kernel_profile()).unwrap();
        let before = dev.stats().kernels_launched;
        let replayed = kiln::block_on(step.call(&inputs)).unwrap();
        let launched = dev.stats().kernels_launched - before;
        assert_eq!(values(&replayed), values(&outs), "{label}: replay");
        let replay_timings = kiln::block_on(dev.kernel_profile()).unwrap();
        assert!(launched > 0, "{label}: the replay launched nothing");
        assert_eq!(replay_timings.len() as u64, launched, "{label}: every replayed launch: {replay_timings:?}");
        dev.set_kernel_profiling(false).unwrap();
        let later = work(&x, &w).unwrap();
        kiln::block_on(Tensor::realize_all(&later.iter().collect::<Vec<_>>())).unwrap();
        assert!(kiln::block_on(dev.kernel_profile()).unwrap().is_empty(), "{label}: timed after profiling stopped");
        profiled += 1;
    }
    assert!(profiled > 0, "no adapter has timestamp queries");
    let cpu = Device::cpu();
    assert!(cpu.set_kernel_profiling(true).is_err());
    assert!(kiln::block_on(cpu.kernel_profile()).unwrap().is_empty());
}

#[test]
fn synchronize_waits_for_realized_work_on_every_device() {
    let cpu = ("cpu reference".to_string(), Device::cpu());
    let shared = kiln_conformance::adapters::shared();
    for (label, dev) in shared.iter().chain([&cpu]) {
        let (x, w) = (random(dev, &[64, 96], 3), random(dev, &[96, 300], 4));
        let outs = work(&x, &w).unwrap();
        kiln::block_on(Tensor::realize_all(&outs.iter().collect::<Vec<_>>())).unwrap();
        kiln::block_on(dev.synchronize()).unwrap_or_else(|e| panic!("{label}: {e}"));
        // Twice in a row, with nothing in flight, is no error either.
        kiln::block_on(dev.synchronize()).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(values(&outs), values(&work(&x, &w).unwrap()), "{label}: the waited-for results");
    }
}
