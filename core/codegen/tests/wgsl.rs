//! Every kind of kernel kiln generates, hand-written templates included,
//! passes naga validation and translates to SPIR-V, MSL, HLSL and GLSL
//! (checked with spirv-val where installed). Runs without a GPU.

use kiln_codegen::attention::KeySharing;
use kiln_codegen::fused::{Combine, RowLanes, Walk};
use kiln_codegen::matmul::MatmulConfig;
use kiln_codegen::reduce::{Monoid, ReducePass, Runs};
use kiln_codegen::row_stream::stream_lanes;
use kiln_codegen::validate::translate_all;
use kiln_codegen::{KernelKey, RowLayout};
use kiln_ir::DType;
use kiln_ir::ir::{ArgOp, BinaryOp, ReduceOp, UnaryOp};
use kiln_sched::lower::{Access, Body, LeafDesc, Op, Sig};
use kiln_sched::pointwise::Pointwise;

/// A signature over `rank` dims whose leaves each read their own buffer,
/// with one body of `ops` (loads of every leaf first) and `roots`.
fn sig(rank: usize, leaves: &[(DType, bool)], params: &[DType], ops: Vec<(Op, DType)>, roots: Vec<usize>) -> Sig {
    let mut body = Body::default();
    for (k, &(d, _)) in leaves.iter().enumerate() {
        body.ops.push((Op::Load(k), d));
    }
    let base = body.ops.len();
    body.ops.extend(ops.into_iter().map(|(op, d)| (shift(op, base), d)));
    body.roots = roots.into_iter().map(|r| r + base).collect();
    Sig {
        rank,
        leaves: leaves
            .iter()
            .enumerate()
            .map(|(k, &(dtype, contiguous))| LeafDesc { dtype, buffer: Some(k), access: access(contiguous) })
            .collect(),
        params: params.to_vec(),
        buffers: leaves.iter().map(|l| l.0).collect(),
        bodies: vec![body],
    }
}

/// Refer to op `i` of the listed ops as `i + base` (after the loads); a
/// negative-free trick: ops name loads as `usize::MAX - k`.
fn shift(op: Op, base: usize) -> Op {
    let r = |i: usize| if i >= LOAD { i - LOAD } else { i + base };
    match op {
        Op::Pointwise(p) => Op::Pointwise(p.map(|&x| r(x))),
        Op::Gather { src, axis, index, len } => Op::Gather { src, axis, index: r(index), len },
        other => other,
    }
}

fn access(contiguous: bool) -> Access {
    if contiguous { Access::Contiguous } else { Access::Strided }
}

/// Operand index of leaf `k`'s load.
const LOAD: usize = 1 << 20;

fn ew(sig: Sig, outputs: Vec<DType>) -> String {
    KernelKey::Elementwise { sig, outputs, out_strided: false, walk: Walk::Flat, whole: false, half: false }.wgsl()
}

/// Where `sig` has f16 values, its kernels computing them as WGSL's `f16`
/// (adapters with `shader-f16`), one element and four at a time.
fn half_forms(sig: &Sig, outputs: &[DType]) -> Vec<String> {
    if !sig.has_dtype(DType::F16) && !outputs.contains(&DType::F16) {
        return Vec::new();
    }
    let walks =
        if kiln_codegen::fused::elementwise_vectorizable(sig) { &[Walk::Flat, Walk::Vec4][..] } else { &[Walk::Flat] };
    let key = |walk| KernelKey::Elementwise {
        sig: sig.clone(),
        outputs: outputs.to_vec(),
        out_strided: false,
        walk,
        whole: false,
        half: true,
    };
    walks.iter().map(|&w| key(w).wgsl()).collect()
}

/// Ops 0..3 of a row body: x − row stage 0.
fn x_minus_row0() -> Vec<(Op, DType)> {
    vec![
        (Op::Load(0), DType::F32),
        (Op::Row(0), DType::F32),
        (Op::Pointwise(Pointwise::Binary(BinaryOp::Sub, 0, 1)), DType::F32),
    ]
}

