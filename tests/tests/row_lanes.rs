//! Row kernels in the subgroup-lanes layout check at run time that each
//! subgroup is one row's lanes. A kernel generated for a subgroup width the
//! adapter does not have takes its fallback, which must still give the
//! CPU reference's result: this test makes kiln assume a wrong width.

use kiln::prelude::*;
use kiln_conformance::adapters::shared as devices;

/// Softmax, a max and a mean consumed per element, over rows of 1024:
/// lanes kernels with one and two stages.
fn outputs(dev: &Device) -> Result<Vec<Vec<f32>>> {
    let x = kiln_conformance::rng::tensor(dev, &[33, 1024], 61, -3.0, 3.0);
    let ys = [x.softmax(-1)?, x.sub(&x.max(&[-1], true)?)?, x.sub(&x.mean(&[-1], true)?)?];
    ys.iter().map(|y| kiln::block_on(y.to_vec::<f32>())).collect()
}

#[test]
fn row_kernels_are_right_whatever_subgroup_width_they_assume() {
    let want = outputs(&Device::cpu()).unwrap();
    let devices = devices();
    for (label, dev) in devices.iter() {
        let Some(actual) = dev.info().subgroup_size else {
            eprintln!("skipped on {label}: no subgroups of a fixed width");
            continue;
        };
        for assumed in [actual, if actual == 8 { 4 } else { 8 }] {
            dev.assume_subgroup_width(Some(assumed));
            let got = outputs(dev);
            dev.assume_subgroup_width(None);
            for (k, (g, w)) in got.unwrap().iter().zip(&want).enumerate() {
                let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst <= 1e-5, "output {k} on {label} assuming {assumed}-wide subgroups: off by {worst:e}");
            }
            eprintln!("{label}: subgroups {actual} wide, assumed {assumed}: every output matches");
        }
    }
}

/// Every lane of a row ends with the same bits for the row's value, even
/// from a merge whose result depends on its operands' order: here the max
/// of a row whose largest values are −0 and +0 (which one a max returns is
/// up to the adapter), seen through x / max(x), ±∞ for each negative x.
#[test]
fn a_rows_lanes_agree_on_its_max_of_signed_zeros() {
    let (rows, len) = (33, 1024);
    let x: Vec<f32> = (0..rows * len)
        .map(|i| match i % len {
            j if j % 97 == 5 => 0.0,
            j if j % 89 == 7 => -0.0,
            j => -1.0 - (j % 13) as f32,
        })
        .collect();
    let devices = devices();
    for (label, dev) in devices.iter() {
        let t = Tensor::from_slice(dev, &x, &[rows, len]).unwrap();
        let y = kiln::block_on(t.div(&t.max(&[-1], true).unwrap()).unwrap().to_vec::<f32>()).unwrap();
        for (r, row) in y.chunks(len).enumerate() {
            let signs: Vec<bool> = row.iter().filter(|v| v.is_infinite()).map(|v| v.is_sign_positive()).collect();
            assert!(signs.len() > 900, "row {r} on {label}: {} infinities", signs.len());
            assert!(signs.iter().all(|&s| s == signs[0]), "row {r} on {label}: lanes disagree on the row's max");
        }
    }
}
