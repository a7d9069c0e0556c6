//! kiln's own transcendentals (core/codegen/src/math.rs): on every adapter
//! each lands within a few ulp of the f64 value, and every adapter gives
//! the same bits, so a training curve does not drift between adapters.

use kiln::prelude::*;
use kiln_conformance::adapters::shared as devices;

const N: usize = 1 << 16;

/// Error of `got` against the f64 value, in ulps of the rounded value.
fn ulps(got: f32, want: f64) -> f64 {
    let rounded = want as f32;
    if got == rounded || (got.is_nan() && want.is_nan()) {
        return 0.0;
    }
    (got as f64 - want).abs() / (f32::EPSILON as f64 * (rounded.abs().max(f32::MIN_POSITIVE) as f64))
}

/// Evenly spread over [lo, hi).
fn spread(lo: f32, hi: f32) -> Vec<f32> {
    (0..N).map(|i| lo + (hi - lo) * i as f32 / N as f32).collect()
}

type Case = (&'static str, f64, Vec<f32>, fn(&Tensor) -> Result<Tensor>, fn(f64) -> f64);

fn cases() -> Vec<Case> {
    vec![
        ("exp", 1.0, spread(-87.0, 88.0), |t| t.exp(), f64::exp),
        ("log", 2.0, spread(1e-30, 4.0), |t| t.log(), f64::ln),
        ("log near 1", 2.0, spread(0.9, 1.1), |t| t.log(), f64::ln),
        ("sin", 1.5, spread(-100.0, 100.0), |t| t.sin(), f64::sin),
        ("cos", 1.5, spread(-100.0, 100.0), |t| t.cos(), f64::cos),
        ("tanh", 2.0, spread(-10.0, 10.0), |t| t.tanh(), f64::tanh),
        ("sigmoid", 2.0, spread(-30.0, 30.0), |t| t.sigmoid(), |x| 1.0 / (1.0 + (-x).exp())),
        ("rsqrt", 1.0, spread(1e-20, 100.0), |t| t.rsqrt(), |x| 1.0 / x.sqrt()),
        ("pow(x, 0.37)", 3.0, spread(0.0, 50.0), |t| t.pow_scalar(0.37), |x| x.powf(0.37)),
        ("pow(x, 2)", 0.5, spread(-50.0, 50.0), |t| t.pow_scalar(2.0), |x| x * x),
        ("pow(x, -3)", 2.0, spread(-5.0, 5.0), |t| t.pow_scalar(-3.0), |x| x.powi(-3)),
    ]
}

#[test]
fn transcendentals_are_accurate_and_identical_on_every_adapter() {
    let devices = devices().clone();
    for (name, bound, xs, op, truth) in cases() {
        let mut first: Option<(String, Vec<f32>)> = None;
        for (label, dev) in devices.iter() {
            let x = Tensor::from_slice(dev, &xs, &[N]).unwrap();
            let got = kiln::block_on(op(&x).unwrap().to_vec::<f32>()).unwrap();
            let (worst_at, worst) = got
                .iter()
                .zip(&xs)
                .map(|(&g, &x)| ulps(g, truth(x as f64)))
                .enumerate()
                .fold((0, 0.0), |a, (i, e)| if e > a.1 { (i, e) } else { a });
            eprintln!("{name} on {label}: worst {worst:.2} ulp (at x = {})", xs[worst_at]);
            assert!(worst <= bound, "{name} on {label}: {worst:.2} ulp at x = {} (bound {bound})", xs[worst_at]);
            match &first {
                None => first = Some((label.clone(), got)),
                Some((first_label, want)) => {
                    let differ = got.iter().zip(want).position(|(a, b)| a.to_bits() != b.to_bits());
                    assert!(
                        differ.is_none(),
                        "{name}: {label} and {first_label} differ at x = {}",
                        xs[differ.unwrap_or(0)]
                    );
                }
            }
        }
    }
}

#[test]
fn special_values_follow_ieee() {
    let devices = devices().clone();
    let inf = f32::INFINITY;
    let xs = [0.0f32, -0.0, inf, -inf, f32::NAN, -1.0, 1e-40, 100.0, -100.0];
    for (label, dev) in devices.iter() {
        let x = Tensor::from_slice(dev, &xs, &[xs.len()]).unwrap();
        let get = |t: Tensor| kiln::block_on(t.to_vec::<f32>()).unwrap();
        let exp = get(x.exp().unwrap());
        assert_eq!(&exp[..4], &[1.0, 1.0, inf, 0.0], "exp on {label}");
        assert!(exp[4].is_nan(), "exp(NaN) on {label}");
        assert_eq!((exp[7], exp[8]), (inf, 0.0), "exp(±100) on {label}");
        let log = get(x.log().unwrap());
        assert_eq!(&log[..3], &[-inf, -inf, inf], "log on {label}");
        assert!(log[3].is_nan() && log[4].is_nan() && log[5].is_nan(), "log of negatives and NaN on {label}: {log:?}");
        let tanh = get(x.tanh().unwrap());
        assert_eq!((tanh[2], tanh[3], tanh[7], tanh[8]), (1.0, -1.0, 1.0, -1.0), "tanh on {label}");
        let sin = get(x.sin().unwrap());
        assert!(sin[2].is_nan() && sin[4].is_nan(), "sin(inf), sin(NaN) on {label}: {sin:?}");
    }
}

/// exp(x − max x) along a row skips exp's overflow test (the argument is
/// at most 0): on every adapter, in the lanes row kernel (rows of 1024) and
/// the row-per-invocation one (rows of 2), it gives the bits `exp` gives.
#[test]
fn exp_of_a_value_minus_its_row_max_matches_exp_bit_for_bit() {
    let devices = devices().clone();
    let mut grid = spread(-104.0, 0.0);
    grid[..6].copy_from_slice(&[f32::NEG_INFINITY, -0.0, -1e-40, -87.3365, -87.3366, -103.97]);
    for len in [1024, 2] {
        // Each row: grid values, then a 0, its max.
        let mut xs = Vec::with_capacity(N);
        for chunk in grid.chunks(len - 1) {
            xs.extend_from_slice(chunk);
            xs.push(0.0);
        }
        let rows = xs.len() / len;
        xs.truncate(rows * len);
        for (label, dev) in devices.iter() {
            let x = Tensor::from_slice(dev, &xs, &[rows, len]).unwrap();
            let shifted = x.sub(&x.max(&[-1], true).unwrap()).unwrap().exp().unwrap();
            let got = kiln::block_on(shifted.to_vec::<f32>()).unwrap();
            let want = kiln::block_on(x.exp().unwrap().to_vec::<f32>()).unwrap();
            let differ = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
            assert!(
                differ.is_none(),
                "rows of {len} on {label}: exp(x - max x) differs from exp at x = {}",
                xs[differ.unwrap_or(0)]
            );
            let specialized = dev.compiled_sources().iter().any(|s| s.contains("= kiln_exp_no_overflow("));
            assert!(specialized, "rows of {len} on {label}: no kernel called kiln_exp_no_overflow");
        }
    }
}

/// Only a max makes the argument non-positive: exp(x − min x) along a row
/// keeps exp's overflow test, so large differences still give ∞.
#[test]
fn exp_of_a_value_minus_its_row_min_still_overflows() {
    let devices = devices().clone();
    let rows = N / 1024;
    // Each row spans 130, so x − min x runs past exp's overflow at 88.72.
    let xs: Vec<f32> = (0..N).map(|i| -10.0 + 130.0 * (i % 1024) as f32 / 1024.0 + (i / 1024) as f32 * 1e-3).collect();
    for (label, dev) in devices.iter() {
        let x = Tensor::from_slice(dev, &xs, &[rows, 1024]).unwrap();
        let d = x.sub(&x.min(&[-1], true).unwrap()).unwrap();
        let got = kiln::block_on(d.exp().unwrap().to_vec::<f32>()).unwrap();
        kiln::block_on(d.realize()).unwrap();
        let want = kiln::block_on(d.exp().unwrap().to_vec::<f32>()).unwrap();
        assert!(want.contains(&f32::INFINITY), "the case reaches overflow");
        let differ = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
        assert!(differ.is_none(), "{label}: exp(x - min x) differs from exp at x = {}", xs[differ.unwrap_or(0)]);
    }
}
