//! Every kind of kernel kiln generates, hand-written templates included,
//! passes naga validation and translates to SPIR-V, MSL, HLSL and GLSL
//! (checked with spirv-val where installed). Runs without a GPU.

use kiln_core::DType;
use kiln_core::codegen::elementwise::{EwKernel, Expr};
use kiln_core::codegen::templates::{Monoid, ReduceSource, matmul_wgsl, reduce_wgsl};
use kiln_core::ir::{ArgOp, BinaryOp, ReduceOp, UnaryOp};
use kiln_core::validate::translate_all;

fn ew(out: DType, inputs: Vec<(DType, bool)>, expr: Expr) -> String {
    EwKernel { out, out_strided: false, rank: 3, inputs, expr }.wgsl()
}

fn input(k: usize) -> Box<Expr> {
    Box::new(Expr::Input(k))
}

fn catalog() -> Vec<String> {
    let mut out = Vec::new();
    for op in UnaryOp::ALL {
        for d in DType::ALL.into_iter().filter(|&d| op.accepts(d)) {
            for contiguous in [true, false] {
                out.push(ew(d, vec![(d, contiguous)], Expr::Unary(op, input(0))));
            }
        }
    }
    for op in BinaryOp::ALL {
        for d in DType::ALL.into_iter().filter(|&d| op.accepts(d)) {
            let o = if op.is_comparison() { DType::Bool } else { d };
            out.push(ew(o, vec![(d, true), (d, false)], Expr::Binary(op, input(0), input(1))));
        }
    }
    for from in DType::ALL {
        for to in DType::ALL {
            out.push(ew(to, vec![(from, false)], Expr::Cast(input(0), to)));
        }
        out.push(ew(
            from,
            vec![(DType::Bool, true), (from, true), (from, false)],
            Expr::Where(input(0), input(1), input(2)),
        ));
        if from != DType::Bool {
            out.push(ew(from, vec![], Expr::Iota));
            out.push(ew(from, vec![(from, false), (DType::I32, true)], Expr::Gather { axis: 1 }));
            out.push(ew(from, vec![(from, false), (DType::U32, false)], Expr::Gather { axis: 0 }));
        }
        out.push(ew(from, vec![], Expr::Fill));
        let wide = from.wide();
        out.push(
            EwKernel {
                out: wide,
                out_strided: true,
                rank: 2,
                inputs: vec![(from, false)],
                expr: Expr::Cast(input(0), wide),
            }
            .wgsl(),
        );
    }
    let monoids = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min]
        .map(Monoid::Reduce)
        .into_iter()
        .chain([ArgOp::ArgMax, ArgOp::ArgMin].map(Monoid::Arg));
    for monoid in monoids {
        for dtype in [DType::F32, DType::F16, DType::I32, DType::U32] {
            for src in [
                ReduceSource::Tensor { dtype, contiguous: true, rank: 2 },
                ReduceSource::Tensor { dtype, contiguous: false, rank: 3 },
                ReduceSource::Partials { dtype },
            ] {
                out.push(reduce_wgsl(monoid, src));
            }
        }
    }
    for dtype in [DType::F32, DType::F16] {
        for batch_rank in 0..4 {
            out.push(matmul_wgsl(dtype, batch_rank));
        }
    }
    out
}

fn spirv_val(words: &[u32]) -> Option<Result<(), String>> {
    let path = std::env::temp_dir().join(format!("kiln-core-{}.spv", std::process::id()));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&path, bytes).ok()?;
    let out = std::process::Command::new("spirv-val").args(["--target-env", "vulkan1.0"]).arg(&path).output().ok()?;
    let _ = std::fs::remove_file(&path);
    Some(if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) })
}

#[test]
fn every_kernel_kind_validates_and_translates() {
    let kernels = catalog();
    let mut checked = 0;
    for source in &kernels {
        let t = translate_all(source).unwrap_or_else(|e| panic!("{e}"));
        assert!(!t.msl.is_empty() && !t.hlsl.is_empty() && !t.glsl.is_empty());
        match spirv_val(&t.spirv) {
            Some(Err(e)) => panic!("spirv-val rejected:\n{e}\n{source}"),
            Some(Ok(())) => checked += 1,
            None => {}
        }
    }
    eprintln!("{} kernels translated, {checked} checked by spirv-val", kernels.len());
    assert!(kernels.len() > 200);
}

#[test]
fn a_broken_kernel_is_an_error_carrying_its_source() {
    let err = translate_all("fn main( {").unwrap_err();
    assert!(err.to_string().contains("fn main( {"), "{err}");
}
