//! Capture and replay: a realization recorded once by the device's runtime
//! (its kernels, parameters, buffer plan and bindings) and replayed with new
//! input buffers: one submit, no graph building, no scheduling, no code
//! generation.

use crate::device::Device;
use crate::split::Parts;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{DeviceArray, Node, Prim, Realized};
use kiln_runtime::{Captured, Replayed, Staged, device_arrays};

/// A captured realization of `outputs` from `inputs`.
pub struct Program {
    device: Device,
    recorded: Box<dyn Captured>,
    /// How each output is stored: split outputs are recorded as their pieces.
    outputs: Vec<Parts>,
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
        let (inputs, _) = self.storage(inputs);
        let (leaves, parts) = self.storage(outputs);
        let recorded = self.runtime.capture(&inputs, &leaves)?;
        Ok(recorded.map(|recorded| Program { device: self.clone(), recorded, outputs: parts }))
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
        self.assemble(realized(self.replay_with(inputs, None)?.outputs)?)
    }

    /// `replay`, with output `read` also on its way to the host: on wgpu
    /// its copy to a mappable buffer is in the replay's own submit (a step
    /// whose result the host needs at once takes one submit, not two),
    /// where the output is a contiguous run of words; otherwise it is read
    /// by a submit of its own.
    pub fn replay_reading(&self, inputs: &[Node], read: usize) -> Result<(Vec<Node>, PendingRead)> {
        if read >= self.outputs.len() {
            return Err(KilnError::Invalid {
                op: "jit",
                detail: format!("reading output {read} of a function with {} outputs", self.outputs.len()),
            });
        }
        // The stored piece that is output `read`, where it is one piece.
        let leaf = (self.outputs[read] == Parts::Whole).then(|| leaf_count(&self.outputs[..read]));
        let replayed = self.replay_with(inputs, leaf)?;
        let outputs = self.assemble(realized(replayed.outputs)?)?;
        let how = match replayed.staged {
            Some(staged) => Pending::Staged(staged),
            None => Pending::Node(outputs[read].clone()),
        };
        Ok((outputs, PendingRead { device: self.device.clone(), how }))
    }

    fn replay_with(&self, inputs: &[Node], read: Option<usize>) -> Result<Replayed> {
        let (inputs, _) = self.device.storage(inputs);
        self.device.runtime.replay(&*self.recorded, &device_arrays("jit", &inputs)?, read)
    }

    /// The outputs from the stored pieces a replay gave.
    fn assemble(&self, leaves: Vec<Node>) -> Result<Vec<Node>> {
        let mut leaves = leaves.into_iter();
        self.outputs.iter().map(|p| p.assemble(&mut leaves)).collect()
    }
}

/// The stored pieces of outputs stored as `parts`.
fn leaf_count(parts: &[Parts]) -> usize {
    parts
        .iter()
        .map(|p| match p {
            Parts::Whole => 1,
            Parts::Split { parts, .. } => leaf_count(parts),
        })
        .sum()
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
            Pending::Staged(staged) => self.device.runtime.read_staged(staged).await,
        }
    }
}
