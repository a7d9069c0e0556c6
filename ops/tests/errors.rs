//! Bad input gets an `Err` that names the op and the shapes (or the limit),
//! never a panic.

use kiln_core::{DType, Device, DeviceOptions, KilnError};
use kiln_ops::Tensor;

/// One CPU device shared by the tests (each `Device::cpu()` is a new device).
fn cpu() -> Device {
    static CPU: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    CPU.get_or_init(Device::cpu).clone()
}

fn t(shape: &[usize]) -> Tensor {
    Tensor::zeros(&cpu(), shape, DType::F32).unwrap()
}

fn message(r: kiln_core::Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn broadcast_mismatch_names_op_and_shapes() {
    let m = message(t(&[2, 3]).add(&t(&[4])));
    assert!(m.contains("add") && m.contains("[2, 3]") && m.contains("[4]"), "{m}");
}

#[test]
fn dtype_mismatch_is_an_error() {
    let i = Tensor::zeros(&cpu(), &[3], DType::I32).unwrap();
    let m = message(t(&[3]).mul(&i));
    assert!(m.contains("mul") && m.contains("f32") && m.contains("i32"), "{m}");
    let m = message(i.exp());
    assert!(m.contains("exp") && m.contains("i32"), "{m}");
    let m = message(t(&[3]).logical_and(&t(&[3])));
    assert!(m.contains("logical_and"), "{m}");
}

#[test]
fn invalid_axes_are_errors() {
    let m = message(t(&[2, 3]).sum(&[2], false));
    assert!(m.contains("sum") && m.contains("axis 2") && m.contains("rank 2"), "{m}");
    assert!(message(t(&[2, 3]).sum(&[1, -1], false)).contains("repeat"));
    assert!(message(t(&[2, 3]).softmax(-3)).contains("max"));
    assert!(message(t(&[2, 3]).permute(&[0, 0])).contains("permute"));
    assert!(message(t(&[2, 3]).squeeze(0)).contains("squeeze"));
    assert!(message(t(&[2, 3]).transpose(0, 5)).contains("transpose"));
}

#[test]
fn shape_errors_name_the_op() {
    assert!(message(t(&[2, 3]).reshape(&[4, 2])).contains("reshape"));
    assert!(message(t(&[2, 3]).reshape(&[-1, -1])).contains("reshape"));
    let m = message(t(&[2, 3]).matmul(&t(&[2, 3])));
    assert!(m.contains("matmul") && m.contains("[2, 3]"), "{m}");
    assert!(message(Tensor::concat(&[&t(&[2, 3]), &t(&[3, 3])], 1)).contains("concat"));
    assert!(message(Tensor::concat(&[], 0)).contains("concat"));
    assert!(message(Tensor::stack(&[&t(&[2]), &t(&[3])], 0)).contains("stack"));
    assert!(message(t(&[2, 3]).expand(&[4, 3])).contains("expand"));
    assert!(message(t(&[4]).narrow(0, 3, 2)).contains("narrow"));
    assert!(message(t(&[4]).slice(0, None, None, 0)).contains("step"));
    assert!(message(Tensor::from_slice(&cpu(), &[1.0f32, 2.0], &[3])).contains("from_slice"));
    assert!(message(Tensor::arange(&cpu(), 0.0, 1.0, 0.0, DType::F32)).contains("arange"));
    assert!(message(t(&[1, 1, 1, 1, 1, 1, 1, 1]).unsqueeze(0)).contains("rank"));
    let idx = Tensor::zeros(&cpu(), &[2, 2], DType::F32).unwrap();
    assert!(message(t(&[2, 3]).gather(1, &idx)).contains("gather"));
    assert!(message(t(&[3]).one_hot(4, DType::F32)).contains("one_hot"));
}

#[test]
fn zero_size_tensors_work_or_error_clearly() {
    let empty = t(&[3, 0]);
    let m = message(empty.max(&[1], false));
    assert!(m.contains("max") && m.contains("[3, 0]"), "{m}");
    assert!(message(empty.argmax(Some(1), false)).contains("argmax"));
    let sums = pollster::block_on(empty.sum(&[1], false).unwrap().to_vec::<f32>()).unwrap();
    assert_eq!(sums, vec![0.0; 3]);
    let none = pollster::block_on(t(&[0]).exp().unwrap().to_vec::<f32>()).unwrap();
    assert!(none.is_empty());
}

#[test]
fn reading_with_the_wrong_type_is_an_error() {
    let e = pollster::block_on(t(&[2]).to_vec::<i32>()).unwrap_err();
    assert!(e.to_string().contains("to_vec"), "{e}");
    let e = pollster::block_on(t(&[2]).item::<f32>()).unwrap_err();
    assert!(e.to_string().contains("item"), "{e}");
}

#[test]
fn tensors_of_different_devices_do_not_mix() {
    let m = message(t(&[2]).add(&Tensor::zeros(&Device::cpu(), &[2], DType::F32).unwrap()));
    assert!(m.contains("different devices"), "{m}");
}

#[test]
fn no_adapter_at_all_is_an_error() {
    let opts = DeviceOptions { adapter: None, backends: kiln_core::wgpu::Backends::empty() };
    match pollster::block_on(Device::with_options(opts)) {
        Err(KilnError::NoAdapter { .. }) => {}
        other => panic!("expected NoAdapter, got {other:?}"),
    }
}

#[test]
fn unknown_adapter_selector_lists_the_available_ones() {
    let opts = DeviceOptions { adapter: Some("no-such-gpu-xyz".into()), ..Default::default() };
    match pollster::block_on(Device::with_options(opts)) {
        Err(e @ KilnError::AdapterNotFound { .. }) => assert!(e.to_string().contains("no-such-gpu-xyz")),
        Err(e @ KilnError::NoAdapter { .. }) => kiln_require::skip(kiln_require::ANY_ADAPTER, &e.to_string()),
        other => panic!("expected AdapterNotFound, got {other:?}"),
    }
}

#[test]
fn lavapipe_selects_mesas_vulkan_driver() {
    let opts = DeviceOptions { adapter: Some("lavapipe".into()), ..Default::default() };
    match pollster::block_on(Device::with_options(opts)) {
        Ok(dev) => {
            let info = dev.info();
            assert!(info.name.contains("llvmpipe") && info.backend.to_lowercase() == "vulkan", "{info:?}");
        }
        Err(KilnError::AdapterNotFound { available, .. }) => {
            kiln_require::skip("lavapipe", &format!("not found on this machine (found {available})"))
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_tensor_over_the_binding_limit_is_held_in_pieces() {
    let dev = match pollster::block_on(Device::gpu()) {
        Ok(dev) => dev,
        Err(e) => return kiln_require::skip(kiln_require::ANY_ADAPTER, &e.to_string()),
    };
    let limit = dev.info().limits.max_storage_buffer_binding_size;
    let n = (limit / 4 + 1) as usize;
    let big = Tensor::zeros(&dev, &[n], DType::F32).unwrap().add_scalar(1.0).unwrap();
    assert!(dev.is_split(big.node()), "{n} f32 over a limit of {limit} bytes");
    let total = pollster::block_on(big.sum(&[], false).unwrap().item::<f32>()).unwrap();
    assert_eq!(total, n as f32);
    // What cannot be computed piece by piece is an error naming the limit.
    let e = big.argmax(Some(0), false).unwrap_err().to_string();
    assert!(e.contains("argmax") && e.contains(&format!("{limit} bytes")), "{e}");
}

#[test]
fn non_contiguous_views_work_on_gpu() {
    let dev = match pollster::block_on(Device::gpu()) {
        Ok(dev) => dev,
        Err(e) => return kiln_require::skip(kiln_require::ANY_ADAPTER, &e.to_string()),
    };
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let v = x.t().unwrap().slice(0, None, None, -1).unwrap();
    assert_eq!(pollster::block_on(v.to_vec::<f32>()).unwrap(), vec![3.0, 6.0, 2.0, 5.0, 1.0, 4.0]);
    let flat = v.reshape(&[-1]).unwrap().sum(&[], false).unwrap();
    assert_eq!(pollster::block_on(flat.item::<f32>()).unwrap(), 21.0);
}

#[test]
fn a_matmul_config_the_device_cannot_run_is_refused_by_name() {
    use kiln_core::codegen::matmul::MatmulConfig;
    let opts = DeviceOptions { adapter: Some("gl".into()), ..Default::default() };
    let dev = match pollster::block_on(Device::with_options(opts)) {
        Ok(dev) => dev,
        Err(e) => return kiln_require::skip("gl", &e.to_string()),
    };
    assert!(!dev.info().subgroups, "llvmpipe's GL has no subgroups");
    let shared = MatmulConfig::CANDIDATES.into_iter().find(|c| c.share).unwrap();
    match dev.set_matmul_config(Some(shared)) {
        Err(e @ KilnError::Invalid { op: "set_matmul_config", .. }) => {
            let m = e.to_string();
            assert!(m.contains(&shared.name()) && m.contains("subgroups"), "{m}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    // Refused, so the tuner's choice still holds and matmuls still run.
    let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    assert_eq!(pollster::block_on(a.matmul(&a).unwrap().to_vec::<f32>()).unwrap(), vec![7.0, 10.0, 15.0, 22.0]);
}

#[test]
fn staged_matmuls_are_refused_without_workgroup_memory() {
    use kiln_core::codegen::{Caps, matmul::MatmulConfig};
    // A Vulkan device without passthrough shaders (none on this machine).
    let mut caps =
        Caps { adapter: "some GPU".into(), backend: "vulkan".into(), workgroup_memory: false, ..Caps::webgpu() };
    let staged = MatmulConfig::CANDIDATES.into_iter().find(|c| c.staged).unwrap();
    let why = staged.refusal(&caps).expect("refused");
    assert!(why.contains(&staged.name()) && why.contains("some GPU") && why.contains("passthrough"), "{why}");
    caps.workgroup_memory = true;
    assert_eq!(staged.refusal(&caps), None);
}

#[test]
fn int8_activations_name_their_op_and_shapes() {
    use kiln_core::QuantFormat;
    let dev = cpu();
    let codes = |n: usize, words: usize| Tensor::zeros(&dev, &[n, words], DType::U32).unwrap();
    let scales = |n: usize, groups: usize| Tensor::zeros(&dev, &[n, groups], DType::F32).unwrap();
    // int4 codes (k / 8 words) where int8 ones (k / 4) belong.
    let m = message(t(&[2, 64]).quant_matmul_w8a8(&codes(3, 8), &scales(3, 2)));
    assert!(m.contains("quant_matmul_w8a8") && m.contains("[2, 64]") && m.contains("[3, 16]"), "{m}");
    let ints = Tensor::zeros(&dev, &[2, 64], DType::I32).unwrap();
    let m = message(ints.quant_matmul_w8a8(&codes(3, 16), &scales(3, 1)));
    assert!(m.contains("quant_matmul_w8a8") && m.contains("i32") && m.contains("[2, 64]"), "{m}");
    // Past k · 128² > i32::MAX the integer sums could overflow.
    let k = 131_072;
    let x_codes = Tensor::zeros(&dev, &[1, k / 4], DType::U32).unwrap();
    let m = message(x_codes.quant_matmul(&codes(1, k / 4), &scales(1, 1), QuantFormat::INT8));
    assert!(m.contains("quant_matmul:") && m.contains(&format!("k = {k}")) && m.contains("[1, 32768]"), "{m}");
    let fits = Tensor::zeros(&dev, &[1, (k - 4) / 4], DType::U32).unwrap();
    assert!(fits.quant_matmul(&codes(1, (k - 4) / 4), &scales(1, 1), QuantFormat::INT8).is_ok());
}

#[test]
fn integer_scales_are_refused_by_the_weight_ops() {
    use kiln_core::QuantFormat;
    let dev = cpu();
    let codes = Tensor::zeros(&dev, &[3, 16], DType::U32).unwrap();
    let int_scales = Tensor::zeros(&dev, &[3, 1], DType::I32).unwrap();
    let m = message(t(&[2, 64]).quant_matmul(&codes, &int_scales, QuantFormat::INT8));
    assert!(m.contains("quant_matmul") && m.contains("float scales") && m.contains("i32 [3, 1]"), "{m}");
    let m = message(Tensor::dequantize(&codes, &int_scales, QuantFormat::INT8));
    assert!(m.contains("dequantize") && m.contains("float scales") && m.contains("i32"), "{m}");
    // Any float dtype is a scale: f16 (what quantize makes) and bf16.
    for dtype in [DType::F16, DType::BF16] {
        let scales = Tensor::zeros(&dev, &[3, 1], dtype).unwrap();
        assert!(t(&[2, 64]).quant_matmul(&codes, &scales, QuantFormat::INT8).is_ok(), "{dtype}");
    }
}

#[test]
fn sizes_near_the_integer_limits_are_errors_not_overflows() {
    let m = message(t(&[4]).narrow(0, 2, usize::MAX));
    assert!(m.contains("narrow") && m.contains("[4]"), "{m}");
    let m = message(t(&[2, 3]).reshape(&[isize::MAX, isize::MAX, -1]));
    assert!(m.contains("reshape") && m.contains("[2, 3]"), "{m}");
    let huge = [usize::MAX / 2, 4];
    let m = message(kiln_ops::random::normal(&cpu(), kiln_ops::Key::new(0), &huge, DType::F32, 0.0, 1.0));
    assert!(m.contains("normal") && m.contains("2^32"), "{m}");
    // The extreme steps take one element, from the start or the end.
    let x = Tensor::from_slice(&cpu(), &[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let first = x.slice(0, None, None, isize::MAX).unwrap();
    assert_eq!(pollster::block_on(first.to_vec::<f32>()).unwrap(), [1.0]);
    let last = x.slice(0, None, None, isize::MIN).unwrap();
    assert_eq!(pollster::block_on(last.to_vec::<f32>()).unwrap(), [3.0]);
}

#[test]
fn a_format_of_no_bits_is_refused_by_every_weight_op() {
    use kiln_core::QuantFormat;
    let dev = cpu();
    let none = QuantFormat { bits: 0, group: None };
    let codes = Tensor::zeros(&dev, &[3, 16], DType::U32).unwrap();
    let scales = Tensor::zeros(&dev, &[3, 1], DType::F32).unwrap();
    let bits = |m: String, op: &str| assert!(m.contains(op) && m.contains("0 bits"), "{m}");
    bits(message(t(&[3, 64]).quantize(none).map(|(codes, _)| codes)), "quantize");
    bits(message(Tensor::dequantize(&codes, &scales, none)), "dequantize");
    // Past QUANT_MATMUL_MAX_ROWS a GPU dequantizes first: both paths check.
    for rows in [2, 2 * kiln_ops::QUANT_MATMUL_MAX_ROWS] {
        bits(message(t(&[rows, 64]).quant_matmul(&codes, &scales, none)), "quant_matmul");
    }
}

#[test]
fn gradient_helpers_given_shapes_of_another_rank_are_errors() {
    use kiln_core::shape::SliceSpec;
    let m = message(t(&[3]).pad_to(&[5, 2]));
    assert_eq!(m, "pad_to: a tensor of [3] into the shape [5, 2] of another rank");
    let index = Tensor::zeros(&cpu(), &[2, 3], DType::I32).unwrap();
    let m = message(t(&[2, 3]).scatter_add(3, &index, &[4, 3]));
    assert!(m.starts_with("scatter_add: needs an axis of [4, 3]") && m.ends_with("got axis 3 and index [2, 3]"), "{m}");
    let m = message(t(&[2, 3]).scatter_add(0, &index, &[4, 3, 1]));
    assert!(m.starts_with("scatter_add: a tensor of [2, 3] into the shape [4, 3, 1]"), "{m}");
    let m = message(t(&[2]).unslice(&[SliceSpec { start: 0, len: 2, step: 0 }], &[4]));
    assert!(m.starts_with("unslice: needs one slice of nonzero step per axis of [4]"), "{m}");
    let ok = t(&[2]).unslice(&[SliceSpec { start: 1, len: 2, step: 1 }], &[4]).unwrap();
    assert_eq!(ok.shape(), [4]);
}

#[test]
fn an_upload_whose_values_do_not_fill_its_shape_is_an_error() {
    let m = cpu().upload(DType::F32, &[2, 2], &[1.0, 2.0]).unwrap_err().to_string();
    assert_eq!(m, "upload: 2 values do not fill shape [2, 2]");
    let m = cpu().upload(DType::F32, &[1 << 40, 1 << 40], &[1.0]).unwrap_err().to_string();
    assert_eq!(m, "upload: 1 values do not fill shape [1099511627776, 1099511627776]");
}

#[test]
fn a_misaligned_matmul_names_the_two_dimensions() {
    assert_eq!(
        message(t(&[2, 3]).matmul(&t(&[2, 3]))),
        "matmul: shapes [2, 3] and [2, 3] are not aligned (k = 3 vs 2)"
    );
    // A vector operand, as the user gave it.
    assert_eq!(message(t(&[4]).matmul(&t(&[3, 5]))), "matmul: shapes [4] and [3, 5] are not aligned (k = 4 vs 3)");
}

#[test]
fn dtype_errors_show_each_operands_own_shape() {
    let i = Tensor::zeros(&cpu(), &[3], DType::I32).unwrap();
    assert_eq!(message(t(&[2, 3]).add(&i)), "add: dtypes f32 [2, 3] and i32 [3] differ; cast one first");
    let cond = Tensor::zeros(&cpu(), &[2, 3], DType::Bool).unwrap();
    assert_eq!(
        message(Tensor::where_cond(&cond, &t(&[2, 3]), &i)),
        "where: dtypes f32 [2, 3] and i32 [3] differ; cast one first"
    );
    let h = Tensor::zeros(&cpu(), &[3, 2], DType::F16).unwrap();
    assert_eq!(message(t(&[2, 3]).matmul(&h)), "matmul: dtypes f32 [2, 3] and f16 [3, 2] differ; cast one first");
}

/// The operators are the methods: same values, same errors.
#[test]
fn operators_are_the_methods() {
    let dev = cpu();
    let a = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let b = Tensor::from_slice(&dev, &[10.0f32, 20.0], &[2]).unwrap();
    let read = |t: kiln_core::Result<Tensor>| pollster::block_on(t.unwrap().to_vec::<f32>()).unwrap();
    assert_eq!(read(&a + &b), [11.0, 22.0, 13.0, 24.0]);
    assert_eq!(read(&a - b.clone()), [-9.0, -18.0, -7.0, -16.0]);
    assert_eq!(read(a.clone() * &b), [10.0, 40.0, 30.0, 80.0]);
    assert_eq!(read(&a / 2.0), [0.5, 1.0, 1.5, 2.0]);
    assert_eq!(read(1.0 - &a), [0.0, -1.0, -2.0, -3.0]);
    assert_eq!(read(-&a), [-1.0, -2.0, -3.0, -4.0]);
    // An op's result on the left, and chained: (a @ a + b) * 2.
    assert_eq!(read((a.matmul(&a) + &b).unwrap() * 2.0), [34.0, 60.0, 50.0, 84.0]);
    let i = Tensor::from_slice(&dev, &[7i32, 8], &[2]).unwrap();
    assert_eq!(pollster::block_on((&i * 3.0).unwrap().to_vec::<i32>()).unwrap(), [21, 24]);
    assert_eq!(message(&a + &t(&[3])), "add: shapes [2, 2] and [3] cannot be broadcast together");
    assert_eq!(message(&a * &i), "mul: dtypes f32 [2, 2] and i32 [2] differ; cast one first");
    // An error on the left passes through unchanged.
    assert_eq!(message(a.matmul(&t(&[3, 1])) + &b), "matmul: shapes [2, 2] and [3, 1] are not aligned (k = 2 vs 3)");
}
