//! kiln's benchmarks on every adapter (or one): ceilings from WGSL
//! microkernels, then matmul, reductions, softmax, layer norm, fused
//! chains, dispatch overhead, cold start and hand-written softmax layouts
//! (what a row kernel could reach), each the median of several
//! repetitions after a warm-up with its min–max spread. Prints a table,
//! writes JSON lines (`--json`; docs/benchmarks.jsonl on a full run) and
//! regenerates docs/BENCHMARKS.md. `--from-json` renders another machine's
//! lines (a GPU run of scripts/device-check) as a section of that page.

mod ceilings;
mod data_parallel;
mod gpt;
mod hf;
mod hf_rows;
mod measure;
mod report;
mod row_layouts;
mod suites;

use clap::Parser;
use kiln::core::wgpu;
use kiln::prelude::*;
use measure::{Record, Reps};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(about = "kiln benchmarks")]
struct Args {
    /// Only adapters whose name or backend contains this (e.g. `lavapipe`, `gl`, `swiftshader`);
    /// `cuda`: the first CUDA GPU; `cuda-host`: the CUDA runtime's host
    /// engine (a dry run of the CUDA figures without a GPU).
    #[arg(long)]
    adapter: Option<String>,
    /// Fewer repetitions, no per-config matmul table, docs left alone.
    #[arg(long)]
    quick: bool,
    /// Write one JSON line per figure to this file (default
    /// docs/benchmarks.jsonl on a full run).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// The page to regenerate (default docs/BENCHMARKS.md on a full run).
    #[arg(long)]
    docs: Option<std::path::PathBuf>,
    /// Measure nothing: render these JSON lines (earlier runs' `--json`,
    /// scripts/torch-yardstick.py's) as the `--section` table of `--docs`,
    /// with the GPU goals each figure meets or not.
    #[arg(long, num_args = 1..)]
    from_json: Vec<std::path::PathBuf>,
    /// The page's section `--from-json` writes (its own markers).
    #[arg(long, default_value = "gpu")]
    section: String,
    /// Measure nothing: write a Hugging Face folder with random weights in
    /// the layout transformers saves (`gpt2-124m`, `tinyllama-1.1b`) to
    /// `--hf-dir`, stored as `--hf-dtype`, for `native-demo --hf`.
    #[arg(long, value_parser = hf_shape)]
    write_hf: Option<hf::HfShape>,
    /// Where `--write-hf` writes (default target/hf/NAME-DTYPE).
    #[arg(long)]
    hf_dir: Option<std::path::PathBuf>,
    /// The stored dtype `--write-hf` writes: f32, f16 or bf16.
    #[arg(long, default_value = "f32", value_parser = ["f32", "f16", "bf16"])]
    hf_dtype: String,
    /// Internal: time to the first result in a fresh process on this adapter.
    #[arg(long, hide = true)]
    cold_start: Option<String>,
    /// Only the figures whose name contains this, or one of several
    /// separated by `|` (the ceilings always run).
    #[arg(long)]
    only: Option<String>,
    /// After each kiln figure, run it once more with kernel profiling on
    /// and print its device time per kernel (adapters with timestamps).
    #[arg(long)]
    profile: bool,
}

/// A short label: lavapipe (Vulkan), llvmpipe (GL), SwiftShader (Vulkan).
fn label(info: &wgpu::AdapterInfo) -> String {
    let backend = match info.backend {
        wgpu::Backend::Vulkan => "Vulkan",
        wgpu::Backend::Gl => "GL",
        b => b.to_str(),
    };
    let lower = info.name.to_lowercase();
    let name = if lower.contains("swiftshader") {
        "SwiftShader"
    } else if lower.contains("llvmpipe") && info.backend == wgpu::Backend::Vulkan {
        "lavapipe"
    } else if lower.contains("llvmpipe") {
        "llvmpipe"
    } else {
        &info.name
    };
    format!("{name} ({backend})")
}

/// What kiln's adapter selector needs to pick this adapter again.
fn selector(info: &wgpu::AdapterInfo) -> String {
    if info.name.to_lowercase().contains("swiftshader") { "swiftshader".into() } else { info.backend.to_str().into() }
}

/// The child side of the cold-start figure: open the device, run a small
/// forward pass (matmul + bias + relu, softmax), read it back, exit.
fn cold_start(sel: &str) -> Result<()> {
    let backends = wgpu::Backends::VULKAN | wgpu::Backends::GL;
    let dev = kiln::block_on(Device::with_options(DeviceOptions { adapter: Some(sel.into()), backends }))?;
    let x = Tensor::ones(&dev, &[64, 96], DType::F32)?;
    let w = Tensor::ones(&dev, &[96, 96], DType::F32)?.mul_scalar(0.01)?;
    let b = Tensor::ones(&dev, &[96], DType::F32)?;
    let y = x.matmul(&w)?.add(&b)?.relu()?.softmax(-1)?;
    kiln::block_on(y.to_vec::<f32>())?;
    Ok(())
}

