//! NVRTC, CUDA's run-time compiler: CUDA C++ to PTX for a virtual
//! architecture. `libnvrtc.so.13` comes with the CUDA 13 toolkit, or from
//! PyPI (`nvidia-cuda-nvrtc`, whose `nvidia/cu13/lib` must then be on
//! `LD_LIBRARY_PATH`).

use cudarc::nvrtc::{result, sys};
use kiln_ir::error::{KilnError, Result};
use std::ffi::CString;

/// A kernel compiled to PTX, and what NVRTC said (empty when clean).
#[derive(Debug, Clone)]
pub struct Compiled {
    pub ptx: String,
    pub log: String,
}

/// Whether NVRTC can be loaded; the error says how to get it.
pub fn available() -> Result<()> {
    // SAFETY: only tries to dlopen the library's candidate names.
    if unsafe { sys::is_culib_present() } {
        return Ok(());
    }
    Err(KilnError::Unavailable {
        what: "NVRTC (libnvrtc.so.13, CUDA's run-time compiler)",
        detail: "install the CUDA 13 toolkit, or `pip install nvidia-cuda-nvrtc` and add its \
                 site-packages/nvidia/cu13/lib to LD_LIBRARY_PATH"
            .into(),
    })
}

/// NVRTC's version, as "13.0".
pub fn version() -> Result<String> {
    available()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| KilnError::Unavailable { what: "NVRTC's version", detail: e.to_string() })?;
    Ok(format!("{major}.{minor}"))
}

/// `source` (CUDA C++) compiled to PTX for `compute_{arch}` (80: Ampere).
pub fn compile(source: &str, arch: u32) -> Result<Compiled> {
    available()?;
    let fail = |log: String| KilnError::CudaCompile { compiler: "NVRTC", log, code: source.to_string() };
    let text = CString::new(source).map_err(|e| fail(e.to_string()))?;
    let prog = result::create_program(&text, Some(c"kiln.cu")).map_err(|e| fail(e.to_string()))?;
    let options = [format!("--gpu-architecture=compute_{arch}"), "--std=c++17".to_string()];
    // SAFETY: `prog` was just created and is destroyed once, below.
    let compiled = unsafe { result::compile_program(prog, &options) };
    let log = unsafe { result::get_program_log(prog) }.map(|l| c_text(&l)).unwrap_or_default();
    let ptx = compiled.and_then(|()| unsafe { result::get_ptx(prog) }).map(|p| c_text(&p));
    // SAFETY: as above; nothing reads `prog` after this.
    unsafe { result::destroy_program(prog) }.map_err(|e| fail(e.to_string()))?;
    match ptx {
        Ok(ptx) => Ok(Compiled { ptx, log: log.trim().to_string() }),
        Err(e) => Err(fail(format!("{e}: {log}"))),
    }
}

/// A NUL-terminated C string NVRTC wrote, as text.
fn c_text(chars: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
