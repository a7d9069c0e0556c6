//! Checkpoints as safetensors files: parameter trees and optimizer state,
//! each leaf named by its path under a prefix (`params.layers.0.weight`,
//! `opt.0.mu.layers.0.weight`), with string metadata in the header.
//!
//! Quantized weights ([`QuantFormat`]) are stored as bytes: int8 codes as
//! `I8 [n, k]`, int4 codes as `U8 [n, k / 2]` (two per byte, the lower k
//! in the low nibble), their scales `[n, ⌈k / group⌉]` (F16) beside them as
//! ordinary leaves, and each code tensor's format in the metadata
//! (`kiln.quant.<name>`: `int8`, `int4/32`). These are the bytes of the
//! device's u32 words, so saving and loading them copies no element. See
//! [`Checkpoint::add_quantized`] and docs/ARCHITECTURE.md for the layout.
//!
//! A CRC-32 of every tensor's name, dtype, shape and bytes is kept in the
//! metadata (`kiln.crc32`), so a corrupted file is an error rather than
//! wrong weights. Files are written to a temporary file in the same
//! directory and renamed over the target, so a failed or interrupted save
//! never leaves a half-written checkpoint or touches the existing one.

use crate::layers::QuantizedTree;
use kiln_autodiff::Tree;
use kiln_core::{DType, Device, KilnError, QuantFormat, Result};
use kiln_ops::Tensor;
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

/// The metadata key of the checksum (reserved).
pub const CHECKSUM_KEY: &str = "kiln.crc32";

/// The metadata key prefix of a code tensor's format (reserved).
pub const QUANT_KEY_PREFIX: &str = "kiln.quant.";

/// How a tensor's elements are stored: a kiln dtype, or the bytes of
/// quantized codes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Elem {
    Kiln(DType),
    Codes(QuantFormat),
}

impl Elem {
    /// The file's dtype of codes: one signed byte per int8 code, two int4
    /// codes per unsigned byte.
    fn file_dtype(self) -> Dtype {
        match self {
            Elem::Kiln(DType::F32) => Dtype::F32,
            Elem::Kiln(DType::F16) => Dtype::F16,
            Elem::Kiln(DType::BF16) => Dtype::BF16,
            Elem::Kiln(DType::I32) => Dtype::I32,
            Elem::Kiln(DType::U32) => Dtype::U32,
            Elem::Kiln(DType::Bool) => Dtype::BOOL,
            Elem::Codes(f) if f.bits == 8 => Dtype::I8,
            Elem::Codes(_) => Dtype::U8,
        }
    }

    /// The name hashed into the checksum (kiln's dtype names, so older
    /// files keep their checksums).
    fn name(self) -> &'static str {
        match self {
            Elem::Kiln(d) => d.name(),
            Elem::Codes(f) if f.bits == 8 => "i8",
            Elem::Codes(_) => "u8",
        }
    }

    fn describe(self) -> String {
        match self {
            Elem::Kiln(d) => d.name().to_string(),
            Elem::Codes(f) => format!("{} codes", f.spec()),
        }
    }
}

/// One tensor on the host, as stored in the file.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    elem: Elem,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl Stored {
    /// The dtype and shape the tensor has on a device: codes are u32 words,
    /// four bytes of the file's last axis to a word.
    fn device_view(&self) -> (DType, Vec<usize>) {
        match self.elem {
            Elem::Kiln(d) => (d, self.shape.clone()),
            Elem::Codes(_) => {
                let mut shape = self.shape.clone();
                if let Some(last) = shape.last_mut() {
                    *last /= 4;
                }
                (DType::U32, shape)
            }
        }
    }
}

