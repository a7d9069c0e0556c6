//! Row kernels in the subgroup-lanes layout check at run time that each
//! subgroup is one row's lanes. A kernel generated for a subgroup width the
//! adapter does not have takes its fallback, which must still give the
//! CPU reference's result: this test makes kiln assume a wrong width.

use kiln::core::testing::TestHooks;
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
    let mut checked = 0;
    for (label, dev) in devices.iter() {
        let Some(actual) = dev.info().subgroup_size else {
            eprintln!("{label}: no subgroups of a fixed width");
            continue;
        };
        checked += 1;
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
    if checked == 0 {
        kiln_conformance::require::skip("fixed-width subgroups", "no adapter found has subgroups of a fixed width");
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

/// Softmax, log-softmax and x − mean(x) over `[37, len]`, with the kernel
/// names `dev` plans for the softmax.
fn uneven_outputs(dev: &Device, len: usize) -> Result<(Vec<Vec<f32>>, Vec<String>)> {
    let x = kiln_conformance::rng::tensor(dev, &[37, len], 63, -3.0, 3.0);
    let ys = [x.softmax(-1)?, x.log_softmax(-1)?, x.sub(&x.mean(&[-1], true)?)?];
    let planned = if dev.is_cpu() { vec![] } else { dev.plan_kernels(&[ys[0].node().clone()])? };
    let names = planned.into_iter().map(|k| k.name).collect();
    let values = ys.iter().map(|y| kiln::block_on(y.to_vec::<f32>())).collect::<Result<_>>()?;
    Ok((values, names))
}

/// Rows that do not split evenly among a row's lanes: the last slot is
/// ragged (lanes past the row's end fold the identity and store what the
/// row's own lane stores), and rows of a length that is not a multiple of 4
/// are held element by element. Each is checked against the CPU reference
/// in every combine an adapter can run: its own subgroups, a subgroup
/// width it does not have (the fallback), and workgroup memory.
#[test]
fn rows_that_do_not_split_evenly_among_lanes_match_the_reference() {
    let devices = devices();
    for len in [1000, 1023, 200] {
        let (want, _) = uneven_outputs(&Device::cpu(), len).unwrap();
        for (label, dev) in devices.iter() {
            let info = dev.info();
            // Each mode with the lanes per row it gives.
            let workgroup_lanes = info.workgroup_memory.then_some(if info.is_cpu_adapter() { 8 } else { 16 });
            let wrong = info.subgroup_size.map(|w| if w == 8 { 4 } else { 8 });
            let mut modes = vec![("its own layout", info.subgroup_size.or(workgroup_lanes))];
            if wrong.is_some() {
                modes.push(("a wrong subgroup width", wrong));
            }
            if workgroup_lanes.is_some() {
                modes.push(("workgroup memory", workgroup_lanes));
            }
            for (mode, lane_count) in modes {
                match mode {
                    "a wrong subgroup width" => dev.assume_subgroup_width(wrong),
                    "workgroup memory" => dev.assume_no_fixed_subgroup_width(),
                    _ => {}
                }
                let got = uneven_outputs(dev, len);
                dev.assume_subgroup_width(None);
                let (got, names) = got.unwrap();
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    let worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                    assert!(worst <= 2e-5, "output {k} over [37, {len}] on {label}, {mode}: off by {worst:e}");
                }
                // Rows of 1000 and 1023 take lanes wherever a lane holds at
                // most 64 vec4s or 128 elements (not SwiftShader's 4 lanes at 1023).
                let lanes = names.iter().any(|n| n.ends_with("_lanes"));
                if len == 1000 || (len == 1023 && lane_count.is_some_and(|l| l >= 8)) {
                    assert!(lanes, "[37, {len}] on {label}, {mode}: {names:?}");
                }
                eprintln!("{label}, {mode}: rows of {len} match the reference ({names:?})");
            }
        }
    }
}
