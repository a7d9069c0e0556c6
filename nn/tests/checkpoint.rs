//! Checkpoints: a bit-exact round trip of parameters and optimizer state
//! (f32, f16, bf16, i32 leaves) onto the CPU reference and a GPU adapter; bad
//! files and mismatched trees are errors naming the file and each leaf,
//! and leave an existing checkpoint's bytes untouched.

mod common;

use kiln::prelude::*;
use kiln_nn::checkpoint::Checkpoint;
use kiln_nn::optim::{Transform, adam};
use std::path::{Path, PathBuf};

#[derive(Tree)]
struct Model {
    weight: Tensor,
    scale: Tensor,
    brain: Tensor,
    ids: Tensor,
}

/// f32 values with edge cases (-0, a subnormal, inf, the largest finite).
const W: [f32; 6] = [1.5, -0.0, 1e-40, f32::INFINITY, f32::MAX, -3.25e-7];

fn model(dev: &Device) -> Model {
    let halves: Vec<half::f16> = [0.1, -65504.0, 6e-8, 3.0].iter().map(|&v| half::f16::from_f64(v)).collect();
    // bf16 keeps f32's range: its largest finite value, a subnormal, -inf.
    let bf = half::bf16::from_f64;
    let brains = [half::bf16::MAX, half::bf16::from_bits(1), half::bf16::NEG_INFINITY, bf(0.1), bf(-7.0)];
    Model {
        weight: Tensor::from_slice(dev, &W, &[2, 3]).unwrap(),
        scale: Tensor::from_slice(dev, &halves, &[4]).unwrap(),
        brain: Tensor::from_slice(dev, &brains, &[5]).unwrap(),
        ids: Tensor::from_slice(dev, &[7i32, -1, i32::MAX], &[3]).unwrap(),
    }
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::F32 => kiln::block_on(t.to_vec::<f32>()).unwrap().iter().map(|v| v.to_bits() as u64).collect(),
        DType::F16 => kiln::block_on(t.to_vec::<half::f16>()).unwrap().iter().map(|v| v.to_bits() as u64).collect(),
        DType::BF16 => kiln::block_on(t.to_vec::<half::bf16>()).unwrap().iter().map(|v| v.to_bits() as u64).collect(),
        DType::I32 => kiln::block_on(t.to_vec::<i32>()).unwrap().iter().map(|&v| v as u32 as u64).collect(),
        d => panic!("no bits for {d}"),
    }
}