fn catalog() -> Vec<String> {
    let mut out = Vec::new();
    for op in UnaryOp::ALL {
        for d in DType::ALL.into_iter().filter(|&d| op.accepts(d)) {
            for contiguous in [true, false] {
                let s = sig(3, &[(d, contiguous)], &[], vec![(Op::Pointwise(Pointwise::Unary(op, LOAD)), d)], vec![0]);
                // Strided leaves read vec4s too, where their rows split into
                // them; packed ones as pairs of words. With and without the
                // grid-strided walk's bounds checks.
                let key = KernelKey::Elementwise {
                    sig: s.clone(),
                    outputs: vec![d],
                    out_strided: false,
                    walk: Walk::Vec4,
                    whole: contiguous,
                    half: false,
                };
                out.push(key.wgsl());
                out.extend(half_forms(&s, &[d]));
                out.push(ew(s, vec![d]));
            }
        }
    }
    for op in BinaryOp::ALL {
        for d in DType::ALL.into_iter().filter(|&d| op.accepts(d)) {
            let o = if op.is_comparison() { DType::Bool } else { d };
            let s = sig(
                3,
                &[(d, true), (d, false)],
                &[],
                vec![(Op::Pointwise(Pointwise::Binary(op, LOAD, LOAD + 1)), o)],
                vec![0],
            );
            out.extend(half_forms(&s, &[o]));
            out.push(ew(s, vec![o]));
            if op != BinaryOp::Pow {
                let s = sig(
                    2,
                    &[(d, true), (d, true)],
                    &[],
                    vec![(Op::Pointwise(Pointwise::Binary(op, LOAD, LOAD + 1)), o)],
                    vec![0],
                );
                out.push(
                    KernelKey::Elementwise {
                        sig: s,
                        outputs: vec![o],
                        out_strided: false,
                        walk: Walk::Vec4,
                        whole: false,
                        half: false,
                    }
                    .wgsl(),
                );
            }
        }
    }
    for from in DType::ALL {
        for to in DType::ALL {
            let s = sig(3, &[(from, false)], &[], vec![(Op::Pointwise(Pointwise::Cast(LOAD)), to)], vec![0]);
            out.extend(half_forms(&s, &[to]));
            out.push(ew(s, vec![to]));
        }
        let leaves = [(DType::Bool, true), (from, true), (from, false)];
        let s = sig(3, &leaves, &[], vec![(Op::Pointwise(Pointwise::Where(LOAD, LOAD + 1, LOAD + 2)), from)], vec![0]);
        out.extend(half_forms(&s, &[from]));
        out.push(ew(s, vec![from]));
        if from != DType::Bool {
            let mut s = sig(3, &[], &[from, from], vec![(Op::Iota { leaf: 0, start: 0, step: 1 }, from)], vec![0]);
            s.leaves.push(LeafDesc { dtype: from, buffer: None, access: Access::Strided });
            out.extend(half_forms(&s, &[from]));
            out.push(ew(s, vec![from]));
            for (index, axis) in [(DType::I32, 1), (DType::U32, 0)] {
                let gather = Op::Gather { src: 0, axis, index: LOAD + 1, len: 0 };
                let s = sig(3, &[(from, false), (index, true)], &[DType::U32], vec![(gather, from)], vec![0]);
                out.push(ew(s, vec![from]));
            }
        }
        out.push(ew(sig(3, &[], &[from], vec![(Op::Param(0), from)], vec![0]), vec![from]));
        let wide = from.wide();
        let s = sig(2, &[(from, false)], &[], vec![(Op::Pointwise(Pointwise::Cast(LOAD)), wide)], vec![0]);
        out.push(
            KernelKey::Elementwise {
                sig: s,
                outputs: vec![wide],
                out_strided: true,
                walk: Walk::Flat,
                whole: false,
                half: false,
            }
            .wgsl(),
        );
    }
    // Broadcast leaves read without coordinates: a bias (period) and a row
    // statistic (repeat), scalar and four at a time.
    for walk in [Walk::Flat, Walk::Vec4, Walk::Vec4Rows, Walk::Vec4Straddling] {
        let mut s = sig(2, &[(DType::F32, true), (DType::F32, true), (DType::Bool, true)], &[], vec![], vec![]);
        s.leaves[1].access = Access::Mod;
        s.leaves[2].access = Access::Div;
        s.bodies[0].ops.push((Op::Pointwise(Pointwise::Binary(BinaryOp::Add, 0, 1)), DType::F32));
        s.bodies[0].ops.push((Op::Pointwise(Pointwise::Where(2, 3, 0)), DType::F32));
        s.bodies[0].roots = vec![4];
        let whole = matches!(walk, Walk::Vec4Rows | Walk::Vec4Straddling);
        out.push(
            KernelKey::Elementwise { sig: s, outputs: vec![DType::F32], out_strided: false, walk, whole, half: false }
                .wgsl(),
        );
    }
    // A row index (an iota along rows) next to a row statistic, and a
    // column index (an iota along columns) next to a per-column value, on
    // rows that a vec4 may straddle.
    for index in [Access::Div, Access::Mod] {
        let mut s = sig(2, &[(DType::F32, true)], &[DType::I32, DType::I32], vec![], vec![]);
        s.leaves[0].access = index;
        s.leaves.push(LeafDesc { dtype: DType::I32, buffer: None, access: index });
        s.bodies[0].ops.push((Op::Iota { leaf: 1, start: 0, step: 1 }, DType::I32));
        s.bodies[0].ops.push((Op::Pointwise(Pointwise::Cast(1)), DType::F32));
        s.bodies[0].ops.push((Op::Pointwise(Pointwise::Binary(BinaryOp::Mul, 0, 2)), DType::F32));
        s.bodies[0].roots = vec![3];
        let walk = Walk::Vec4Straddling;
        out.push(
            KernelKey::Elementwise {
                sig: s,
                outputs: vec![DType::F32],
                out_strided: false,
                walk,
                whole: false,
                half: false,
            }
            .wgsl(),
        );
    }
    // Row statistics alone (an op depending only on one, hoisted): eighths
    // of rows, and a reduction's prologue loading them once per span.
    let mut s = sig(2, &[(DType::F32, true), (DType::F32, true)], &[], vec![], vec![]);
    s.leaves[1].access = Access::Div;
    s.bodies[0].ops.push((Op::Pointwise(Pointwise::Unary(UnaryOp::Exp, 1)), DType::F32));
    s.bodies[0].ops.push((Op::Pointwise(Pointwise::Binary(BinaryOp::Sub, 0, 2)), DType::F32));
    s.bodies[0].roots = vec![3];
    let walk = Walk::Vec4Segments;
    for whole in [false, true] {
        let key = KernelKey::Elementwise {
            sig: s.clone(),
            outputs: vec![DType::F32],
            out_strided: false,
            walk,
            whole,
            half: false,
        };
        out.push(key.wgsl());
    }
    for (workgroup, streams) in [(false, false), (false, true), (true, false), (true, true)] {
        let prologue = Some(s.clone());
        let monoid = Monoid::Reduce(ReduceOp::Sum);
        let key = KernelKey::Reduce {
            monoid,
            prologue,
            partials: DType::F32,
            pass: ReducePass {
                runs: Runs::Vec4,
                workgroup,
                streams,
                row_leaves: true,
                whole: streams,
                one_row: streams,
                columns: false,
            },
        };
        out.push(key.wgsl());
        // The same prologue over rows that do not split into vec4s.
        let key = KernelKey::Reduce {
            monoid,
            prologue: Some(s.clone()),
            partials: DType::F32,
            pass: ReducePass {
                runs: Runs::Straddling,
                workgroup,
                streams,
                row_leaves: false,
                whole: streams,
                one_row: false,
                columns: false,
            },
        };
        out.push(key.wgsl());
    }
    // A multi-output kernel with packed and f32 outputs sharing a
    // subexpression.
    for packed in [DType::F16, DType::BF16] {
        let ops = vec![
            (Op::Pointwise(Pointwise::Unary(UnaryOp::Exp, LOAD)), DType::F32),
            (Op::Pointwise(Pointwise::Cast(0)), packed),
        ];
        out.push(ew(sig(2, &[(DType::F32, false)], &[], ops, vec![0, 1]), vec![DType::F32, packed]));
    }
    let monoids = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min]
        .map(Monoid::Reduce)
        .into_iter()
        .chain([ArgOp::ArgMax, ArgOp::ArgMin].map(Monoid::Arg));
    for monoid in monoids {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32] {
            for contiguous in [true, false] {
                let s = sig(
                    3,
                    &[(dtype, contiguous)],
                    &[],
                    vec![(Op::Pointwise(Pointwise::Unary(UnaryOp::Abs, LOAD)), dtype)],
                    vec![0],
                );
                let runs = if matches!(monoid, Monoid::Reduce(_)) && !dtype.is_packed() {
                    vec![Runs::Scalar, Runs::Vec4, Runs::Straddling]
                } else {
                    vec![Runs::Scalar]
                };
                // Each pass as CPU adapters run it and as GPUs do (workgroup),
                // over small inputs and large (streams).
                for (workgroup, streams) in [(false, false), (false, true), (true, false), (true, true)] {
                    let key = |runs| KernelKey::Reduce {
                        monoid,
                        prologue: Some(s.clone()),
                        partials: dtype.wide(),
                        // Both forms of each pass: with and without the
                        // code for spans that are not whole, over one row
                        // and over many.
                        pass: ReducePass {
                            runs,
                            workgroup,
                            streams,
                            row_leaves: false,
                            whole: streams,
                            one_row: streams,
                            columns: false,
                        },
                    };
                    out.extend(runs.iter().map(|&r| key(r).wgsl()));
                }
                // A first pass over columns, whose leaves' indices step: a
                // row at a time, and four where plain reductions can.
                if !contiguous {
                    for &runs in runs.iter().filter(|&&r| r != Runs::Straddling) {
                        let pass = ReducePass::over_columns(runs);
                        let key = KernelKey::Reduce { monoid, prologue: Some(s.clone()), partials: dtype.wide(), pass };
                        out.push(key.wgsl());
                    }
                }
            }
            // Later passes, over partials read as vec4s where a plain
            // reduction's rows of partials split into them.
            let runs =
                if matches!(monoid, Monoid::Reduce(_)) { &[Runs::Scalar, Runs::Vec4][..] } else { &[Runs::Scalar] };
            for (&runs, workgroup) in runs.iter().flat_map(|r| [(r, false), (r, true)]) {
                let key = KernelKey::Reduce {
                    monoid,
                    prologue: None,
                    partials: dtype.wide(),
                    pass: ReducePass {
                        runs,
                        workgroup,
                        streams: false,
                        row_leaves: false,
                        whole: workgroup,
                        one_row: !workgroup,
                        columns: false,
                    },
                };
                out.push(key.wgsl());
            }
        }
    }
    // Row kernels: softmax's shape (max, then sum of exp, then divide).
    for per_row in [false, true] {
        let mut s = sig(2, &[(DType::F32, true)], &[], vec![], vec![]);
        s.bodies = vec![
            Body { ops: vec![(Op::Load(0), DType::F32)], roots: vec![0] },
            Body {
                ops: [x_minus_row0(), vec![(Op::Pointwise(Pointwise::Unary(UnaryOp::Exp, 2)), DType::F32)]].concat(),
                roots: vec![3],
            },
            Body {
                ops: vec![
                    (Op::Load(0), DType::F32),
                    (Op::Row(0), DType::F32),
                    (Op::Row(1), DType::F32),
                    (Op::Pointwise(Pointwise::Binary(BinaryOp::Sub, 0, 1)), DType::F32),
                    (Op::Pointwise(Pointwise::Unary(UnaryOp::Exp, 3)), DType::F32),
                    (Op::Pointwise(Pointwise::Binary(BinaryOp::Div, 4, 2)), DType::F32),
                ],
                roots: vec![5],
            },
        ];
        let stages = vec![ReduceOp::Max, ReduceOp::Sum];
        // A row per invocation, and streamed by 4, 8 or 16 lanes per row.
        let stream = |lanes, straddling| RowLayout::Stream { lanes, straddling };
        let layouts = [RowLayout::Invocation, stream(4, false), stream(8, false), stream(16, false)];
        for (vec4, layout) in [false, !per_row].into_iter().flat_map(|v| layouts.map(|l| (v, l))) {
            let outputs = vec![DType::F32];
            let key = KernelKey::Row { sig: s.clone(), stages: stages.clone(), outputs, per_row, vec4, layout };
            out.push(key.wgsl());
        }
        // Rows that do not split into vec4s, streamed as vec4s.
        if !per_row {
            let (outputs, layout) = (vec![DType::F32], stream(8, true));
            let key = KernelKey::Row { sig: s.clone(), stages: stages.clone(), outputs, per_row, vec4: false, layout };
            out.push(key.wgsl());
        }
        // The lanes layout: 4 to 32 lanes per row, one subgroup or sharing
        // a workgroup with other rows' lanes, up to 64 vec4s per lane; rows
        // with a ragged last slot, and rows read element by element.
        let widths = if per_row {
            vec![]
        } else {
            let vec4 = [(4, 1024), (8, 1024), (8, 2048), (32, 128), (32, 8192), (16, 4096), (8, 1000)];
            let scalar = [(8, 1023), (4, 256), (16, 100)];
            vec4.map(|(w, l)| (w, l, true)).into_iter().chain(scalar.map(|(w, l)| (w, l, false))).collect()
        };
        for (width, len, vec4) in widths {
            for combine in [Combine::Subgroup, Combine::Workgroup] {
                let lanes = RowLanes::fitting(width, combine, &s, &stages, len, vec4).expect("a fitting row");
                let outputs = vec![DType::F32];
                let key = KernelKey::Row {
                    sig: s.clone(),
                    stages: stages.clone(),
                    outputs,
                    per_row,
                    vec4: true,
                    layout: RowLayout::Lanes(lanes),
                };
                out.push(key.wgsl());
            }
        }
    }
    // A streamed row of a plain stage: x − its sum per element, or the sum
    // per row; rows read element by element, in vec4s, or in the vec4s
    // covering them.
    let reads = [(false, false), (true, false), (false, true)];
    for (per_row, (vec4, straddling)) in [false, true].into_iter().flat_map(|p| reads.map(|r| (p, r))) {
        let mut s = sig(2, &[(DType::F32, true)], &[], vec![], vec![]);
        let last = if per_row {
            Body { ops: vec![(Op::Row(0), DType::F32)], roots: vec![0] }
        } else {
            Body { ops: x_minus_row0(), roots: vec![2] }
        };
        s.bodies = vec![Body { ops: vec![(Op::Load(0), DType::F32)], roots: vec![0] }, last];
        let layout = RowLayout::Stream { lanes: 8, straddling };
        let (stages, outputs) = (vec![ReduceOp::Sum], vec![DType::F32]);
        out.push(KernelKey::Row { sig: s, stages, outputs, per_row, vec4, layout }.wgsl());
    }
    // Both forms of the copy of a matmul operand into a texture, per float dtype.
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        out.extend([false, true].map(|vec4| KernelKey::OperandTexture { vec4, dtype }.wgsl()));
    }
    // The copy of a transposed operand in blocks, batched or not.
    out.extend((0..4).map(|batch_rank| KernelKey::Transpose { batch_rank }.wgsl()));
    // The integer-weight product: both code widths (and int8 with int8 x),
    // one row or a block, per invocation or per workgroup, scales of every
    // float dtype.
    let widths = [(8, false), (4, false), (8, true)];
    for ((bits, packed_x), rows_per, cooperative) in
        widths.into_iter().flat_map(|w| [(w, 1), (w, 4)]).flat_map(|(w, r)| [(w, r, false), (w, r, true)])
    {
        for scales in [DType::F32, DType::F16, DType::BF16] {
            out.push(KernelKey::QuantMatmul { bits, rows_per, cooperative, packed_x, scales }.wgsl());
        }
    }
    // The attention kernel, keys shared through workgroup memory or
    // subgroups: bare scores, and scores scaled and masked by a
    // strided bool leaf (buffer 3, after q, kt and v), for rows a multiple
    // of 4 and not, the widest, and batch ranks 0 to 3.
    for (batch_rank, dk, dv) in [(0, 16, 12), (1, 6, 5), (2, 32, 32), (3, 128, 128), (2, 1, 3)] {
        let mut bare = sig(batch_rank + 2, &[], &[], vec![], vec![]);
        bare.buffers = vec![DType::F32; 3];
        bare.bodies[0] = Body { ops: vec![(Op::Acc, DType::F32)], roots: vec![0] };
        let mut masked = sig(batch_rank + 2, &[(DType::Bool, false)], &[DType::F32, DType::F32], vec![], vec![]);
        masked.buffers = vec![DType::F32, DType::F32, DType::F32, DType::Bool];
        masked.leaves[0].buffer = Some(3);
        masked.bodies[0] = Body {
            ops: vec![
                (Op::Acc, DType::F32),
                (Op::Param(0), DType::F32),
                (Op::Pointwise(Pointwise::Binary(BinaryOp::Mul, 0, 1)), DType::F32),
                (Op::Load(0), DType::Bool),
                (Op::Param(1), DType::F32),
                (Op::Pointwise(Pointwise::Where(3, 2, 4)), DType::F32),
            ],
            roots: vec![5],
        };
        for scores in [bare, masked] {
            for keys in [KeySharing::Workgroup, KeySharing::Subgroup(4), KeySharing::Subgroup(32)] {
                for causal in [false, true] {
                    out.push(KernelKey::Attention { batch_rank, dk, dv, keys, causal, scores: scores.clone() }.wgsl());
                }
            }
        }
    }
    // Every member of the matmul family and the twins a texture member
    // (vec4) and a vec4 member (scalar) fall back to, plain and with an
    // epilogue.
    let mut configs = MatmulConfig::CANDIDATES.to_vec();
    let twins = MatmulConfig::CANDIDATES
        .map(|c| [MatmulConfig { tex: false, ..c }, MatmulConfig { vec: false, tex: false, ..c }]);
    for twin in twins.into_iter().flatten() {
        if !configs.contains(&twin) {
            configs.push(twin);
        }
    }
    let pairs = configs.into_iter().flat_map(|c| [(c, DType::F32), (c, DType::F16), (c, DType::BF16)]);
    // Every config on every float dtype: vec4 configs read packed operands
    // by pairs of words, texture configs from f32 textures.
    for (config, dtype) in pairs {
        for batch_rank in 0..4 {
            out.push(KernelKey::Matmul { dtype, batch_rank, epilogue: None, config }.wgsl());
            // relu(acc + bias): the bias is buffer 2, after A and B.
            let mut s = sig(batch_rank + 2, &[(DType::F32, false)], &[], vec![], vec![]);
            s.buffers = vec![dtype, dtype, DType::F32];
            s.leaves[0].buffer = Some(2);
            s.bodies[0] = Body {
                ops: vec![
                    (Op::Acc, DType::F32),
                    (Op::Load(0), DType::F32),
                    (Op::Pointwise(Pointwise::Binary(BinaryOp::Add, 0, 1)), DType::F32),
                    (Op::Pointwise(Pointwise::Unary(UnaryOp::Relu, 2)), DType::F32),
                ],
                roots: vec![3],
            };
            out.push(KernelKey::Matmul { dtype, batch_rank, epilogue: Some(s), config }.wgsl());
        }
    }
    out
}

