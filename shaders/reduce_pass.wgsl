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
    // Invocations past the last slot redo it and store the same value: no
    // early return, which leaves every later load masked lane by lane on
    // CPU adapters.
    let slot = min(gid.y * m(3u) + gid.x, rows * groups - 1u);
    // One row needs no division (one per lane on CPU adapters, which have
    // no vector integer division).
    let row = select(slot / groups, 0u, ONE_ROW);
    let g = select(slot % groups, slot, ONE_ROW);
    var i = 0u;
    let v = fold_slot(row, g, groups, len, &i);
    store(slot, v, i);
}
