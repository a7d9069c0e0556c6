//! jit on CUDA: a realization's launch list kept with each binding as an
//! input, an output or a fixed buffer (an intermediate, or a tensor read
//! from outside the inputs, as at capture), and enqueued again over other
//! inputs and fresh outputs: no tracing, scheduling or compiling; where
//! the addresses recur, as one CUDA graph ([`super::graphs`]).

use super::graphs::Graphs;
use super::launch_list::LaunchList;
use super::pool::Park;
use super::{CudaDevice, resolved, store};
use kiln_ir::error::{KilnError, Result};
use kiln_ir::ir::{DeviceArray, DeviceBuffer, Node, Role, Roles};
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
    /// First, so that its graphs go before the kernels they launch.
    graphs: Mutex<Graphs>,
    list: LaunchList<Slot>,
    inputs: usize,
    /// The bytes of each output buffer.
    output_sizes: Vec<u64>,
    outputs: Vec<OutputSpec>,
    /// Per output buffer where graphs are on: where its buffers come from,
    /// so that a replay's addresses recur.
    recurring: Vec<RecurringOutput>,
}

/// Outputs up to this size land in the program's own buffer when kept.
const LANDING_MAX_BYTES: u64 = 64 << 10;

/// An output buffer's sources: its park (the buffer it had two replays
/// ago, if that has been dropped since), and for a small output (a loss,
/// a metric) a buffer of the program's. A small output whose last buffer is
/// still held (a loop keeps its losses) is written there, then copied to a
/// fresh buffer, so its fresh address does not keep the others from
/// recurring.
struct RecurringOutput {
    park: Park,
    landing: Option<Arc<dyn DeviceBuffer>>,
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
        let output_sizes: Vec<u64> =
            roles.written.iter().map(|b| self.own(b).map(|b| b.size())).collect::<Result<_>>()?;
        let graphs = Graphs::new();
        let recurring = match graphs.on() {
            true => output_sizes.iter().map(|&bytes| self.recurring_output(bytes)).collect::<Result<_>>()?,
            false => Vec::new(),
        };
        Ok(CudaProgram { list, inputs: inputs.len(), output_sizes, outputs, graphs: Mutex::new(graphs), recurring })
    }

    fn recurring_output(&self, bytes: u64) -> Result<RecurringOutput> {
        let landing = match bytes <= LANDING_MAX_BYTES {
            true => Some(self.pool.get(&*self.engine, bytes, self.id)? as Arc<dyn DeviceBuffer>),
            false => None,
        };
        Ok(RecurringOutput { park: self.pool.park(bytes), landing })
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
        // Each output's fresh buffer, and where its launches write it.
        let (fresh, written): (Vec<_>, Vec<_>) = (0..program.output_sizes.len())
            .map(|j| {
                let Some(r) = program.recurring.get(j) else {
                    let b = self.pool.get(&*self.engine, program.output_sizes[j], self.id)? as Arc<dyn DeviceBuffer>;
                    return Ok((b.clone(), b));
                };
                let (b, parked) = self.pool.get_parked(&*self.engine, &r.park, self.id)?;
                let b = b as Arc<dyn DeviceBuffer>;
                Ok(match (&r.landing, parked) {
                    (Some(landing), false) => (b, landing.clone()),
                    _ => (b.clone(), b),
                })
            })
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let buffer = |s: &Slot| match s {
            Slot::Input(k) => inputs[*k].buffer.clone(),
            Slot::Output(j) => fresh[*j].clone(),
            Slot::Fixed(b) => b.clone(),
        };
        let bound = |s: &Slot| match s {
            Slot::Output(j) => written[*j].clone(),
            other => buffer(other),
        };
        let calls = self.calls(&program.list, |s| Ok(self.own(&bound(s))?.address()))?;
        let _order = self.enqueue_lock.lock().unwrap();
        // SAFETY: the buffers are those of the capture or as large (inputs
        // of the same shapes and layouts, outputs of the same sizes); the
        // fixed ones live as long as the program, and graphs are captured
        // and launched only with the addresses of this replay's buffers.
        unsafe { self.enqueue_calls(&calls, Some(&program.graphs))? };
        for ((written, out), &bytes) in written.iter().zip(&fresh).zip(&program.output_sizes) {
            if !Arc::ptr_eq(written, out) {
                self.engine.copy(self.own(written)?.memory(), self.own(out)?.memory(), bytes)?;
            }
        }
        Ok(program.outputs.iter().map(|o| DeviceArray { buffer: buffer(&o.slot), ..o.array.clone() }).collect())
    }
}