fn spirv_val(words: &[u32], env: &str) -> Option<Result<(), String>> {
    let path = std::env::temp_dir().join(format!("kiln-core-{}.spv", std::process::id()));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).ok()?;
    let out = std::process::Command::new("spirv-val").args(["--target-env", env]).arg(&path).output().ok()?;
    let _ = std::fs::remove_file(&path);
    Some(if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) })
}

#[test]
fn every_kernel_kind_validates_and_translates() {
    let kernels = catalog();
    let mut checked = 0;
    for source in &kernels {
        let t = translate_all(source).unwrap_or_else(|e| panic!("{e}"));
        assert!(!t.msl.is_empty() && !t.hlsl.is_empty());
        assert_eq!(t.glsl.is_none(), source.contains("enable f16;"), "GLSL for every kernel not computing f16");
        let env = if source.contains("subgroup") { "vulkan1.1" } else { "vulkan1.0" };
        match spirv_val(&t.spirv, env) {
            Some(Err(e)) => panic!("spirv-val rejected:\n{e}\n{source}"),
            Some(Ok(())) => checked += 1,
            None => {}
        }
    }
    eprintln!("{} kernels translated, {checked} checked by spirv-val", kernels.len());
    assert!(kernels.len() > 200);
}

#[test]
fn the_untuned_defaults_are_candidates() {
    // So the family test and the validation above cover them.
    for default in [MatmulConfig::DEFAULT_CPU, MatmulConfig::DEFAULT_GPU] {
        assert!(MatmulConfig::CANDIDATES.contains(&default), "{}", default.name());
    }
}