fn hf_shape(name: &str) -> std::result::Result<hf::HfShape, String> {
    hf::HfShape::from_name(name).ok_or_else(|| format!("`{name}` is not gpt2-124m or tinyllama-1.1b"))
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map_or("?".into(), |l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(sel) = &args.cold_start {
        return Ok(cold_start(sel)?);
    }
    if let Some(shape) = args.write_hf {
        let name = format!("target/hf/{}-{}", shape.name(), args.hf_dtype);
        let dir = args.hf_dir.clone().unwrap_or_else(|| name.into());
        hf::write(shape, &args.hf_dtype, &dir)?;
        println!("wrote {} with random {} weights to {}", shape.name(), args.hf_dtype, dir.display());
        return Ok(());
    }
    if !args.from_json.is_empty() {
        return render_json(&args);
    }
    let reps = Reps(if args.quick { 3 } else { 7 });
    // The tuner chooses afresh in each run, under the run's own conditions,
    // unless env KILN_TUNE_CACHE names a cache: a choice an earlier process
    // cached while the machine was loaded would otherwise be measured.
    let fresh_cache = std::env::var_os("KILN_TUNE_CACHE")
        .is_none()
        .then(|| std::env::temp_dir().join(format!("kiln-bench-tune-{}.txt", std::process::id())));
    if let Some(path) = &fresh_cache {
        // SAFETY: no other thread has started yet.
        unsafe { std::env::set_var("KILN_TUNE_CACHE", path) };
    }
    let backends = wgpu::Backends::VULKAN | wgpu::Backends::GL;
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let mut adapters = kiln::block_on(instance.enumerate_adapters(backends));
    adapters.sort_by_key(|a| label(&a.get_info()));
    // A full run rewrites the table and its figures' JSON lines together.
    let full = args.adapter.is_none() && args.only.is_none() && !args.quick;
    let json_path = args.json.clone().or_else(|| full.then(|| "docs/benchmarks.jsonl".into()));
    let mut json = json_path.as_ref().map(std::fs::File::create).transpose()?;
    let mut records: Vec<Record> = Vec::new();
    let load_before = load();
    let started = Instant::now();
    let mut out = |r: Record| {
        println!("{}", r.line());
        if let Some(f) = json.as_mut() {
            use std::io::Write;
            let _ = writeln!(f, "{}", r.json());
        }
        records.push(r);
    };
    for adapter in adapters {
        let info = adapter.get_info();
        let name = label(&info);
        let wanted = args.adapter.as_ref().is_none_or(|a| {
            let a = a.to_lowercase();
            name.to_lowercase().contains(&a) || info.name.to_lowercase().contains(&a)
        });
        if !wanted {
            continue;
        }
        println!("{name}: {} ({})", info.name, info.driver_info);
        let c = ceilings::measure(&adapter, reps, 1 << 24)?;
        out(Record::rate("ceiling: copy", &name, c.copy, c.copy_bytes / 1e9, "GB/s"));
        out(Record::rate("ceiling: FMA", &name, c.fma, c.fma_flops / 1e9, "GFLOP/s"));
        let dev = kiln::block_on(Device::from_adapter(adapter.clone()))?;
        let cx = suites::Ctx {
            dev: &dev,
            adapter: &name,
            reps,
            ceilings: &c,
            only: args.only.as_deref(),
            profile: args.profile,
        };
        suites::run(&cx, args.quick, &mut out)?;
        if cx.wants("softmax layout") && !args.quick {
            let bytes = 8.0 * (row_layouts::ROWS * row_layouts::LEN) as f64;
            for layout in row_layouts::measure(&adapter, reps, &c.copy_run)? {
                let bench = format!("softmax layout: {}", layout.name);
                match layout.timing {
                    Ok(p) => out(Record::rate(&bench, &name, p.timing, bytes / 1e9, "GB/s")
                        .fraction(p.fraction(bytes, c.copy_bytes))),
                    Err(e) => println!("  {bench}: skipped, {e}"),
                }
            }
        }
        if !cx.wants("cold start") {
            continue;
        }
        // Cold start: this binary in a new process, spawn to exit.
        let exe = std::env::current_exe()?;
        let sel = selector(&info);
        let t = measure::time(Reps(if args.quick { 1 } else { 3 }), || {
            let status = std::process::Command::new(&exe).args(["--cold-start", &sel]).status()?;
            if status.success() { Ok(()) } else { Err(std::io::Error::other(format!("cold start child: {status}"))) }
        })?;
        out(Record::duration("cold start (process → first result)", &name, t, 1e3, "ms"));
    }
    match args.adapter.as_deref() {
        Some(cuda @ ("cuda" | "cuda-host")) => cuda_figures(&args, cuda == "cuda-host", reps, &mut out)?,
        Some(wanted) if records.is_empty() => return Err(format!("--adapter {wanted}: no adapter matches it").into()),
        _ => {}
    }
    let docs = args.docs.clone().or_else(|| full.then(|| "docs/BENCHMARKS.md".into()));
    if let Some(path) = docs {
        let header = format!(
            "Generated {} UTC by `cargo run --release -p kiln-bench`, {:.0} s; load average (1/5/15 min) {} before, {} after, on a shared 2-core machine. Each cell: median of {} repetitions after a warm-up (min–max), and in bold the fraction of the ceiling: the ceiling's microkernel runs next to each repetition (before it, then after the next, in turn), and the fraction is the median over these pairs of the figure's rate over the ceiling's, so that the machine's changes of speed (the copy rate moved by 2× within one run) move both sides alike. The ceiling rows are each adapter's first measurement. The matmul tuner chooses afresh in each run (unless env `KILN_TUNE_CACHE` names a cache). FMA for matmul; copy for the memory-bound kernels, whose rates count the bytes an ideal kernel moves (4 B/element for sum, 8 for softmax and layer norm; for the chains, the copy kernel's time for 8 B/element, 4 for the f16 chain, over the chain's).",
            utc_now(),
            started.elapsed().as_secs_f64(),
            load_before,
            load(),
            reps.0
        );
        let page = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, report::splice(&page, None, &report::markdown(&records, &header)))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = fresh_cache {
        let _ = std::fs::remove_file(path); // absent when nothing was tuned
    }
    Ok(())
}

/// `--from-json`: the records of earlier runs rendered as `--section` of
/// `--docs`, in the order the files and their lines give.
fn render_json(args: &Args) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let Some(path) = &args.docs else {
        return Err("--from-json needs --docs PAGE, the page whose section it writes".into());
    };
    let mut records = Vec::new();
    for file in &args.from_json {
        let text = std::fs::read_to_string(file).map_err(|e| format!("--from-json {}: {e}", file.display()))?;
        for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
            records.push(Record::from_json(line).map_err(|e| format!("--from-json {}: {e}", file.display()))?);
        }
    }
    if records.is_empty() {
        return Err(format!("--from-json: no figures in {:?}", args.from_json).into());
    }
    let names: Vec<String> = args.from_json.iter().map(|f| format!("`{}`", f.display())).collect();
    let mut table = report::markdown(
        &records,
        &format!(
            "Rendered {} UTC by `kiln-bench --from-json` from {} (figures measured on the machine that ran them, as in the table above: medians, min–max, and in bold the fraction of the adapter's own ceiling; on CUDA the ceilings are a copy kernel and cuBLAS sgemm).",
            utc_now(),
            names.join(", ")
        ),
    );
    let goals = report::gpu_goals(&records);
    if !goals.is_empty() {
        table += &format!("\nThe CUDA backend's goals:\n\n{}\n", goals.join("\n"));
    }
    let page = std::fs::read_to_string(path).unwrap_or_default();
    std::fs::write(path, report::splice(&page, Some(&args.section), &table))?;
    println!("wrote section `{}` of {} ({} figures)", args.section, path.display(), records.len());
    Ok(())
}

