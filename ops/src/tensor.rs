//! The `Tensor` type: a graph node plus the device it lives on.

use kiln_core::interp::HostArray;
use kiln_core::{DType, Device, Element, KilnError, Node, Prim, Result};

/// A lazy n-dimensional array on a device: a node of the computation graph,
/// computed when realized or read back. Clones share the node.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub(crate) node: Node,
    pub(crate) device: Device,
}

/// `KILN_EAGER=1` realizes every op as it is built (native only), so an
/// error shows at the line that caused it, PyTorch-style.
#[cfg(not(target_arch = "wasm32"))]
fn eager() -> bool {
    static EAGER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *EAGER.get_or_init(|| std::env::var("KILN_EAGER").is_ok_and(|v| v == "1"))
}

/// Run the body of a composite op (one built of other ops) so that its
/// errors name `op`, the op the user called, not the primitive that failed.
pub(crate) fn composite<T>(op: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    body().map_err(|e| e.in_op(op))
}

impl Tensor {
    /// Wrap a new node built from `prim` over `inputs` (all on `device`).
    pub(crate) fn build(device: &Device, prim: Prim, inputs: &[&Tensor]) -> Result<Tensor> {
        for t in inputs {
            if t.device != *device {
                return Err(KilnError::DeviceMismatch {
                    op: prim.name(),
                    left: device.info().name,
                    right: t.device.info().name,
                });
            }
        }
        let node = Node::new(prim, inputs.iter().map(|t| t.node.clone()).collect())?;
        let pieces = inputs.iter().any(|t| device.is_split(&t.node));
        if (pieces || kiln_core::node_bytes(&node) > device.binding_limit())
            && let Some(t) = crate::split::build(device, node.prim(), inputs, &node)?
        {
            return Ok(t);
        }
        let t = Tensor { node, device: device.clone() };
        #[cfg(not(target_arch = "wasm32"))]
        if eager() {
            pollster::block_on(t.realize())?;
        }
        Ok(t)
    }

    /// Build a node over `self` and `others`, on `self`'s device.
    pub(crate) fn op(&self, prim: Prim, others: &[&Tensor]) -> Result<Tensor> {
        let inputs: Vec<&Tensor> = std::iter::once(self).chain(others.iter().copied()).collect();
        Tensor::build(&self.device, prim, &inputs)
    }

    /// The size of each axis.
    pub fn shape(&self) -> &[usize] {
        self.node.shape()
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.node.dtype()
    }
    /// The number of axes (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.shape().len()
    }
    /// The number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }
    /// The device the tensor lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// The graph node (for transforms and debugging).
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Compute this tensor (and what it needs) now; no readback.
    pub async fn realize(&self) -> Result<()> {
        self.device.realize(std::slice::from_ref(&self.node)).await
    }

    /// Compute several tensors in one realization (one submit on a GPU).
    pub async fn realize_all(tensors: &[&Tensor]) -> Result<()> {
        let Some(first) = tensors.first() else {
            return Ok(());
        };
        let nodes: Vec<Node> = tensors.iter().map(|t| t.node.clone()).collect();
        first.device.realize(&nodes).await
    }

    /// Read the values back, row-major. `T` must match the dtype.
    pub async fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(KilnError::DType {
                op: "to_vec",
                detail: format!("tensor of shape {:?} is {}, asked for {}", self.shape(), self.dtype(), T::DTYPE),
            });
        }
        Ok(self.to_host().await?.data.into_iter().map(T::from_f64).collect())
    }

    /// Read the values back as f64 with shape and dtype.
    pub async fn to_host(&self) -> Result<HostArray> {
        self.device.read(&self.node).await
    }

    /// The single value of a one-element tensor.
    pub async fn item<T: Element>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(KilnError::Shape {
                op: "item",
                detail: format!("needs one element, shape is {:?}", self.shape()),
            });
        }
        Ok(self.to_vec::<T>().await?[0])
    }
}
