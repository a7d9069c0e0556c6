//! Random numbers from explicit keys (no global seed): Threefry-2x32 with 20
//! rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
//! SC'11), counter-based, so element `i` of a draw depends only on the key
//! and `i`. On a device the bit generator is ordinary u32 ops (add, xor,
//! shifts) over an iota counter, which fuse with the float conversion into
//! one kernel; [`threefry2x32`] is the same function on the host.
//!
//! Counters and keys follow JAX's `threefry_partitionable` scheme: element
//! `i` (row-major) hashes the counter `(0, i)` and its 32 bits are the XOR of
//! the two output words; `split(n)[j]` and `fold_in(j)` are the two words of
//! the hash of `(0, j)`.

use crate::Tensor;
use kiln_core::{DType, Device, KilnError, Result};

/// A PRNG key: two u32 words. Copy it freely; derive new keys with
/// [`Key::split`] or [`Key::fold_in`] rather than reusing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    words: [u32; 2],
}

/// Rotation constants of Threefry-2x32 (Random123's `R_32x2_*`).
const ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];
/// Skein's key-schedule parity constant.
const PARITY: u32 = 0x1BD1_1BDA;
const ROUNDS: usize = 20;

/// Threefry-2x32 with 20 rounds of `counter` under `key`, on the host.
pub fn threefry2x32(key: [u32; 2], counter: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], key[0] ^ key[1] ^ PARITY];
    let mut x = [counter[0].wrapping_add(ks[0]), counter[1].wrapping_add(ks[1])];
    for r in 0..ROUNDS {
        x[0] = x[0].wrapping_add(x[1]);
        x[1] = x[1].rotate_left(ROTATIONS[r % 8]) ^ x[0];
        if r % 4 == 3 {
            let i = r / 4 + 1;
            x[0] = x[0].wrapping_add(ks[i % 3]);
            x[1] = x[1].wrapping_add(ks[(i + 1) % 3]).wrapping_add(i as u32);
        }
    }
    x
}

impl Key {
    /// The key of a 64-bit seed: its high and low words (as JAX's `PRNGKey`).
    pub fn new(seed: u64) -> Key {
        Key { words: [(seed >> 32) as u32, seed as u32] }
    }

    /// The key with these two words (as `words` returns them).
    pub fn from_words(words: [u32; 2]) -> Key {
        Key { words }
    }

    /// The key's two u32 words.
    pub fn words(&self) -> [u32; 2] {
        self.words
    }

    /// `n` new keys, independent of this one and of each other.
    pub fn split(&self, n: usize) -> Vec<Key> {
        (0..n).map(|j| self.fold_in(j as u32)).collect()
    }

    /// A new key for `data` (a step number, a layer index).
    pub fn fold_in(&self, data: u32) -> Key {
        Key { words: threefry2x32(self.words, [0, data]) }
    }

    /// The 32-bit words a device draw of `n` elements uses, on the host.
    pub fn random_bits_host(&self, n: usize) -> Vec<u32> {
        (0..n)
            .map(|i| {
                let y = threefry2x32(self.words, [0, i as u32]);
                y[0] ^ y[1]
            })
            .collect()
    }

    /// `0..n` shuffled (Fisher–Yates over this key's bits), on the host.
    pub fn shuffled_indices(&self, n: usize) -> Vec<usize> {
        let bits = self.random_bits_host(n);
        let mut out: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            // j uniform in 0..=i: the high word of bits · (i + 1).
            let j = ((bits[i] as u64 * (i as u64 + 1)) >> 32) as usize;
            out.swap(i, j);
        }
        out
    }
}

fn u32s(dev: &Device, v: u32) -> Result<Tensor> {
    Tensor::scalar(dev, v as f64, DType::U32)
}

impl Key {
    /// This key as a u32 tensor of shape `[2]`, for the draws to read on
    /// the device ([`KeyArg`]).
    pub fn to_tensor(&self, dev: &Device) -> Result<Tensor> {
        Tensor::from_slice(dev, &self.words, &[2])
    }
}

/// `keys` as a u32 tensor of shape `[n, 2]`: mapped over axis 0 by
/// `vmap`, each example draws from its own key.
pub fn keys(dev: &Device, keys: &[Key]) -> Result<Tensor> {
    let words: Vec<u32> = keys.iter().flat_map(|k| k.words).collect();
    Tensor::from_slice(dev, &words, &[keys.len(), 2])
}