/// The figures on the first CUDA GPU (`--adapter cuda`), against its own
/// ceilings: a copy kernel, and cuBLAS sgemm; or (`on_host`) on the CUDA
/// host engine against the CPU's memcpy and a plain product.
fn cuda_figures(
    args: &Args,
    on_host: bool,
    reps: Reps,
    out: &mut dyn FnMut(Record),
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let dev = if on_host { Device::cuda_on_host() } else { Device::cuda()? };
    let info = dev.info();
    let name = format!("{} (CUDA)", info.name);
    println!("{name}: {}, {}", info.driver, info.driver_info);
    let (c, side, product) = match on_host {
        true => (ceilings::measure_cuda_host(reps, 1 << 26)?, ceilings::HOST_SIDE, "host sgemm"),
        false => (ceilings::measure_cuda(reps, 1 << 30)?, ceilings::CUBLAS_SIDE, "cuBLAS sgemm"),
    };
    out(Record::rate("ceiling: copy", &name, c.copy, c.copy_bytes / 1e9, "GB/s"));
    out(Record::rate(&format!("ceiling: {product} {side}³"), &name, c.fma, c.fma_flops / 1e9, "GFLOP/s"));
    let cx = suites::Ctx { dev: &dev, adapter: &name, reps, ceilings: &c, only: args.only.as_deref(), profile: false };
    Ok(suites::run(&cx, args.quick, out)?)
}

/// `YYYY-MM-DD HH:MM` from the system clock (civil-from-days, no deps).
fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", rem / 3600, rem % 3600 / 60)
}
