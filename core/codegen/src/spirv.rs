//! The SPIR-V kiln hands to Vulkan itself, for kernels with workgroup
//! memory. naga 30 decorates every array and struct type with an explicit
//! layout (`ArrayStride`, `Offset`, …), which Vulkan forbids on the types of
//! Workgroup variables (VUID-StandaloneSpirv-None-10684): Intel's and Mesa's
//! drivers run such modules, Qualcomm's Adreno rejects them. wgpu 30 has no
//! option to leave the decorations out (upstream fix pending,
//! gfx-rs/wgpu#9295), so kiln writes the SPIR-V with naga, with wgpu's own
//! safety options, drops those decorations, and passes the words through
//! (`runtime/pipelines.rs`).

use kiln_ir::error::{KilnError, Result};
use naga::back::spv;
use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
use naga::valid::ModuleInfo;
use std::collections::{HashMap, HashSet};

const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
const OP_TYPE_STRUCT: u32 = 30;
const OP_TYPE_POINTER: u32 = 32;
const OP_DECORATE: u32 = 71;
#[cfg(test)]
const OP_VARIABLE: u32 = 59;
const OP_MEMBER_DECORATE: u32 = 72;
const STORAGE_WORKGROUP: u32 = 4;
const ARRAY_STRIDE: u32 = 6;
/// RowMajor, ColMajor, MatrixStride, Offset.
const MEMBER_LAYOUT: [u32; 4] = [4, 5, 7, 35];
/// Words before the first instruction.
const HEADER_WORDS: usize = 5;