/// What a draw takes as its key: a [`Key`], whose words become kernel
/// parameters, or a key held in a u32 tensor of shape `[2]` ([`Key::to_tensor`]),
/// whose words are read on the device. The two give the same numbers; a
/// tensor of keys ([`keys`]) mapped over its first axis by `vmap` gives
/// every example its own stream, as JAX's `vmap(random.normal)` does.
pub trait KeyArg: sealed::Sealed {
    #[doc(hidden)]
    fn schedule(&self, op: &'static str) -> Result<KeySchedule>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Key {}
    impl Sealed for &crate::Tensor {}
}

/// Threefry's three key words: host constants, or device values.
#[doc(hidden)]
pub enum KeySchedule {
    Host([u32; 3]),
    Device([Tensor; 3]),
}

impl KeyArg for Key {
    fn schedule(&self, _: &'static str) -> Result<KeySchedule> {
        let [k0, k1] = self.words;
        Ok(KeySchedule::Host([k0, k1, k0 ^ k1 ^ PARITY]))
    }
}

impl KeyArg for &Tensor {
    fn schedule(&self, op: &'static str) -> Result<KeySchedule> {
        if self.dtype() != DType::U32 || self.shape() != [2] {
            return Err(KilnError::Shape {
                op,
                detail: format!(
                    "a key tensor is u32 [2] (Key::to_tensor; vmap a [n, 2] one from random::keys), got {} {:?}",
                    self.dtype(),
                    self.shape()
                ),
            });
        }
        let word = |i: usize| self.narrow(0, i, 1)?.reshape(&[]);
        let (k0, k1) = (word(0)?, word(1)?);
        let k2 = k0.bitwise_xor(&k1)?.bitwise_xor(&u32s(self.device(), PARITY)?)?;
        Ok(KeySchedule::Device([k0, k1, k2]))
    }
}

impl KeySchedule {
    /// Key word `i` plus `plus`, as a tensor.
    fn word(&self, dev: &Device, i: usize, plus: u32) -> Result<Tensor> {
        match self {
            KeySchedule::Host(ks) => u32s(dev, ks[i].wrapping_add(plus)),
            KeySchedule::Device(ks) if plus == 0 => Ok(ks[i].clone()),
            KeySchedule::Device(ks) => ks[i].add(&u32s(dev, plus)?),
        }
    }
}

/// Threefry-2x32 of counters `(hi, lo)` (u32 tensors that broadcast) as
/// device ops; the key words are scalars, so they travel as kernel params.
pub fn threefry2x32_tensors(key: Key, hi: &Tensor, lo: &Tensor) -> Result<[Tensor; 2]> {
    threefry(&key.schedule("threefry2x32")?, hi, lo)
}

fn threefry(ks: &KeySchedule, hi: &Tensor, lo: &Tensor) -> Result<[Tensor; 2]> {
    let dev = hi.device();
    let mut x0 = hi.add(&ks.word(dev, 0, 0)?)?;
    let mut x1 = lo.add(&ks.word(dev, 1, 0)?)?;
    for r in 0..ROUNDS {
        x0 = x0.add(&x1)?;
        let rot = ROTATIONS[r % 8];
        let rotated = x1.shift_left(&u32s(dev, rot)?)?.bitwise_or(&x1.shift_right(&u32s(dev, 32 - rot)?)?)?;
        x1 = rotated.bitwise_xor(&x0)?;
        if r % 4 == 3 {
            let i = r / 4 + 1;
            x0 = x0.add(&ks.word(dev, i % 3, 0)?)?;
            x1 = x1.add(&ks.word(dev, (i + 1) % 3, i as u32)?)?;
        }
    }
    Ok([x0, x1])
}

/// Both hash words of element `i`'s counter `(0, i)`, in `shape`.
fn hash_words(op: &'static str, dev: &Device, key: impl KeyArg, shape: &[usize]) -> Result<[Tensor; 2]> {
    let n = if shape.contains(&0) { 0 } else { kiln_core::shape::checked_numel(shape).unwrap_or(usize::MAX) };
    if n as u64 > u32::MAX as u64 {
        return Err(KilnError::Shape {
            op,
            detail: format!("shape {shape:?} has more than 2^32 elements (counters are u32)"),
        });
    }
    let ks = key.schedule(op)?;
    let lo = Tensor::arange(dev, 0.0, n as f64, 1.0, DType::U32)?;
    let lo = lo.reshape(&shape.iter().map(|&s| s as isize).collect::<Vec<_>>())?;
    threefry(&ks, &u32s(dev, 0)?, &lo)
}

/// Uniform u32 bits of `shape` (element `i` as [`Key::random_bits_host`]).
pub fn random_bits(dev: &Device, key: impl KeyArg, shape: &[usize]) -> Result<Tensor> {
    bits("random_bits", dev, key, shape)
}

fn bits(op: &'static str, dev: &Device, key: impl KeyArg, shape: &[usize]) -> Result<Tensor> {
    let [y0, y1] = hash_words(op, dev, key, shape)?;
    y0.bitwise_xor(&y1)
}

/// The top 24 bits of `bits` as an f32 in [0, 1) (exact: 24 bits fit f32's
/// significand), plus `offset` ulps of 2^-24.
fn unit_float(bits: &Tensor, offset: f64) -> Result<Tensor> {
    let top = bits.shift_right(&u32s(bits.device(), 8)?)?.cast(DType::F32)?;
    let top = if offset != 0.0 { top.add_scalar(offset)? } else { top };
    top.mul_scalar(1.0 / (1u32 << 24) as f64)
}

fn float_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(KilnError::DType { op, detail: format!("draws a float dtype (f32, f16, bf16), not {dtype}") })
    }
}

