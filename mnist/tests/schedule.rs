//! The demo's jit-captured training steps as schedules, made on the CPU
//! reference for WebGPU's guaranteed capabilities: no adapter is needed.
//! The item counts are the kernels per step that the fusion rules gave
//! before the scheduler became a device-free layer (docs/BENCHMARKS.md's
//! "demo/training" row: MLP 21); a change of either is a change of fusion.

use kiln::core::codegen::Caps;
use kiln::core::ir::buffer_id;
use kiln::core::sched::schedule::Schedule;
use kiln::core::schedule_for;
use kiln::prelude::*;
use kiln_mnist::{Config, ModelKind, Trainer};
use kiln_nn::data::Mnist;
use std::sync::Arc;

/// The schedule of the model's next training step, and the step's outputs.
fn step_schedule(model: ModelKind, precision: DType) -> (Schedule, Vec<kiln::core::Node>) {
    let data = Arc::new(Mnist::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/mnist-10k")).unwrap());
    let config = Config { model, epochs: 1, batch_size: 64, lr: 2e-3, seed: 5, precision };
    let mut t = Trainer::new(&Device::cpu(), data, config).unwrap();
    let outs = kiln::block_on(t.traced_step()).unwrap();
    let nodes: Vec<_> = outs.leaves().iter().map(|t| t.node().clone()).collect();
    (schedule_for(&Caps::webgpu(), &nodes).unwrap(), nodes)
}

fn count(s: &Schedule, kind: &str) -> usize {
    s.items.iter().filter(|k| k.item.kind() == kind).count()
}

/// Every item binds at most WebGPU's 8 storage buffers.
fn assert_bindings_fit(s: &Schedule) {
    for k in &s.items {
        let mut bound: Vec<_> = k.item.reads().iter().chain(k.item.writes()).map(buffer_id).collect();
        bound.sort();
        bound.dedup();
        assert!(bound.len() <= 8, "{} binds {} buffers", k.op, bound.len());
    }
}

#[test]
fn the_mlp_adam_step_is_21_items() {
    let (s, outputs) = step_schedule(ModelKind::Mlp, DType::F32);
    assert_eq!(s.items.len(), 21);
    // Two layers forward and back: each weight's product, its two input
    // gradients' minus the first layer's (x needs none).
    assert_eq!(count(&s, "matmul"), 5);
    // Softmax cross-entropy forward, its gradient, and the mean loss.
    assert_eq!(count(&s, "row"), 3);
    assert_bindings_fit(&s);
    // Every output the step computes (the loss, 4 parameters, Adam's state)
    // lands in a slot; the rest are its realized inputs passed through (an
    // f32 run's loss-scale state).
    let computed: Vec<_> = outputs.iter().filter(|o| o.realized_value().is_none()).collect();
    assert_eq!(computed.len(), 1 + 4 + 4 + 4 + 2);
    for o in computed {
        assert!(s.results.iter().any(|(n, _)| n.id() == o.id()), "{:?} has no slot", o.prim());
    }
}

/// f16 with dynamic loss scaling: the casts, one reduction per gradient for
/// the overflow flag, and the skip-on-overflow selects. The flag is computed
/// once (it reads the four reductions; inlined into each update it crowded
/// their bindings and split them: 54 items).
#[test]
fn the_mlp_f16_step_is_45_items_with_its_overflow_flag_computed_once() {
    let (s, outputs) = step_schedule(ModelKind::Mlp, DType::F16);
    assert_eq!(s.items.len(), 45);
    assert_bindings_fit(&s);
    let ands: Vec<u64> = kiln::core::Node::topo_unrealized(&outputs)
        .iter()
        .filter(|n| n.prim().name() == "logical_and")
        .map(|n| n.id())
        .collect();
    assert_eq!(ands.len(), 4, "one per gradient");
    let computing = s.items.iter().filter(|k| k.covers.iter().any(|c| ands.contains(c))).count();
    assert_eq!(computing, 1, "the flag is computed in one kernel");
}

/// 84 until shared views of a matmul's epilogue read the epilogue's own
/// buffer (two kernels fewer); 82 until a matmul's epilogue and a row
/// kernel could be computed through a reshape of their elements.
#[test]
fn the_cnn_adam_step_is_80_items() {
    let (s, _) = step_schedule(ModelKind::Cnn, DType::F32);
    assert_eq!(s.items.len(), 80);
    assert_bindings_fit(&s);
}
