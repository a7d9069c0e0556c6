//! Tensors larger than one storage binding. A kernel may bind at most
//! `max_storage_buffer_binding_size` bytes of a buffer (128 MiB on
//! lavapipe, llvmpipe and browsers by default), and GPT-2's token table
//! alone is 154 MB. Such a tensor is held as pieces along one axis, each
//! in a buffer of its own: its node is a `Concat` of the pieces that is
//! never computed whole. `kiln-ops` builds every op over it piece by
//! piece; here the device uploads, realizes, reads and captures it as its
//! pieces.

use crate::device::Device;
use kiln_ir::error::Result;
use kiln_ir::interp::HostArray;
use kiln_ir::ir::{Node, Prim};
use kiln_ir::shape::numel;

/// How a tensor is stored: whole, or as pieces along `axis` (each of which
/// may be split again, along another axis).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Parts {
    /// One buffer.
    Whole,
    /// A `Concat` of `parts` along `axis`, kept as its pieces.
    Split { axis: usize, parts: Vec<Parts> },
}

impl Parts {
    /// The node that `leaves` (the stored pieces, in order) make: the
    /// inverse of [`Device::storage`].
    pub fn assemble(&self, leaves: &mut impl Iterator<Item = Node>) -> Result<Node> {
        match self {
            Parts::Whole => Ok(leaves.next().expect("a leaf per whole part")),
            Parts::Split { axis, parts } => {
                let pieces = parts.iter().map(|p| p.assemble(leaves)).collect::<Result<Vec<_>>>()?;
                Node::new(Prim::Concat { axis: *axis }, pieces)
            }
        }
    }
}

/// The bytes `node` takes in device memory.
pub fn node_bytes(node: &Node) -> u64 {
    node.dtype().storage_bytes(numel(node.shape()))
}

impl Device {
    /// The most bytes one tensor is stored in before it is split into
    /// pieces: the adapter's binding limit (or a lower one set by
    /// [`Device::with_binding_limit`]), rounded down to a power of two so
    /// that the buffer pool's size classes stay within it too.
    pub fn binding_limit(&self) -> u64 {
        self.binding_limit
    }

    /// This device with tensors of more than `bytes` (rounded down to a
    /// power of two) held as pieces: to run natively what a browser's
    /// default 128 MiB binding allows, or to test splitting on small data.
    pub fn with_binding_limit(&self, bytes: u64) -> Device {
        Device { binding_limit: power_of_two_at_most(bytes.min(self.binding_limit)), ..self.clone() }
    }

    /// Whether `node` is a tensor held as pieces (a `Concat` over this
    /// device's binding limit).
    pub fn is_split(&self, node: &Node) -> bool {
        matches!(node.prim(), Prim::Concat { .. }) && node_bytes(node) > self.binding_limit
    }

    /// The stored pieces of `nodes` in order (a whole node is its own
    /// piece), each node's [`Parts`] beside them.
    pub fn storage(&self, nodes: &[Node]) -> (Vec<Node>, Vec<Parts>) {
        let mut leaves = Vec::new();
        let parts = nodes.iter().map(|n| self.collect_parts(n, &mut leaves)).collect();
        (leaves, parts)
    }

    fn collect_parts(&self, node: &Node, leaves: &mut Vec<Node>) -> Parts {
        match node.prim() {
            Prim::Concat { axis } if self.is_split(node) => {
                let parts = node.inputs().iter().map(|n| self.collect_parts(n, leaves)).collect();
                Parts::Split { axis: *axis, parts }
            }
            _ => {
                leaves.push(node.clone());
                Parts::Whole
            }
        }
    }

    /// `values` uploaded as pieces of rows (axis 0) within the binding
    /// limit, joined by a `Concat` node, where they exceed it.
    pub(crate) fn upload_split(&self, dtype: kiln_ir::DType, shape: &[usize], values: &[f64]) -> Result<Option<Node>> {
        let row: usize = shape.iter().skip(1).product();
        let row_bytes = dtype.storage_bytes(row).max(1);
        if shape.is_empty() || dtype.storage_bytes(values.len()) <= self.binding_limit || row_bytes > self.binding_limit
        {
            // A single row over the limit stays whole: the runtime's upload
            // names the limit it exceeds.
            return Ok(None);
        }
        let rows_per_piece = ((self.binding_limit / row_bytes) as usize).max(1);
        let mut pieces = Vec::new();
        for chunk in values.chunks(rows_per_piece * row.max(1)) {
            let mut piece_shape = shape.to_vec();
            piece_shape[0] = chunk.len() / row.max(1);
            let prim = Prim::Input { shape: piece_shape.clone(), dtype };
            pieces.push(Node::realized(prim, self.runtime.upload(dtype, &piece_shape, chunk)?)?);
        }
        Ok(Some(Node::new(Prim::Concat { axis: 0 }, pieces)?))
    }

    /// A split `node` read back: its pieces read and joined on the host.
    pub(crate) async fn read_split(&self, node: &Node) -> Result<HostArray> {
        let (leaves, parts) = self.storage(std::slice::from_ref(node));
        self.runtime.realize(&leaves).await?;
        let mut hosts = Vec::with_capacity(leaves.len());
        for leaf in &leaves {
            hosts.push(self.runtime.read(leaf).await?);
        }
        Ok(join(&parts[0], &mut hosts.into_iter()))
    }
}

/// The largest power of two at most `bytes` (at least 4).
fn power_of_two_at_most(bytes: u64) -> u64 {
    1u64 << (63 - bytes.max(4).leading_zeros())
}

/// Host arrays of `parts`' pieces joined into one.
fn join(parts: &Parts, hosts: &mut impl Iterator<Item = HostArray>) -> HostArray {
    let Parts::Split { axis, parts } = parts else {
        return hosts.next().expect("a host array per whole part");
    };
    let pieces: Vec<HostArray> = parts.iter().map(|p| join(p, hosts)).collect();
    let mut shape = pieces[0].shape.clone();
    shape[*axis] = pieces.iter().map(|p| p.shape[*axis]).sum();
    let outer: usize = shape[..*axis].iter().product();
    let mut data = Vec::with_capacity(numel(&shape));
    for o in 0..outer {
        for p in &pieces {
            let block = p.data.len() / outer.max(1);
            data.extend_from_slice(&p.data[o * block..(o + 1) * block]);
        }
    }
    HostArray::new(pieces[0].dtype, shape, data)
}
