//! CUDA kernels run on the host, for the executed checks on machines
//! without an NVIDIA GPU: the very source NVRTC compiles, built by the
//! system's C++ compiler (env `CXX`, else `c++`) over `shim.h`, which gives
//! CUDA's execution model on the CPU (each block's threads as fibers, warps
//! of 32, barriers that wait for their group). Only the prelude's two f16
//! conversions differ (PTX there, `_Float16` here). The CUDA device's
//! host engine (`crate::device`, `Device::cuda_on_host`) runs on this.

use crate::device::ptx_cache::fingerprint;
use kiln_codegen::cuda::{CudaKernel, batch, entry_of};
use kiln_ir::error::{KilnError, Result};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// CUDA's execution model on the host.
const SHIM: &str = include_str!("shim.h");

/// Kernels built for the host as one shared library.
pub struct HostModule {
    library: libloading::Library,
    /// Whether each kernel waits at barriers or shuffles (and so needs its
    /// threads as fibers); the others run each thread to its end in turn.
    synchronizes: Vec<bool>,
    /// The library's file, removed with the module unless it is kept in
    /// the cache ([`cache_dir`]).
    path: PathBuf,
    cached: bool,
}

/// The compiler's arguments, part of a cached library's key.
const CXX_FLAGS: [&str; 8] = ["-std=c++20", "-O1", "-U_FORTIFY_SOURCE", "-pthread", "-shared", "-fPIC", "-w", "-o"];

/// Where built libraries are kept between runs: env `KILN_CUDA_HOST_CACHE`
/// (scripts/test keeps it beside Cargo's build directory), keyed by their
/// source, the compiler's arguments and `--version`; unset, each run builds
/// its own (the C++ compiler is most of a host run's time).
fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("KILN_CUDA_HOST_CACHE").map(PathBuf::from)
}

/// What identifies `cxx`: its `--version`, read once.
fn compiler_identity(cxx: &str) -> String {
    static IDENTITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    IDENTITY
        .get_or_init(|| {
            let out = Command::new(cxx).arg("--version").output();
            out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
        })
        .clone()
}

/// Move the library just built at `built` into the cache as `kept`, whole
/// or not at all (a copy renamed into place); whether it is there.
fn keep(built: &std::path::Path, kept: &std::path::Path) -> bool {
    let partial = kept.with_extension(format!("{}.tmp", std::process::id()));
    let moved = kept
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::copy(built, &partial))
        .and_then(|_| std::fs::rename(&partial, kept));
    let _ = std::fs::remove_file(&partial);
    let there = moved.is_ok() || kept.exists();
    if there {
        let _ = std::fs::remove_file(built);
    }
    there
}

type Launch = unsafe extern "C" fn(*const *mut u32, *const u32, *const u32, i32) -> i32;

