//! ptxas, CUDA's PTX assembler: PTX to machine code for one GPU
//! architecture. It needs no GPU, so it checks kiln's kernels on any
//! machine. Found as env `KILN_PTXAS`, else `ptxas` on `PATH` (the CUDA
//! toolkit's, or PyPI's `nvidia-cuda-nvcc`: `site-packages/nvidia/cu13/bin`).

use kiln_ir::error::{KilnError, Result};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The ptxas to run; an error saying how to get one.
pub fn find() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KILN_PTXAS") {
        return Ok(p.into());
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("ptxas")).find(|p| p.is_file()));
    on_path.ok_or_else(|| KilnError::Unavailable {
        what: "ptxas (CUDA's PTX assembler)",
        detail: "install the CUDA 13 toolkit, or `pip install nvidia-cuda-nvcc` and add its \
                 site-packages/nvidia/cu13/bin to PATH (or name it in KILN_PTXAS)"
            .into(),
    })
}

/// Assemble `ptx` for `sm_{arch}`, treating any warning as an error.
pub fn assemble(ptx: &str, arch: u32) -> Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let ptxas = find()?;
    let stem = format!("kiln-ptxas-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let dir = std::env::temp_dir();
    let (input, output) = (dir.join(format!("{stem}.ptx")), dir.join(format!("{stem}.cubin")));
    let fail = |log: String| KilnError::CudaCompile { compiler: "ptxas", log, code: ptx.to_string() };
    std::fs::write(&input, ptx).map_err(|e| fail(format!("{}: {e}", input.display())))?;
    let run = Command::new(&ptxas)
        .arg(format!("-arch=sm_{arch}"))
        .arg("--warning-as-error")
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .output();
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    let out = run.map_err(|e| fail(format!("{}: {e}", ptxas.display())))?;
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if out.status.success() && said.is_empty() { Ok(()) } else { Err(fail(said)) }
}
