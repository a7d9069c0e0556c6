//! Capture and replay: a realization recorded once by the device's runtime
//! (its kernels, parameters, buffer plan and bindings) and replayed with new
//! input buffers: one submit, no graph building, no scheduling, no code
//! generation.

use crate::device::Device;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{DeviceArray, Node, Prim, Realized};
use kiln_runtime::{Captured, Replayed, Staged, device_arrays};

/// A captured realization of `outputs` from `inputs`.
pub struct Program {
    device: Device,
    recorded: Box<dyn Captured>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Program({} launches on {})", self.kernels(), self.device.info().name)
    }
}

impl Device {
    /// Realize `outputs`, built from the realized `inputs`, and record how
    /// as a [`Program`] to replay on other inputs of the same shapes,
    /// dtypes and layouts. `None` on the CPU reference (nothing to record).
    pub fn capture(&self, inputs: &[Node], outputs: &[Node]) -> Result<Option<Program>> {
        if let Some(n) = outputs.iter().find(|n| n.reads_placeholder()) {
            return Err(KilnError::Invalid {
                op: "jit",
                detail: format!(
                    "an output of {} {:?} is computed from a vmap input inside the mapped function, whose values \
                     exist only batched: capture the mapped function instead",
                    n.dtype(),
                    n.shape()
                ),
            });
        }
        let recorded = self.0.capture(inputs, outputs)?;
        Ok(recorded.map(|recorded| Program { device: self.clone(), recorded }))
    }
}

impl Program {
    /// Kernels one replay launches.
    pub fn kernels(&self) -> usize {
        self.recorded.launches()
    }

    /// Run the program on `inputs` (realized, shaped and laid out as at
    /// capture); returns the outputs as realized nodes. One submit (on
    /// CUDA, one launch list).
    pub fn replay(&self, inputs: &[Node]) -> Result<Vec<Node>> {
        realized(self.replay_with(inputs, None)?.outputs)
    }

    /// `replay`, with output `read` also on its way to the host: on wgpu
    /// its copy to a mappable buffer is in the replay's own submit (a step
    /// whose result the host needs at once takes one submit, not two),
    /// where the output is a contiguous run of words; otherwise it is read
    /// by a submit of its own.
    pub fn replay_reading(&self, inputs: &[Node], read: usize) -> Result<(Vec<Node>, PendingRead)> {
        if read >= self.recorded.outputs() {
            return Err(KilnError::Invalid {
                op: "jit",
                detail: format!("reading output {read} of a function with {} outputs", self.recorded.outputs()),
            });
        }
        let replayed = self.replay_with(inputs, Some(read))?;
        let outputs = realized(replayed.outputs)?;
        let how = match replayed.staged {
            Some(staged) => Pending::Staged(staged),
            None => Pending::Node(outputs[read].clone()),
        };
        Ok((outputs, PendingRead { device: self.device.clone(), how }))
    }

    fn replay_with(&self, inputs: &[Node], read: Option<usize>) -> Result<Replayed> {
        self.device.0.replay(&*self.recorded, &device_arrays("jit", inputs)?, read)
    }
}

/// A replay's outputs as realized nodes.
fn realized(outputs: Vec<DeviceArray>) -> Result<Vec<Node>> {
    let node = |a: DeviceArray| {
        Node::realized(Prim::Input { shape: a.layout.shape.clone(), dtype: a.dtype }, Realized::Gpu(a))
    };
    outputs.into_iter().map(node).collect()
}

/// A replay's output on its way to the host ([`Program::replay_reading`]).
pub struct PendingRead {
    device: Device,
    how: Pending,
}

enum Pending {
    /// Copied toward the host by the replay's own submit.
    Staged(Box<dyn Staged>),
    /// Read by a submit of its own.
    Node(Node),
}

impl PendingRead {
    /// `node`'s value, read by a submit of its own when waited for.
    pub fn later(node: Node, device: Device) -> PendingRead {
        PendingRead { device, how: Pending::Node(node) }
    }

    /// The value, once the device has computed it.
    pub async fn wait(self) -> Result<HostArray> {
        match self.how {
            Pending::Node(node) => self.device.read(&node).await,
            Pending::Staged(staged) => self.device.0.read_staged(staged).await,
        }
    }
}
