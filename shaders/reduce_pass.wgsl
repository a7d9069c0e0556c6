// The entry point of a reduce pass on CPU adapters (after reduce.wgsl):
// invocation `slot = row * groups + g` stores its partial at `slot`. No
// workgroup memory: barriers are costly on CPU adapters (a 16×16 tiled
// matmul ran at half the speed of a naive one on lavapipe), so the runtime
// repeats passes until one partial per row is left.

@compute @workgroup_size(REDUCE_WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let rows = m(0u);
    let len = m(1u);
    let groups = m(2u);
    let slot = gid.y * m(3u) + gid.x;
    if (slot >= rows * groups) {
        return;
    }
    let row = slot / groups;
    var i = 0u;
    let v = fold_slot(row, slot % groups, groups, len, &i);
    store(slot, v, i);
}
