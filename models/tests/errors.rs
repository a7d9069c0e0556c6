//! A model folder kiln cannot run is a one-line error naming what is wrong:
//! the file, the tensor and both shapes, the `model_type`.

use kiln::prelude::*;
use kiln_models::Model;
use std::path::{Path, PathBuf};

/// A copy of fixture `name` in a folder of its own, for `test` to spoil.
fn copy_of(name: &str, test: &str) -> PathBuf {
    let from = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let to = std::env::temp_dir().join(format!("kiln-models-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
    to
}

fn load_error(dir: &Path) -> String {
    let e = Model::load(dir, &Device::cpu()).unwrap_err().to_string();
    std::fs::remove_dir_all(dir).unwrap();
    e
}

/// `config.json` with `key` set to the JSON `value`.
fn set_config(dir: &Path, key: &str, value: &str) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json[key] = serde_json::from_str(value).unwrap();
    std::fs::write(path, json.to_string()).unwrap();
}

#[test]
fn an_unknown_model_type_is_named() {
    let dir = copy_of("gpt2", "type");
    set_config(&dir, "model_type", "\"bert\"");
    let want = format!(
        "config.json: {}: model_type `bert` is not one kiln runs (gpt2, llama)",
        dir.join("config.json").display()
    );
    assert_eq!(load_error(&dir), want);
}

#[test]
fn a_tensor_of_another_shape_names_the_tensor_and_both_shapes() {
    let dir = copy_of("gpt2", "shape");
    set_config(&dir, "n_positions", "65");
    let want = format!(
        "safetensors: {}: tensor `transformer.wpe.weight` is [64, 32] in the file, [65, 32] expected",
        dir.join("model.safetensors").display()
    );
    assert_eq!(load_error(&dir), want);
}

#[test]
fn a_missing_tensor_is_named() {
    let dir = copy_of("llama", "missing");
    set_config(&dir, "num_hidden_layers", "3");
    let e = load_error(&dir);
    assert!(e.contains("tensor `model.layers.2.self_attn.q_proj.weight` [64, 64] is missing"), "{e}");
}

#[test]
fn tensors_no_layer_uses_are_named() {
    let dir = copy_of("llama", "extra");
    set_config(&dir, "num_hidden_layers", "1");
    let e = load_error(&dir);
    assert!(e.contains("tensors no layer uses: `model.layers.1.input_layernorm.weight`"), "{e}");
}

#[test]
fn a_truncated_file_is_named() {
    let dir = copy_of("gpt2", "truncated");
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_error(&dir);
    let want = format!("safetensors: {}: not a valid safetensors file, truncated or corrupted", file.display());
    assert!(e.starts_with(&want), "{e}");
}

#[test]
fn ids_the_model_cannot_take_are_an_error() {
    let model =
        Model::load(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gpt2"), &Device::cpu()).unwrap();
    let dev = Device::cpu();
    let long = Tensor::zeros(&dev, &[1, 65], DType::I32).unwrap();
    assert_eq!(
        model.forward(&long).unwrap_err().to_string(),
        "Gpt2: takes integer ids [B, T] with T ≤ 64, got i32 [1, 65]"
    );
    let floats = Tensor::zeros(&dev, &[1, 3], DType::F32).unwrap();
    assert_eq!(
        model.forward(&floats).unwrap_err().to_string(),
        "Gpt2: takes integer ids [B, T] with T ≤ 64, got f32 [1, 3]"
    );
}

/// Files given in memory (a browser's) read as the folder on disk does,
/// and one that is missing is named, with the files that were given.
#[test]
fn files_given_in_memory_load_and_a_missing_one_is_named() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama");
    let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (format!("llama/{}", p.file_name().unwrap().to_str().unwrap()), std::fs::read(p).unwrap()))
        .collect();
    let dev = Device::cpu();
    let from_memory = Model::from_folder(&kiln_models::Folder::files(files.clone()), &dev).unwrap();
    let from_disk = Model::load(&dir, &dev).unwrap();
    let ids = Tensor::from_slice(&dev, &[5i32, 17, 42], &[1, 3]).unwrap();
    let logits = |m: &Model| kiln::block_on(m.forward(&ids).unwrap().to_vec::<f32>()).unwrap();
    assert_eq!(logits(&from_memory), logits(&from_disk));
    let without: Vec<_> = files.into_iter().filter(|(n, _)| !n.ends_with("00002-of-00003.safetensors")).collect();
    let e = Model::from_folder(&kiln_models::Folder::files(without), &dev).unwrap_err().to_string();
    assert!(
        e.starts_with("safetensors: model-00002-of-00003.safetensors: is not among the files given (config.json"),
        "{e}"
    );
}
