//! IDX files, the bundled MNIST subset and batches; every bad file is an
//! error naming it.

use kiln::prelude::*;
use kiln_nn::data::*;
use std::io::Write;
use std::path::{Path, PathBuf};

/// An IDX file: header then big-endian elements (given as bytes).
fn idx(code: u8, dims: &[u32], body: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, code, dims.len() as u8];
    for d in dims {
        out.extend(d.to_be_bytes());
    }
    out.extend(body);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn bundled() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/mnist-10k")
}

fn err_of<T: std::fmt::Debug>(r: Result<T>) -> String {
    let e = r.err().unwrap();
    assert!(matches!(e, KilnError::File { .. }), "{e:?}");
    e.to_string()
}

#[test]
fn idx_parses_plain_and_gzip_and_every_element_type() {
    let plain = idx(0x08, &[2, 3], &[1, 2, 3, 4, 5, 255]);
    let a = parse_idx(&plain, "a").unwrap();
    assert_eq!(a, IdxArray { dims: vec![2, 3], data: IdxData::U8(vec![1, 2, 3, 4, 5, 255]) });
    assert_eq!(parse_idx(&gzip(&plain), "a.gz").unwrap(), a);
    let be = |v: &[i16]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
    assert_eq!(parse_idx(&idx(0x0B, &[2], &be(&[-2, 300])), "s").unwrap().data, IdxData::I16(vec![-2, 300]));
    let f: Vec<u8> = [1.5f32, -0.25].iter().flat_map(|x| x.to_be_bytes()).collect();
    assert_eq!(parse_idx(&idx(0x0D, &[2], &f), "f").unwrap().data, IdxData::F32(vec![1.5, -0.25]));
    let d: Vec<u8> = 2.5f64.to_be_bytes().to_vec();
    assert_eq!(parse_idx(&idx(0x0E, &[1], &d), "d").unwrap().data, IdxData::F64(vec![2.5]));
    assert_eq!(parse_idx(&idx(0x09, &[1], &[0xff]), "i").unwrap().data, IdxData::I8(vec![-1]));
    let i: Vec<u8> = (-7i32).to_be_bytes().to_vec();
    assert_eq!(parse_idx(&idx(0x0C, &[1, 1], &i), "i").unwrap().data, IdxData::I32(vec![-7]));
}

#[test]
fn bad_idx_files_are_errors_naming_the_file() {
    let good = idx(0x08, &[2, 3], &[1, 2, 3, 4, 5, 6]);
    let e = err_of(parse_idx(b"PK\x03\x04 not idx", "x.zip"));
    assert!(e.contains("x.zip") && e.contains("bad magic 50 4b 03 04"), "{e}");
    let e = err_of(parse_idx(&idx(0x07, &[1], &[0]), "odd.idx"));
    assert!(e.contains("odd.idx") && e.contains("unknown element type code 0x07"), "{e}");
    let e = err_of(parse_idx(&good[..good.len() - 1], "short.idx"));
    assert!(e.contains("short.idx") && e.contains("truncated: dimensions [2, 3] need 6 bytes of data, the file has 5"));
    let e = err_of(parse_idx(&good[..6], "head.idx"));
    assert!(e.contains("head.idx") && e.contains("truncated: the header of rank 2 needs 12 bytes"), "{e}");
    let e = err_of(parse_idx(&good[..2], "tiny.idx"));
    assert!(e.contains("tiny.idx") && e.contains("truncated"), "{e}");
    let e = err_of(parse_idx(&[good.clone(), vec![0]].concat(), "long.idx"));
    assert!(e.contains("long.idx") && e.contains("extra bytes"), "{e}");
    let z = gzip(&good);
    let e = err_of(parse_idx(&z[..z.len() / 2], "cut.gz"));
    assert!(e.contains("cut.gz") && e.contains("gzip stream is truncated or corrupted"), "{e}");
    let e = err_of(read_idx("/nonexistent/file.idx"));
    assert!(e.contains("/nonexistent/file.idx: cannot read"), "{e}");
}

#[test]
fn datasets_check_types_ranks_and_counts() {
    let images = idx(0x08, &[2, 2, 2], &[0, 255, 51, 102, 1, 2, 3, 4]);
    let labels = idx(0x08, &[2], &[7, 3]);
    let d = Dataset::from_idx(&images, "im", &labels, "lb").unwrap();
    assert_eq!((d.len(), d.rows, d.cols, d.labels.clone()), (2, 2, 2, vec![7, 3]));
    assert_eq!(d.image(0), [0.0, 1.0, 0.2, 0.4]);
    let e = err_of(Dataset::from_idx(&images, "im", &idx(0x08, &[3], &[1, 2, 3]), "lb3"));
    assert!(e.contains("im") && e.contains("2 images but 3 labels in lb3"), "{e}");
    let floats = idx(0x0D, &[1, 1, 1], &0.5f32.to_be_bytes());
    let e = err_of(Dataset::from_idx(&floats, "float-images", &labels, "lb"));
    assert!(e.contains("float-images") && e.contains("must be unsigned bytes (type code 0x08), the file holds f32"));
    let e = err_of(Dataset::from_idx(&labels, "flat", &labels, "lb"));
    assert!(e.contains("flat") && e.contains("images need rank 3"), "{e}");
}

