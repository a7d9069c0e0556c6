//! The matmul autotuner: on the first matmul of a shape class, time each
//! candidate of the kernel family on this adapter and keep the fastest.
//! On CPU adapters the first few candidates ([`SIFT_CPU`]) run a product
//! of at most 512 per dimension; for larger classes the few fastest then run again at the
//! product's size up to 2048, since rankings shift with size (at 512³
//! llvmpipe GL preferred a 16×8 block that ran at three quarters of the
//! 16×16 one's rate at 2048³; see also [`ShapeClass`]).
//! GPUs time every candidate at the product's own size, up to 2048: they
//! finish a 512³ product in microseconds, less than a submission costs,
//! and a big tile that fills the GPU at 2048³ leaves it idle at 512³.
//! Natively the first matmul of a class waits for its tuning (new
//! candidates stop after `BUDGET`). A browser
//! cannot block on the GPU, so there the class runs the default config
//! and is tuned when the realization or readback that met it is awaited,
//! within a time budget (every page load tunes again); later steps get the
//! winner.
//! Choices are cached per adapter (name, driver, backend) in memory and,
//! natively, in a text file: env `KILN_TUNE_CACHE` names it, else
//! `$XDG_CACHE_HOME/kiln/matmul-tune.txt` or `~/.cache/kiln/…`.
//! `KILN_TUNE=off` uses the default config (natively). Every config sums k
//! in the same order, so results do not depend on which one won.

use super::Gpu;
use super::launch::Recording;
use super::pool::Pooled;
use crate::codegen::Caps;
use crate::codegen::matmul::{MatmulConfig, ShapeClass};
use crate::dtype::DType;
use crate::error::Result;
use crate::sched::schedule::{Item, Schedule, product_dims};
use crate::shape::Layout;
use kiln_runtime::{DeviceInfo, TuningStats};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Products smaller than this (m·n·k) use the default without tuning:
/// they take microseconds whichever config runs.
const TUNE_MIN_WORK: usize = 1 << 21;
/// Every candidate runs a product of at most this size in each dimension.
const TUNE_DIM: usize = 512;
/// On CPU adapters the sift times only this many usable candidates, the
/// first listed (the list puts first what has won somewhere). Every
/// candidate's compile and timings there cost about 0.1–0.5 s, and the
/// demo's first epoch on lavapipe meets four classes: the full sift took
/// 10.4 s of tuning against an epoch of 7.5 s, and every class chose one
/// of the first five (docs/BENCHMARKS.md, "Tuning on the first run").
const SIFT_CPU: usize = 6;
/// The `FINALISTS` fastest (and the fastest texture member) run again at
/// up to this size, where the real product is larger than `TUNE_DIM` in
/// some dimension. At 2048³ a CPU
/// adapter takes about 0.5 s (SwiftShader 2 s) per run: a few seconds of
/// tuning, once per adapter and class.
const TUNE_DIM_LARGE: usize = 2048;
/// On GPUs every candidate runs a product of at most this size.
const TUNE_DIM_GPU: usize = 2048;
/// A timing covers submissions of one product until they take this long
/// (seconds), so that launch cost and a coarse clock (a browser's is
/// 0.1 ms) do not decide the ranking of fast kernels.
const MIN_TIMED: f64 = 0.002;
/// ... or this many submissions.
const MAX_REPS: usize = 64;
/// A class stops timing new candidates after this many seconds and keeps
/// the best so far. On the web every page load tunes again (a fast GPU
/// times them all well within it). Natively it bounds a one-time stall
/// where compiling is slow: SwiftShader spent 23 s tuning one class, 21 of
/// them compiling its 17 candidates (lavapipe 1.7 s, GL 0.45 s); the
/// candidates most likely to win come first.
const BUDGET: f64 = if cfg!(target_arch = "wasm32") { 2.0 } else { 10.0 };
const FINALISTS: usize = 3;
/// Timings per candidate (see [`rank`]).
const ROUNDS: usize = 3;
/// Candidates within this fraction of the fastest count as tied, and the
/// tie goes to the one listed first: at 1024³ on lavapipe 32x16/8x1+sg+vec4
/// and 32x8/8x1+sg+vec4 have run within 1–3% of each other, either winning
/// by noise, and 2048³ (which takes 1024³'s choice, and reads B in column
/// panels that 1024³ does not) then ran at 0.256–0.277 or 0.287–0.291 of
/// FMA (docs/BENCHMARKS.md, 'What was tried' (tuner)). The list puts first what
/// wins at larger sizes.
const NEAR_TIE: f64 = 0.03;

