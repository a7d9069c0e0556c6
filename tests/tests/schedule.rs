//! The scheduler's fusion results as plain data: schedules made for
//! WebGPU's guaranteed capabilities from graphs built on the CPU
//! reference, so no adapter is needed (or looked for).

use kiln::core::codegen::Caps;
use kiln::core::ir::buffer_id;
use kiln::core::sched::schedule::{Item, Schedule, slot_of};
use kiln::core::schedule_for;
use kiln::prelude::*;

fn schedule(outputs: &[&Tensor]) -> Schedule {
    let nodes: Vec<_> = outputs.iter().map(|t| t.node().clone()).collect();
    schedule_for(&Caps::webgpu(), &nodes).unwrap()
}

fn kinds(s: &Schedule) -> Vec<&'static str> {
    s.items.iter().map(|k| k.item.kind()).collect()
}

/// The CPU reference device all of a test's tensors live on.
fn cpu() -> Device {
    static CPU: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    CPU.get_or_init(Device::cpu).clone()
}

fn input(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let values: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect();
    Tensor::from_slice(&cpu(), &values, shape).unwrap()
}

#[test]
fn an_eight_op_chain_is_one_elementwise_item() {
    let ops: [fn(&Tensor) -> kiln::Result<Tensor>; 8] = [
        |t| t.exp(),
        |t| t.mul_scalar(2.0),
        |t| t.add_scalar(1.0),
        |t| t.sqrt(),
        |t| t.neg(),
        |t| t.abs(),
        |t| t.log(),
        |t| t.tanh(),
    ];
    let mut chain = vec![input(&[64, 100])];
    for op in ops {
        chain.push(op(chain.last().unwrap()).unwrap());
    }
    let y = chain.last().unwrap();
    let s = schedule(&[y]);
    assert_eq!(kinds(&s), ["elementwise"]);
    // It computes all eight ops and writes one new slot that the result lives in.
    for t in &chain[1..] {
        assert!(s.items[0].covers.contains(&t.node().id()), "{:?} not covered", t.node().prim());
    }
    assert_eq!(s.results.len(), 1);
    let out = slot_of(&s.results[0].1.buffer).expect("a slot");
    assert!(!s.slots[out].external);
    assert_eq!(s.slots[out].bytes(), 64 * 100 * 4);
}

#[test]
fn softmax_is_one_row_item() {
    let s = schedule(&[&input(&[32, 10]).softmax(-1).unwrap()]);
    assert_eq!(kinds(&s), ["row"]);
    let Item::Row { stages, per_row, .. } = &s.items[0].item else { unreachable!() };
    assert_eq!((stages.len(), *per_row), (2, false), "a max and a sum, then one value per element");
}

#[test]
fn a_dense_layer_with_relu_is_one_matmul_item() {
    let (x, w, b) = (input(&[32, 64]), input(&[64, 16]), input(&[16]));
    let y = x.matmul(&w).unwrap().add(&b).unwrap().relu().unwrap();
    let s = schedule(&[&y]);
    assert_eq!(kinds(&s), ["matmul"]);
    let Item::Matmul { epilogue, .. } = &s.items[0].item else { unreachable!() };
    assert!(epilogue.is_some(), "bias and relu are the matmul's epilogue");
    // x, w and b are inputs realized elsewhere: slots of their own, read only.
    let external: Vec<_> = s.slots.iter().filter(|sl| sl.external).collect();
    assert_eq!(external.len(), 3);
}

#[test]
fn slots_live_from_the_item_that_writes_them_to_the_last_that_reads_them() {
    // A full reduction is a tree reduction (its own item), then the division reads it.
    let x = input(&[512, 300]);
    let total = x.sum(&[], false).unwrap();
    let y = x.div(&total).unwrap().exp().unwrap();
    let s = schedule(&[&y]);
    assert_eq!(kinds(&s), ["reduce", "elementwise"]);
    let Item::Reduce { values, .. } = &s.items[0].item else { unreachable!() };
    let sum = slot_of(values).unwrap();
    assert_eq!(s.slots[sum].lifetime, Some((0, 1)));
    let out = slot_of(&s.results.last().unwrap().1.buffer).unwrap();
    assert_eq!(s.slots[out].lifetime, Some((1, 1)));
}

#[test]
fn every_item_binds_at_most_eight_buffers() {
    // The gradient of a cross-entropy over a product, which once fused
    // into a kernel of 11 bindings.
    let x = input(&[5, 2, 6]);
    let labels = Tensor::from_slice(&cpu(), &[1i32, 4], &[2]).unwrap();
    let loss = |x: &Tensor| {
        let logits = x.prod(&[0], false)?;
        let one_hot = labels.one_hot(6, DType::F32)?;
        logits.log_softmax(-1)?.mul(&one_hot)?.sum(&[-1], false)?.neg()?.mean(&[], false)
    };
    let (value, grad) = kiln::value_and_grad(loss)(&x).unwrap();
    let s = schedule(&[&value, &grad]);
    for k in &s.items {
        let mut bound: Vec<_> = k.item.reads().iter().chain(k.item.writes()).map(buffer_id).collect();
        bound.sort();
        bound.dedup();
        assert!(bound.len() <= 8, "{} binds {}", k.op, bound.len());
    }
}