#[test]
fn the_bundled_mnist_subset_loads() {
    let m = Mnist::load(bundled()).unwrap();
    assert_eq!((m.train.len(), m.test.len()), (8000, 2000));
    assert_eq!((m.train.rows, m.train.cols), (28, 28));
    assert_eq!(m.train.images.len(), 8000 * 784);
    assert!(m.train.images.iter().all(|&p| (0.0..=1.0).contains(&p)));
    assert!(m.train.images.contains(&1.0) && m.train.images.contains(&0.0));
    let mut per_class = [0; 10];
    for &l in m.train.labels.iter().chain(&m.test.labels) {
        per_class[l as usize] += 1;
    }
    assert!(per_class.iter().all(|&n| (800..=1200).contains(&n)), "{per_class:?}");
}

#[test]
fn full_mnist_file_names_and_missing_files() {
    let dir = std::env::temp_dir().join(format!("kiln-mnist-full-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, bytes: Vec<u8>| std::fs::write(dir.join(name), bytes).unwrap();
    write("train-images-idx3-ubyte", idx(0x08, &[1, 1, 2], &[0, 255]));
    write("train-labels-idx1-ubyte", idx(0x08, &[1], &[4]));
    write("t10k-images-idx3-ubyte.gz", gzip(&idx(0x08, &[2, 1, 2], &[255, 0, 0, 0])));
    let e = err_of(Mnist::load(&dir));
    assert!(e.contains("no labels file: looked for t10k-labels-idx1-ubyte.gz"), "{e}");
    write("t10k-labels-idx1-ubyte.gz", gzip(&idx(0x08, &[1], &[9])));
    let e = err_of(Mnist::load(&dir));
    assert!(e.contains("t10k-images-idx3-ubyte.gz") && e.contains("2 images but 1 labels"), "{e}");
    write("t10k-labels-idx1-ubyte.gz", gzip(&idx(0x08, &[2], &[9, 1])));
    let m = Mnist::load(&dir).unwrap();
    assert_eq!((m.train.labels.clone(), m.test.labels.clone()), (vec![4], vec![9, 1]));
    assert_eq!(m.test.image(0), [1.0, 0.0]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn batches_follow_the_order_and_drop_or_keep_the_last() {
    let n = 5u8;
    let images = idx(0x08, &[n as u32, 1, 2], &(0..2 * n).map(|i| i * 10).collect::<Vec<_>>());
    let labels = idx(0x08, &[n as u32], &(0..n).collect::<Vec<_>>());
    let d = Dataset::from_idx(&images, "im", &labels, "lb").unwrap();
    let order = vec![3, 0, 4, 1, 2];
    let kept: Vec<Batch> = d.batches(order.clone(), 2, false).unwrap().collect();
    assert_eq!(kept.iter().map(|b| b.labels.clone()).collect::<Vec<_>>(), [vec![3, 0], vec![4, 1], vec![2]]);
    assert_eq!(kept[0].images, [60.0 / 255.0, 70.0 / 255.0, 0.0, 10.0 / 255.0]);
    let dropped = d.batches(order, 2, true).unwrap();
    assert_eq!(dropped.len(), 2);
    assert_eq!(dropped.map(|b| b.len()).collect::<Vec<_>>(), [2, 2]);

    let dev = Device::cpu();
    let (x, y) = kept[0].to_device(&dev, ImageLayout::Flat).unwrap();
    assert_eq!((x.shape(), y.shape(), x.dtype(), y.dtype()), (&[2, 2][..], &[2][..], DType::F32, DType::I32));
    assert_eq!(kiln::block_on(y.to_vec::<i32>()).unwrap(), [3, 0]);
    let (x, _) = kept[2].to_device(&dev, ImageLayout::Nchw).unwrap();
    assert_eq!(x.shape(), [1, 1, 1, 2]);
    assert_eq!(kiln::block_on(x.to_vec::<f32>()).unwrap(), [40.0 / 255.0, 50.0 / 255.0]);

    let e = d.batches(vec![0, 5], 2, false).err().unwrap().to_string();
    assert!(e.contains("sample index 5 is out of range for a dataset of 5"), "{e}");
    assert!(d.batches(vec![0], 0, false).err().unwrap().to_string().contains("batch size must be at least 1"));
    let by_hand = Dataset { images: vec![0.0; 6], ..d };
    let e = by_hand.batches(vec![0], 2, false).err().unwrap().to_string();
    assert_eq!(e, "batches: the dataset holds 6 pixel values for 5 labels of 1×2 images");
}
