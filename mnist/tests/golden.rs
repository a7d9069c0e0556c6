//! Golden kernels of the demo's training steps: the WGSL that one captured
//! step of each model compiles on each adapter (default matmul configs, so
//! that no timing enters), compared with `tests/golden/mnist-steps/` (one
//! file per set of capabilities). A
//! refactoring that should change no kernel proves it here as well as in
//! the conformance suite; `KILN_BLESS=1` accepts a change.

use kiln::prelude::DType;
use kiln_conformance::golden;
use kiln_mnist::{Config, ModelKind, Trainer};
use kiln_nn::data::Mnist;
use std::sync::Arc;

#[test]
fn both_steps_compile_the_golden_kernels_on_every_adapter() {
    kiln_conformance::validation::env_for_adapters();
    let data = Arc::new(Mnist::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k")).unwrap());
    let (found, _) = kiln::block_on(kiln_conformance::adapters::discover());
    let mut failures = Vec::new();
    for f in &found {
        f.device.set_matmul_tuning(Some(false));
        for model in [ModelKind::Mlp, ModelKind::Cnn] {
            let config = Config { model, epochs: 1, batch_size: 64, lr: 2e-3, seed: 5, precision: DType::F32 };
            let mut t = Trainer::new(&f.device, data.clone(), config).unwrap();
            kiln::block_on(async { t.step().await?.item::<f32>().await }).unwrap();
        }
        let key = golden::caps_key(&f.device.info().caps);
        match golden::verdict("mnist-steps", &key, &f.device.compiled_sources()) {
            Ok(line) => eprintln!("{line} ({})", f.label),
            Err(failure) => failures.push(format!("{}: {failure}", f.label)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
