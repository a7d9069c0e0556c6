//! The safetensors of a model folder: `model.safetensors`, or the shards
//! that `model.safetensors.index.json` maps each tensor to. Tensors are
//! taken by name with the shape the architecture expects, each uploaded in
//! its stored dtype; every mismatch is an error naming the tensor.

use crate::Folder;
use kiln::prelude::*;
use safetensors::tensor::{Dtype, Metadata, SafeTensors};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Buffers that checkpoints carry but no model reads (GPT-2's causal masks,
/// older Llamas' rotary frequencies): not reported as left over.
const IGNORED_SUFFIXES: [&str; 3] = [".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"];

/// Where one tensor is: its file (an index into `Weights::files`) and
/// its stored dtype, shape and byte range there.
struct Entry {
    file: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: (usize, usize),
}

/// One safetensors file: its path, its bytes, and where its data starts
/// (after the header).
struct File {
    path: PathBuf,
    bytes: Arc<Vec<u8>>,
    data: usize,
}

/// The tensors of a model folder, by name.
pub struct Weights {
    files: Vec<File>,
    entries: BTreeMap<String, Entry>,
    taken: BTreeSet<String>,
}

fn file_err(path: &Path, detail: String) -> KilnError {
    KilnError::File { op: "safetensors", path: path.display().to_string(), detail }
}

impl Weights {
    /// Read the folder's safetensors (all shards, when there is an index).
    pub fn open(folder: &Folder) -> Result<Weights> {
        let index = "model.safetensors.index.json";
        let names: Vec<String> = match folder.has(index) {
            true => shard_names(&folder.path(index), &folder.read_text("safetensors", index)?)?,
            false => vec!["model.safetensors".to_string()],
        };
        let mut weights = Weights::empty();
        for name in names {
            weights.add(&folder.path(&name), folder.read("safetensors", &name)?)?;
        }
        Ok(weights)
    }

    /// The tensors of one safetensors file at `path`.
    pub fn open_file(path: &Path) -> Result<Weights> {
        let bytes = std::fs::read(path).map_err(|e| file_err(path, format!("cannot read: {e}")))?;
        Weights::from_bytes(path, Arc::new(bytes))
    }

    /// The tensors of one safetensors file's `bytes` (`source` names it in
    /// errors).
    pub fn from_bytes(source: &Path, bytes: Arc<Vec<u8>>) -> Result<Weights> {
        let mut weights = Weights::empty();
        weights.add(source, bytes)?;
        Ok(weights)
    }

    fn empty() -> Weights {
        Weights { files: Vec::new(), entries: BTreeMap::new(), taken: BTreeSet::new() }
    }

    fn add(&mut self, path: &Path, bytes: Arc<Vec<u8>>) -> Result<()> {
        let (n, header): (usize, Metadata) = SafeTensors::read_metadata(&bytes)
            .map_err(|e| file_err(path, format!("not a valid safetensors file, truncated or corrupted ({e})")))?;
        let file = self.files.len();
        for (name, info) in header.tensors() {
            let entry = Entry { file, dtype: info.dtype, shape: info.shape.clone(), bytes: info.data_offsets };
            if self.entries.insert(name.clone(), entry).is_some() {
                return Err(file_err(path, format!("tensor `{name}` is stored twice")));
            }
        }
        self.files.push(File { path: path.to_path_buf(), bytes, data: 8 + n });
        Ok(())
    }

    /// Whether the folder holds a tensor called `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The names of the folder's tensors, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// Tensor `name`, which must have `shape`, on `device` in its stored
    /// dtype (f32, f16 or bf16).
    pub fn take(&mut self, name: &str, shape: &[usize], device: &Device) -> Result<Tensor> {
        let Some(entry) = self.entries.get(name) else {
            let path = &self.files.first().map_or_else(PathBuf::new, |f| f.path.clone());
            return Err(file_err(path, format!("tensor `{name}` {shape:?} is missing")));
        };
        let File { path, bytes, data } = &self.files[entry.file];
        if entry.shape != shape {
            let detail = format!("tensor `{name}` is {:?} in the file, {shape:?} expected", entry.shape);
            return Err(file_err(path, detail));
        }
        let bytes = &bytes[data + entry.bytes.0..data + entry.bytes.1];
        let tensor = match entry.dtype {
            Dtype::F32 => Tensor::from_slice(device, &bytemuck::pod_collect_to_vec::<u8, f32>(bytes), shape),
            Dtype::F16 => Tensor::from_slice(device, &bytemuck::pod_collect_to_vec::<u8, half::f16>(bytes), shape),
            Dtype::BF16 => Tensor::from_slice(device, &bytemuck::pod_collect_to_vec::<u8, half::bf16>(bytes), shape),
            other => {
                return Err(file_err(path, format!("tensor `{name}` is {other:?}; kiln loads f32, f16 and bf16")));
            }
        }?;
        self.taken.insert(name.to_string());
        Ok(tensor)
    }

    /// An error naming the tensors no layer took (another architecture's,
    /// or a variant kiln does not run), if any.
    pub fn finish(&self) -> Result<()> {
        let left: Vec<&str> = self
            .names()
            .filter(|n| !self.taken.contains(*n) && !IGNORED_SUFFIXES.iter().any(|s| n.ends_with(s)))
            .collect();
        match (left.first(), self.files.first()) {
            (Some(_), Some(File { path, .. })) => {
                let shown: Vec<String> = left.iter().take(5).map(|n| format!("`{n}`")).collect();
                let more = if left.len() > 5 { format!(" and {} more", left.len() - 5) } else { String::new() };
                Err(file_err(path, format!("tensors no layer uses: {}{more}", shown.join(", "))))
            }
            _ => Ok(()),
        }
    }
}

/// The shard files an index names, each once, in order.
fn shard_names(index: &Path, text: &str) -> Result<Vec<String>> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| file_err(index, format!("not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| file_err(index, "has no `weight_map` object".into()))?;
    let mut files: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| file_err(index, format!("`{tensor}` maps to {file}, not a file")))?;
        if !files.iter().any(|f| f == file) {
            files.push(file.to_string());
        }
    }
    files.sort();
    Ok(files)
}
