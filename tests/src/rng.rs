//! A small seeded generator (SplitMix64) for test inputs: the same seed
//! gives the same inputs on every run and machine.

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi), rounded to f32 so that every adapter and the
    /// reference see the same input values.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (lo + (hi - lo) * u) as f32 as f64
    }

    /// Integer uniform in [lo, hi].
    pub fn int(&mut self, lo: i64, hi: i64) -> f64 {
        (lo + (self.next_u64() % (hi - lo + 1) as u64) as i64) as f64
    }
}

/// An f32 tensor of `shape` with values uniform in [lo, hi) from `seed`.
pub fn tensor(dev: &kiln::Device, shape: &[usize], seed: u64, lo: f64, hi: f64) -> kiln::Tensor {
    let mut rng = Rng::new(seed);
    let data: Vec<f32> = (0..shape.iter().product()).map(|_| rng.uniform(lo, hi) as f32).collect();
    kiln::Tensor::from_slice(dev, &data, shape).expect("a valid test tensor")
}