#[test]
fn a_broken_kernel_is_an_error_carrying_its_source() {
    let err = translate_all("fn main( {").unwrap_err();
    assert!(err.to_string().contains("fn main( {"), "{err}");
}

#[test]
fn the_lanes_row_layout_is_chosen_only_where_it_fits() {
    let row = |d: DType| {
        let mut s = sig(2, &[(d, true)], &[], vec![], vec![]);
        s.bodies = vec![Body { ops: vec![(Op::Load(0), d)], roots: vec![0] }];
        s
    };
    let (f32_row, bool_row) = (row(DType::F32), row(DType::Bool));
    let sum = [ReduceOp::Sum];
    let fits =
        |width: u32, combine: Combine, s: &Sig, len: usize| RowLanes::fitting(width, combine, s, &sum, len, true);
    let scalar = |width: u32, len: usize| RowLanes::fitting(width, Combine::Subgroup, &f32_row, &sum, len, false);
    assert!(fits(8, Combine::Subgroup, &f32_row, 1024).is_some());
    assert!(fits(8, Combine::Subgroup, &f32_row, 2048).is_some(), "64 vec4s per lane");
    assert!(fits(8, Combine::Subgroup, &f32_row, 2080).is_none(), "65 vec4s per lane");
    assert!(fits(8, Combine::Subgroup, &f32_row, 1040).is_some(), "a ragged last slot");
    assert!(fits(8, Combine::Subgroup, &f32_row, 96).is_some(), "3 whole slots");
    assert!(fits(8, Combine::Subgroup, &f32_row, 100).is_none(), "4 slots, 7 of 32 idle");
    assert!(fits(4, Combine::Subgroup, &f32_row, 100).is_some(), "7 slots, 3 of 28 idle");
    assert!(fits(8, Combine::Subgroup, &f32_row, 200).is_some(), "7 slots, 6 of 56 idle");
    assert!(fits(8, Combine::Subgroup, &f32_row, 1023).is_none(), "not vec4s");
    assert!(scalar(8, 1023).is_some() && scalar(8, 1024).is_some(), "128 elements per lane");
    assert!(scalar(8, 1025).is_none(), "129 elements per lane");
    assert!(fits(128, Combine::Subgroup, &f32_row, 1024).is_none(), "a subgroup wider than the workgroup");
    assert_eq!(fits(128, Combine::Workgroup, &f32_row, 1024).map(|l| l.workgroup_size()), Some(128));
    assert_eq!(fits(8, Combine::Workgroup, &f32_row, 1024).map(|l| l.workgroup_size()), Some(64), "8 rows' lanes");
    assert_eq!(fits(12, Combine::Workgroup, &f32_row, 1056).map(|l| l.workgroup_size()), Some(60), "5 rows' lanes");
    assert!(fits(8, Combine::Subgroup, &bool_row, 1024).is_none(), "a bool stage");
    // Which combine each kind of adapter gets.
    let chosen = |workgroup_memory: bool, cpu: bool, width: Option<u32>| {
        RowLanes::for_device(workgroup_memory, cpu, width, &f32_row, &sum, 1024, true).map(|l| (l.lanes, l.combine))
    };
    assert_eq!(chosen(true, true, Some(8)), Some((8, Combine::Subgroup)));
    assert_eq!(chosen(false, false, Some(8)), Some((8, Combine::Subgroup)));
    assert_eq!(chosen(true, true, None), Some((8, Combine::Workgroup)), "llvmpipe GL's SIMD width");
    assert_eq!(chosen(true, false, None), Some((16, Combine::Workgroup)));
    assert_eq!(chosen(false, true, None), None, "no workgroup memory");
}

