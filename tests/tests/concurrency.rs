//! Several threads realizing on one device at once get the same bits as
//! one thread alone. (Before plans took turns per device, `pow`, `rsqrt`
//! and softmax came out wrong now and then when the tests of one binary
//! shared the devices.)

use kiln::prelude::*;
use kiln_conformance::adapters::shared as devices;

const THREADS: usize = 4;
const ROUNDS: usize = 12;
const ROWS: usize = 64;
const COLS: usize = 1024;

type Work = fn(&Tensor) -> Result<Tensor>;

/// Each is a different kernel, so threads compile, plan and submit
/// different work at the same time.
const WORK: [(&str, Work); 4] = [
    ("pow(x, 0.37)", |x| x.abs()?.pow_scalar(0.37)),
    ("rsqrt(|x| + 1)", |x| x.abs()?.add_scalar(1.0)?.rsqrt()),
    ("softmax", |x| x.softmax(-1)),
    ("tanh(x) · x − mean", |x| x.tanh()?.mul(x)?.sub(&x.mean(&[-1], true)?)),
];

fn input(seed: usize) -> Vec<f32> {
    (0..ROWS * COLS).map(|i| (((i * 7919 + seed * 104729) % 20011) as f32 / 1000.0) - 10.0).collect()
}

fn run(device: &Device, seed: usize, work: Work) -> Vec<u32> {
    let x = Tensor::from_slice(device, &input(seed), &[ROWS, COLS]).unwrap();
    let y = work(&x).unwrap();
    kiln::block_on(y.to_vec::<f32>()).unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn threads_sharing_a_device_get_the_bits_of_one_thread() {
    let devices = devices();
    for (label, device) in devices.iter() {
        let want: Vec<Vec<u32>> = (0..THREADS).map(|t| run(device, t, WORK[t % WORK.len()].1)).collect();
        std::thread::scope(|s| {
            for (t, want) in want.iter().enumerate() {
                let device = device.clone();
                s.spawn(move || {
                    let (name, work) = WORK[t % WORK.len()];
                    for round in 0..ROUNDS {
                        let got = run(&device, t, work);
                        let differ = got.iter().zip(want).position(|(a, b)| a != b);
                        assert!(
                            differ.is_none(),
                            "{label}: {name} in thread {t}, round {round}: element {} is {} instead of {}",
                            differ.unwrap_or(0),
                            f32::from_bits(got[differ.unwrap_or(0)]),
                            f32::from_bits(want[differ.unwrap_or(0)])
                        );
                    }
                });
            }
        });
    }
}