/// Uniform in `[low, high)` (up to the rounding of `low + u · (high − low)`).
pub fn uniform(dev: &Device, key: impl KeyArg, shape: &[usize], dtype: DType, low: f64, high: f64) -> Result<Tensor> {
    float_dtype("uniform", dtype)?;
    if !(low.is_finite() && high.is_finite() && low < high) {
        return Err(KilnError::Invalid {
            op: "uniform",
            detail: format!("needs finite low < high, got [{low}, {high})"),
        });
    }
    let u = unit_float(&bits("uniform", dev, key, shape)?, 0.0)?;
    let u = if (low, high) == (0.0, 1.0) { u } else { u.mul_scalar(high - low)?.add_scalar(low)? };
    u.cast(dtype)
}

/// Normal with `mean` and `std`, by Box–Muller from the two hash words of
/// each element (one hash per element, no rejection).
pub fn normal(dev: &Device, key: impl KeyArg, shape: &[usize], dtype: DType, mean: f64, std: f64) -> Result<Tensor> {
    float_dtype("normal", dtype)?;
    if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
        return Err(KilnError::Invalid {
            op: "normal",
            detail: format!("needs finite mean and std ≥ 0, got {mean}, {std}"),
        });
    }
    let [y0, y1] = hash_words("normal", dev, key, shape)?;
    // u1 in (0, 1] keeps the log finite; the angle stays in [−π, π), where
    // WGSL bounds cos's error.
    let u1 = unit_float(&y0, 1.0)?;
    let angle = unit_float(&y1, 0.0)?.mul_scalar(2.0 * std::f64::consts::PI)?.sub_scalar(std::f64::consts::PI)?;
    let z = u1.log()?.mul_scalar(-2.0)?.sqrt()?.mul(&angle.cos()?)?;
    let z = if (mean, std) == (0.0, 1.0) { z } else { z.mul_scalar(std)?.add_scalar(mean)? };
    z.cast(dtype)
}

/// `true` with probability `p` (bool tensor).
pub fn bernoulli(dev: &Device, key: impl KeyArg, p: f64, shape: &[usize]) -> Result<Tensor> {
    if !(0.0..=1.0).contains(&p) {
        return Err(KilnError::Invalid { op: "bernoulli", detail: format!("p = {p} is not in [0, 1]") });
    }
    uniform(dev, key, shape, DType::F32, 0.0, 1.0)?.lt(&Tensor::scalar(dev, p, DType::F32)?)
}

/// The high 32 bits of the 64-bit product `a · s` with 16-bit limbs
/// (WGSL has no 64-bit integers); `s` is a host constant.
fn mul_hi(a: &Tensor, s: u32) -> Result<Tensor> {
    let dev = a.device();
    let c = |v: u32| u32s(dev, v);
    let (ah, al) = (a.shift_right(&c(16)?)?, a.bitwise_and(&c(0xFFFF)?)?);
    let (sh, sl) = (s >> 16, s & 0xFFFF);
    let mid = ah.mul(&c(sl)?)?.add(&al.mul(&c(sl)?)?.shift_right(&c(16)?)?)?;
    let mid2 = mid.bitwise_and(&c(0xFFFF)?)?.add(&al.mul(&c(sh)?)?)?;
    ah.mul(&c(sh)?)?.add(&mid.shift_right(&c(16)?)?)?.add(&mid2.shift_right(&c(16)?)?)
}

/// Integers uniform in `[low, high)` as i32, by Lemire's multiply-shift
/// (bias at most (high − low) / 2^32).
pub fn randint(dev: &Device, key: impl KeyArg, shape: &[usize], low: i32, high: i32) -> Result<Tensor> {
    if low >= high {
        return Err(KilnError::Invalid { op: "randint", detail: format!("needs low < high, got [{low}, {high})") });
    }
    let span = (high as i64 - low as i64) as u32;
    let r = mul_hi(&bits("randint", dev, key, shape)?, span)?.cast(DType::I32)?;
    r.add(&Tensor::scalar(dev, low as f64, DType::I32)?)
}

/// A random permutation of `0..n` (i32). Drawn on the host with
/// [`Key::shuffled_indices`] (a shuffle is sequential) and uploaded.
pub fn permutation(dev: &Device, key: Key, n: usize) -> Result<Tensor> {
    if n > i32::MAX as usize {
        return Err(KilnError::Invalid { op: "permutation", detail: format!("n = {n} does not fit i32 indices") });
    }
    let idx: Vec<f64> = key.shuffled_indices(n).into_iter().map(|i| i as f64).collect();
    Tensor::from_f64(dev, &idx, &[n], DType::I32)
}
