// The entry point of a reduce pass on GPUs (after reduce.wgsl): workgroup
// `w` takes the REDUCE_WG invocations g = REDUCE_WG · (w % blocks) + li of
// row w / blocks (blocks = ceil(groups / REDUCE_WG), REDUCE_WG a power of
// two), folds their partials in workgroup memory
// and stores one partial at `w`: a 16M-element sum takes 2 passes instead
// of 5. The tree pairs neighbours (0+1, 2+3, then 0..1 + 2..3, …), so its
// order is fixed and the left operand always holds the lower indices: the
// result is bitwise stable from run to run, and argmax/argmin keep the
// first extreme. It is not the order of reduce_pass.wgsl, so the bits may
// differ from a CPU adapter's.

var<workgroup> part_v: array<Acc, REDUCE_WG>;
var<workgroup> part_i: array<u32, REDUCE_WG>;

@compute @workgroup_size(REDUCE_WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let rows = m(0u);
    let len = m(1u);
    let groups = m(2u);
    let blocks = (groups + REDUCE_WG - 1u) / REDUCE_WG;
    let w = wid.y * nwg.x + wid.x;
    // Uniform across the workgroup, so the barriers below stay uniform.
    if (w >= rows * blocks) {
        return;
    }
    let row = select(w / blocks, 0u, ONE_ROW);
    let g = select(w % blocks, w, ONE_ROW) * REDUCE_WG + li;
    var v = identity();
    var i = 0u;
    if (g < groups) {
        v = fold_slot(row, g, groups, len, &i);
    }
    part_v[li] = v;
    part_i[li] = i;
    workgroupBarrier();
    for (var s = 1u; s < REDUCE_WG; s *= 2u) {
        if (li % (2u * s) == 0u) {
            let a = part_v[li];
            let b = part_v[li + s];
            part_i[li] = select(part_i[li], part_i[li + s], take_value(a, b));
            part_v[li] = merge(a, b);
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        store(w, part_v[0], part_i[0]);
    }
}
