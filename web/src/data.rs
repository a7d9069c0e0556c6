//! TEMPORARY until the nn crate's IDX reader lands: a minimal reader for
//! gzipped IDX files (the MNIST format: big-endian magic, dims, u8 data).

use flate2::read::GzDecoder;
use std::io::Read;

/// Images as f32 in [0, 1] (row-major, `rows·cols` per image) and labels.
pub struct Split {
    pub images: Vec<f32>,
    pub labels: Vec<u8>,
    pub pixels: usize,
}

impl Split {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// An images file and its labels file, both gzipped IDX.
    pub fn from_gz(name: &str, images_gz: &[u8], labels_gz: &[u8]) -> Result<Split, String> {
        let (dims, images) = idx(&format!("{name} images"), images_gz, 0x0803)?;
        let (ldims, labels) = idx(&format!("{name} labels"), labels_gz, 0x0801)?;
        if dims[0] != ldims[0] {
            return Err(format!("{name}: {} images but {} labels", dims[0], ldims[0]));
        }
        Ok(Split { images: images.iter().map(|&p| p as f32 / 255.0).collect(), labels, pixels: dims[1] * dims[2] })
    }
}

/// Gunzip and parse one IDX file whose magic must be `magic` (u8 data,
/// rank in the low byte).
fn idx(what: &str, gz: &[u8], magic: u32) -> Result<(Vec<usize>, Vec<u8>), String> {
    let mut raw = Vec::new();
    GzDecoder::new(gz).read_to_end(&mut raw).map_err(|e| format!("{what}: not gzip ({e})"))?;
    let word = |i: usize| -> Result<usize, String> {
        raw.get(4 * i..4 * i + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| format!("{what}: header cut short"))
    };
    let found = word(0)?;
    if found != magic as usize {
        return Err(format!("{what}: IDX magic {found:#010x}, want {magic:#010x}"));
    }
    let rank = magic as usize & 0xff;
    let dims: Vec<usize> = (1..=rank).map(word).collect::<Result<_, _>>()?;
    let start = 4 * (rank + 1);
    let n: usize = dims.iter().product();
    if raw.len() != start + n {
        return Err(format!("{what}: dims {dims:?} need {n} bytes after the header, found {}", raw.len() - start));
    }
    raw.drain(..start);
    Ok((dims, raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{Compression, write::GzEncoder};
    use std::io::Write;

    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn header(magic: u32, dims: &[u32]) -> Vec<u8> {
        std::iter::once(magic).chain(dims.iter().copied()).flat_map(u32::to_be_bytes).collect()
    }

    #[test]
    fn reads_images_and_labels() {
        let mut images = header(0x0803, &[2, 2, 2]);
        images.extend([0, 255, 51, 102, 1, 2, 3, 4]);
        let mut labels = header(0x0801, &[2]);
        labels.extend([7, 3]);
        let s = Split::from_gz("t", &gz(&images), &gz(&labels)).unwrap();
        assert_eq!((s.len(), s.pixels), (2, 4));
        assert_eq!(s.labels, [7, 3]);
        assert_eq!(&s.images[..4], &[0.0, 1.0, 0.2, 0.4]);
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_file() {
        let labels = gz(&[header(0x0801, &[1]), vec![1]].concat());
        let e = Split::from_gz("t", b"plain", &labels).err().unwrap();
        assert!(e.contains("t images: not gzip"), "{e}");
        let e = Split::from_gz("t", &labels, &labels).err().unwrap();
        assert!(e.contains("IDX magic 0x00000801, want 0x00000803"), "{e}");
        let short = gz(&[header(0x0803, &[1, 2, 2]), vec![0; 3]].concat());
        let e = Split::from_gz("t", &short, &labels).err().unwrap();
        assert!(e.contains("need 4 bytes"), "{e}");
        let two = gz(&[header(0x0803, &[2, 1, 1]), vec![0; 2]].concat());
        let e = Split::from_gz("t", &two, &labels).err().unwrap();
        assert!(e.contains("2 images but 1 labels"), "{e}");
    }
}
