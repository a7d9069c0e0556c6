//! The demo's training code natively: it learns on the repository's MNIST
//! subset, and the same seed gives the same run.

use kiln::Device;
use kiln_web::train::Trainer;
use std::rc::Rc;

fn run(device: &Device, seed: u64, steps: usize) -> (Vec<f32>, f32) {
    let data = Rc::new(kiln_web::native::load_mnist().unwrap());
    let mut t = Trainer::new(device, data, seed).unwrap();
    let losses = (0..steps).map(|_| kiln::block_on(t.step(5)).unwrap()).collect();
    (losses, kiln::block_on(t.evaluate()).unwrap())
}

#[test]
fn the_demo_mlp_learns_and_a_seed_repeats() {
    kiln_conformance::validation::env_for_adapters();
    let device = kiln::block_on(Device::gpu()).unwrap();
    let (losses, accuracy) = run(&device, 3, 20);
    eprintln!("{}: losses {losses:?}, test accuracy {accuracy}", device.info().name);
    assert!(losses[19] < 0.6 * losses[0], "loss falls: {losses:?}");
    assert!(accuracy > 0.7, "test accuracy after 100 steps: {accuracy}");
    let (again, _) = run(&device, 3, 3);
    assert_eq!(again, losses[..3], "same seed, same losses");
    let (other, _) = run(&device, 4, 1);
    assert_ne!(other[0], losses[0], "another seed, another run");
}

#[test]
fn predict_gives_probabilities_and_rejects_a_wrong_size() {
    let device = Device::cpu();
    let t = Trainer::new(&device, Rc::new(kiln_web::native::load_mnist().unwrap()), 1).unwrap();
    let p = kiln::block_on(t.predict(&[0.5; 784])).unwrap();
    assert_eq!(p.len(), 10);
    assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{p:?}");
    let e = kiln::block_on(t.predict(&[0.5; 100])).unwrap_err().to_string();
    assert!(e.contains("matmul"), "{e}");
}