impl HostModule {
    /// `kernels` built for the host.
    pub fn build(kernels: &[CudaKernel]) -> Result<HostModule> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let stem = format!("kiln-host-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir();
        let (source, path) = (dir.join(format!("{stem}.cpp")), dir.join(format!("{stem}.so")));
        let mut text = format!("{SHIM}\n{}", batch(kernels));
        for i in 0..kernels.len() {
            let entry = entry_of(i);
            text.push_str(&format!(
                "extern \"C\" int kiln_launch_{i}(void* const* g, const unsigned* grid, const unsigned* size, int fibers) {{\n    \
                 return kiln_host_run([](const void* p) {{ k{i}::{entry}(*static_cast<const k{i}::Globals*>(p)); }}, \
                 g, grid, size, fibers);\n}}\n"
            ));
        }
        let fail = |log: String| KilnError::CudaCompile { compiler: "the host C++ compiler", log, code: text.clone() };
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let kept = cache_dir().map(|dir| {
            let key = fingerprint(&[&text, &cxx, &CXX_FLAGS.join(" "), &compiler_identity(&cxx)]);
            dir.join(format!("{key:016x}.so"))
        });
        if let Some(kept) = kept.as_ref().filter(|k| k.exists()) {
            return HostModule::load(kernels, kept.clone(), true).map_err(fail);
        }
        std::fs::write(&source, &text).map_err(|e| fail(format!("{}: {e}", source.display())))?;
        let out = Command::new(&cxx)
            // No fortified longjmp: it refuses to jump between fibers' stacks.
            .args(CXX_FLAGS)
            .arg(&path)
            .arg(&source)
            .output()
            .map_err(|e| KilnError::Unavailable { what: "a C++ compiler", detail: format!("`{cxx}`: {e}") })?;
        let _ = std::fs::remove_file(&source);
        if !out.status.success() {
            return Err(fail(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        match kept {
            Some(kept) if keep(&path, &kept) => HostModule::load(kernels, kept, true).map_err(fail),
            _ => HostModule::load(kernels, path, false).map_err(fail),
        }
    }

    /// The library at `path`, built from `kernels`.
    fn load(kernels: &[CudaKernel], path: PathBuf, cached: bool) -> std::result::Result<HostModule, String> {
        // SAFETY: the library was built from kiln's kernels (here, or from
        // the same source by the same compiler into the cache); its
        // initializers only set up thread-locals.
        let library = unsafe { libloading::Library::new(&path) }.map_err(|e| e.to_string())?;
        let synchronizes = kernels.iter().map(|k| synchronizes(&k.body)).collect();
        Ok(HostModule { library, synchronizes, path, cached })
    }

    /// Run kernel `index` over `grid` blocks of `block` threads, its
    /// `Globals` pointing at `buffers` (in binding order).
    ///
    /// # Safety
    /// Each buffer must hold every element the kernel reads or writes.
    pub unsafe fn launch(&self, index: usize, buffers: &[*mut u32], grid: [u32; 3], block: [u32; 3]) -> Result<()> {
        let name = format!("kiln_launch_{index}");
        // SAFETY: every kernel's launcher has this signature (`build`).
        let launch = unsafe { self.library.get::<Launch>(name.as_bytes()) }
            .map_err(|e| KilnError::Gpu(format!("host kernel {index}: {e}")))?;
        let fibers = self.synchronizes[index] as i32;
        // SAFETY: the caller vouches for the buffers; grid and block are read.
        match unsafe { launch(buffers.as_ptr(), grid.as_ptr(), block.as_ptr(), fibers) } {
            0 => Ok(()),
            _ => Err(KilnError::Gpu(format!("host kernel {index}: a barrier that not every thread reaches"))),
        }
    }
}

impl Drop for HostModule {
    fn drop(&mut self) {
        if !self.cached {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Kernels per host library: the libraries build in parallel.
const PER_LIBRARY: usize = 32;

/// Kernels built as a few libraries at once (the compiler uses one core).
pub struct HostLibraries(Vec<HostModule>);

impl HostLibraries {
    pub fn build(kernels: &[CudaKernel]) -> Result<HostLibraries> {
        let chunks: Vec<&[CudaKernel]> = kernels.chunks(PER_LIBRARY).collect();
        let next = AtomicUsize::new(0);
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut built: Vec<(usize, Result<HostModule>)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..cores.min(chunks.len()))
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(chunk) = chunks.get(i) else { break };
                            mine.push((i, HostModule::build(chunk)));
                        }
                        mine
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().expect("a host compiler thread panicked")).collect()
        });
        built.sort_by_key(|(i, _)| *i);
        Ok(HostLibraries(built.into_iter().map(|(_, m)| m).collect::<Result<Vec<_>>>()?))
    }

    /// [`HostModule::launch`] of kernel `index` of those built.
    ///
    /// # Safety
    /// As for [`HostModule::launch`].
    pub unsafe fn launch(&self, index: usize, buffers: &[*mut u32], grid: [u32; 3], block: [u32; 3]) -> Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.0[index / PER_LIBRARY].launch(index % PER_LIBRARY, buffers, grid, block) }
    }
}

/// Whether a kernel's body waits at a barrier or exchanges within a warp.
fn synchronizes(body: &str) -> bool {
    ["__sync", "k_shuffle", "k_subgroup"].iter().any(|s| body.contains(s))
}
