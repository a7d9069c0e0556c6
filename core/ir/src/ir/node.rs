//! Lazy graph nodes: shared, cheap to clone, realized at most once.

use super::{DeviceArray, Prim, TypeInfo, infer::infer};
use crate::error::Result;
use crate::interp::HostArray;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A value a node has been computed to, on the device that computed it.
#[derive(Clone, Debug)]
pub enum Realized {
    Host(Arc<HostArray>),
    Gpu(DeviceArray),
}

#[derive(Debug)]
struct NodeInner {
    id: u64,
    prim: Prim,
    info: TypeInfo,
    /// Emptied once the node is realized, so that a long chain of updates
    /// (a training loop) does not keep every past value alive; kept while
    /// a live trace depends on the node (see [`Trace`]).
    inputs: Mutex<Vec<Node>>,
    realized: Mutex<Option<Realized>>,
    /// The live traces (grad, vjp) whose leaves this node depends on.
    traces: Vec<Arc<Trace>>,
    /// Whether this node is, or depends on, a value-less input (`vmap`'s
    /// per-example placeholder): known when built, so realizing and
    /// reading need no walk of the graph to find out.
    reads_placeholder: bool,
}

/// One run of a transform (grad, vjp) over a closure. While it is live,
/// nodes that depend on its leaves keep their inputs when realized, so the
/// transform can walk back through values the closure read (`item()`).
/// There is no global tape: a node knows its traces, a trace knows nothing.
#[derive(Debug)]
pub struct Trace {
    live: AtomicBool,
}

impl Trace {
    pub fn start() -> Arc<Trace> {
        Arc::new(Trace { live: AtomicBool::new(true) })
    }
    /// After this, realizing the trace's nodes frees their inputs again.
    pub fn end(&self) {
        self.live.store(false, Ordering::Relaxed);
    }
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }
}

#[derive(Clone, Debug)]
pub struct Node(Arc<NodeInner>);

/// Kernels carry shapes and strides in a 512-byte uniform block (`META_WORDS`),
/// which bounds the rank.
pub const MAX_RANK: usize = 8;

/// Kernels index elements with 32-bit integers.
pub const MAX_ELEMENTS: u64 = u32::MAX as u64;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The live traces any of `inputs` depends on, each once.
fn live_traces(inputs: &[Node]) -> Vec<Arc<Trace>> {
    let mut traces: Vec<Arc<Trace>> = Vec::new();
    for t in inputs.iter().flat_map(|n| &n.0.traces) {
        if t.is_live() && !traces.iter().any(|u| Arc::ptr_eq(t, u)) {
            traces.push(t.clone());
        }
    }
    traces
}

impl Node {
    /// Build a node; shape and dtype are inferred and checked here.
    pub fn new(prim: Prim, inputs: Vec<Node>) -> Result<Node> {
        let traces = live_traces(&inputs);
        Node::with_traces(prim, inputs, traces)
    }

    /// An input with no value of its own: `vmap`'s stand-in for one example
    /// of a batch, whose values exist only as the batch. Everything computed
    /// from it stays lazy when realized, and reading it is an error.
    pub fn placeholder(shape: Vec<usize>, dtype: crate::DType) -> Result<Node> {
        Node::build(Prim::Input { shape, dtype }, Vec::new(), Vec::new(), true)
    }

    fn with_traces(prim: Prim, inputs: Vec<Node>, traces: Vec<Arc<Trace>>) -> Result<Node> {
        let reads_placeholder = inputs.iter().any(|n| n.0.reads_placeholder);
        Node::build(prim, inputs, traces, reads_placeholder)
    }

    fn build(prim: Prim, inputs: Vec<Node>, traces: Vec<Arc<Trace>>, reads_placeholder: bool) -> Result<Node> {
        let infos: Vec<&TypeInfo> = inputs.iter().map(|n| &n.0.info).collect();
        let info = infer(&prim, &infos)?;
        if info.shape.len() > MAX_RANK {
            return Err(crate::KilnError::Shape {
                op: prim.name(),
                detail: format!("result shape {:?} has rank over {MAX_RANK}, the most kiln supports", info.shape),
            });
        }
        let elements = info.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        if elements.is_none_or(|n| n > MAX_ELEMENTS) {
            return Err(crate::KilnError::Shape {
                op: prim.name(),
                detail: format!(
                    "result shape {:?} has over {MAX_ELEMENTS} elements, the most kiln indexes",
                    info.shape
                ),
            });
        }
        Ok(Node(Arc::new(NodeInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            prim,
            info,
            inputs: Mutex::new(inputs),
            realized: Mutex::new(None),
            traces,
            reads_placeholder,
        })))
    }

    /// A node whose value already exists (uploaded data).
    pub fn realized(prim: Prim, value: Realized) -> Result<Node> {
        let node = Node::new(prim, vec![])?;
        node.set_realized(value);
        Ok(node)
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }
    pub fn prim(&self) -> &Prim {
        &self.0.prim
    }
    pub fn info(&self) -> &TypeInfo {
        &self.0.info
    }
    pub fn shape(&self) -> &[usize] {
        &self.0.info.shape
    }
    pub fn dtype(&self) -> crate::DType {
        self.0.info.dtype
    }
    pub fn inputs(&self) -> Vec<Node> {
        self.0.inputs.lock().unwrap().clone()
    }
    pub fn realized_value(&self) -> Option<Realized> {
        self.0.realized.lock().unwrap().clone()
    }

    /// Store the node's value and drop its inputs, unless a live trace
    /// still needs them to differentiate through this node.
    pub fn set_realized(&self, value: Realized) {
        *self.0.realized.lock().unwrap() = Some(value);
        if !self.0.traces.iter().any(|t| t.is_live()) {
            self.0.inputs.lock().unwrap().clear();
        }
    }

    /// Whether this node depends on a leaf of `trace`.
    pub fn is_traced_by(&self, trace: &Arc<Trace>) -> bool {
        self.0.traces.iter().any(|t| Arc::ptr_eq(t, trace))
    }

    /// An identity view of this node (a permute by the identity, free on
    /// every device) that is a leaf of `trace` as well as a function of this
    /// node for the traces it already depends on.
    pub fn trace_leaf(&self, trace: &Arc<Trace>) -> Result<Node> {
        let mut traces = live_traces(std::slice::from_ref(self));
        traces.push(trace.clone());
        Node::with_traces(self.identity(), vec![self.clone()], traces)
    }

    /// An identity view of this node that depends on no trace: the
    /// transforms see a constant (`stop_gradient`).
    pub fn detached(&self) -> Result<Node> {
        Node::with_traces(self.identity(), vec![self.clone()], Vec::new())
    }

    fn identity(&self) -> Prim {
        Prim::Permute { perm: (0..self.shape().len()).collect() }
    }

    /// Whether computing this node needs a value no device holds: it is,
    /// or depends on, a [`Node::placeholder`].
    pub fn reads_placeholder(&self) -> bool {
        self.0.reads_placeholder
    }

    /// Nodes reachable from `roots` that still need computing, inputs first.
    pub fn topo_unrealized(roots: &[Node]) -> Vec<Node> {
        let mut order = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut stack: Vec<(Node, bool)> = roots.iter().rev().map(|n| (n.clone(), false)).collect();
        while let Some((node, expanded)) = stack.pop() {
            if expanded {
                order.push(node);
                continue;
            }
            if node.realized_value().is_some() || !seen.insert(node.id()) {
                continue;
            }
            stack.push((node.clone(), true));
            for input in node.inputs().into_iter().rev() {
                stack.push((input, false));
            }
        }
        order
    }
}
