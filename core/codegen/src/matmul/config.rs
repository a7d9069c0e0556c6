//! The family's configs: what each kernel computes per invocation and
//! workgroup, which devices run it, the tuner's candidates and shape classes.

use super::kernel::matmul_kernel;
use kiln_ir::dtype::DType;

/// One kernel of the family. An invocation owns `tm` consecutive rows and
/// `tn` columns interleaved with stride `wx` (so the `wx` invocations of a
/// workgroup row read consecutive B elements: vector loads on CPU adapters,
/// coalesced loads on GPUs). With `share`, a subgroup of exactly `wx` lanes
/// (checked at run time; otherwise the plain path runs) loads each A value
/// once and passes it around with `subgroupBroadcast`. With `vec` (f32
/// operands contiguous along k and n, K and N multiples of 4, 4-aligned
/// offsets and strides; the runtime falls back to the scalar twin
/// otherwise) operands are read as vec4s: A four k at a time, B four
/// consecutive columns, columns interleaved by vec4s. CPU adapters pay
/// per load instruction, not per byte, so this cuts their cost 4×. With
/// `staged` (the GPU form) the workgroup copies each `STAGE_K`-deep slice
/// of its A and B tiles into workgroup memory once, double-buffered, and
/// every invocation reads its operands from there. With `tex` (a `vec`
/// config whose workgroup is one row of lanes) the runtime first copies A
/// and B into rgba32float texture arrays laid out as the workgroups read
/// them ([`crate::operand_textures`]), and the kernel reads its operands
/// with `textureLoad`: llvmpipe fetches a texel for 8 lanes with 8 vector
/// loads and a transpose, where a storage buffer load is a loop over the
/// lanes with a bounds branch per component (docs/BENCHMARKS.md,
/// 'Notes on the adapters').
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatmulConfig {
    pub tm: u32,
    pub tn: u32,
    pub wx: u32,
    pub wy: u32,
    pub share: bool,
    pub vec: bool,
    pub staged: bool,
    pub tex: bool,
}

const fn cfg(tm: u32, tn: u32, wx: u32, wy: u32, share: bool) -> MatmulConfig {
    MatmulConfig { tm, tn, wx, wy, share, vec: false, staged: false, tex: false }
}

const fn vcfg(tm: u32, tn: u32, wx: u32, wy: u32, share: bool) -> MatmulConfig {
    MatmulConfig { tm, tn, wx, wy, share, vec: true, staged: false, tex: false }
}

const fn scfg(tm: u32, tn: u32, wx: u32, wy: u32) -> MatmulConfig {
    MatmulConfig { tm, tn, wx, wy, share: false, vec: false, staged: true, tex: false }
}

/// A texture config: operands from textures, one row of `wx` lanes.
const fn tcfg(tm: u32, tn: u32, wx: u32, share: bool) -> MatmulConfig {
    MatmulConfig { tm, tn, wx, wy: 1, share, vec: true, staged: false, tex: true }
}

/// Depth (k) of the operand slices a staged config keeps in workgroup memory.
pub const STAGE_K: u32 = 8;

