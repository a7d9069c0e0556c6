//! The kernels a CUDA device would run for the conformance suite, the
//! gradient checks, the fusion tests and both MNIST training steps: each
//! graph is built on the CPU reference and its schedule rendered for a
//! CUDA device (`cuda_kernels_for`) with no GPU at hand. The CUDA checks
//! compile these.

use crate::{cases, grad_cases};
use kiln::core::codegen::KernelKey;
use kiln::core::codegen::cuda::{self, CudaKernel};
use kiln::core::cuda_kernels_for;
use kiln::prelude::*;
use std::collections::BTreeMap;

/// Distinct kernels by their WGSL, with the first case that made each.
#[derive(Default)]
pub struct Collected {
    pub kernels: BTreeMap<String, (KernelKey, String)>,
    /// Cases whose graph could not be scheduled, with why.
    pub failures: Vec<String>,
}

impl Collected {
    fn add(&mut self, case: String, roots: Result<Vec<Tensor>>) {
        let nodes = match roots {
            Ok(ts) => ts.iter().map(|t| t.node().clone()).collect::<Vec<_>>(),
            // Cases that check an error are not scheduled at all.
            Err(_) => return,
        };
        match cuda_kernels_for(&nodes) {
            Ok(keys) => {
                for k in keys {
                    self.kernels.entry(k.wgsl()).or_insert_with(|| (k, case.clone()));
                }
            }
            Err(e) => self.failures.push(format!("{case}: {e}")),
        }
    }
}

/// Every case's kernels for a CUDA device.
pub fn collect() -> Collected {
    let cpu = Device::cpu();
    let mut out = Collected::default();
    for c in cases::all() {
        out.add(format!("{} ({})", c.op, c.detail), (c.build)(&cpu).map(|t| vec![t]));
    }
    for c in grad_cases::all() {
        let name = format!("grad {} ({})", c.op, c.detail);
        out.add(name, gradients(&cpu, &c));
    }
    for kind in [kiln_mnist::ModelKind::Mlp, kiln_mnist::ModelKind::Cnn] {
        out.add(format!("MNIST {} step", kind.name()), mnist_step(&cpu, kind));
    }
    out
}

/// The value and gradients of a gradient case's output against its
/// fixed cotangent.
pub fn gradients(dev: &Device, c: &grad_cases::GradCase) -> Result<Vec<Tensor>> {
    let primals = c.primals(dev)?;
    let out = (c.f)(&primals)?;
    let cot = grad_cases::cotangent(dev, out.shape(), out.dtype())?;
    let f = |p: &Vec<Tensor>| (c.f)(p)?.mul(&cot)?.sum(&[], false);
    let (value, grads) = kiln::value_and_grad(f)(&primals)?;
    Ok([vec![value], grads].concat())
}

/// One training step of the demo's model of `kind` on a batch of 32:
/// the loss, its gradients and an Adam update.
fn mnist_step(dev: &Device, kind: kiln_mnist::ModelKind) -> Result<Vec<Tensor>> {
    use kiln_nn::optim::{Transform, adam, apply_updates};
    let model = kind.build(dev, Key::new(3))?;
    let batch = 32;
    let image: Vec<usize> = match kind {
        kiln_mnist::ModelKind::Mlp => vec![batch, 784],
        kiln_mnist::ModelKind::Cnn => vec![batch, 1, 28, 28],
    };
    let x = cases::input(dev, 5, &image, DType::F32, 0.0, 1.0)?;
    let labels = cases::input(dev, 6, &[batch], DType::I32, 0.0, 9.0)?;
    let loss = |p: &kiln_nn::Sequential| kiln_nn::loss::cross_entropy(&p.forward(&x)?, &labels);
    let (value, grads) = kiln::value_and_grad(loss)(&model)?;
    let opt = adam(1e-3, 0.9, 0.999, 1e-8);
    let (updates, state) = opt.update(&grads, &opt.init(&model)?, Some(&model))?;
    Ok([vec![value], apply_updates(&model, &updates)?.leaves(), state.leaves()].concat())
}

/// Kernels per NVRTC program: NVRTC then parses the prelude once per
/// batch, not once per kernel.
pub const BATCH: usize = 24;