impl View for &Stored {
    fn dtype(&self) -> Dtype {
        self.elem.file_dtype()
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn kiln_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// The format of code tensor `name`, stored as `dtype` `shape` with format
/// `spec` in the metadata, checked: int8 codes are I8, int4 codes U8, in
/// rows of whole u32 words.
fn code_format(ck: &Checkpoint, name: &str, spec: &str, dtype: Dtype, shape: &[usize]) -> Result<QuantFormat> {
    let format = QuantFormat::from_spec(spec)
        .ok_or_else(|| ck.err(format!("tensor `{name}` has format `{spec}`, which is not int8, int4 or intB/G")))?;
    let want = Elem::Codes(format).file_dtype();
    if dtype != want || shape.len() != 2 || !shape[1].is_multiple_of(4) {
        return Err(ck.err(format!(
            "tensor `{name}` holds {spec} codes as {dtype:?} {shape:?}; expected {want:?} [n, bytes], bytes a multiple of 4"
        )));
    }
    Ok(format)
}

/// Little-endian bytes of host values of `dtype`.
fn encode(dtype: DType, values: &[f64]) -> Vec<u8> {
    match dtype {
        DType::F32 => values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|&v| half::f16::from_f64(v).to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&v| half::bf16::from_f64(v).to_le_bytes()).collect(),
        DType::I32 => values.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect(),
        DType::U32 => values.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect(),
        DType::Bool => values.iter().map(|&v| (v != 0.0) as u8).collect(),
    }
}

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    let words = |n: usize| bytes.chunks_exact(n);
    match dtype {
        DType::F32 => words(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64).collect(),
        DType::F16 => words(2).map(|b| half::f16::from_le_bytes(b.try_into().unwrap()).to_f64()).collect(),
        DType::BF16 => words(2).map(|b| half::bf16::from_le_bytes(b.try_into().unwrap()).to_f64()).collect(),
        DType::I32 => words(4).map(|b| i32::from_le_bytes(b.try_into().unwrap()) as f64).collect(),
        DType::U32 => words(4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as f64).collect(),
        DType::Bool => bytes.iter().map(|&b| (b != 0) as u8 as f64).collect(),
    }
}

/// Named tensors on the host plus string metadata: what a safetensors
/// file holds. Build one with [`Checkpoint::add`], write it with
/// [`Checkpoint::save`]; read one with [`Checkpoint::load`] and take trees
/// out of it with [`Checkpoint::tree`].
#[derive(Debug, Clone)]
pub struct Checkpoint {
    tensors: BTreeMap<String, Stored>,
    metadata: BTreeMap<String, String>,
    /// Where it came from, for errors (a path, or `<memory>`).
    source: String,
}

/// `prefix.path`; a lone tensor (path `<root>`) is named by the prefix.
fn tensor_name(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path == "<root>") {
        (true, _) => path.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}.{path}"),
    }
}

fn under(prefix: &str, name: &str) -> bool {
    prefix.is_empty() || name == prefix || name.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('.'))
}

impl Default for Checkpoint {
    fn default() -> Checkpoint {
        Checkpoint { tensors: BTreeMap::new(), metadata: BTreeMap::new(), source: "<memory>".into() }
    }
}

impl Checkpoint {
    /// An empty checkpoint, with no tensors or metadata.
    pub fn new() -> Checkpoint {
        Checkpoint::default()
    }

    fn err(&self, detail: String) -> KilnError {
        KilnError::File { op: "checkpoint", path: self.source.clone(), detail }
    }

    /// Read `tree`'s leaves back from their device (one realization, then
    /// one readback per leaf) and store them as `prefix.<leaf path>`.
    pub async fn add<T: Tree>(&mut self, prefix: &str, tree: &T) -> Result<()> {
        let leaves = tree.named_leaves();
        let names: Vec<String> = leaves.iter().map(|(p, _)| tensor_name(prefix, p)).collect();
        if let Some(dup) = names.iter().find(|n| self.tensors.contains_key(*n)) {
            return Err(self.err(format!("tensor `{dup}` is already in the checkpoint")));
        }
        Tensor::realize_all(&leaves.iter().map(|(_, t)| t).collect::<Vec<_>>()).await?;
        // Read everything first, so a failed readback adds nothing.
        let mut stored = Vec::with_capacity(leaves.len());
        for (_, t) in &leaves {
            let host = t.to_host().await?;
            stored.push(Stored {
                elem: Elem::Kiln(host.dtype),
                shape: host.shape,
                bytes: encode(host.dtype, &host.data),
            });
        }
        self.tensors.extend(names.into_iter().zip(stored));
        Ok(())
    }

