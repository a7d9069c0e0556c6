//! jit on CUDA: a realization's launch list kept with each binding as an
//! input, an output or a fixed buffer (an intermediate, or a tensor read
//! from outside the inputs, as at capture), and enqueued again over other
//! inputs and fresh outputs: no tracing, scheduling or compiling; where
//! the addresses recur, as one CUDA graph ([`super::graphs`]).

use super::graphs::{Enqueued, Graphs};
use super::launch_list::LaunchList;
use super::{CudaDevice, resolved, store};
use kiln_ir::error::{KilnError, Result};
use kiln_ir::ir::{DeviceArray, DeviceBuffer, Node, Role, Roles};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

#[derive(Clone)]
enum Slot {
    Input(usize),
    /// A buffer the launches write that a replay returns (fresh each time).
    Output(usize),
    Fixed(Arc<dyn DeviceBuffer>),
}

/// An output of the program: where it lives, as which array.
struct OutputSpec {
    slot: Slot,
    array: DeviceArray,
}

/// A captured realization of some outputs from some inputs.
pub struct CudaProgram {
    list: LaunchList<Slot>,
    inputs: usize,
    /// The bytes of each output buffer.
    output_sizes: Vec<u64>,
    outputs: Vec<OutputSpec>,
    graphs: Mutex<Graphs>,
}

impl CudaProgram {
    /// Kernel launches and cuBLAS calls one replay enqueues.
    pub fn launches(&self) -> usize {
        self.list.len()
    }

    /// Outputs one replay gives.
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }
}

impl CudaDevice {
    /// Realize `outputs`, built from the realized `inputs`, and record how
    /// as a program to replay on other inputs of the same shapes, dtypes
    /// and layouts.
    pub fn capture(&self, inputs: &[DeviceArray], outputs: &[Node]) -> Result<CudaProgram> {
        let mut scheduler = self.scheduler();
        scheduler.run(outputs)?;
        let arrays = outputs.iter().map(|n| scheduler.array(n)).collect::<Result<Vec<_>>>()?;
        let schedule = scheduler.finish();
        let (list, slots) = self.record(&schedule)?;
        self.enqueue(&list, |b| Ok(self.own(b)?.address()))?;
        store(schedule.results, &slots);
        let arrays: Vec<DeviceArray> =
            arrays.into_iter().map(|a| DeviceArray { buffer: resolved(&slots, &a.buffer), ..a }).collect();
        let mut roles = Roles::new(inputs, &arrays);
        let mut slot_of = |b: &Arc<dyn DeviceBuffer>| match roles.of(b) {
            Role::Input(k) => Slot::Input(k),
            Role::Output(j) => Slot::Output(j),
            Role::Fixed => Slot::Fixed(b.clone()),
        };
        let list = list.map(&mut slot_of);
        let outputs = arrays.iter().map(|a| OutputSpec { slot: slot_of(&a.buffer), array: a.clone() }).collect();
        let output_sizes = roles.written.iter().map(|b| self.own(b).map(|b| b.size())).collect::<Result<_>>()?;
        Ok(CudaProgram { list, inputs: inputs.len(), output_sizes, outputs, graphs: Mutex::new(Graphs::new()) })
    }

    /// Enqueue `program` over `inputs` (shaped and laid out as at capture)
    /// and fresh output buffers; the outputs.
    pub fn replay(&self, program: &CudaProgram, inputs: &[DeviceArray]) -> Result<Vec<DeviceArray>> {
        if inputs.len() != program.inputs {
            return Err(KilnError::Invalid {
                op: "jit",
                detail: format!("a replay with {} inputs of a program captured with {}", inputs.len(), program.inputs),
            });
        }
        let fresh = program
            .output_sizes
            .iter()
            .map(|&bytes| Ok(self.pool.get(&*self.engine, bytes, self.id)? as Arc<dyn DeviceBuffer>))
            .collect::<Result<Vec<_>>>()?;
        let buffer = |s: &Slot| match s {
            Slot::Input(k) => inputs[*k].buffer.clone(),
            Slot::Output(j) => fresh[*j].clone(),
            Slot::Fixed(b) => b.clone(),
        };
        let calls = self.calls(&program.list, |s| Ok(self.own(&buffer(s))?.address()))?;
        let _order = self.enqueue_lock.lock().unwrap();
        // SAFETY: the buffers are those of the capture or as large (inputs
        // of the same shapes and layouts, outputs of the same sizes); the
        // fixed ones live as long as the program, and graphs are captured
        // and launched only with the addresses of this replay's buffers.
        let enqueued = unsafe { program.graphs.lock().unwrap().enqueue(&*self.engine, &calls)? };
        if enqueued == Enqueued::Graph {
            self.graphs_launched.fetch_add(1, Ordering::Relaxed);
        }
        self.count_submit(calls.len());
        Ok(program.outputs.iter().map(|o| DeviceArray { buffer: buffer(&o.slot), ..o.array.clone() }).collect())
    }
}
