// The first pass of a reduction over columns: rows whose elements lie a
// stride apart in memory while neighbouring rows' lie together (the
// reduced axes outside a kept one: a bias's gradient, a sum over a batch).
// Generated above this entry point: the meta block, bindings, the alias
// `Acc`, the monoid, STEP (1, or 4 when four neighbouring rows are read as
// vec4s), `fold_column(row, start, end, &acc_i)` (one chunk of STEP rows,
// in order) and `store_column(row, chunk, chunks, acc, i)`.
//
// Invocation `slot = chunk * quads + q` folds chunk `chunk` of rows
// `q * STEP ..` and stores a partial per row at `row * chunks + chunk`,
// the layout later passes (reduce.wgsl) read. Neighbouring invocations
// take neighbouring rows, so at each step a CPU adapter's SIMD batch reads
// one contiguous block and a GPU's warp one coalesced one; in the row
// layout they read one row's elements, a row's stride apart (a sum over
// the leading axis of [64, 784, 512]: 424 ms on lavapipe, against 90 ms
// for the same elements summed along rows). The runtime picks `chunks` so
// that every chunk holds at least one element and fewer than 65,536 (Mesa
// ends longer loops), and so that there are invocations enough to fill
// the device.

@compute @workgroup_size(REDUCE_WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let rows = m(0u);
    let len = m(1u);
    let chunks = m(2u);
    let quads = rows / STEP;
    // Invocations past the last slot redo it and store the same values (no
    // early return: see reduce_pass.wgsl).
    let slot = min(gid.y * m(3u) + gid.x, quads * chunks - 1u);
    let row = (slot % quads) * STEP;
    let chunk = slot / quads;
    let span = (len + chunks - 1u) / chunks;
    let start = chunk * span;
    var i = 0u;
    let acc = fold_column(row, start, min(start + span, len), &i);
    store_column(row, chunk, chunks, acc, i);
}