    /// [`Checkpoint::add`] for a tree with quantized weights: its code
    /// leaves are stored as `I8 [n, k]` (int8) or `U8 [n, k / 2]` (int4, two
    /// per byte, the lower k in the low nibble), with their formats in the
    /// metadata, so that other tools read them as bytes, not as u32 words.
    pub async fn add_quantized<T: QuantizedTree>(&mut self, prefix: &str, tree: &T) -> Result<()> {
        let codes = tree.code_formats();
        let leaves = tree.named_leaves();
        for (path, format) in &codes {
            let shape = leaves.iter().find(|(p, _)| p == path).map(|(_, t)| (t.dtype(), t.shape().to_vec()));
            if !matches!(&shape, Some((DType::U32, s)) if s.len() == 2) {
                return Err(self.err(format!(
                    "`{path}` is named as {} codes, but the tree's leaf there is {shape:?}, not u32 words [n, k / per_word]",
                    format.spec()
                )));
            }
        }
        self.add(prefix, tree).await?;
        for (path, format) in codes {
            let s = self.tensors.get_mut(&tensor_name(prefix, &path)).expect("added above");
            s.elem = Elem::Codes(format);
            s.shape[1] *= 4;
        }
        Ok(())
    }

    /// Set a metadata entry (e.g. `step`, `model`). `kiln.crc32` and keys
    /// starting `kiln.quant.` are reserved.
    pub fn set_metadata(&mut self, key: &str, value: &str) -> Result<()> {
        if key == CHECKSUM_KEY || key.starts_with(QUANT_KEY_PREFIX) {
            return Err(self.err(format!("metadata key `{key}` is reserved for kiln")));
        }
        self.metadata.insert(key.to_string(), value.to_string());
        Ok(())
    }