/// Whether NVRTC and ptxas are here. Without them the CUDA compile checks
/// are skipped by name, unless the run requires `nvrtc` (`KILN_REQUIRE`;
/// scripts/test sets it), which makes their absence a failure.
pub fn cuda_tools() -> bool {
    let found = kiln_cuda::nvrtc::available().and_then(|()| kiln_cuda::ptxas::find().map(drop));
    match found {
        Ok(()) => true,
        Err(e) => {
            kiln_require::skip("nvrtc", &e.to_string());
            false
        }
    }
}

/// Kernels NVRTC and ptxas accepted cleanly before, kept as one empty file
/// per kernel in the folder env `KILN_CUDA_VERDICTS` names (scripts/test
/// keeps it beside Cargo's build directory), keyed by the kernel's source,
/// the architectures and both compilers' versions, so a kernel already
/// found clean by these compilers is not compiled again (ccache's idea).
/// Only clean verdicts are kept; without the variable nothing is.
struct Verdicts {
    dir: std::path::PathBuf,
    /// The compilers and architectures, part of every key.
    salt: String,
}

impl Verdicts {
    fn open() -> Option<&'static Verdicts> {
        static VERDICTS: std::sync::OnceLock<Option<Verdicts>> = std::sync::OnceLock::new();
        VERDICTS
            .get_or_init(|| {
                let dir = std::path::PathBuf::from(std::env::var_os("KILN_CUDA_VERDICTS")?);
                std::fs::create_dir_all(&dir).ok()?;
                let nvrtc = kiln_cuda::nvrtc::version().ok()?;
                let ptxas = kiln_cuda::ptxas::find().ok()?;
                let said = std::process::Command::new(&ptxas).arg("--version").output().ok()?;
                let ptxas = String::from_utf8_lossy(&said.stdout).into_owned();
                Some(Verdicts { dir, salt: format!("nvrtc {nvrtc}\n{ptxas}\narchs {:?}\n", kiln_cuda::ARCHS) })
            })
            .as_ref()
    }

    fn file(&self, kernel: &CudaKernel) -> std::path::PathBuf {
        let text = format!("{}{:?}{}", self.salt, kernel.workgroup_size, kernel.source());
        self.dir.join(crate::golden::fnv1a(&text))
    }

    fn clean(&self, kernel: &CudaKernel) -> bool {
        self.file(kernel).exists()
    }

    fn record_clean(&self, kernels: &[&CudaKernel]) {
        for k in kernels {
            let _ = std::fs::write(self.file(k), "");
        }
    }
}

/// How many kernels [`compile`] skipped as clean before, this process.
pub static SKIPPED_AS_CLEAN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What NVRTC and ptxas said of `kernels` compiled as one program for
/// each architecture kiln targets, if anything: a warning fails too.
/// Kernels the verdict cache knows clean are left out (`Verdicts`, env `KILN_CUDA_VERDICTS`).
pub fn compile(kernels: &[CudaKernel]) -> Option<String> {
    let verdicts = Verdicts::open();
    let fresh: Vec<&CudaKernel> = kernels.iter().filter(|k| !verdicts.is_some_and(|v| v.clean(k))).collect();
    SKIPPED_AS_CLEAN.fetch_add(kernels.len() - fresh.len(), std::sync::atomic::Ordering::Relaxed);
    if fresh.is_empty() {
        return None;
    }
    let fresh_kernels: Vec<CudaKernel> = fresh.iter().map(|&k| k.clone()).collect();
    let complaint = compile_all(&fresh_kernels);
    if let (None, Some(v)) = (&complaint, verdicts) {
        v.record_clean(&fresh);
    }
    complaint
}

fn compile_all(kernels: &[CudaKernel]) -> Option<String> {
    let source = cuda::batch(kernels);
    for arch in kiln_cuda::ARCHS {
        match kiln_cuda::nvrtc::compile(&source, arch) {
            Ok(c) if !c.log.is_empty() => return Some(format!("NVRTC warned for compute_{arch}: {}", c.log)),
            Ok(c) => {
                if let Err(e) = kiln_cuda::ptxas::assemble(&c.ptx, arch) {
                    return Some(e.to_string());
                }
            }
            Err(e) => return Some(e.to_string()),
        }
    }
    None
}