/// Whether `module` declares workgroup memory.
pub fn uses_workgroup_memory(module: &naga::Module) -> bool {
    module.global_variables.iter().any(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
}

/// `module` as SPIR-V for Vulkan, with the checks wgpu itself asks naga for
/// (indices clamped, loops bounded, integer division checked) and without
/// layout decorations on workgroup types. `source` names the kernel in an
/// error. WGSL promises zeroed workgroup memory; this SPIR-V does not zero
/// it, because kiln's kernels write it before they read it (the staged
/// matmul's slices, the row lanes' partials), and naga's zeroing made
/// lavapipe compile a matmul with two 2048-float tiles for over a minute
/// (a benchmark of it ran 93 s with the zeroing, 6.6 s without).
pub fn for_vulkan(module: &naga::Module, info: &ModuleInfo, source: &str) -> Result<Vec<u32>> {
    let words = spv::write_vec(module, info, &options(source), None)
        .map_err(|e| KilnError::Shader { message: format!("SPIR-V: {e}"), wgsl: source.to_string() })?;
    Ok(without_workgroup_layouts(&words))
}

fn options(source: &str) -> spv::Options<'static> {
    spv::Options {
        // Subgroup operations need SPIR-V 1.3 (Vulkan 1.1), as wgpu emits them.
        lang_version: if source.contains("subgroup") { (1, 3) } else { (1, 0) },
        bounds_check_policies: BoundsCheckPolicies {
            index: BoundsCheckPolicy::Restrict,
            buffer: BoundsCheckPolicy::Restrict,
            image_load: BoundsCheckPolicy::Restrict,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: true,
        emit_int_div_checks: true,
        ..Default::default()
    }
}

/// The instructions after the header, each with all its words.
fn instructions(words: &[u32]) -> impl Iterator<Item = &[u32]> {
    let mut rest = words.get(HEADER_WORDS..).unwrap_or_default();
    std::iter::from_fn(move || {
        let count = (*rest.first()? >> 16) as usize;
        let (inst, tail) = rest.split_at(count.clamp(1, rest.len()));
        rest = tail;
        Some(inst)
    })
}

/// An instruction's opcode and operand words.
fn split(inst: &[u32]) -> (u32, &[u32]) {
    (inst[0] & 0xffff, &inst[1..])
}

/// `words` less the layout decorations of the types only Workgroup
/// pointers reach. A type other storage classes also reach keeps its
/// layout, which they need (kiln's kernels share none).
pub fn without_workgroup_layouts(words: &[u32]) -> Vec<u32> {
    let mut parts: HashMap<u32, Vec<u32>> = HashMap::new();
    let (mut workgroup, mut other) = (Vec::new(), Vec::new());
    for (op, args) in instructions(words).map(split) {
        match op {
            OP_TYPE_ARRAY | OP_TYPE_RUNTIME_ARRAY if args.len() >= 2 => {
                parts.insert(args[0], vec![args[1]]);
            }
            OP_TYPE_STRUCT if !args.is_empty() => {
                parts.insert(args[0], args[1..].to_vec());
            }
            OP_TYPE_POINTER if args.len() == 3 => {
                if args[1] == STORAGE_WORKGROUP { &mut workgroup } else { &mut other }.push(args[2]);
            }
            _ => {}
        }
    }
    let reached = |roots: Vec<u32>| {
        let mut seen = HashSet::new();
        let mut todo = roots;
        while let Some(t) = todo.pop() {
            if seen.insert(t) {
                todo.extend(parts.get(&t).into_iter().flatten());
            }
        }
        seen
    };
    let elsewhere = reached(other);
    let strip: HashSet<u32> = reached(workgroup).into_iter().filter(|t| !elsewhere.contains(t)).collect();
    let mut out = words[..HEADER_WORDS.min(words.len())].to_vec();
    for inst in instructions(words) {
        let layout = match split(inst) {
            (OP_DECORATE, args) => args.len() >= 2 && strip.contains(&args[0]) && args[1] == ARRAY_STRIDE,
            (OP_MEMBER_DECORATE, args) => {
                args.len() >= 3 && strip.contains(&args[0]) && MEMBER_LAYOUT.contains(&args[2])
            }
            _ => false,
        };
        if !layout {
            out.extend_from_slice(inst);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (target, decoration) of every ArrayStride and member layout decoration.
    fn layouts(words: &[u32]) -> Vec<(u32, u32)> {
        instructions(words)
            .map(split)
            .filter_map(|(op, a)| match op {
                OP_DECORATE if a[1] == ARRAY_STRIDE => Some((a[0], a[1])),
                OP_MEMBER_DECORATE if MEMBER_LAYOUT.contains(&a[2]) => Some((a[0], a[2])),
                _ => None,
            })
            .collect()
    }

    /// The types of the Workgroup variables.
    fn workgroup_variable_types(words: &[u32]) -> Vec<u32> {
        let pointee: HashMap<u32, u32> = instructions(words)
            .map(split)
            .filter(|(op, _)| *op == OP_TYPE_POINTER)
            .map(|(_, a)| (a[0], a[2]))
            .collect();
        instructions(words)
            .map(split)
            .filter(|(op, a)| *op == OP_VARIABLE && a[2] == STORAGE_WORKGROUP)
            .map(|(_, a)| pointee[&a[0]])
            .collect()
    }

    fn spirv(source: &str) -> (Vec<u32>, Vec<u32>) {
        let (module, info) = crate::validate::validate_wgsl(source).unwrap();
        let raw = spv::write_vec(&module, &info, &options(source), None).unwrap();
        (raw, for_vulkan(&module, &info, source).unwrap())
    }

    const KERNEL: &str = "
struct Pair { a: vec4<f32>, b: array<f32, 4> }
@group(0) @binding(0) var<uniform> params: array<vec4<u32>, 4>;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;
var<workgroup> tile: array<vec4<f32>, 64>;
var<workgroup> pairs: array<Pair, 8>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) l: u32) {
    tile[l] = vec4<f32>(f32(params[0].x));
    pairs[l % 8u].b[l % 4u] = 1.0;
    workgroupBarrier();
    out[l] = tile[63u - l] + vec4<f32>(pairs[l % 8u].b[0]);
}
";

    #[test]
    fn workgroup_types_lose_their_layout_and_buffers_keep_theirs() {
        let (raw, words) = spirv(KERNEL);
        let wg = workgroup_variable_types(&words);
        assert_eq!(wg.len(), 2, "two workgroup variables");
        assert!(layouts(&raw).iter().any(|(t, _)| wg.contains(t)), "naga decorates the workgroup types");
        // Nothing a workgroup variable's type contains keeps a layout; the
        // uniform array, the storage array and its Block struct keep theirs.
        let left = layouts(&words);
        assert!(left.iter().all(|(t, _)| !wg.contains(t)), "{left:?}");
        // tile's and pairs' strides, Pair's two member offsets, Pair.b's stride.
        assert_eq!(left.len() + 5, layouts(&raw).len(), "{left:?}");
        assert_eq!(words.len() + 3 * 4 + 2 * 5, raw.len(), "four words per stride, five per offset");
    }

    #[test]
    fn a_kernel_without_workgroup_memory_is_unchanged() {
        let src = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(1) fn main() { out[0] = 1.0; }";
        let (module, info) = crate::validate::validate_wgsl(src).unwrap();
        assert!(!uses_workgroup_memory(&module));
        let words = for_vulkan(&module, &info, src).unwrap();
        assert_eq!(without_workgroup_layouts(&words), words);
    }
}
