// Batched matmul C[b] = A[b] @ B[b] (+ C[b] when accumulating), f32 compute.
//
// Generated above this template: the meta block, bindings `out`, `in0` (A),
// `in1` (B) and any the epilogue reads, `load_a(e)`, `load_b(e)` (f32 or
// packed f16), `batch_offsets(batch)` and `epilogue(f, acc)` (a fused
// consumer such as `relu(acc + bias[col])`, or the identity).
// Each invocation computes a 4x4 block of C held in registers, reading A and
// B straight from storage through their strides (transposed operands need no
// copy). On CPU adapters this beats workgroup-memory tiling, whose barriers
// are costly (see DESIGN.md); the per-adapter tuned family is the benchmark
// issue's work. The k loop runs over [k0, k1), which the runtime keeps at
// most 16,384 long (Mesa ends loops after 65,535 iterations), accumulating
// longer K over several dispatches.
//
// meta: 0 M, 1 K, 2 N, 3 k0, 4 k1, 5 accumulate, 6 first batch,
//       7 A row stride, 8 A col stride, 9 B row stride, 10 B col stride,
//       13 apply the epilogue (set on the last k chunk).

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let M = m(0u);
    let N = m(2u);
    let batch = wg.z + m(6u);
    let base = batch_offsets(batch);
    let sar = bitcast<i32>(m(7u));
    let sac = bitcast<i32>(m(8u));
    let sbr = bitcast<i32>(m(9u));
    let sbc = bitcast<i32>(m(10u));
    let row0 = gid.y * 4u;
    let col0 = gid.x * 4u;
    if (row0 >= M || col0 >= N) {
        return;
    }
    // Rows and columns past the edge read the last valid one; their results
    // are never stored.
    var ra: vec4<i32>;
    var cb: vec4<i32>;
    for (var i = 0u; i < 4u; i++) {
        ra[i] = base.x + i32(min(row0 + i, M - 1u)) * sar;
        cb[i] = base.y + i32(min(col0 + i, N - 1u)) * sbc;
    }
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    for (var k = m(3u); k < m(4u); k++) {
        let ka = i32(k) * sac;
        let kb = i32(k) * sbr;
        let av = vec4<f32>(load_a(ra.x + ka), load_a(ra.y + ka), load_a(ra.z + ka), load_a(ra.w + ka));
        let bv = vec4<f32>(load_b(cb.x + kb), load_b(cb.y + kb), load_b(cb.z + kb), load_b(cb.w + kb));
        c0 += av.x * bv;
        c1 += av.y * bv;
        c2 += av.z * bv;
        c3 += av.w * bv;
    }
    // Four calls rather than a loop over an array of rows: naga 30 gives
    // arrays an explicit layout, which Vulkan forbids in function memory
    // (VUID-StandaloneSpirv-None-10684, wgpu issue 7696).
    store_row(batch, row0, col0, c0);
    store_row(batch, row0 + 1u, col0, c1);
    store_row(batch, row0 + 2u, col0, c2);
    store_row(batch, row0 + 3u, col0, c3);
}

fn store_row(batch: u32, r: u32, col0: u32, v: vec4<f32>) {
    let M = m(0u);
    let N = m(2u);
    if (r >= M) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let c = col0 + j;
        if (c < N) {
            let at = (batch * M + r) * N + c;
            var x = v[j];
            if (m(5u) != 0u) {
                x += out[at];
            }
            if (m(13u) != 0u) {
                x = epilogue(at, x);
            }
            out[at] = x;
        }
    }
}
