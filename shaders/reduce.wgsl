// Deterministic row reduction, one pass of a multi-pass tree.
//
// Generated above this template: the meta block, bindings, `identity()`,
// `merge(a, b)` (the monoid), `take(a, b)` (whether an arg reduction moves
// to b's index), `load(row, r)` (the STEP elements at r as the kernel's
// unit: a value, or a vec4 folded lane-wise into a vec4 accumulator),
// `load_index(row, r)`, `identity_unit()`, `merge_unit(a, b)`, `value(acc)`
// (a unit folded to one value), `fold_span(row, start, &acc_i)` (the loop
// below over a whole span), `store(slot, v, i)`, STEP (1, or 4 when a
// contiguous prologue is read as vec4s) and LANES.
//
// Invocation `slot = row * groups + g` folds PER_THREAD runs of STEP
// elements of its row into one partial, in order. With LANES = 1 they are
// consecutive: partial g holds elements [g*PER_THREAD*STEP,
// (g+1)*PER_THREAD*STEP), so argmax/argmin partials keep index order. With
// LANES > 1 (plain reductions) each LANES consecutive invocations share a
// span of LANES*PER_THREAD runs, lane l taking runs l, l + LANES, …: one SIMD
// batch of a CPU adapter then reads contiguous memory instead of LANES runs
// far apart, and a GPU's loads coalesce. The last span of a row has fewer
// lanes when groups is not a multiple of LANES, and strides by their number.
// A span wholly inside the row is folded by `fold_span` in the same order,
// without bounds checks and, where its runs are contiguous, unrolled (CPU
// adapters' compilers do not unroll the loop: a sum's pass ran 15% faster
// on lavapipe, 20% on GL, 6% slower on SwiftShader; docs/BENCHMARKS.md).
// The runtime repeats passes until one partial per row is left. The loop is
// bounded (Mesa silently ends loops after 65,535 iterations) and the order
// is fixed, so a result is bitwise stable from run to run. `take` keeps
// `a` on ties and `a` holds the lower indices, so argmax/argmin return the
// first extreme.
// Value and index live in two variables, not a struct: naga 30 gives
// structs explicit layouts, which Vulkan forbids outside buffers
// (VUID-StandaloneSpirv-None-10684, wgpu issue 7696).
//
// No workgroup memory: barriers are costly on CPU adapters. Workgroup memory
// now runs on every backend (on Vulkan through kiln's own SPIR-V), so a pass
// that combines a workgroup's partials in it, for fewer passes on GPUs, could
// be added; it would have to keep this order to give the same bits. Not
// written: no GPU here to measure what it gains.

const PER_THREAD: u32 = 64u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let rows = m(0u);
    let len = m(1u);
    let groups = m(2u);
    let slot = gid.y * m(3u) + gid.x;
    if (slot >= rows * groups) {
        return;
    }
    let row = slot / groups;
    let g = slot % groups;
    let span = g / LANES;
    let lanes = min(LANES, groups - span * LANES);
    let start = (span * LANES * PER_THREAD + g % LANES) * STEP;
    var acc = identity_unit();
    var acc_i = 0u;
    if (lanes == LANES && start + (PER_THREAD - 1u) * LANES * STEP < len) {
        acc = fold_span(row, start, &acc_i);
    } else {
        for (var k = 0u; k < PER_THREAD; k++) {
            let r = start + k * lanes * STEP;
            if (r < len) {
                let v = load(row, r);
                acc_i = select(acc_i, load_index(row, r), take(acc, v));
                acc = merge_unit(acc, v);
            }
        }
    }
    store(slot, value(acc), acc_i);
}
