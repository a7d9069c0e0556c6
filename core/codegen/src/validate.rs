//! naga validation of WGSL, and translation to every backend language, so
//! that the Metal, DX12 and GL paths we cannot run here at least compile.

use kiln_ir::error::{KilnError, Result};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

/// Parse and validate a WGSL source; the error carries the source.
pub fn validate_wgsl(source: &str) -> Result<(naga::Module, ModuleInfo)> {
    let fail = |message: String| KilnError::Shader { message, wgsl: source.to_string() };
    let module = naga::front::wgsl::parse_str(source).map_err(|e| fail(e.emit_to_string(source)))?;
    // pack2x16float/unpack2x16float (f16 storage) need this capability in
    // naga; wgpu grants it on every backend kiln targets. Subgroup and f16
    // kernels are only compiled where the device has the feature.
    let caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32 | Capabilities::SUBGROUP | Capabilities::SHADER_FLOAT16;
    let info =
        Validator::new(ValidationFlags::all(), caps).validate(&module).map_err(|e| fail(e.emit_to_string(source)))?;
    Ok((module, info))
}

/// Translations of one kernel to the other shading languages.
#[cfg(feature = "translate")]
#[derive(Debug)]
pub struct Translations {
    pub spirv: Vec<u32>,
    pub msl: String,
    pub hlsl: String,
    /// None for kernels computing f16 (`enable f16;`): GLSL ES 3.1 has no
    /// f16, and wgpu's GL backend offers no `shader-f16`.
    pub glsl: Option<String>,
}

/// Validate `source` and translate its `main` entry point to SPIR-V (as
/// [`crate::spirv::for_vulkan`] writes it), MSL,
/// HLSL and GLSL (ES 3.1 compute, what wgpu's GL backend emits; not for
/// kernels computing f16). With the `translate` feature.
#[cfg(feature = "translate")]
pub fn translate_all(source: &str) -> Result<Translations> {
    use naga::back::{glsl, hlsl, msl};
    let (module, info) = validate_wgsl(source)?;
    let fail = |lang: &str, e: String| KilnError::Shader { message: format!("{lang}: {e}"), wgsl: source.to_string() };
    // What kiln hands Vulkan for kernels with workgroup memory; wgpu
    // translates the others itself, with options of its own.
    let spirv = crate::spirv::for_vulkan(&module, &info, source)?;
    let (msl, _) = msl::write_string(&module, &info, &msl::Options::default(), &msl::PipelineOptions::default())
        .map_err(|e| fail("MSL", e.to_string()))?;
    let mut hlsl = String::new();
    hlsl::Writer::new(&mut hlsl, &hlsl::Options::default(), &hlsl::PipelineOptions::default())
        .write(&module, &info, None)
        .map_err(|e| fail("HLSL", e.to_string()))?;
    let glsl = if source.contains("enable f16;") {
        None
    } else {
        let mut glsl = String::new();
        let options = glsl::Options { version: glsl::Version::new_gles(310), ..Default::default() };
        let pipeline = glsl::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: "main".into(),
            multiview: None,
        };
        glsl::Writer::new(&mut glsl, &module, &info, &options, &pipeline, naga::proc::BoundsCheckPolicies::default())
            .and_then(|mut w| w.write())
            .map_err(|e| fail("GLSL", e.to_string()))?;
        Some(glsl)
    };
    Ok(Translations { spirv, msl, hlsl, glsl })
}