/// A device's matmul tuner: the configs chosen per shape class, and the
/// timing that chooses them.
#[derive(Debug)]
pub(super) struct Tuner {
    /// The adapter, for logs.
    adapter: String,
    /// Identifies the adapter and the kernel family in the cache file.
    key: String,
    caps: Caps,
    chosen: Mutex<HashMap<ShapeClass, MatmulConfig>>,
    forced: Mutex<Option<MatmulConfig>>,
    loaded: std::sync::OnceLock<()>,
    /// On the web: classes met without a choice, each with the product
    /// that met it, for [`Tuner::tune_pending`].
    pending: Mutex<Vec<(ShapeClass, Product)>>,
    /// Set by `Device::set_matmul_tuning`; `None`: [`Tuner::by_default`].
    enabled: Mutex<Option<bool>>,
    /// Classes tuned and the time spent tuning them, for `Device::stats`.
    stats: Mutex<TuningStats>,
}

/// A config being ranked: its fastest timing so far (seconds per run), its
/// recorded product and how many submissions a timing takes.
struct Candidate {
    seconds: f64,
    config: MatmulConfig,
    rec: Recording,
    reps: usize,
}

/// An m×k @ k×n product of `dtype` operands.
#[derive(Debug, Clone, Copy)]
struct Product {
    dtype: DType,
    m: usize,
    n: usize,
    k: usize,
}

impl Tuner {
    pub fn new(info: &DeviceInfo) -> Tuner {
        let family = MatmulConfig::family_fingerprint();
        let key = format!("{} | {} {} | {} | family {family}", info.name, info.driver, info.driver_info, info.backend)
            .replace(['\t', '\n'], " ");
        Tuner {
            adapter: info.name.clone(),
            key,
            caps: info.caps.clone(),
            chosen: Mutex::default(),
            forced: Mutex::default(),
            loaded: std::sync::OnceLock::new(),
            pending: Mutex::default(),
            enabled: Mutex::default(),
            stats: Mutex::default(),
        }
    }

    pub fn set_enabled(&self, on: Option<bool>) {
        *self.enabled.lock().unwrap() = on;
    }

    fn enabled(&self) -> bool {
        self.enabled.lock().unwrap().unwrap_or_else(|| self.by_default())
    }

    /// Natively on, unless env `KILN_TUNE` is `off` or `0`. In a browser on
    /// for GPUs only: every page load tunes again, and in headless Chromium
    /// on SwiftShader that took the demo's 300 steps from 31 s to over 80 s,
    /// for no faster step.
    fn by_default(&self) -> bool {
        if cfg!(target_arch = "wasm32") {
            !self.caps.cpu
        } else {
            !std::env::var("KILN_TUNE").is_ok_and(|v| v == "off" || v == "0")
        }
    }

    /// Make every matmul take `config` (`None`: the tuner's choice).
    pub fn force(&self, config: Option<MatmulConfig>) {
        *self.forced.lock().unwrap() = config;
    }

    pub fn stats(&self) -> TuningStats {
        let pending = self.pending.lock().unwrap().len() as u64;
        TuningStats { classes_pending: pending, ..*self.stats.lock().unwrap() }
    }

    /// What the tuner chose so far, as (shape class, config) names.
    pub fn choices(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self.chosen.lock().unwrap().iter().map(|(c, cfg)| (c.name(), cfg.name())).collect();
        v.sort();
        v
    }

