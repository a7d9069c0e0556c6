//! `jit(f)`: capture what `f` computes on its first call for each input
//! signature (device, shapes, dtypes, layouts) and replay it afterwards:
//! one submit, no graph building, scheduling or code generation.
//!
//! This is the flat form, over a slice of tensors; `kiln::jit` (crate
//! `kiln-autodiff`) takes and returns parameter trees on top of
//! [`Captures`].
//!
//! Sharp edge: `f` runs only at capture. Anything it reads besides its
//! inputs (a tensor from outside, a Rust number such as a learning rate)
//! is frozen at its capture-time value.

use crate::Tensor;
use kiln_core::ir::DeviceArray as GpuArray;
use kiln_core::{DType, KilnError, Node, Parts, PendingRead, Program, Realized, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One input as a capture sees it: shape, dtype, strides, offset, and the
/// first input sharing its buffer (aliasing changes what a replay binds).
type InputSig = (Vec<usize>, DType, Vec<isize>, usize, usize);
/// A device (by id), the signature of every input, and the caller's own
/// part of the key (a tree's leaf paths).
/// Inputs held as pieces count by their pieces ([`Parts`]).
type Key = (usize, Vec<InputSig>, Vec<Parts>, Vec<String>);

/// Programs captured per input signature, each kept with a `T` of the
/// caller's (what it needs to rebuild a replay's outputs: a tree's
/// structure). The engine under both jit forms.
pub struct Captures<T> {
    programs: Mutex<HashMap<Key, (Arc<Program>, T)>>,
    count: AtomicUsize,
}

impl<T> Default for Captures<T> {
    fn default() -> Self {
        Captures { programs: Mutex::default(), count: AtomicUsize::new(0) }
    }
}

/// What one call of a captured function gives back.
pub struct Ran<T> {
    /// The outputs, realized.
    pub outputs: Vec<Tensor>,
    /// The output asked to be read, staged by a replay's own submit.
    pub pending: Option<PendingRead>,
    /// The caller's `T`: from this call's trace, or kept with the program.
    pub kept: T,
}

fn gpu_array(node: &Node) -> Option<GpuArray> {
    match node.realized_value() {
        Some(Realized::Gpu(a)) => Some(a),
        _ => None,
    }
}

impl<T: Clone> Captures<T> {
    /// How many programs were captured (one per input signature).
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Replay the program captured for `inputs`' signature (with `tag`,
    /// the caller's part of the key), or run `trace` and capture what it
    /// builds. `read` stages that output for reading in a replay's submit.
    pub async fn run(
        &self,
        inputs: &[Tensor],
        tag: Vec<String>,
        read: Option<usize>,
        trace: impl FnOnce(&[Tensor]) -> Result<(Vec<Tensor>, T)>,
    ) -> Result<Ran<T>> {
        let Some(first) = inputs.first() else {
            let (outputs, kept) = trace(inputs)?;
            return Ok(Ran { outputs, pending: None, kept });
        };
        let device = first.device().clone();
        if let Some(t) = inputs.iter().find(|t| *t.device() != device) {
            return Err(KilnError::DeviceMismatch {
                op: "jit",
                left: device.info().name,
                right: t.device().info().name,
            });
        }
        Tensor::realize_all(&inputs.iter().collect::<Vec<_>>()).await?;
        let nodes: Vec<Node> = inputs.iter().map(|t| t.node().clone()).collect();
        let (leaves, parts) = device.storage(&nodes);
        let arrays: Vec<Option<GpuArray>> = leaves.iter().map(gpu_array).collect();
        if arrays.iter().any(Option::is_none) {
            // The CPU reference: nothing to capture.
            let (outputs, kept) = trace(inputs)?;
            Tensor::realize_all(&outputs.iter().collect::<Vec<_>>()).await?;
            return Ok(Ran { outputs, pending: None, kept });
        }
        let arrays: Vec<GpuArray> = arrays.into_iter().flatten().collect();
        let key = (device.id(), signature(&arrays), parts, tag);
        let cached = self.programs.lock().unwrap().get(&key).cloned();
        if let Some((program, kept)) = cached {
            let (out, pending) = match read {
                Some(k) => program.replay_reading(&nodes, k).map(|(out, p)| (out, Some(p)))?,
                None => (program.replay(&nodes)?, None),
            };
            let outputs = out.into_iter().map(|n| Tensor::from_node(n, device.clone())).collect();
            return Ok(Ran { outputs, pending, kept });
        }
        let (outputs, kept) = trace(inputs)?;
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
            self.count.fetch_add(1, Ordering::Relaxed);
            self.programs.lock().unwrap().insert(key, (Arc::new(program), kept.clone()));
        }
        Ok(Ran { outputs, pending: None, kept })
    }
}

impl<T> Ran<T> {
    /// The outputs with output `read`'s pending read: the one a replay
    /// staged, or a read of the realized output.
    pub fn reading(self, read: usize) -> Result<(Vec<Tensor>, PendingRead, T)> {
        let pending = match self.pending {
            Some(p) => p,
            None => match self.outputs.get(read) {
                Some(t) => PendingRead::later(t.node().clone(), t.device().clone()),
                None => {
                    return Err(KilnError::Invalid {
                        op: "jit",
                        detail: format!("reading output {read} of a function with {} outputs", self.outputs.len()),
                    });
                }
            },
        };
        Ok((self.outputs, pending, self.kept))
    }
}

/// A function of a slice of tensors, captured and replayed: see [`jit`].
pub struct Jit<F> {
    f: F,
    captures: Captures<()>,
}

/// Wrap `f` (a pure function of its input tensors) for capture and replay.
pub fn jit<F>(f: F) -> Jit<F>
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>>,
{
    Jit { f, captures: Captures::default() }
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
        Ok(self.captures.run(inputs, Vec::new(), None, |xs| Ok(((self.f)(xs)?, ()))).await?.outputs)
    }

    /// `call`, with output `read` on its way to the host: a replay copies
    /// it for reading in its own submit (one submit for the step and its
    /// result), which [`PendingRead::wait`] then maps.
    pub async fn call_reading(&self, inputs: &[Tensor], read: usize) -> Result<(Vec<Tensor>, PendingRead)> {
        let ran = self.captures.run(inputs, Vec::new(), Some(read), |xs| Ok(((self.f)(xs)?, ()))).await?;
        let (outputs, pending, ()) = ran.reading(read)?;
        Ok((outputs, pending))
    }

    /// How many times `f` has been captured (once per input signature).
    pub fn captures(&self) -> usize {
        self.captures.count()
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
