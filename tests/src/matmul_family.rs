//! Every member of the matmul kernel family, forced in turn on one device,
//! against the CPU reference on ragged shapes, batches, transposed and f16
//! operands and a fused epilogue: whichever config the autotuner picks,
//! results pass the same tolerances. Natively `tests/matmul_family.rs` runs
//! it on every adapter; the browser's conformance page on WebGPU (where the
//! tuner is off, so these kernels otherwise never reach Dawn's compiler).

use crate::rng::Rng;
use kiln::core::codegen::matmul::MatmulConfig;
use kiln::core::testing::TestHooks;
use kiln::prelude::*;

fn random(dev: &Device, shape: &[usize], seed: u64) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    Tensor::from_slice(dev, &data, shape)
}

pub type Case = (&'static str, fn(&Device) -> Result<Tensor>);

/// A vec4 config runs its scalar twin on shapes that are not
/// vec4-eligible; the "ragged" case checks that fallback (every shape
/// for every vec4 config is slow to compile on SwiftShader). Texture
/// configs run every case: they copy any layout into their textures, and
/// fall back to their vec4 twin on batches, f16 operands and N not a
/// multiple of 4.
pub const CASES: [Case; 14] = [
    ("ragged 37x53 @ 53x29", |d| random(d, &[37, 53], 1)?.matmul(&random(d, &[53, 29], 2)?)),
    ("batched [2,3,19,70] @ [3,70,21]", |d| random(d, &[2, 3, 19, 70], 3)?.matmul(&random(d, &[3, 70, 21], 4)?)),
    ("transposed operands 45x33", |d| random(d, &[33, 45], 5)?.t()?.matmul(&random(d, &[40, 33], 6)?.t()?)),
    ("f16 operands 40x66 @ 66x70", |d| {
        random(d, &[40, 66], 7)?.cast(DType::F16)?.matmul(&random(d, &[66, 70], 8)?.cast(DType::F16)?)
    }),
    // K and N multiples of 4, contiguous: the vec4 configs run these.
    // More row blocks than one launch-order group holds (and a last
    // group cut short) for every config, and several column blocks.
    ("vec4-eligible relu(x @ w + b) 1100x52 @ 52x140", |d| {
        random(d, &[1100, 52], 12)?.matmul(&random(d, &[52, 140], 13)?)?.add(&random(d, &[140], 14)?)?.relu()
    }),
    ("vec4-eligible batched [2,3,19,68] @ [3,68,20]", |d| {
        random(d, &[2, 3, 19, 68], 15)?.matmul(&random(d, &[3, 68, 20], 16)?)
    }),
    // B copied into column panels first (forced here; by default only
    // large products on CPU adapters): N splits into every vec4 config's
    // panels.
    ("vec4-eligible in column panels relu(x @ w + b) 70x36 @ 36x256", |d| {
        random(d, &[70, 36], 17)?.matmul(&random(d, &[36, 256], 18)?)?.add(&random(d, &[256], 19)?)?.relu()
    }),
    // Transposed operands reused across 32 or more outputs: vec4 configs
    // read them from copies in rows (a broadcast batch copied once), made
    // in 4 × 4 blocks (B here) or, with 66 rows, elementwise (A).
    ("vec4-eligible transposed, copied into rows 66x36 @ 36x48", |d| {
        random(d, &[36, 66], 25)?.t()?.matmul(&random(d, &[48, 36], 26)?.t()?)
    }),
    // Nothing to copy: zeros.
    ("vec4-eligible transposed, K = 0: [0,36]ᵀ @ [40,0]ᵀ", |d| {
        random(d, &[0, 36], 31)?.t()?.matmul(&random(d, &[40, 0], 32)?.t()?)
    }),
    ("vec4-eligible batched [2,3,40,36] @ [3,44,36]ᵀ, B copied into rows", |d| {
        random(d, &[2, 3, 40, 36], 27)?.matmul(&random(d, &[3, 44, 36], 28)?.transpose(1, 2)?)
    }),
    // K past one dispatch's chunk: the second adds to the first's output.
    ("vec4-eligible k split over dispatches 3x16404 @ 16404x8", |d| {
        random(d, &[3, 16404], 20)?.matmul(&random(d, &[16404, 8], 21)?)
    }),
    // Packed operands by pairs of words (vec4 configs) or unpacked into
    // f32 textures (texture configs); f16 tolerance, as the fused cast to
    // f16 rounds only where it is stored, and the reference at every node.
    ("f16 vec4-eligible relu(x @ w + b) 70x52 @ 52x140", |d| {
        let (x, w) = (random(d, &[70, 52], 22)?.cast(DType::F16)?, random(d, &[52, 140], 23)?.cast(DType::F16)?);
        x.matmul(&w)?.cast(DType::F32)?.add(&random(d, &[140], 24)?)?.relu()
    }),
    ("f16 vec4-eligible x @ wᵀ, w copied into rows 40x52 @ [44,52]ᵀ", |d| {
        random(d, &[40, 52], 29)?.cast(DType::F16)?.matmul(&random(d, &[44, 52], 30)?.cast(DType::F16)?.t()?)
    }),
    ("relu(x @ w + b) epilogue 1030x72 @ 72x90", |d| {
        random(d, &[1030, 72], 9)?.matmul(&random(d, &[72, 90], 10)?)?.add(&random(d, &[90], 11)?)?.relu()
    }),
];

/// What one device made of the family.
#[derive(Debug, Default)]
pub struct Family {
    /// (case, config) pairs that ran and matched.
    pub checked: usize,
    /// Configs the device cannot run, with the reason it gave.
    pub skipped: Vec<String>,
    pub failures: Vec<String>,
    /// Configs the device runs that no selected case checked.
    pub unchecked: Vec<String>,
}

/// Which (case, config) pairs a run checks.
#[derive(Debug, Clone, Copy)]
pub enum Coverage {
    /// Every pair where the config can run the case.
    Every,
    /// Those of them whose case and config indices plus `offset` sum to a
    /// multiple of `every`: about one pair in `every`, yet every config
    /// meets at least one case it runs and every case several configs;
    /// adapters with other offsets check other pairs. For adapters where
    /// compiling is slow.
    Sample { every: usize, offset: usize },
    /// Every pair for the cases `always` names, the others sampled as
    /// `Sample { every, offset: 0 }` (the browser: its compiles are slow).
    EveryFor { always: fn(&str) -> bool, every: usize },
}

impl Coverage {
    fn includes(self, case: usize, what: &str, config: usize) -> bool {
        match self {
            Coverage::Every => true,
            Coverage::Sample { every, offset } => (case + config + offset).is_multiple_of(every),
            Coverage::EveryFor { always, every } => always(what) || (case + config).is_multiple_of(every),
        }
    }
}

/// Force each config in turn on `dev` for each of `cases` (the pairs
/// `coverage` selects); the device is left on the tuner's choice and its
/// own panel rule, also when a case fails to build.
pub async fn check(dev: &Device, cases: &[Case], coverage: Coverage) -> Result<Family> {
    let family = check_forcing(dev, cases, coverage).await;
    dev.set_matmul_config(None)?;
    dev.set_matmul_panels(None);
    family
}

async fn check_forcing(dev: &Device, cases: &[Case], coverage: Coverage) -> Result<Family> {
    let cpu = Device::cpu();
    let mut family = Family::default();
    let (info, mut configs) = (dev.info(), Vec::new());
    for config in MatmulConfig::CANDIDATES {
        match dev.set_matmul_config(Some(config)) {
            Err(e) if config.runs_on(&info.caps) => family.failures.push(format!("refused: {e}")),
            Err(e) => family.skipped.push(e.to_string()),
            Ok(()) => configs.push(config),
        }
    }
    let mut checked_configs = vec![false; configs.len()];
    for (case, &(what, build)) in cases.iter().enumerate() {
        let want = build(&cpu)?.cast(DType::F32)?.to_vec::<f32>().await?;
        let scale = want.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
        let tol = if what.starts_with("f16") { 2e-3 } else { 1e-5 };
        for (index, config) in configs.iter().enumerate() {
            // Texture configs read any layout (through their copies into textures).
            let eligible = !config.vec || config.tex || what.contains("vec4") || what.starts_with("ragged");
            // Packed operands through the scalar configs: the "f16 operands" case.
            let eligible = eligible && (config.vec || !what.starts_with("f16 vec4"));
            if !eligible || !coverage.includes(case, what, index) {
                continue;
            }
            checked_configs[index] = true;
            dev.set_matmul_config(Some(*config))?;
            let panels = what.contains("column panels");
            dev.set_matmul_panels(panels.then_some(true));
            // The copies into panels or rows are kernels of their own;
            // texture configs copy A and B into textures instead.
            let copies = match (panels, what.contains("transposed, copied into rows")) {
                (true, _) if config.tex => Some(2),
                (true, _) => Some(config.vec as usize),
                (false, true) => Some(2 * (config.vec || config.tex) as usize),
                (false, false) => None,
            };
            if let Some(copies) = copies {
                let planned = dev.plan_kernels(&[build(dev)?.node().clone()])?.len();
                if planned != 1 + copies {
                    family.failures.push(format!("{what}, {}: {planned} kernels planned", config.name()));
                }
            }
            let got = build(dev)?.cast(DType::F32)?.to_vec::<f32>().await;
            let got = match got {
                Ok(g) => g,
                Err(e) => {
                    family.failures.push(format!("{what}, {}: {e}", config.name()));
                    continue;
                }
            };
            let bad = got.iter().zip(&want).position(|(g, w)| (g - w).abs() > tol * scale);
            match bad {
                Some(i) => family.failures.push(format!(
                    "{what}, {}: element {i} is {}, reference {}",
                    config.name(),
                    got[i],
                    want[i]
                )),
                None => family.checked += 1,
            }
        }
    }
    family.unchecked = configs.iter().zip(&checked_configs).filter(|(_, c)| !**c).map(|(c, _)| c.name()).collect();
    Ok(family)
}
