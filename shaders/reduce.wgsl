// Deterministic row reduction, one pass of a multi-pass tree.
//
// Generated above this template: the meta block, bindings, `identity()`,
// `merge(a, b)` (the monoid), `take(a, b)` (whether an arg reduction moves
// to b's index), `load(row, r)` (elements r..r+STEP folded), `load_index(row, r)`,
// `store(slot, v, i)`, STEP (1, or 4 when a contiguous prologue is read
// as vec4s) and LANES. Invocation `slot = row * groups + g` folds PER_THREAD
// runs of STEP elements of its row into one partial, in order. With LANES = 1
// they are consecutive: partial g holds elements [g*PER_THREAD*STEP,
// (g+1)*PER_THREAD*STEP), so argmax/argmin partials keep index order. With
// LANES > 1 (plain reductions) each LANES consecutive invocations share a
// span of LANES*PER_THREAD runs, lane l taking runs l, l + LANES, …: one SIMD
// batch of a CPU adapter then reads contiguous memory instead of LANES runs
// far apart, and a GPU's loads coalesce. The last span of a row has fewer
// lanes when groups is not a multiple of LANES, and strides by their number.
// The runtime repeats passes until one partial per row is left. The loop is
// bounded (Mesa silently ends loops after 65,535 iterations) and the order
// is fixed, so a result is bitwise stable from run to run. `combine` keeps
// `a` on ties and `a` holds the lower indices, so argmax/argmin return the
// first extreme.
// Value and index live in two variables, not a struct: naga 30 gives
// structs explicit layouts, which Vulkan forbids outside buffers
// (VUID-StandaloneSpirv-None-10684, wgpu issue 7696).
//
// No workgroup memory: naga 30 decorates workgroup arrays with an explicit
// layout too, and barriers are costly on CPU adapters anyway. A workgroup-tree
// variant for real GPUs waits for the naga fix (unmeasured: no GPU here yet).

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
    var acc = identity();
    var acc_i = 0u;
    for (var k = 0u; k < PER_THREAD; k++) {
        let r = start + k * lanes * STEP;
        if (r < len) {
            let v = load(row, r);
            acc_i = select(acc_i, load_index(row, r), take(acc, v));
            acc = merge(acc, v);
        }
    }
    store(slot, acc, acc_i);
}
