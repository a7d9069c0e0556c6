//! `jit(f)`: capture what `f` computes on its first call for each input
//! signature (device, shapes, dtypes, layouts) and replay it afterwards:
//! one submit, no graph building, scheduling or code generation.
//!
//! Sharp edge: `f` runs only at capture. Anything it reads besides its
//! inputs (a tensor from outside, a Rust number such as a learning rate)
//! is frozen at its capture-time value.

use crate::Tensor;
use kiln_core::ir::DeviceArray as GpuArray;
use kiln_core::{DType, KilnError, Node, PendingRead, Program, Realized, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One input as a capture sees it: shape, dtype, strides, offset, and the
/// first input sharing its buffer (aliasing changes what a replay binds).
type InputSig = (Vec<usize>, DType, Vec<isize>, usize, usize);
/// A device (by id) and the signature of every input.
type Key = (usize, Vec<InputSig>);

pub struct Jit<F> {
    f: F,
    programs: Mutex<HashMap<Key, Arc<Program>>>,
    captures: AtomicUsize,
}

/// Wrap `f` (a pure function of its input tensors) for capture and replay.
pub fn jit<F>(f: F) -> Jit<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    Jit { f, programs: Mutex::default(), captures: AtomicUsize::new(0) }
}

fn gpu_array(t: &Tensor) -> Option<GpuArray> {
    match t.node().realized_value() {
        Some(Realized::Gpu(a)) => Some(a),
        _ => None,
    }
}

impl<F> Jit<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    /// `f(inputs)` as a lazy graph: neither captured nor realized, to look
    /// at what a call computes (its schedule, its picture).
    pub fn trace(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        (self.f)(inputs)
    }

    /// `f(inputs)`: captured on the first call with this signature,
    /// replayed on later ones. Outputs are realized.
    pub async fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(self.run(inputs, None).await?.0)
    }

    /// `call`, with output `read` on its way to the host: a replay copies
    /// it for reading in its own submit (one submit for the step and its
    /// result), which [`PendingRead::wait`] then maps.
    pub async fn call_reading(&self, inputs: &[Tensor], read: usize) -> Result<(Vec<Tensor>, PendingRead)> {
        let (outputs, pending) = self.run(inputs, Some(read)).await?;
        match pending {
            Some(p) => Ok((outputs, p)),
            None => match outputs.get(read) {
                Some(t) => {
                    let p = PendingRead::later(t.node().clone(), t.device().clone());
                    Ok((outputs, p))
                }
                None => Err(KilnError::Invalid {
                    op: "jit",
                    detail: format!("reading output {read} of a function with {} outputs", outputs.len()),
                }),
            },
        }
    }

    /// The outputs, and output `read`'s pending read where a replay staged it.
    async fn run(&self, inputs: &[Tensor], read: Option<usize>) -> Result<(Vec<Tensor>, Option<PendingRead>)> {
        let Some(first) = inputs.first() else { return Ok(((self.f)(inputs)?, None)) };
        let device = first.device().clone();
        if let Some(t) = inputs.iter().find(|t| *t.device() != device) {
            return Err(KilnError::DeviceMismatch {
                op: "jit",
                left: device.info().name,
                right: t.device().info().name,
            });
        }
        Tensor::realize_all(&inputs.iter().collect::<Vec<_>>()).await?;
        let arrays: Vec<Option<GpuArray>> = inputs.iter().map(gpu_array).collect();
        if arrays.iter().any(Option::is_none) {
            // The CPU reference: nothing to capture.
            let outputs = (self.f)(inputs)?;
            Tensor::realize_all(&outputs.iter().collect::<Vec<_>>()).await?;
            return Ok((outputs, None));
        }
        let arrays: Vec<GpuArray> = arrays.into_iter().flatten().collect();
        let key = (device.id(), signature(&arrays));
        let nodes: Vec<Node> = inputs.iter().map(|t| t.node().clone()).collect();
        let cached = self.programs.lock().unwrap().get(&key).cloned();
        if let Some(program) = cached {
            let (out, pending) = match read {
                Some(k) => program.replay_reading(&nodes, k).map(|(out, p)| (out, Some(p)))?,
                None => (program.replay(&nodes)?, None),
            };
            return Ok((out.into_iter().map(|n| Tensor::from_node(n, device.clone())).collect(), pending));
        }
        let outputs = (self.f)(inputs)?;
        if let Some(t) = outputs.iter().find(|t| *t.device() != device) {
            return Err(KilnError::DeviceMismatch {
                op: "jit output",
                left: device.info().name,
                right: t.device().info().name,
            });
        }
        let out_nodes: Vec<Node> = outputs.iter().map(|t| t.node().clone()).collect();
        device.tune_matmuls(&out_nodes).await?;
        if let Some(program) = device.capture(&nodes, &out_nodes)? {
            self.captures.fetch_add(1, Ordering::Relaxed);
            self.programs.lock().unwrap().insert(key, Arc::new(program));
        }
        Ok((outputs, None))
    }

    /// How many times `f` has been captured (once per input signature).
    pub fn captures(&self) -> usize {
        self.captures.load(Ordering::Relaxed)
    }
}

fn signature(arrays: &[GpuArray]) -> Vec<InputSig> {
    arrays
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let first = arrays[..i].iter().position(|b| Arc::ptr_eq(&a.buffer, &b.buffer)).unwrap_or(i);
            (a.layout.shape.clone(), a.dtype, a.layout.strides.clone(), a.layout.offset, first)
        })
        .collect()
}