#[test]
fn streamed_rows_take_enough_lanes_to_stay_within_mesas_loop_budget() {
    let mut softmax = sig(2, &[(DType::F32, true)], &[], vec![], vec![]);
    softmax.bodies = vec![
        Body { ops: vec![(Op::Load(0), DType::F32)], roots: vec![0] },
        Body {
            ops: [x_minus_row0(), vec![(Op::Pointwise(Pointwise::Unary(UnaryOp::Exp, 2)), DType::F32)]].concat(),
            roots: vec![3],
        },
        Body { ops: x_minus_row0(), roots: vec![2] },
    ];
    let pair = [ReduceOp::Max, ReduceOp::Sum];
    let lanes = |stages: &[ReduceOp], per_row: bool, len: usize, vec4: bool| {
        stream_lanes(&softmax, stages, per_row, len, vec4).map(|l| (stages.len(), l))
    };
    // Softmax: one online pass and the outputs, 2 · len / (4 · lanes) iterations.
    assert_eq!(lanes(&pair, false, 1 << 18, true), Some((2, 8)));
    assert_eq!(lanes(&pair, false, 1 << 20, true), Some((2, 16)), "2 · 32,768 with 8 lanes is too many");
    assert_eq!(lanes(&pair, false, 1 << 20, false), Some((2, 64)));
    assert_eq!(lanes(&pair, true, 1 << 20, false), Some((2, 32)), "per row: no output pass");
    assert_eq!(lanes(&pair, false, 1 << 21, false), Some((2, 128)));
    // The same stages read as two plain ones (the pair not recognized: a
    // max stage alone): three passes.
    assert_eq!(lanes(&[ReduceOp::Max], false, 1 << 20, true), Some((1, 16)));
}

