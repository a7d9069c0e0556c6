//! Threefry-2x32 known answers, bit equality of draws on every adapter,
//! the fused kernel count, and the random API's errors.

use kiln::prelude::*;
use kiln::random::{self, threefry2x32};

/// Random123's `kat_vectors` (Salmon et al., SC'11; D. E. Shaw Research),
/// the `threefry2x32 20` lines: counter, key, expected output.
const KAT: [([u32; 2], [u32; 2], [u32; 2]); 3] = [
    ([0, 0], [0, 0], [0x6b20_0159, 0x99ba_4efe]),
    ([0xffff_ffff, 0xffff_ffff], [0xffff_ffff, 0xffff_ffff], [0x1cb9_96fc, 0xbb00_2be7]),
    ([0x243f_6a88, 0x85a3_08d3], [0x1319_8a2e, 0x0370_7344], [0xc492_3a9c, 0x483d_f7a0]),
];

fn devices() -> Vec<(String, Device)> {
    kiln_conformance::validation::env_for_adapters();
    let (found, skipped) = kiln::block_on(kiln_conformance::adapters::discover());
    for s in skipped {
        eprintln!("skipped: {s}");
    }
    assert!(!found.is_empty(), "no adapter found");
    let mut out = vec![("cpu reference".to_string(), Device::cpu())];
    out.extend(found.into_iter().map(|f| (f.label, f.device)));
    out
}

fn u32s(t: &Tensor) -> Vec<u32> {
    kiln::block_on(t.to_vec::<u32>()).unwrap()
}

#[test]
fn known_answers_on_the_host() {
    for (ctr, key, want) in KAT {
        assert_eq!(threefry2x32(key, ctr), want, "counter {ctr:x?} key {key:x?}");
    }
}

#[test]
fn known_answers_and_bits_on_every_device() {
    for (label, dev) in devices() {
        for (ctr, key, want) in KAT {
            let hi = Tensor::from_slice(&dev, &[ctr[0]], &[1]).unwrap();
            let lo = Tensor::from_slice(&dev, &[ctr[1]], &[1]).unwrap();
            let [y0, y1] = random::threefry2x32_tensors(Key::from_words(key), &hi, &lo).unwrap();
            assert_eq!([u32s(&y0)[0], u32s(&y1)[0]], want, "{label}: counter {ctr:x?} key {key:x?}");
        }
        // Bits of a draw equal the host's, element for element.
        let key = Key::new(42).fold_in(7);
        let n = if dev.info().backend == "cpu" { 4099 } else { 1 << 20 };
        let bits = random::random_bits(&dev, key, &[n]).unwrap();
        assert_eq!(u32s(&bits), key.random_bits_host(n), "{label}: bits differ from the host's");
    }
}

#[test]
fn uniform_is_one_kernel_and_bit_identical_at_2_pow_24() {
    let key = Key::new(2024);
    let n = 1usize << 24;
    let host = key.random_bits_host(n);
    for (label, dev) in devices().into_iter().skip(1) {
        let u = random::uniform(&dev, key, &[1 << 12, 1 << 12], DType::F32, 0.0, 1.0).unwrap();
        let before = dev.stats();
        kiln::block_on(u.realize()).unwrap();
        let kernels = dev.stats().kernels_launched - before.kernels_launched;
        // Threefry's round states are each read twice, all within the
        // draw's one elementwise expression: one kernel computes them once.
        assert_eq!(kernels, 1, "{label}: uniform took {kernels} kernels");
        eprintln!("{label}: uniform [4096, 4096] in {kernels} kernels");
        let got = kiln::block_on(u.to_vec::<f32>()).unwrap();
        for (i, (g, b)) in got.iter().zip(&host).enumerate() {
            let want = (b >> 8) as f32 / (1u32 << 24) as f32;
            assert_eq!(g.to_bits(), want.to_bits(), "{label}: element {i}");
        }
    }
}

#[test]
fn draws_realized_together_split_where_one_kernel_cannot_hold_them() {
    // Roots of one shape share a kernel while its bindings and meta block
    // hold them: a one-kernel draw's params fill some 56 of the block's
    // 128 words, so four (dropout masks of four layers) take several.
    let keys = Key::new(11).split(4);
    let shape = [3, 5, 7, 11];
    let n: usize = shape.iter().product();
    for (label, dev) in devices().into_iter().skip(1) {
        let draws: Vec<Tensor> = keys.iter().map(|&k| random::random_bits(&dev, k, &shape).unwrap()).collect();
        let before = dev.stats();
        kiln::block_on(Tensor::realize_all(&draws.iter().collect::<Vec<_>>())).unwrap();
        let kernels = dev.stats().kernels_launched - before.kernels_launched;
        assert!((2..=4).contains(&kernels), "{label}: four draws in {kernels} kernels");
        for (k, d) in keys.iter().zip(&draws) {
            assert_eq!(u32s(d), k.random_bits_host(n), "{label}: a draw realized with others");
        }
    }
}