    /// The config for an m×k @ k×n product of `dtype` operands: natively,
    /// a shape class met for the first time is tuned now.
    pub fn config(&self, gpu: &Gpu, dtype: DType, m: usize, n: usize, k: usize) -> Result<MatmulConfig> {
        if let Some(c) = self.settled_config(dtype, m, n, k) {
            return Ok(c);
        }
        let (class, product) = (ShapeClass::of(dtype, m, n, k), Product { dtype, m, n, k });
        if cfg!(target_arch = "wasm32") {
            self.queue_class(class, product);
            return Ok(MatmulConfig::default_for(&self.caps));
        }
        let best = pollster::block_on(self.tune(gpu, class, product))?;
        self.choose(class, best);
        save_choice(&self.key, &class, &best);
        Ok(best)
    }

    /// The config a product takes without tuning: the one chosen for its
    /// class, or the default.
    pub fn chosen_config(&self, dtype: DType, m: usize, n: usize, k: usize) -> MatmulConfig {
        self.settled_config(dtype, m, n, k).unwrap_or_else(|| MatmulConfig::default_for(&self.caps))
    }

    /// The config forced, chosen, or fixed (too small to tune, tuning
    /// off); `None` when the product's class is still to tune.
    fn settled_config(&self, dtype: DType, m: usize, n: usize, k: usize) -> Option<MatmulConfig> {
        if let Some(c) = *self.forced.lock().unwrap() {
            return Some(c);
        }
        if m * n * k < TUNE_MIN_WORK || !self.enabled() {
            return Some(MatmulConfig::default_for(&self.caps));
        }
        self.loaded.get_or_init(|| self.load_cache());
        self.chosen.lock().unwrap().get(&ShapeClass::of(dtype, m, n, k)).copied()
    }

    fn queue_class(&self, class: ShapeClass, product: Product) {
        let mut pending = self.pending.lock().unwrap();
        if !pending.iter().any(|(c, _)| *c == class) {
            pending.push((class, product));
        }
    }

    /// Queue the untuned shape classes of `schedule`'s matmuls, for
    /// [`Tuner::tune_pending`].
    pub fn queue(&self, schedule: &Schedule) {
        for k in &schedule.items {
            if let Item::Matmul { a, b, operands, .. } = &k.item {
                let (m, k, n) = product_dims(a, b);
                if self.settled_config(*operands, m, n, k).is_none() {
                    self.queue_class(ShapeClass::of(*operands, m, n, k), Product { dtype: *operands, m, n, k });
                }
            }
        }
    }