/// Shifts whose operands are not unary expressions, as in `a * b >> 2u`:
/// WGSL's grammar forbids them and browsers' compilers (Tint) reject them
/// ("mixing '*' and '>>' requires parenthesis"), but naga accepts them.
/// Reads kiln's style: shifts written with a space on either side
/// (templates such as `vec4<f32>>` never are).
fn unparenthesized_shifts(source: &str) -> Vec<String> {
    let binary = |c: u8| b"*/%+-&|^".contains(&c);
    let operand_end = |c: u8| c.is_ascii_alphanumeric() || b"_)]".contains(&c);
    let mut found = Vec::new();
    for line in source.lines() {
        let b = line.as_bytes();
        for at in (0..b.len().saturating_sub(3)).filter(|&i| &b[i..i + 4] == b" >> " || &b[i..i + 4] == b" << ") {
            // Back over the left operand: names, templates, calls, indexing.
            let mut i = at;
            while i > 0 {
                let c = b[i - 1];
                if c == b')' || c == b']' {
                    let (close, open) = (c, if c == b')' { b'(' } else { b'[' });
                    let mut depth = 0;
                    while i > 0 {
                        i -= 1;
                        depth += (b[i] == close) as i32 - (b[i] == open) as i32;
                        if depth == 0 {
                            break;
                        }
                    }
                } else if c.is_ascii_alphanumeric() || b"_.<>".contains(&c) {
                    i -= 1;
                } else {
                    break;
                }
            }
            // The character before the left operand, and the one before that.
            let last_non_space = |end: usize| b[..end].iter().rposition(|&c| c != b' ');
            let left_binary = match last_non_space(i) {
                Some(k) => {
                    let prev = k.checked_sub(1).map(|p| b[p]);
                    match b[k] {
                        // Binary where an operand precedes it, not a negation.
                        b'-' => last_non_space(k).is_some_and(|p| operand_end(b[p])),
                        c @ (b'&' | b'|') => prev != Some(c),
                        c => binary(c),
                    }
                }
                None => false,
            };
            // Forward over the right operand.
            let mut j = at + 4;
            while j < b.len() && b"-!~".contains(&b[j]) {
                j += 1;
            }
            while j < b.len() {
                let c = b[j];
                if c == b'(' || c == b'[' {
                    let (open, close) = (c, if c == b'(' { b')' } else { b']' });
                    let mut depth = 0;
                    while j < b.len() {
                        depth += (b[j] == open) as i32 - (b[j] == close) as i32;
                        j += 1;
                        if depth == 0 {
                            break;
                        }
                    }
                } else if c.is_ascii_alphanumeric() || b"_.".contains(&c) {
                    j += 1;
                } else {
                    break;
                }
            }
            let after = b[j..].iter().position(|&c| c != b' ').map(|k| (b[j + k], b.get(j + k + 1).copied()));
            let right_binary = match after {
                Some((b'&', Some(b'&'))) | Some((b'|', Some(b'|'))) => false,
                Some((c, _)) => binary(c),
                None => false,
            };
            if left_binary || right_binary {
                found.push(line.trim().to_string());
            }
        }
    }
    found
}