#[test]
fn keys_split_and_fold_in() {
    let key = Key::new(0);
    assert_eq!(key.words(), [0, 0]);
    assert_eq!(Key::new(0x1234_5678_9abc_def0).words(), [0x1234_5678, 0x9abc_def0]);
    let kids = key.split(4);
    assert_eq!(kids.len(), 4);
    for (j, k) in kids.iter().enumerate() {
        assert_eq!(*k, key.fold_in(j as u32));
        assert_ne!(*k, key);
    }
    let distinct: std::collections::HashSet<_> = kids.iter().collect();
    assert_eq!(distinct.len(), 4);
    let mut perm = key.shuffled_indices(1000);
    assert_ne!(perm, (0..1000).collect::<Vec<_>>());
    perm.sort_unstable();
    assert_eq!(perm, (0..1000).collect::<Vec<_>>());
    assert_ne!(key.shuffled_indices(50), kids[0].shuffled_indices(50));
}

fn moments(v: &[f32]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var)
}

#[test]
fn distributions_have_their_moments() {
    let dev = devices().pop().unwrap().1;
    let key = Key::new(5);
    let n = 1 << 18;
    let u = kiln::block_on(random::uniform(&dev, key, &[n], DType::F32, -2.0, 6.0).unwrap().to_vec::<f32>()).unwrap();
    assert!(u.iter().all(|&x| (-2.0..6.0).contains(&x)));
    let (m, v) = moments(&u);
    assert!((m - 2.0).abs() < 0.03 && (v - 64.0 / 12.0).abs() < 0.05, "uniform mean {m} var {v}");
    let z = kiln::block_on(random::normal(&dev, key, &[n], DType::F32, 1.0, 3.0).unwrap().to_vec::<f32>()).unwrap();
    let (m, v) = moments(&z);
    assert!((m - 1.0).abs() < 0.03 && (v - 9.0).abs() < 0.1, "normal mean {m} var {v}");
    let b = random::bernoulli(&dev, key, 0.3, &[n]).unwrap().cast(DType::F32).unwrap();
    let (m, _) = moments(&kiln::block_on(b.to_vec::<f32>()).unwrap());
    assert!((m - 0.3).abs() < 0.005, "bernoulli mean {m}");
    let r = kiln::block_on(random::randint(&dev, key, &[n], -3, 7).unwrap().to_vec::<i32>()).unwrap();
    assert!(r.iter().all(|x| (-3..7).contains(x)));
    for k in -3..7 {
        let share = r.iter().filter(|&&x| x == k).count() as f64 / n as f64;
        assert!((share - 0.1).abs() < 0.005, "randint value {k}: share {share}");
    }
    let wide = kiln::block_on(random::randint(&dev, key, &[n], i32::MIN, i32::MAX).unwrap().to_vec::<i32>()).unwrap();
    let (m, _) = moments(&wide.iter().map(|&x| x as f32 / 2f32.powi(31)).collect::<Vec<_>>());
    assert!(m.abs() < 0.01, "randint over the i32 range: mean {m}");
    let p = kiln::block_on(random::permutation(&dev, key, 100).unwrap().to_vec::<i32>()).unwrap();
    assert_eq!(p, key.shuffled_indices(100).iter().map(|&i| i as i32).collect::<Vec<_>>());
}

#[test]
fn draws_are_deterministic_and_keys_differ() {
    let dev = Device::cpu();
    let a = |k: Key| kiln::block_on(random::uniform(&dev, k, &[64], DType::F32, 0.0, 1.0).unwrap().to_vec::<f32>());
    assert_eq!(a(Key::new(1)).unwrap(), a(Key::new(1)).unwrap());
    assert_ne!(a(Key::new(1)).unwrap(), a(Key::new(2)).unwrap());
    let h = random::uniform(&dev, Key::new(1), &[64], DType::F16, 0.0, 1.0).unwrap();
    assert_eq!(h.dtype(), DType::F16);
}

#[test]
fn bad_arguments_are_errors() {
    let dev = Device::cpu();
    let k = Key::new(0);
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    assert!(err(random::uniform(&dev, k, &[3], DType::I32, 0.0, 1.0)).contains("uniform"));
    assert!(err(random::uniform(&dev, k, &[3], DType::F32, 1.0, 1.0)).contains("low < high"));
    assert!(err(random::normal(&dev, k, &[3], DType::F32, 0.0, -1.0)).contains("normal"));
    assert!(err(random::bernoulli(&dev, k, 1.5, &[3])).contains("bernoulli"));
    assert!(err(random::randint(&dev, k, &[3], 5, 5)).contains("randint"));
    let f = Tensor::ones(&dev, &[2], DType::F32).unwrap();
    assert!(err(f.bitwise_xor(&f)).contains("bitwise_xor"));
    assert!(err(f.shift_left(&f)).contains("shift_left"));
}
