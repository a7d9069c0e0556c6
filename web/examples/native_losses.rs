//! The browser demo's first training losses, computed natively by the same
//! code (`kiln-mnist`) on SwiftShader's Vulkan driver (the browser's adapter
//! in the e2e test), as JSON for the e2e test to compare with the browser's.
//!
//! `cargo run --release -p kiln-web --example native_losses -- [seed] [steps]`

use kiln::{Device, DeviceOptions};
use kiln_mnist::{Config, ModelKind, Trainer};
use kiln_nn::data::Mnist;
use std::sync::Arc;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| args.get(i).map_or(Ok(default), |a| a.parse().map_err(|e| format!("{a}: {e}")));
    let (seed, steps) = (arg(0, 7)?, arg(1, 20)?);
    kiln_conformance::validation::env_for_adapters();
    let options = DeviceOptions { adapter: Some("swiftshader".into()), backends: kiln::core::wgpu::Backends::VULKAN };
    let device = kiln::block_on(Device::with_options(options)).map_err(|e| e.to_string())?;
    let data = Mnist::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k")).map_err(|e| e.to_string())?;
    let config = Config { seed, ..ModelKind::Mlp.default_config() };
    let mut trainer = Trainer::new(&device, Arc::new(data), config).map_err(|e| e.to_string())?;
    let losses = kiln::block_on(trainer.run(steps as usize)).map_err(|e| e.to_string())?;
    let losses: Vec<String> = losses.iter().map(f32::to_string).collect();
    println!("{{\"seed\":{seed},\"adapter\":\"{}\",\"losses\":[{}]}}", device.info().name, losses.join(","));
    Ok(())
}