#[test]
fn no_kernel_mixes_a_shift_with_other_operators_unparenthesized() {
    // The checker itself, on what Tint rejects and what it accepts.
    assert_eq!(unparenthesized_shifts("let at = ((b * M + r) * N >> 2u) + cv;").len(), 1);
    assert_eq!(unparenthesized_shifts("let x = a >> 2u + 1u;").len(), 1);
    assert_eq!(unparenthesized_shifts("let x = a - b >> 2u;").len(), 1);
    assert!(unparenthesized_shifts("let at = (((b * M + r) * N) >> 2u) + cv;").is_empty());
    assert!(unparenthesized_shifts("let p = base.y + i32(wg.x) * (bitcast<i32>(m(14u)) >> 2u);").is_empty());
    assert!(unparenthesized_shifts("if (r >= M || cv >= N >> 2u) { return; }").is_empty());
    assert!(unparenthesized_shifts("x = kparams[i >> 2u][i & 3u]; y = -a >> 1u;").is_empty());
    assert!(unparenthesized_shifts("let ok = x && y >> 2u == 0u;").is_empty());
    let kernels = catalog();
    let bad: Vec<String> = kernels.iter().flat_map(|k| unparenthesized_shifts(k)).collect();
    assert!(bad.is_empty(), "shifts mixed with other operators (Tint rejects these):\n{}", bad.join("\n"));
}

/// Kernels computing f16 natively are for wgpu adapters with `shader-f16`;
/// the CUDA backend computes f16 in f32 (`Caps::cuda`), so has none.
#[test]
fn every_kernel_kind_has_a_cuda_form_but_those_reading_textures_or_computing_f16() {
    let kernels = catalog();
    let mut rendered = 0;
    for source in &kernels {
        match kiln_codegen::cuda::from_wgsl(source) {
            Ok(k) => {
                assert!(k.body.contains(kiln_codegen::cuda::ENTRY));
                if let Some(dir) = std::env::var_os("KILN_DUMP_CUDA") {
                    std::fs::write(std::path::Path::new(&dir).join(format!("{rendered}.cu")), k.source()).unwrap();
                }
                rendered += 1;
            }
            Err(e) if source.contains("texture_") || source.contains("enable f16;") => {
                assert!(e.to_string().contains("CUDA"), "{e}")
            }
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!("{rendered} of {} kernels rendered as CUDA C++", kernels.len());
    assert!(rendered > 200);
}
