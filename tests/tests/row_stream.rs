//! Long rows on CPU adapters: one streaming row kernel (a workgroup per
//! row, each lane walking its share) instead of tree passes per
//! statistic. Each case is checked against the CPU reference on every
//! adapter, along with the path it takes (adapters that do not stream
//! keep their tree passes and are checked all the same).

use kiln::prelude::*;
use kiln_conformance::adapters::shared as devices;

type Build = fn(&Device) -> Result<Tensor>;

fn random(dev: &Device, shape: &[usize], seed: u64) -> Tensor {
    kiln_conformance::rng::tensor(dev, shape, seed, -4.0, 4.0)
}

/// (what, build, tolerance relative to the largest reference magnitude,
/// the streamed kernel's name suffix: how it reads the rows).
const CASES: [(&str, Build, f64, &str); 15] = [
    // vec4 lanes, every lane's share whole: the online (max, sum of exp) pass.
    ("softmax over [16, 262144]", |d| random(d, &[16, 262144], 1).softmax(-1), 1e-5, VEC4),
    // vec4 lanes, the last walk of some lanes short (70000 = 273·256 + 112).
    ("softmax over [16, 70000]", |d| random(d, &[16, 70000], 2).softmax(-1), 1e-5, VEC4),
    // 50257 is odd: rows not 4-aligned, read in the vec4s covering them.
    ("log-softmax over [20, 50257]", |d| random(d, &[20, 50257], 3).log_softmax(-1), 1e-5, STRADDLING),
    // Two plain stages (mean, then the mean of squares about it).
    ("layer norm over [16, 40000]", |d| layer_norm(&random(d, &[16, 40000], 4)), 1e-4, VEC4),
    // The same over rows that straddle vec4s: the sums' masked elements count 0.
    ("layer norm over [16, 40001]", |d| layer_norm(&random(d, &[16, 40001], 8)), 1e-4, STRADDLING),
    // A row-broadcast leaf (one value per row) in straddling vec4s.
    ("softmax of x minus a per-row value over [18, 30003]", |d| shifted_softmax(d, 18, 30003), 1e-5, STRADDLING),
    // One value per row, written by the row's first lane.
    ("logsumexp over [24, 30011]", |d| logsumexp(&random(d, &[24, 30011], 5)), 1e-5, STRADDLING),
    ("logsumexp over [24, 30012]", |d| logsumexp(&random(d, &[24, 30012], 11)), 1e-5, VEC4),
    // A per-column leaf (a bias) over rows that straddle vec4s: each
    // element reads its own column's entry.
    ("softmax of x plus a per-column bias over [16, 30001]", |d| biased_softmax(d, 16, 30001), 1e-5, STRADDLING),
    // A one-hot target per row (a row-broadcast label against a column
    // index), then the picked log-probability per row: in vec4s where the
    // rows split into them, and in those covering them where they do not.
    ("cross-entropy over [16, 50256]", |d| cross_entropy(d, 16, 50256), 1e-5, VEC4),
    ("cross-entropy over [16, 50257]", |d| cross_entropy(d, 16, 50257), 1e-5, STRADDLING),
    ("max over [16, 65536]", |d| random(d, &[16, 65536], 6).max(&[-1], false), 0.0, VEC4),
    // A transposed input: strided leaves, read element by element.
    (
        "sum over a transposed [20000, 16]",
        |d| random(d, &[20000, 16], 7).permute(&[1, 0])?.sum(&[-1], false),
        1e-5,
        ELEMENTS,
    ),
    // A row whose every element is −∞ but one: sums of exp from −∞ prefixes stay 0.
    ("softmax of −∞ rows with one finite value", |d| minus_infinity_rows(d, 20000)?.softmax(-1), 1e-6, VEC4),
    ("the same over rows of 20001", |d| minus_infinity_rows(d, 20001)?.softmax(-1), 1e-6, STRADDLING),
];

const VEC4: &str = "_stream_vec4";
const STRADDLING: &str = "_stream_straddling";
const ELEMENTS: &str = "_stream";

fn layer_norm(x: &Tensor) -> Result<Tensor> {
    let centered = x.sub(&x.mean(&[-1], true)?)?;
    centered.div(&centered.mul(&centered)?.mean(&[-1], true)?.add_scalar(1e-5)?.sqrt()?)
}

fn logsumexp(x: &Tensor) -> Result<Tensor> {
    let m = x.max(&[-1], true)?;
    x.sub(&m)?.exp()?.sum(&[-1], true)?.log()?.add(&m)
}

/// Each row's −log p(label) under softmax, the labels spread over the row.
fn cross_entropy(d: &Device, rows: usize, len: usize) -> Result<Tensor> {
    let labels: Vec<i32> = (0..rows).map(|r| (r * 7919 % len) as i32).collect();
    let labels = Tensor::from_slice(d, &labels, &[rows])?;
    let picked = random(d, &[rows, len], 12).log_softmax(-1)?.mul(&labels.one_hot(len, DType::F32)?)?;
    picked.sum(&[-1], false)?.neg()
}

fn shifted_softmax(d: &Device, rows: usize, len: usize) -> Result<Tensor> {
    random(d, &[rows, len], 9).sub(&random(d, &[rows, 1], 10))?.softmax(-1)
}

fn biased_softmax(d: &Device, rows: usize, len: usize) -> Result<Tensor> {
    random(d, &[rows, len], 13).add(&random(d, &[len], 14))?.softmax(-1)
}

fn minus_infinity_rows(d: &Device, len: usize) -> Result<Tensor> {
    let rows = 16;
    let x: Vec<f32> =
        (0..rows * len).map(|i| if i % len == (i / len) * 997 % len { 1.5 } else { f32::NEG_INFINITY }).collect();
    Tensor::from_slice(d, &x, &[rows, len])
}

#[test]
fn long_rows_match_the_reference_on_every_adapter() {
    let devices = devices();
    for (what, build, tol, suffix) in CASES {
        let want = kiln::block_on(build(&Device::cpu()).unwrap().to_vec::<f32>()).unwrap();
        let scale = want.iter().filter(|v| v.is_finite()).fold(1e-30f32, |m, v| m.max(v.abs())) as f64;
        for (label, dev) in devices.iter() {
            let y = build(dev).unwrap();
            let names: Vec<String> =
                dev.plan_kernels(&[y.node().clone()]).unwrap().into_iter().map(|k| k.name).collect();
            let info = dev.info();
            let streams = info.is_cpu_adapter() && info.workgroup_memory;
            let streamed = names.iter().filter(|n| n.ends_with(suffix)).count();
            assert_eq!(streamed, if streams { 1 } else { 0 }, "{what} on {label}: {names:?}");
            if streams {
                // One kernel in all, but layer norm's (two row statistics,
                // then the outputs) and those finishing on a scalar kernel.
                assert!(names.len() <= 2, "{what} on {label}: {names:?}");
            }
            let got = kiln::block_on(y.to_vec::<f32>()).unwrap();
            assert_eq!(got.len(), want.len(), "{what} on {label}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = if w.is_finite() { ((g - w).abs() as f64) <= tol * scale } else { g == w };
                assert!(ok, "{what} on {label}: element {i} is {g}, reference {w} ({names:?})");
            }
            eprintln!("{what} on {label}: matches the reference ({names:?})");
        }
    }
}
