//! The IDX format (<http://yann.lecun.com/exdb/mnist/>): two zero bytes, an
//! element type code, the rank, each dimension as a big-endian u32, then
//! the elements big-endian, row-major. Gzipped files are recognized by
//! their magic (0x1f 0x8b) and inflated with flate2's pure-Rust backend,
//! which also builds for wasm32.

use super::file_err;
use kiln_core::Result;
use std::io::Read;
use std::path::Path;

/// The elements of an IDX file, by type code.
#[derive(Debug, Clone, PartialEq)]
pub enum IdxData {
    /// Type code 0x08.
    U8(Vec<u8>),
    /// Type code 0x09.
    I8(Vec<i8>),
    /// Type code 0x0B.
    I16(Vec<i16>),
    /// Type code 0x0C.
    I32(Vec<i32>),
    /// Type code 0x0D.
    F32(Vec<f32>),
    /// Type code 0x0E.
    F64(Vec<f64>),
}

/// One IDX file: its dimensions and elements.
#[derive(Debug, Clone, PartialEq)]
pub struct IdxArray {
    /// Dimensions, outermost first.
    pub dims: Vec<usize>,
    /// Elements, row-major.
    pub data: IdxData,
}

/// Type code → (name, element size).
fn element_type(code: u8) -> Option<(&'static str, usize)> {
    Some(match code {
        0x08 => ("u8", 1),
        0x09 => ("i8", 1),
        0x0B => ("i16", 2),
        0x0C => ("i32", 4),
        0x0D => ("f32", 4),
        0x0E => ("f64", 8),
        _ => return None,
    })
}

impl IdxData {
    /// The element type's name (`u8`, `i8`, `i16`, `i32`, `f32`, `f64`).
    pub fn type_name(&self) -> &'static str {
        match self {
            IdxData::U8(_) => "u8",
            IdxData::I8(_) => "i8",
            IdxData::I16(_) => "i16",
            IdxData::I32(_) => "i32",
            IdxData::F32(_) => "f32",
            IdxData::F64(_) => "f64",
        }
    }
}

fn decode(code: u8, body: &[u8]) -> IdxData {
    fn be<const N: usize, T>(body: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
        body.chunks_exact(N).map(|c| f(c.try_into().expect("chunks of N"))).collect()
    }
    match code {
        0x08 => IdxData::U8(body.to_vec()),
        0x09 => IdxData::I8(body.iter().map(|&b| b as i8).collect()),
        0x0B => IdxData::I16(be(body, i16::from_be_bytes)),
        0x0C => IdxData::I32(be(body, i32::from_be_bytes)),
        0x0D => IdxData::F32(be(body, f32::from_be_bytes)),
        _ => IdxData::F64(be(body, f64::from_be_bytes)),
    }
}

/// Parse an IDX file (gzipped or plain) from its bytes; `source` names it
/// in errors (a path or a URL).
pub fn parse_idx(bytes: &[u8], source: &str) -> Result<IdxArray> {
    let err = |detail: String| file_err("idx", source, detail);
    let inflated;
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(bytes)
            .read_to_end(&mut out)
            .map_err(|e| err(format!("the gzip stream is truncated or corrupted ({e})")))?;
        inflated = out;
        &inflated[..]
    } else {
        bytes
    };
    if bytes.len() < 4 {
        return Err(err(format!("truncated: {} bytes, an IDX header needs at least 4", bytes.len())));
    }
    if bytes[..2] != [0, 0] {
        return Err(err(format!(
            "bad magic {:02x} {:02x} {:02x} {:02x}: not an IDX file (expected 00 00, a type code and a rank) nor gzip",
            bytes[0], bytes[1], bytes[2], bytes[3]
        )));
    }
    let (code, rank) = (bytes[2], bytes[3] as usize);
    let (_, size) = element_type(code).ok_or_else(|| {
        err(format!("unknown element type code 0x{code:02x} (IDX has 08 u8, 09 i8, 0b i16, 0c i32, 0d f32, 0e f64)"))
    })?;
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(err(format!(
            "truncated: the header of rank {rank} needs {header} bytes, the file has {}",
            bytes.len()
        )));
    }
    let dims: Vec<usize> =
        bytes[4..header].chunks_exact(4).map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")) as usize).collect();
    let need = dims.iter().try_fold(size, |acc, &d| acc.checked_mul(d));
    let body = &bytes[header..];
    match need {
        Some(n) if n == body.len() => Ok(IdxArray { data: decode(code, body), dims }),
        Some(n) if n > body.len() => {
            Err(err(format!("truncated: dimensions {dims:?} need {n} bytes of data, the file has {}", body.len())))
        }
        Some(n) => {
            Err(err(format!("{} bytes of data, dimensions {dims:?} need {n}: extra bytes at the end", body.len())))
        }
        None => Err(err(format!("dimensions {dims:?} overflow"))),
    }
}

/// Read and parse the IDX file at `path`.
pub fn read_idx(path: impl AsRef<Path>) -> Result<IdxArray> {
    let path = path.as_ref();
    let source = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| file_err("idx", &source, format!("cannot read: {e}")))?;
    parse_idx(&bytes, &source)
}
