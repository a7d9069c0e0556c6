//! The conformance suite as a test: every op on every adapter against the
//! CPU reference, under the Vulkan validation layer, then every WGSL source
//! the adapters compiled through naga to SPIR-V (checked by spirv-val where
//! installed), MSL, HLSL and GLSL. Prints "N passed, M failed".

use kiln::core::ir::{BinaryOp, UnaryOp};
use kiln_conformance::golden;
use kiln_conformance::report;

/// Ops outside the unary and binary tables that must each have a case.
const OTHER_OPS: [&str; 31] = [
    "full",
    "zeros",
    "ones",
    "arange",
    "eye",
    "from_slice",
    "empty",
    "where",
    "cast",
    "sum",
    "mean",
    "max",
    "min",
    "prod",
    "argmax",
    "argmin",
    "matmul",
    "reshape",
    "permute",
    "transpose",
    "slice",
    "narrow",
    "expand",
    "unsqueeze",
    "squeeze",
    "flatten",
    "concat",
    "stack",
    "softmax",
    "log_softmax",
    "gather",
];
const INDEXING_OPS: [&str; 2] = ["index_select", "one_hot"];
/// Integer weights: the ops and kiln-nn's quantized layers.
const QUANT_OPS: [&str; 6] =
    ["quantize", "dequantize", "quant_matmul", "quant_matmul_w8a8", "QuantizedLinear", "QuantizedConv2d"];
/// kiln-nn layers, losses and metrics, and `kiln::random`.
const NN_OPS: [&str; 27] = [
    "Linear",
    "RmsNorm",
    "CausalSelfAttention",
    "causal_attention",
    "GeluMlp",
    "Block",
    "Conv2d",
    "MaxPool2d",
    "AvgPool2d",
    "LayerNorm",
    "Embedding",
    "Dropout",
    "Sequential",
    "mlp",
    "cross_entropy",
    "cross_entropy_one_hot",
    "mse",
    "binary_cross_entropy_with_logits",
    "accuracy",
    "init",
    "random_bits",
    "uniform",
    "normal",
    "bernoulli",
    "randint",
    "permutation",
    "threefry",
];
/// Ops of the lists above that have no gradient (constants, integer
/// results); every other op must have a gradient case.
const NOT_DIFFERENTIABLE: [&str; 20] = [
    "quantize",
    "full",
    "zeros",
    "ones",
    "arange",
    "eye",
    "from_slice",
    "empty",
    "argmax",
    "argmin",
    "one_hot",
    "accuracy",
    "init",
    "random_bits",
    "uniform",
    "normal",
    "bernoulli",
    "randint",
    "permutation",
    "threefry",
];

/// Whether SPIRV-Tools' validator runs here; without it the SPIR-V checks
/// are reported skipped, or fail the suite where the run requires
/// `spirv-val` (scripts/test does).
fn spirv_val_found() -> bool {
    match std::process::Command::new("spirv-val").arg("--version").output() {
        Ok(out) if out.status.success() => true,
        Ok(out) => {
            kiln_conformance::require::skip("spirv-val", &format!("spirv-val --version failed: {}", out.status));
            false
        }
        Err(e) => {
            kiln_conformance::require::skip("spirv-val", &format!("spirv-val (SPIRV-Tools) not found: {e}"));
            false
        }
    }
}

