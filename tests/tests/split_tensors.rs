//! Tensors larger than one storage binding are held as pieces and used as
//! one tensor: each op over them, on the CPU reference and every adapter
//! with a binding limit lowered to 4 KiB, equals the op on the CPU
//! reference over whole tensors; a jit replay takes and gives them; and an
//! op that cannot run piece by piece is an error naming the limit.

use kiln::prelude::*;
use kiln_conformance::rng;

/// The binding limit the devices under test get: a [300, 16] f32 table
/// (19,200 bytes) is then five pieces of at most 64 rows.
const LIMIT: u64 = 4096;

struct Inputs {
    table: Tensor,
    x: Tensor,
    w: Tensor,
    bias: Tensor,
    ids: Tensor,
}

fn inputs(dev: &Device) -> Inputs {
    Inputs {
        table: rng::tensor(dev, &[300, 16], 1, -1.0, 1.0),
        x: rng::tensor(dev, &[5, 16], 2, -1.0, 1.0),
        w: rng::tensor(dev, &[16, 8], 3, -1.0, 1.0),
        bias: rng::tensor(dev, &[16], 4, -1.0, 1.0),
        ids: Tensor::from_slice(dev, &[0i32, 63, 64, 150, 299, 5, 200, 128], &[8]).unwrap(),
    }
}

type Case = (&'static str, fn(&Inputs) -> Result<Tensor>);

/// Every way the models use a large table, and each kind of op rule.
const CASES: [Case; 17] = [
    ("the table read back", |i| Ok(i.table.clone())),
    ("index_select (an embedding)", |i| i.table.index_select(0, &i.ids)),
    ("x @ tableᵀ (a tied head)", |i| i.x.matmul(&i.table.t()?)),
    ("table @ w (rows)", |i| i.table.matmul(&i.w)),
    ("tableᵀ @ table (contraction)", |i| i.table.t()?.matmul(&i.table)),
    ("sum over the split axis", |i| i.table.sum(&[0], false)),
    ("sum over the other axis", |i| i.table.sum(&[1], false)),
    ("max of all", |i| i.table.max(&[], false)),
    ("f16 and back", |i| i.table.cast(DType::F16)?.cast(DType::F32)),
    ("exp + bias", |i| i.table.exp()? + &i.bias),
    ("a slice across pieces", |i| i.table.narrow(0, 50, 100)),
    ("a slice inside a piece", |i| i.table.narrow(0, 70, 10)),
    ("reshape to [4800]", |i| i.table.reshape(&[-1])),
    ("reshape to [1, 300, 4, 4]", |i| i.table.reshape(&[1, 300, 4, 4])),
    ("softmax of rows", |i| i.table.softmax(-1)),
    ("a large fill, added to", |i| Tensor::zeros(i.table.device(), &[3000], DType::F32)?.add_scalar(1.0)),
    ("mean over rows of tableᵀ", |i| i.table.t()?.mean(&[1], false)),
];

fn values(t: &Tensor) -> Vec<f32> {
    kiln::block_on(t.to_vec::<f32>()).unwrap()
}

fn devices_under_test() -> Vec<(String, Device)> {
    kiln_conformance::validation::env_for_adapters();
    let (found, skipped) = kiln::block_on(kiln_conformance::adapters::discover());
    for s in skipped {
        eprintln!("skipped: {s}");
    }
    let mut devices = vec![("CPU reference".to_string(), Device::cpu())];
    devices.extend(found.into_iter().map(|f| (f.label, f.device)));
    devices
}

#[test]
fn every_op_over_a_tensor_held_in_pieces_equals_the_op_over_it_whole() {
    let whole = inputs(&Device::cpu());
    assert!(whole.table.node().inputs().is_empty(), "the reference's table is one piece");
    for (label, dev) in devices_under_test() {
        let dev = dev.with_binding_limit(LIMIT);
        let split = inputs(&dev);
        assert!(dev.is_split(split.table.node()), "{label}: the table is held in pieces");
        assert_eq!(split.table.node().inputs().len(), 5, "{label}: pieces of 64 rows");
        for (name, case) in CASES {
            let want = values(&case(&whole).unwrap());
            let got = values(&case(&split).unwrap_or_else(|e| panic!("{label}: {name}: {e}")));
            assert_eq!(got.len(), want.len(), "{label}: {name}");
            // Through f16 an adapter may round once less than the reference.
            let tolerance = if name.contains("f16") { 1e-3 } else { 1e-5 };
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= tolerance * (1.0 + w.abs()), "{label}: {name}: element {k} is {g}, want {w}");
            }
        }
    }
}

#[test]
fn a_captured_function_takes_and_gives_tensors_held_in_pieces() {
    for (label, dev) in devices_under_test() {
        let dev = dev.with_binding_limit(LIMIT);
        let f = kiln::jit_flat(|xs: &[Tensor]| {
            let [table, x] = xs else { panic!("two inputs") };
            Ok(vec![table.mul_scalar(2.0)?.add_scalar(1.0)?, x.matmul(&table.t()?)?])
        });
        for seed in [1, 2] {
            let (table, x) =
                (rng::tensor(&dev, &[300, 16], seed, -1.0, 1.0), rng::tensor(&dev, &[5, 16], 9, -1.0, 1.0));
            let out = kiln::block_on(f.call(&[table.clone(), x.clone()])).unwrap();
            assert!(dev.is_split(out[0].node()), "{label}: the [300, 16] result is held in pieces");
            let want =
                [table.mul_scalar(2.0).unwrap().add_scalar(1.0).unwrap(), x.matmul(&table.t().unwrap()).unwrap()];
            for (o, w) in out.iter().zip(&want) {
                assert_eq!(values(o), values(w), "{label}: seed {seed}");
            }
        }
        if !dev.is_cpu() {
            assert_eq!(f.captures(), 1, "{label}: the second call replays");
        }
    }
}

#[test]
fn an_op_that_cannot_run_piece_by_piece_is_an_error_naming_the_limit() {
    let dev = Device::cpu().with_binding_limit(LIMIT);
    let table = rng::tensor(&dev, &[300, 16], 1, -1.0, 1.0);
    let e = table.argmax(Some(0), false).unwrap_err().to_string();
    assert!(e.contains("argmax") && e.contains("[300, 16]") && e.contains("4096 bytes"), "{e}");
    let e = table.slice(0, None, None, 2).unwrap_err().to_string();
    assert!(e.contains("slice") && e.contains("step of 2"), "{e}");
}
