//! Adapters with `shader-f16` compute f16 elementwise chains in f16, so
//! each op rounds as the reference's per-op f16 does; the others compute a
//! fused chain in f32 and round once where it stores. One chain whose two
//! roundings differ shows which path ran, and that it is the one
//! `dev.info()` names.

use kiln::prelude::*;
use kiln_conformance::adapters::shared as devices;

/// `(a + b) · c` in f16 with a = 1, b = 3·2⁻¹², c = 7: a + b rounds up to
/// 1 + 2⁻¹⁰, and 7 · (1 + 2⁻¹⁰) to 7 + 2⁻⁷; in f32, 7 · (1 + 3·2⁻¹²) is
/// 7 + 21·2⁻¹², which rounds to 7 + 2⁻⁸ (no ties either way).
fn chain(dev: &Device) -> Result<f32> {
    let f16 = |v: f32| Tensor::from_slice(dev, &[v; 4], &[4])?.cast(DType::F16);
    let y = f16(1.0)?.add(&f16(3.0 / 4096.0)?)?.mul(&f16(7.0)?)?;
    // Realized in f16 first, so that the (exact) widening is a kernel of
    // its own and not fused into the chain.
    kiln::block_on(y.realize())?;
    let values = kiln::block_on(y.cast(DType::F32)?.to_vec::<f32>())?;
    assert!(values.iter().all(|v| *v == values[0]), "{values:?}");
    Ok(values[0])
}

#[test]
fn f16_chains_round_every_op_where_the_adapter_computes_f16() {
    let per_op = chain(&Device::cpu()).unwrap();
    assert_eq!(per_op, 7.0 + 1.0 / 128.0, "the reference rounds each op");
    let rounded_once = 7.0 + 1.0 / 256.0;
    let devices = devices();
    for (label, dev) in devices.iter() {
        let info = dev.info();
        if std::env::var_os("KILN_F16_COMPUTE").is_none() {
            assert_eq!(info.f16_compute, info.shader_f16, "{label}: f16 arithmetic wherever shader-f16 is");
        }
        let got = chain(dev).unwrap();
        let want = if info.f16_compute { per_op } else { rounded_once };
        assert_eq!(got, want, "{label} ({})", info.f16_path());
        eprintln!("{label}: {}: (a + b) · c = {got}", info.f16_path());
    }
}
