//! Every member of the matmul kernel family, forced in turn on every
//! adapter, agrees with the CPU reference on ragged shapes, batches,
//! transposed operands, f16 operands and a fused epilogue: whichever config
//! the autotuner picks, results pass the same tolerances.

use kiln::core::codegen::matmul::MatmulConfig;
use kiln::prelude::*;
use kiln_conformance::rng::Rng;

fn random(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    let mut rng = Rng::new(seed);
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    Tensor::from_slice(dev, &data, shape).unwrap()
}

type Case = (&'static str, fn(&Device) -> Result<Tensor>);

const CASES: [Case; 7] = [
    ("ragged 37x53 @ 53x29", |d| random(d, &[37, 53], 1).matmul(&random(d, &[53, 29], 2))),
    ("batched [2,3,19,70] @ [3,70,21]", |d| random(d, &[2, 3, 19, 70], 3).matmul(&random(d, &[3, 70, 21], 4))),
    ("transposed operands 45x33", |d| random(d, &[33, 45], 5).t()?.matmul(&random(d, &[40, 33], 6).t()?)),
    ("f16 operands 40x66 @ 66x70", |d| {
        random(d, &[40, 66], 7).cast(DType::F16)?.matmul(&random(d, &[66, 70], 8).cast(DType::F16)?)
    }),
    // K and N multiples of 4, contiguous: the vec4 configs run these.
    ("vec4-eligible relu(x @ w + b) 37x52 @ 52x44", |d| {
        random(d, &[37, 52], 12).matmul(&random(d, &[52, 44], 13))?.add(&random(d, &[44], 14))?.relu()
    }),
    ("vec4-eligible batched [2,3,19,68] @ [3,68,20]", |d| {
        random(d, &[2, 3, 19, 68], 15).matmul(&random(d, &[3, 68, 20], 16))
    }),
    ("relu(x @ w + b) epilogue 130x72 @ 72x90", |d| {
        random(d, &[130, 72], 9).matmul(&random(d, &[72, 90], 10))?.add(&random(d, &[90], 11))?.relu()
    }),
];

#[test]
fn every_matmul_config_matches_the_reference() {
    kiln_conformance::validation::env_for_adapters();
    let (found, _) = kiln::block_on(kiln_conformance::adapters::discover());
    assert!(!found.is_empty(), "no adapter found");
    let cpu = Device::cpu();
    let configs = MatmulConfig::CANDIDATES.into_iter().chain([MatmulConfig::DEFAULT]);
    for (what, f) in CASES {
        let want = kiln::block_on(f(&cpu).unwrap().cast(DType::F32).unwrap().to_vec::<f32>()).unwrap();
        let scale = want.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
        for found in &found {
            let dev = &found.device;
            for config in configs.clone() {
                // A vec4 config runs its scalar twin on other shapes; one
                // ragged case checks that fallback (the full set is slow
                // to compile on SwiftShader).
                if config.vec && !what.contains("vec4") && !what.starts_with("ragged") {
                    continue;
                }
                if let Err(e) = dev.set_matmul_config(Some(config)) {
                    assert!(!config.runs_on(&dev.info()), "{} refused {}", found.label, config.name());
                    eprintln!("skipped: {e}");
                    continue;
                }
                let got = kiln::block_on(f(dev).unwrap().cast(DType::F32).unwrap().to_vec::<f32>()).unwrap();
                let tol = if what.starts_with("f16") { 2e-3 } else { 1e-5 };
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let ok = (g - w).abs() <= tol * scale;
                    assert!(ok, "{what}, {} on {}: element {i} is {g}, reference {w}", config.name(), found.label);
                }
            }
            dev.set_matmul_config(None).unwrap();
        }
    }
}