fn save_a(path: &Path) -> Vec<u8> {
    let dev = Device::cpu();
    let mut ck = Checkpoint::new();
    kiln::block_on(ck.add("params", &model(&dev))).unwrap();
    ck.set_metadata("step", "3").unwrap();
    ck.save(path).unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn params_and_optimizer_state_round_trip_bit_exactly() {
    let d = dir("roundtrip");
    let path = d.join("model.safetensors");
    let mut devs: Vec<(String, Device)> = vec![("cpu".into(), Device::cpu())];
    devs.extend(common::devices().into_iter().skip(1).take(1).map(|(l, dev, _)| (l, dev)));
    for (label, dev) in devs {
        let p = model(&dev);
        let opt = adam(1e-3, 0.9, 0.999, 1e-8);
        let float_params = vec![p.weight.clone()];
        let state = opt.init(&float_params).unwrap();
        let (_, state) = opt.update(&float_params, &state, None).unwrap();
        let mut ck = Checkpoint::new();
        kiln::block_on(ck.add("params", &p)).unwrap();
        kiln::block_on(ck.add("opt", &state)).unwrap();
        ck.set_metadata("model", "test").unwrap();
        ck.set_metadata("step", "1").unwrap();
        ck.save(&path).unwrap();

        let names: Vec<&str> = ck.names().collect();
        assert_eq!(
            names,
            [
                "opt.0.count",
                "opt.0.mu.0",
                "opt.0.nu.0",
                "opt.1.count",
                "params.brain",
                "params.ids",
                "params.scale",
                "params.weight"
            ]
        );
        let back = Checkpoint::load(&path).unwrap();
        assert_eq!(back.metadata().get("step").map(String::as_str), Some("1"), "{label}");
        assert_eq!(back.metadata().get("model").map(String::as_str), Some("test"), "{label}");
        let q = back.tree("params", &model(&Device::cpu()), &dev).unwrap();
        assert_eq!(q.weight.device(), &dev);
        for (a, b) in p.leaves().iter().zip(q.leaves()) {
            assert_eq!(bits(a), bits(&b), "{label}: {:?}", a.dtype());
        }
        let s = back.tree("opt", &state, &dev).unwrap();
        for (a, b) in state.leaves().iter().zip(s.leaves()) {
            assert_eq!(bits(a), bits(&b), "{label}: state");
        }
        assert_eq!(kiln::block_on(s.0.count.item::<i32>()).unwrap(), 1);
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_mismatched_tree_names_every_difference() {
    let d = dir("mismatch");
    let path = d.join("a.safetensors");
    let a = save_a(&path);
    let cpu = Device::cpu();
    #[derive(Tree)]
    struct Other {
        weight: Tensor,
        scale: Tensor,
        bias: Tensor,
    }
    let like = Other {
        weight: Tensor::zeros(&cpu, &[3, 2], DType::F32).unwrap(),
        scale: Tensor::zeros(&cpu, &[4], DType::F32).unwrap(),
        bias: Tensor::zeros(&cpu, &[2], DType::F32).unwrap(),
    };
    let err = Checkpoint::load(&path).unwrap().tree("params", &like, &cpu).err().unwrap().to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("`params.weight` is f32 [2, 3] in the file, f32 [3, 2] expected"), "{err}");
    assert!(err.contains("`params.scale` is f16 [4] in the file, f32 [4] expected"), "{err}");
    assert!(err.contains("`params.bias` is missing"), "{err}");
    assert!(err.contains("`params.ids` is in the file but not in the tree"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), a, "a failed load leaves the file as it was");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_prefix_the_file_does_not_have_is_an_error_listing_the_prefixes_it_has() {
    let d = dir("prefix");
    let path = d.join("a.safetensors");
    let a = save_a(&path);
    let cpu = Device::cpu();
    let mut ck = Checkpoint::load(&path).unwrap();
    kiln::block_on(ck.add("opt_state", &Tensor::zeros(&cpu, &[1], DType::F32).unwrap())).unwrap();
    assert_eq!(ck.prefixes(), ["opt_state", "params"]);
    let err = ck.tree("opt", &model(&cpu), &cpu).err().unwrap().to_string();
    assert_eq!(
        err,
        format!(
            "checkpoint: {}: holds no tensor under the prefix `opt`; its prefixes are `opt_state`, `params`",
            path.display()
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), a, "a failed load leaves the file as it was");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn corrupted_and_truncated_files_are_errors_naming_the_file() {
    let d = dir("corrupt");
    let path = d.join("a.safetensors");
    let a = save_a(&path);
    let bad = d.join("bad.safetensors");
    let check = |bytes: &[u8], want: &str| {
        std::fs::write(&bad, bytes).unwrap();
        let err = Checkpoint::load(&bad).err().unwrap();
        assert!(matches!(err, KilnError::File { .. }), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("bad.safetensors") && err.contains(want), "{err}");
    };
    check(&a[..a.len() - 5], "truncated or corrupted");
    check(&a[..20], "truncated or corrupted");
    check(&a[..3], "truncated or corrupted");
    check(b"", "truncated or corrupted");
    let mut flipped = a.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    check(&flipped, "checksum mismatch");
    let mut header = a.clone();
    header[10] = b'#';
    check(&header, "truncated or corrupted");
    let err = Checkpoint::load(d.join("missing.safetensors")).err().unwrap().to_string();
    assert!(err.contains("missing.safetensors: cannot read"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), a, "the good file is untouched");
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn a_failed_save_leaves_the_existing_file_untouched() {
    let d = dir("failed-save");
    let path = d.join("a.safetensors");
    let a = save_a(&path);
    let cpu = Device::cpu();
    let mut ck = Checkpoint::new();
    kiln::block_on(ck.add("params", &model(&cpu))).unwrap();
    let err = kiln::block_on(ck.add("params", &model(&cpu))).err().unwrap().to_string();
    assert!(err.contains("tensor `params.weight` is already in the checkpoint"), "{err}");
    let err = ck.set_metadata("kiln.crc32", "0").err().unwrap().to_string();
    assert!(err.contains("reserved"), "{err}");
    // The write itself fails: the temporary file's name is taken by a folder.
    std::fs::create_dir(d.join(format!(".a.safetensors.tmp-{}", std::process::id()))).unwrap();
    ck.set_metadata("step", "99").unwrap();
    let err = ck.save(&path).err().unwrap().to_string();
    assert!(err.contains("a.safetensors: cannot write"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), a, "the existing checkpoint is untouched");
    assert_eq!(Checkpoint::load(&path).unwrap().metadata().get("step").unwrap(), "3");
    std::fs::remove_dir_all(d).unwrap();
}

/// Python's safetensors and numpy read kiln's F16 and BF16 tensors
/// (`nn/tests/python/read_half.py`), each equal to the f32 values kiln
/// stored beside it.
#[test]
fn python_reads_f16_and_bf16_checkpoints() {
    let dev = Device::cpu();
    let d = dir("python-half");
    let values = [-3.5, 0.1, 1e-3, 65504.0, -2.0e-5, 300.7, 0.0, -0.0];
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/read_half.py");
    for dtype in [DType::F16, DType::BF16] {
        let w = Tensor::from_f64(&dev, &values, &[2, 4], DType::F32).unwrap().cast(dtype).unwrap();
        let b = Tensor::from_f64(&dev, &values[..3], &[3], DType::F32).unwrap().cast(dtype).unwrap();
        let half: std::collections::BTreeMap<String, Tensor> = [("w".to_string(), w), ("b".to_string(), b)].into();
        let f32s: std::collections::BTreeMap<String, Tensor> =
            half.iter().map(|(k, t)| (k.clone(), t.cast(DType::F32).unwrap())).collect();
        let (half_path, f32_path) =
            (d.join(format!("{dtype}.safetensors")), d.join(format!("{dtype}-f32.safetensors")));
        for (tree, path) in [(&half, &half_path), (&f32s, &f32_path)] {
            let mut ck = Checkpoint::new();
            kiln::block_on(ck.add("params", tree)).unwrap();
            ck.save(path).unwrap();
        }
        let Some((ok, said)) =
            common::python("python_reads_f16_and_bf16_checkpoints", script, &[&half_path, &f32_path])
        else {
            break;
        };
        let as_python = if dtype == DType::F16 { "F16" } else { "BF16" };
        assert!(ok && said.contains(&format!("2 tensors read as {as_python}")), "{dtype}: {said}");
    }
    std::fs::remove_dir_all(d).unwrap();
}
