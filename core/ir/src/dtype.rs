//! Element types. Every dtype is stored in 32-bit words on the GPU, so every
//! kernel works on adapters without `shader-f16`: f16 and bf16 are packed two
//! per u32 and computed in f32 (f16 in f16 where the adapter has
//! `shader-f16`: the bytes are the same); bool is one u32 (0 or 1) per
//! element.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    U32,
    Bool,
}

impl DType {
    pub const ALL: [DType; 6] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::Bool];

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }

    /// The dtype [`DType::name`] calls `name`.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// A 16-bit float stored two per 32-bit word (f16, bf16): kernels read
    /// it by unpacking a half word and write it a whole word at a time.
    pub fn is_packed(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }

    /// Numeric: takes part in arithmetic (everything but bool).
    pub fn is_numeric(self) -> bool {
        self != DType::Bool
    }

    /// Bytes a GPU buffer needs for `n` elements (packed dtypes round up to
    /// whole words).
    pub fn storage_bytes(self, n: usize) -> u64 {
        if self.is_packed() { n.div_ceil(2) as u64 * 4 } else { n as u64 * 4 }
    }

    /// Bytes of one element as the user sees it on the host.
    pub fn host_size(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::Bool => 1,
            _ => 4,
        }
    }

    /// The dtype non-elementwise kernels write: a 4-byte type. Packed results
    /// are computed into f32 and packed by a cast kernel afterwards.
    pub fn wide(self) -> DType {
        if self.is_packed() { DType::F32 } else { self }
    }

    /// Round or wrap an f64 to a value this dtype can hold (used by the CPU
    /// reference so that its storage matches the GPU's). f32 keeps f64
    /// precision on purpose: the reference is the more accurate oracle.
    pub fn store(self, v: f64) -> f64 {
        match self {
            DType::F32 => v,
            DType::F16 => half::f16::from_f64(v).to_f64(),
            DType::BF16 => half::bf16::from_f64(v).to_f64(),
            DType::I32 => {
                if v.is_nan() {
                    0.0
                } else {
                    (v as i64 as i32) as f64
                }
            }
            DType::U32 => {
                if v.is_nan() {
                    0.0
                } else {
                    (v as i64 as u32) as f64
                }
            }
            DType::Bool => (v != 0.0) as u8 as f64,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Host element types that tensors can be built from and read back into.
pub trait Element: Copy + Send + Sync + 'static + fmt::Debug {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
        }
    };
}
element!(f32, DType::F32);
element!(i32, DType::I32);
element!(u32, DType::U32);

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

/// Pack host values into the 32-bit words the GPU stores for `dtype`.
pub fn pack_words(dtype: DType, values: &[f64]) -> Vec<u32> {
    match dtype {
        DType::F32 => values.iter().map(|&v| (v as f32).to_bits()).collect(),
        DType::I32 => values.iter().map(|&v| v as i64 as i32 as u32).collect(),
        DType::U32 => values.iter().map(|&v| v as i64 as u32).collect(),
        DType::Bool => values.iter().map(|&v| (v != 0.0) as u32).collect(),
        DType::F16 => pack_halves(values, |v| half::f16::from_f64(v).to_bits()),
        DType::BF16 => pack_halves(values, |v| half::bf16::from_f64(v).to_bits()),
    }
}

/// Two 16-bit patterns per word, the first element in the low half.
fn pack_halves(values: &[f64], bits: impl Fn(f64) -> u16) -> Vec<u32> {
    let pair = |p: &[f64]| bits(p[0]) as u32 | (p.get(1).map_or(0, |&v| bits(v)) as u32) << 16;
    values.chunks(2).map(pair).collect()
}

/// The 16-bit pattern of packed element `i`.
fn half_word(words: &[u32], i: usize) -> u16 {
    (words[i / 2] >> (16 * (i % 2))) as u16
}

/// Unpack `n` elements of `dtype` from GPU words.
pub fn unpack_words(dtype: DType, words: &[u32], n: usize) -> Vec<f64> {
    match dtype {
        DType::F32 => words[..n].iter().map(|&w| f32::from_bits(w) as f64).collect(),
        DType::I32 => words[..n].iter().map(|&w| w as i32 as f64).collect(),
        DType::U32 => words[..n].iter().map(|&w| w as f64).collect(),
        DType::Bool => words[..n].iter().map(|&w| (w != 0) as u8 as f64).collect(),
        DType::F16 => (0..n).map(|i| half::f16::from_bits(half_word(words, i)).to_f64()).collect(),
        DType::BF16 => (0..n).map(|i| half::bf16::from_bits(half_word(words, i)).to_f64()).collect(),
    }
}