/// `env`: vulkan1.0, or vulkan1.1 for kernels with subgroup operations
/// (SPIR-V 1.3, as `translate_all` and wgpu emit them).
fn spirv_val(words: &[u32], env: &str) -> Result<(), String> {
    let path = std::env::temp_dir().join(format!("kiln-{}.spv", std::process::id()));
    std::fs::write(&path, bytemuck_words(words)).map_err(|e| format!("{}: {e}", path.display()))?;
    let out = std::process::Command::new("spirv-val").arg("--target-env").arg(env).arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let out = out.map_err(|e| format!("spirv-val: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

fn bytemuck_words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn main() {
    // `KILN_CONFORMANCE_ONLY=op` runs the cases of the ops whose name holds
    // `op` (a quick check by hand); the coverage checks below then stay off.
    let only = std::env::var("KILN_CONFORMANCE_ONLY").ok();
    let run = pollster::block_on(report::run(only.as_deref()));
    let mut failures = run.failures();

    let required = UnaryOp::ALL.iter().map(|o| o.name()).chain(BinaryOp::ALL.iter().map(|o| o.name()));
    let every_op = required.chain(OTHER_OPS).chain(INDEXING_OPS).chain(NN_OPS).chain(QUANT_OPS);
    for op in every_op.filter(|_| only.is_none()) {
        if !run.rows.iter().any(|r| r.0 == op) {
            failures.push(format!("op {op} has no conformance case"));
        }
    }
    let float_unary = UnaryOp::ALL.iter().filter(|o| **o != UnaryOp::Not).map(|o| o.name());
    let arithmetic =
        BinaryOp::ALL.iter().filter(|o| !o.is_comparison() && !o.is_logical() && !o.is_bitwise()).map(|o| o.name());
    let others = OTHER_OPS
        .into_iter()
        .chain(INDEXING_OPS)
        .chain(NN_OPS)
        .chain(QUANT_OPS)
        .filter(|op| !NOT_DIFFERENTIABLE.contains(op));
    for op in float_unary.chain(arithmetic).chain(others).filter(|_| only.is_none()) {
        if !run.grads.iter().any(|r| r.op == op) {
            failures.push(format!("differentiable op {op} has no gradient case"));
        }
    }
    for (_, msgs) in &run.messages {
        failures.extend(msgs.iter().map(|m| format!("validation layer: {m}")));
    }

    let run_spirv_val = spirv_val_found();
    let mut spirv_checked = 0;
    for source in &run.sources {
        // Browsers' WGSL compilers (Tint) reject non-finite constant
        // expressions that naga accepts: kernels build such values with
        // f32_bits(), a runtime call, never bitcast<f32>(<literal>).
        let const_bitcast = source
            .match_indices("bitcast<f32>(")
            .any(|(i, m)| source[i + m.len()..].starts_with(|c: char| c.is_ascii_digit()));
        if const_bitcast {
            failures.push(format!("a kernel bitcasts a constant to f32 (use f32_bits):\n{source}"));
        }
        match kiln_codegen::validate::translate_all(source) {
            Err(e) => failures.push(format!("translation failed: {e}")),
            Ok(_) if !run_spirv_val => {}
            Ok(t) => match spirv_val(&t.spirv, if source.contains("subgroup") { "vulkan1.1" } else { "vulkan1.0" }) {
                Err(e) => failures.push(format!("spirv-val rejected a kernel: {e}\n{source}")),
                Ok(()) => spirv_checked += 1,
            },
        }
    }

    // The kernels of every case, compared with the golden set of the
    // adapter's capabilities (see `golden`); a filtered run has fewer.
    let adapters = run.adapters.iter().zip(&run.sources_by_adapter).filter(|_| only.is_none());
    for ((label, info), (_, sources)) in adapters {
        match golden::verdict("conformance", &golden::caps_key(&info.caps), sources) {
            Ok(line) => println!("{line} ({label})"),
            Err(failure) => failures.push(format!("{label}: {failure}")),
        }
    }

    if run.adapters.is_empty() {
        failures.push("no adapter was found: no op ran on an adapter (scripts/setup installs Mesa's)".into());
    }
    println!("{}", run.validation);
    for (label, _) in &run.adapters {
        println!("adapter: {label}");
    }
    for skip in &run.skipped {
        println!("skipped adapter: {skip}");
    }
    println!("{} kernels translated to SPIR-V/MSL/HLSL/GLSL, {spirv_checked} checked by spirv-val", run.sources.len());
    for f in &failures {
        println!("FAIL {f}");
    }
    let (grad_passed, grad_failed) = run.grad_counts();
    println!("gradient checks (finite differences and adapters): {grad_passed} passed, {grad_failed} failed");
    let (passed, failed) = run.counts();
    let (batch_passed, batch_failed) = kiln_conformance::batch_check::counts(&run.batching);
    println!("batching checks (vmap, CPU reference and adapters): {batch_passed} passed, {batch_failed} failed");
    let (vg_passed, vg_failed) = kiln_conformance::batch_check::counts(&run.batched_grads);
    println!(
        "per-example gradient checks (vmap of grad, CPU reference and adapters): {vg_passed} passed, {vg_failed} failed"
    );
    let (vc_passed, vc_failed) = kiln_conformance::batch_check::counts(&run.compositions);
    println!("vmap compositions (CPU reference and adapters): {vc_passed} passed, {vc_failed} failed");
    let extra = failures.len() - run.failures().len();
    println!("{} passed, {} failed", passed + grad_passed, failed + grad_failed + extra);
    if !failures.is_empty() {
        std::process::exit(1);
    }
}
