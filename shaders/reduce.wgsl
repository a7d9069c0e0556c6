// Deterministic row reduction, one pass of a multi-pass tree.
//
// Generated above this template: the meta block, bindings, `struct Acc`,
// `identity()`, `combine(a, b)`, `load(row, r)` and `store(slot, acc)`.
// Workgroup `slot = row * groups + g` reduces elements [g*CHUNK, (g+1)*CHUNK)
// of its row into one partial. Each invocation folds PER_THREAD consecutive
// elements (a bounded loop: Mesa silently ends loops after 65,535
// iterations), then the workgroup combines its 256 partials in a fixed tree,
// so a result is bitwise stable from run to run. `combine` keeps `a` on ties,
// and `a` always holds the lower indices, so argmax/argmin return the first.

const PER_THREAD: u32 = 16u;
const CHUNK: u32 = 4096u;

var<workgroup> tree: array<Acc, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let rows = m(0u);
    let len = m(1u);
    let groups = m(2u);
    let slot = wg.y * m(3u) + wg.x;
    let valid = slot < rows * groups;
    let row = slot / groups;
    let start = (slot % groups) * CHUNK + li * PER_THREAD;
    var acc = identity();
    for (var k = 0u; k < PER_THREAD; k++) {
        let r = start + k;
        if (valid && r < len) {
            acc = combine(acc, load(row, r));
        }
    }
    tree[li] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (li < s) {
            tree[li] = combine(tree[li], tree[li + s]);
        }
        workgroupBarrier();
    }
    if (li == 0u && valid) {
        store(slot, tree[0]);
    }
}