impl MatmulConfig {
    /// What the autotuner tries, most likely winners first (ties go to the
    /// earlier). CPU adapters like big register blocks, workgroups of one
    /// SIMD width and operands from textures (the texture members won at
    /// 512³ to 2048³ on lavapipe, llvmpipe GL and SwiftShader); GPUs like
    /// more invocations per workgroup. (Uniform rows do not make A's loads
    /// scalar on llvmpipe: Mesa loads one address for all lanes only where
    /// it proves it uniform from constants and push constants,
    /// `nir_src_is_always_uniform`, which a workgroup id is not.)
    pub const CANDIDATES: [MatmulConfig; 24] = [
        tcfg(32, 8, 8, true),
        tcfg(32, 16, 8, true),
        tcfg(32, 16, 8, false),
        vcfg(32, 8, 8, 1, true),
        vcfg(32, 16, 8, 1, true),
        vcfg(16, 8, 8, 1, true),
        vcfg(32, 16, 8, 1, false),
        vcfg(32, 8, 8, 1, false),
        vcfg(16, 16, 8, 1, false),
        vcfg(8, 8, 8, 1, false),
        vcfg(16, 8, 8, 1, false),
        vcfg(4, 8, 8, 1, false),
        vcfg(4, 8, 16, 16, false),
        cfg(16, 8, 8, 1, false),
        cfg(16, 8, 8, 1, true),
        cfg(8, 8, 8, 1, false),
        cfg(8, 8, 8, 1, true),
        cfg(8, 8, 8, 8, false),
        cfg(8, 8, 8, 8, true),
        cfg(4, 4, 16, 16, false),
        cfg(8, 4, 32, 4, true),
        scfg(4, 4, 16, 16),
        scfg(8, 8, 8, 8),
        scfg(8, 8, 16, 16),
    ];
    /// What CPU adapters run untuned: natively only small products, and in a
    /// browser (where they are not tuned) SwiftShader's every product. The
    /// demo's MLP step with every product on one config, interleaved here:
    /// SwiftShader 55.6 ms with this one, 63.3 with 16x16/8x1+vec4 (which
    /// ran 23.5 → 18.3 ms on lavapipe and 23.2 → 17.2 on GL, where tuning
    /// is on by default).
    pub const DEFAULT_CPU: MatmulConfig = cfg(8, 8, 8, 1, false);
    /// What GPUs run untuned: whole warps and waves (256 invocations), 16
    /// accumulators each. Chosen, not measured (no GPU here yet); a
    /// workgroup of 8, the former default, fills a quarter of a 32-lane warp.
    pub const DEFAULT_GPU: MatmulConfig = cfg(4, 4, 16, 16, false);

    /// The config for products too small to tune, and for all products when
    /// tuning is off.
    pub fn default_for(caps: &crate::Caps) -> MatmulConfig {
        if caps.cpu { Self::DEFAULT_CPU } else { Self::DEFAULT_GPU }
    }

    /// Output rows and columns one workgroup covers.
    pub fn tile(&self) -> (usize, usize) {
        ((self.tm * self.wy) as usize, (self.tn * self.wx) as usize)
    }

    /// e.g. `16x8/8x1+sg`.
    pub fn name(&self) -> String {
        let sg = if self.share { "+sg" } else { "" };
        let v = if self.vec { "+vec4" } else { "" };
        let wg = if self.staged { "+wg" } else { "" };
        let tex = if self.tex { "+tex" } else { "" };
        format!("{}x{}/{}x{}{sg}{v}{wg}{tex}", self.tm, self.tn, self.wx, self.wy)
    }

    /// Whether kiln runs this config on a device with `caps` ([`MatmulConfig::refusal`]).
    pub fn runs_on(&self, caps: &crate::Caps) -> bool {
        self.refusal(caps).is_none()
    }

    /// Why kiln does not run this config on a device with `caps`, if it does
    /// not: it is no member of the family, or shares through subgroups the
    /// device lacks, or stages in workgroup memory kiln leaves off there
    /// ([`crate::Caps::workgroup_memory`]).
    pub fn refusal(&self, caps: &crate::Caps) -> Option<String> {
        let (adapter, backend) = (&caps.adapter, &caps.backend);
        let name = self.name();
        // The fields are public; kernels exist for the family's members
        // (with or without operand textures) only.
        let member = Self::CANDIDATES.iter().any(|c| MatmulConfig { tex: self.tex, ..*c } == *self);
        if !member && *self != Self::DEFAULT_CPU && *self != Self::DEFAULT_GPU {
            Some(format!("{name} is not a member of kiln's matmul family (MatmulConfig::CANDIDATES)"))
        } else if self.staged && !caps.workgroup_memory {
            Some(format!(
                "{name} stages operands in workgroup memory, which kiln leaves off {adapter} ({backend}: no passthrough shaders)"
            ))
        } else if self.share && !caps.subgroups {
            Some(format!("{name} shares through subgroups, which {adapter} ({backend}) lacks"))
        } else if self.tex && !caps.storage_textures {
            Some(format!("{name} writes its operands to storage textures, which {adapter} ({backend}) lacks"))
        } else {
            None
        }
    }