    /// The metadata (without the checksum).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    fn checksum(&self) -> String {
        let mut h = crc32fast::Hasher::new();
        for (name, t) in &self.tensors {
            h.update(name.as_bytes());
            h.update(t.elem.name().as_bytes());
            for d in &t.shape {
                h.update(&(*d as u64).to_le_bytes());
            }
            h.update(&t.bytes);
        }
        format!("{:08x}", h.finalize())
    }

    /// The file's bytes (for a download in the browser, or [`Checkpoint::save`]).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut meta: HashMap<String, String> = self.metadata.clone().into_iter().collect();
        meta.insert(CHECKSUM_KEY.into(), self.checksum());
        for (name, t) in &self.tensors {
            if let Elem::Codes(format) = t.elem {
                meta.insert(format!("{QUANT_KEY_PREFIX}{name}"), format.spec());
            }
        }
        safetensors::serialize(self.tensors.iter().map(|(n, t)| (n.as_str(), t)), Some(meta))
            .map_err(|e| self.err(format!("cannot serialize: {e}")))
    }

    /// Write to `path` atomically: a temporary file in the same directory
    /// (`.<name>.tmp-<pid>`), flushed to disk, then renamed over `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let fail = |detail: String| KilnError::File { op: "checkpoint", path: path.display().to_string(), detail };
        let bytes = self.to_bytes()?;
        let name = path.file_name().ok_or_else(|| fail("not a file path".into()))?;
        let tmp = path.with_file_name(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(&bytes)?;
            f.sync_all()
        });
        let done = written.and_then(|()| std::fs::rename(&tmp, path));
        done.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            fail(format!("cannot write (via {}): {e}", tmp.display()))
        })
    }

    /// Parse a checkpoint from bytes; `source` names it in errors.
    pub fn from_bytes(bytes: &[u8], source: &str) -> Result<Checkpoint> {
        let mut ck = Checkpoint { source: source.to_string(), ..Checkpoint::new() };
        let (n, header) = SafeTensors::read_metadata(bytes)
            .map_err(|e| ck.err(format!("not a valid safetensors file, truncated or corrupted ({e})")))?;
        // read_metadata checked that the offsets tile the rest of the file.
        let data = &bytes[8 + n..];
        let mut meta: BTreeMap<String, String> = header.metadata().clone().unwrap_or_default().into_iter().collect();
        for (name, info) in header.tensors() {
            let elem = match meta.remove(&format!("{QUANT_KEY_PREFIX}{name}")) {
                Some(spec) => Elem::Codes(code_format(&ck, &name, &spec, info.dtype, &info.shape)?),
                None => Elem::Kiln(kiln_dtype(info.dtype).ok_or_else(|| {
                    ck.err(format!("tensor `{name}` has dtype {:?}, which kiln has no use for", info.dtype))
                })?),
            };
            let (start, end) = info.data_offsets;
            let stored = Stored { elem, shape: info.shape.clone(), bytes: data[start..end].to_vec() };
            ck.tensors.insert(name, stored);
        }
        if let Some(key) = meta.keys().find(|k| k.starts_with(QUANT_KEY_PREFIX)) {
            return Err(ck.err(format!("metadata `{key}` names a tensor the file does not have")));
        }
        if let Some(want) = meta.remove(CHECKSUM_KEY) {
            let got = ck.checksum();
            if got != want {
                return Err(ck.err(format!("checksum mismatch (file says {want}, contents give {got}): corrupted")));
            }
        }
        ck.metadata = meta;
        Ok(ck)
    }

    /// Read and parse the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Checkpoint> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| KilnError::File {
            op: "checkpoint",
            path: path.display().to_string(),
            detail: format!("cannot read: {e}"),
        })?;
        Checkpoint::from_bytes(&bytes, &path.display().to_string())
    }

    /// The first segments of the tensors' names (`params`, `opt`): the
    /// prefixes trees were stored under, sorted.
    pub fn prefixes(&self) -> Vec<String> {
        let mut out: Vec<String> = self.names().map(|n| n.split('.').next().unwrap_or(n).to_string()).collect();
        out.sort();
        out.dedup();
        out
    }

    /// The tree stored under `prefix`, with `like`'s structure, built on
    /// `device`. Every difference (a missing or unexpected name, a shape,
    /// a dtype) is reported by name in one error.
    pub fn tree<T: Tree>(&self, prefix: &str, like: &T, device: &Device) -> Result<T> {
        self.tree_with_codes(prefix, like, device, &[])
    }

    /// [`Checkpoint::tree`] for a tree with quantized weights, saved by
    /// [`Checkpoint::add_quantized`]: each code leaf must hold codes of the
    /// format `like` has there.
    pub fn quantized_tree<T: QuantizedTree>(&self, prefix: &str, like: &T, device: &Device) -> Result<T> {
        self.tree_with_codes(prefix, like, device, &like.code_formats())
    }

    fn tree_with_codes<T: Tree>(
        &self,
        prefix: &str,
        like: &T,
        device: &Device,
        codes: &[(String, QuantFormat)],
    ) -> Result<T> {
        let expected: Vec<(String, Tensor, Elem)> = like
            .named_leaves()
            .into_iter()
            .map(|(p, t)| {
                let elem = codes.iter().find(|(c, _)| *c == p).map_or(Elem::Kiln(t.dtype()), |&(_, f)| Elem::Codes(f));
                (tensor_name(prefix, &p), t, elem)
            })
            .collect();
        if !expected.is_empty() && !self.names().any(|n| under(prefix, n)) {
            return Err(self.err(format!(
                "holds no tensor under the prefix `{prefix}`; its prefixes are {}",
                self.prefixes().iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
            )));
        }
        let mut problems = Vec::new();
        for (name, t, elem) in &expected {
            match self.tensors.get(name) {
                None => problems.push(format!("`{name}` is missing")),
                Some(s) if s.device_view().1 != t.shape() || s.elem != *elem => problems.push(format!(
                    "`{name}` is {} {:?} in the file, {} {:?} expected",
                    s.elem.describe(),
                    s.device_view().1,
                    elem.describe(),
                    t.shape()
                )),
                Some(_) => {}
            }
        }
        let extra = self.names().filter(|n| under(prefix, n) && !expected.iter().any(|(e, _, _)| e == n));
        problems.extend(extra.map(|n| format!("`{n}` is in the file but not in the tree")));
        if !problems.is_empty() {
            return Err(self.err(format!("does not match the expected tree: {}", problems.join("; "))));
        }
        let leaves = expected
            .iter()
            .map(|(name, _, _)| {
                let s = &self.tensors[name];
                let (dtype, shape) = s.device_view();
                Tensor::from_f64(device, &decode(dtype, &s.bytes), &shape, dtype)
            })
            .collect::<Result<Vec<_>>>()?;
        like.unflatten(leaves)
    }
}
