// Deterministic row reduction: the fold of one invocation's runs, shared
// by the two entry points that follow it (reduce_pass.wgsl on CPU
// adapters, reduce_workgroup.wgsl on GPUs).
//
// Generated above this template: the meta block, bindings, the alias `Acc`
// (a value's type), `identity()`, `merge(a, b)` (the monoid), `take(a, b)`
// (whether an arg reduction moves to b's index) and `take_value(a, b)` (the
// same for two values), `load(row, r)` (the STEP elements at r as the
// kernel's unit: a value, or a vec4 folded lane-wise into a vec4
// accumulator), `load_index(row, r)`, `identity_unit()`, `merge_unit(a, b)`,
// `value(acc)` (a unit folded to one value), `fold_span(row, start, &acc_i)`
// (the loop below over a whole span), `store(slot, v, i)`, STEP (1, or 4
// when a contiguous prologue is read as vec4s), LANES, PER_THREAD and
// WHOLE_SPANS (every span of every row is whole, known at launch: the
// loop for the others folds away) and ONE_ROW (a single row, for the entry
// points).
//
// Invocation g of a row folds PER_THREAD runs of STEP elements of its row
// into one partial, in order. With LANES = 1 they are consecutive: partial
// g holds elements [g*PER_THREAD*STEP, (g+1)*PER_THREAD*STEP), so
// argmax/argmin partials keep index order. With LANES > 1 (plain
// reductions) each LANES consecutive invocations share a span of
// LANES*PER_THREAD runs, lane l taking runs l, l + LANES, …: neighbouring
// invocations read neighbouring memory (a CPU adapter's SIMD batch one
// contiguous block, a GPU's warp coalesced loads; `reduce_shape` in
// templates.rs says how many runs and lanes each pass takes, and why).
// The last span of a row has fewer lanes when groups is not a multiple of
// LANES, and strides by their number.
// A span wholly inside the row is folded by `fold_span` in the same order,
// without bounds checks and, where its runs are contiguous, unrolled (CPU
// adapters' compilers do not unroll the loop: a sum's pass ran 15% faster
// on lavapipe, 20% on GL, 6% slower on SwiftShader; docs/BENCHMARKS.md).
// The loop is bounded (Mesa silently ends loops after 65,535 iterations)
// and the order is fixed, so a result is bitwise stable from run to run.
// `take` keeps `a` on ties and `a` holds the lower indices, so
// argmax/argmin return the first extreme.
// Value and index live in two variables, not a struct: naga 30 gives
// structs explicit layouts, which Vulkan forbids outside buffers
// (VUID-StandaloneSpirv-None-10684, wgpu issue 7696).

// Invocation g's partial of `row`, and its index for arg reductions.
fn fold_slot(row: u32, g: u32, groups: u32, len: u32, acc_i: ptr<function, u32>) -> Acc {
    let span = g / LANES;
    let lanes = min(LANES, groups - span * LANES);
    let start = (span * LANES * PER_THREAD + g % LANES) * STEP;
    var acc = identity_unit();
    var i = 0u;
    let whole = WHOLE_SPANS || (lanes == LANES && start + (PER_THREAD - 1u) * LANES * STEP < len);
    if (whole) {
        acc = fold_span(row, start, &i);
    }
    // The other spans: a loop no lane of a whole span enters, not an else
    // branch, which CPU adapters run masked for every SIMD batch (a sum's
    // first pass: 10.0 → 8.1 ms on lavapipe).
    let runs = select(PER_THREAD, 0u, whole);
    for (var k = 0u; k < runs; k++) {
        let r = start + k * lanes * STEP;
        if (r < len) {
            let v = load(row, r);
            i = select(i, load_index(row, r), take(acc, v));
            acc = merge_unit(acc, v);
        }
    }
    *acc_i = i;
    return value(acc);
}