    /// Tunes the classes met on the web since the last call (see the module
    /// comment); natively there are none.
    pub async fn tune_pending(&self, gpu: &Gpu) -> Result<()> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap());
        for (class, product) in pending {
            let best = self.tune(gpu, class, product).await?;
            self.choose(class, best);
        }
        Ok(())
    }

    fn choose(&self, class: ShapeClass, best: MatmulConfig) {
        log::info!("kiln: matmul {} on {} tuned to {}", class.name(), self.adapter, best.name());
        self.chosen.lock().unwrap().insert(class, best);
    }

    /// The fastest usable candidate for an m×k @ k×n product: on CPU
    /// adapters the first `SIFT_CPU` at up to `TUNE_DIM`, then the finalists at up
    /// to `TUNE_DIM_LARGE`; on GPUs all of them at up to `TUNE_DIM_GPU`.
    async fn tune(&self, gpu: &Gpu, class: ShapeClass, product: Product) -> Result<MatmulConfig> {
        let Product { m, n, k, .. } = product;
        log::info!(
            target: "kiln::tune",
            "tuning matmul for {}, once per shape class: {} ({m}x{k} @ {k}x{n}); the choice is cached in {}",
            self.adapter,
            class.name(),
            cache_path().map_or("memory only".into(), |p| p.display().to_string())
        );
        let started = crate::clock::now();
        let best = self.tune_product(gpu, product).await;
        let mut stats = self.stats.lock().unwrap();
        stats.classes_tuned += 1;
        stats.time += std::time::Duration::from_secs_f64(crate::clock::now() - started);
        best
    }

    async fn tune_product(&self, gpu: &Gpu, product: Product) -> Result<MatmulConfig> {
        let Product { dtype, m, n, k } = product;
        // Staged configs wait on barriers, which CPU adapters pay for dearly
        // (every lane of the workgroup is switched out and in): not tried there.
        let cpu = self.caps.cpu;
        let mut usable: Vec<MatmulConfig> =
            MatmulConfig::CANDIDATES.into_iter().filter(|c| c.runs_on(&self.caps) && !(c.staged && cpu)).collect();
        if ShapeClass::of(dtype, m, n, k).is_matrix_vector() {
            // Few rows: the fewest rows per invocation first (a stable sort
            // keeps the list's order among them).
            usable.sort_by_key(|c| c.tm);
        }
        let usable = usable.into_iter().take(if cpu { SIFT_CPU } else { usize::MAX });
        let (sift, large) = if cpu { (TUNE_DIM, TUNE_DIM_LARGE) } else { (TUNE_DIM_GPU, TUNE_DIM_GPU) };
        let deadline = crate::clock::now() + BUDGET;
        let [sm, sn, sk] = [m, n, k].map(|d| d.min(sift));
        let ranked = rank(gpu, Product { dtype, m: sm, n: sn, k: sk }, usable, deadline).await?;
        let [lm, ln, lk] = [m, n, k].map(|d| d.min(large));
        if [lm, ln, lk] == [sm, sn, sk] || past(deadline) {
            return Ok(ranked[0]);
        }
        // The fastest texture member runs again even if it is not among the
        // fastest: its operand copies cost n² against the product's n³, so
        // it gains on the others with size: on lavapipe it lost at 256³,
        // tied at 512³ and led by 1.1–1.4× in every timing at 2048³, yet
        // two tunings in three without this rule gave 2048³ a buffer
        // member. In the candidates' order, for ties.
        let best_tex = ranked.iter().find(|c| c.tex);
        let finalists: Vec<MatmulConfig> = ranked.iter().take(FINALISTS).chain(best_tex).copied().collect();
        let finalists = MatmulConfig::CANDIDATES.into_iter().filter(|c| finalists.contains(c));
        Ok(rank(gpu, Product { dtype, m: lm, n: ln, k: lk }, finalists, deadline).await?[0])
    }

    fn load_cache(&self) {
        let Some(path) = cache_path() else { return };
        let Ok(text) = std::fs::read_to_string(&path) else { return };
        let mut chosen = self.chosen.lock().unwrap();
        for line in text.lines() {
            let mut parts = line.split('\t');
            let (Some(k), Some(class), Some(cfg)) = (parts.next(), parts.next(), parts.next()) else { continue };
            let class = ShapeClass::parse(class);
            let usable = |c: &MatmulConfig| c.runs_on(&self.caps);
            if let (true, Some(class), Some(cfg)) = (k == self.key, class, MatmulConfig::parse(cfg).filter(usable)) {
                chosen.insert(class, cfg);
            }
        }
    }
}

/// `configs` fastest first (near ties, [`NEAR_TIE`], to the first
/// listed), each timed on zero-filled operands. Round
/// one compiles and times every candidate; rounds two and three time
/// again, in turn, those within twice the best, and each keeps its
/// fastest timing. Taking the rounds in turn rather than a candidate's
/// three timings together means a change of the machine's speed during
/// tuning (this machine's moves by up to 2×) slows every candidate
/// alike instead of ranking whichever it fell on last. A timing
/// covers as many submissions as take `MIN_TIMED`. Past `deadline`
/// (seconds on `crate::clock`) no new candidate is compiled; those already
/// compiled still take their rounds, which cost little beside compiling.
async fn rank(
    gpu: &Gpu,
    product: Product,
    configs: impl Iterator<Item = MatmulConfig>,
    deadline: f64,
) -> Result<Vec<MatmulConfig>> {
    let Product { dtype, m, n, k } = product;
    let (a, b) = (gpu.resources.alloc("matmul", dtype, &[m, k])?, gpu.resources.alloc("matmul", dtype, &[k, n])?);
    let out = gpu.resources.alloc("matmul", DType::F32, &[m, n])?;
    let mut encoder = gpu.ctx.device.create_command_encoder(&Default::default());
    encoder.clear_buffer(a.buffer(), 0, None);
    encoder.clear_buffer(b.buffer(), 0, None);
    gpu.ctx.queue.submit([encoder.finish()]);
    let (la, lb) = (Layout::contiguous(&[m, k]), Layout::contiguous(&[k, n]));
    let args = crate::sched::lower::Args { buffers: vec![a, b], ..Default::default() };
    let item = Item::Matmul { a: la, b: lb, operands: dtype, shape: vec![m, n], out, epilogue: None, args };
    let mut timed: Vec<Candidate> = Vec::new();
    for config in configs {
        if !timed.is_empty() && past(deadline) {
            break;
        }
        let mut rec = Recording::default();
        rec.item(gpu, "matmul", &item, Arc::clone, Some(config))?;
        gpu.submit_uncounted(&rec, None)?; // compiles and warms up
        gpu.ctx.synchronize().await?;
        let mut reps = 1;
        let seconds = timing(gpu, &rec, &mut reps).await?;
        timed.push(Candidate { seconds, config, rec, reps });
    }
    for _ in 1..ROUNDS {
        let best = timed.iter().map(|c| c.seconds).fold(f64::INFINITY, f64::min);
        for c in timed.iter_mut().filter(|c| c.seconds <= 2.0 * best) {
            c.seconds = c.seconds.min(timing(gpu, &c.rec, &mut c.reps).await?);
        }
    }
    let seconds: Vec<f64> = timed.iter().map(|c| c.seconds).collect();
    Ok(fastest_first(&seconds).into_iter().map(|i| timed[i].config).collect())
}