    /// Identifies the candidate set and their kernels, so a tuning cache
    /// written for other candidates, or for kernels a later kiln changed
    /// under the same names, is not trusted (FNV-1a of their names and
    /// their f32 WGSL).
    pub fn family_fingerprint() -> String {
        static FINGERPRINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        FINGERPRINT
            .get_or_init(|| {
                let text: String = MatmulConfig::CANDIDATES
                    .iter()
                    .map(|c| format!("{}\n{}", c.name(), matmul_kernel(c, DType::F32, 0, None)))
                    .collect();
                let hash = text.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193));
                format!("{hash:08x}")
            })
            .clone()
    }

    pub fn parse(s: &str) -> Option<MatmulConfig> {
        MatmulConfig::CANDIDATES.into_iter().find(|c| c.name() == s.trim())
    }
}

/// Matmuls that likely share a best config: operand dtype and each of
/// m, n, k bucketed as small (≤ 64), medium (≤ 512), large (≤ 1024) or
/// larger. The last bucket is its own because rankings shift past 1024 on
/// CPU adapters: on lavapipe the texture members' lead grows with size
/// (their copies cost n² against the product's n³), and a class shared
/// by 1024³ and 2048³ took whichever block 1024³ happened to favour (in
/// one full run a buffer member, 2048³ at 0.245 of FMA where the texture
/// members ran at 0.29–0.32; docs/BENCHMARKS.md, 'What was tried'
/// (tuner)).
/// Products with at most this many rows (a decoding step's, batch 1 to
/// 8) are a class of their own: a texture member, chosen where the rows
/// are many, copies the whole weight per call, and each invocation's `tm`
/// rows repeat the last real one. GPT-2 124M decoding on lavapipe, batch 1:
/// 1.0 tokens/s on the 52-row prefill's texture choice, 3.3 untuned.
pub const MATRIX_VECTOR_ROWS: usize = 8;
/// The row bucket of [`MATRIX_VECTOR_ROWS`] (its name's `mv`).
const MATRIX_VECTOR: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    dtype: DType,
    buckets: [u8; 3],
}

impl ShapeClass {
    pub fn of(dtype: DType, m: usize, n: usize, k: usize) -> ShapeClass {
        let b = |d: usize| match d {
            0..=64 => 0,
            65..=512 => 1,
            513..=1024 => 2,
            _ => 3,
        };
        let rows = if m <= MATRIX_VECTOR_ROWS { MATRIX_VECTOR } else { b(m) };
        ShapeClass { dtype, buckets: [rows, b(n), b(k)] }
    }

    /// Whether the class is of products with at most
    /// `MATRIX_VECTOR_ROWS` rows (a decoding step's).
    pub fn is_matrix_vector(&self) -> bool {
        self.buckets[0] == MATRIX_VECTOR
    }

    /// e.g. `f32:m2n2k2`, and `f32:mvn3k2` for matrix–vector products.
    pub fn name(&self) -> String {
        let [m, n, k] = self.buckets;
        let m = if m == MATRIX_VECTOR { "v".to_string() } else { m.to_string() };
        format!("{}:m{m}n{n}k{k}", self.dtype.name())
    }

    pub fn parse(s: &str) -> Option<ShapeClass> {
        let all = DType::ALL
            .into_iter()
            .flat_map(|dtype| (0..80u8).map(move |i| ShapeClass { dtype, buckets: [i / 16, i / 4 % 4, i % 4] }));
        all.into_iter().find(|c| c.name() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::ShapeClass;
    use kiln_ir::dtype::DType;

    #[test]
    fn shape_classes_split_at_64_512_and_1024_and_parse_back() {
        let name = |m, n, k| ShapeClass::of(DType::F32, m, n, k).name();
        assert_eq!(name(64, 65, 512), "f32:m0n1k1");
        assert_eq!(name(513, 1024, 1025), "f32:m2n2k3");
        assert_eq!(name(2048, 2048, 2048), "f32:m3n3k3");
        assert_ne!(name(1024, 1024, 1024), name(2048, 2048, 2048));
        for dtype in DType::ALL {
            for (m, n, k) in [(1, 100, 600), (8192, 256, 1024), (2000, 3, 70)] {
                let class = ShapeClass::of(dtype, m, n, k);
                assert_eq!(ShapeClass::parse(&class.name()), Some(class), "{}", class.name());
            }
        }
        assert_eq!(ShapeClass::parse("f32:m4n0k0"), None);
        assert_eq!(name(8, 2304, 768), "f32:mvn3k2");
        assert_eq!(name(9, 2304, 768), "f32:m0n3k2");
        assert!(ShapeClass::of(DType::F32, 1, 64, 64).is_matrix_vector());
    }
}