/// Seconds per run of `rec`, timed over `reps` submissions, first raised
/// (×4, up to `MAX_REPS`) until they take `MIN_TIMED`.
async fn timing(gpu: &Gpu, rec: &Recording, reps: &mut usize) -> Result<f64> {
    loop {
        let t = crate::clock::now();
        for _ in 0..*reps {
            gpu.submit_uncounted(rec, None)?;
        }
        gpu.ctx.synchronize().await?;
        let seconds = crate::clock::now() - t;
        if seconds >= MIN_TIMED || *reps >= MAX_REPS {
            return Ok(seconds / *reps as f64);
        }
        *reps = (*reps * 4).min(MAX_REPS);
    }
}

/// Indices of `seconds` (timings in the order of the candidate list),
/// fastest first, except that the first listed of those within
/// [`NEAR_TIE`] of the fastest goes first.
fn fastest_first(seconds: &[f64]) -> Vec<usize> {
    let best = seconds.iter().copied().fold(f64::INFINITY, f64::min);
    let tie_winner = seconds.iter().position(|&s| s <= best * (1.0 + NEAR_TIE));
    let mut rest: Vec<usize> = (0..seconds.len()).filter(|&i| Some(i) != tie_winner).collect();
    rest.sort_by(|&a, &b| seconds[a].total_cmp(&seconds[b]));
    tie_winner.into_iter().chain(rest).collect()
}

/// Whether `deadline` (seconds on `crate::clock`) has passed.
fn past(deadline: f64) -> bool {
    crate::clock::now() > deadline
}

fn cache_path() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("KILN_TUNE_CACHE") {
        return Some(p.into());
    }
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))?;
    Some(dir.join("kiln").join("matmul-tune.txt"))
}

/// Append one choice to the cache file; a failure only costs a re-tune.
fn save_choice(key: &str, class: &ShapeClass, config: &MatmulConfig) {
    use std::io::Write;
    let Some(path) = cache_path() else { return };
    let line = format!("{key}\t{}\t{}\n", class.name(), config.name());
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| std::fs::OpenOptions::new().create(true).append(true).open(&path)?.write_all(line.as_bytes()));
    if let Err(e) = written {
        log::warn!("kiln: cannot write the tuning cache {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::fastest_first;

    #[test]
    fn near_ties_go_to_the_first_listed_and_the_rest_by_time() {
        // 1.02 is within 3% of 1.0: the first listed wins the tie.
        assert_eq!(fastest_first(&[1.02, 1.0, 1.5]), vec![0, 1, 2]);
        // 1.05 is not: the fastest leads, then the others by time.
        assert_eq!(fastest_first(&[1.05, 1.0, 1.01]), vec![1, 2, 0]);
        assert_eq!(fastest_first(&[2.0, 1.5, 1.0]), vec![2, 1, 0]);
        assert_eq!(fastest_first(&[]), Vec::<usize>::new());
    }
}
