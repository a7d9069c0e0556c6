//! Pictures of a computation: the IR behind some tensors as Graphviz DOT,
//! as built (one node per primitive) or as the scheduler would run it (one
//! cluster per kernel launch). Take the picture before realizing: a
//! realized tensor is drawn as data, with nothing behind it.

use crate::Tensor;
use kiln_core::{Device, KilnError, Node, Prim, Result};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

/// What [`Graph::to_dot`] draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DotView {
    /// The primitives as the ops built them.
    Ir,
    /// The same primitives grouped into the kernels that would compute them;
    /// an edge between clusters is a value that goes through memory.
    Kernels,
}

/// The graph behind a set of tensors (all on one device).
pub struct Graph {
    device: Device,
    roots: Vec<Node>,
    names: HashMap<u64, String>,
}

impl Graph {
    /// The graph behind `outputs`; an error if there are none or they are on
    /// different devices.
    pub fn new(outputs: &[&Tensor]) -> Result<Graph> {
        let Some(first) = outputs.first() else {
            return Err(KilnError::Invalid { op: "graph", detail: "no tensors to draw".into() });
        };
        if let Some(other) = outputs.iter().find(|t| t.device() != first.device()) {
            return Err(KilnError::DeviceMismatch {
                op: "graph",
                left: first.device().info().name,
                right: other.device().info().name,
            });
        }
        Ok(Graph {
            device: first.device().clone(),
            roots: outputs.iter().map(|t| t.node().clone()).collect(),
            names: HashMap::new(),
        })
    }

    /// Label `t`'s node with `name` (parameters, inputs, the loss).
    pub fn name(mut self, t: &Tensor, name: &str) -> Graph {
        self.names.insert(t.node().id(), name.to_string());
        self
    }

    /// The graph as Graphviz DOT text: the primitives alone (`DotView::Ir`) or
    /// grouped into kernels (`DotView::Kernels`).
    pub fn to_dot(&self, view: DotView) -> Result<String> {
        let nodes = all_nodes(&self.roots);
        let place = match view {
            DotView::Ir => Placement::default(),
            DotView::Kernels => Placement::of(&self.device.plan_kernels(&self.roots)?, &nodes),
        };
        let mut out = String::from("digraph kiln {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
        out += "  edge [color=\"#777777\"];\n";
        for (k, name) in place.kernels.iter().enumerate() {
            let members: Vec<&Node> = nodes.iter().filter(|n| place.home.get(&n.id()) == Some(&k)).collect();
            let _ = writeln!(out, "  subgraph cluster_{k} {{");
            let _ = writeln!(out, "    label=\"kernel {k}: {}\"; style=rounded; color=\"#3b6ea5\";", escape(name));
            for n in members {
                let _ = writeln!(out, "    {}", self.node_line(n, &place));
            }
            out += "  }\n";
        }
        for n in nodes.iter().filter(|n| !place.home.contains_key(&n.id())) {
            let _ = writeln!(out, "  {}", self.node_line(n, &place));
        }
        for n in &nodes {
            for i in n.inputs() {
                let crosses = view == DotView::Kernels && place.home.get(&i.id()) != place.home.get(&n.id());
                let style = if crosses { " [color=\"#b22222\", penwidth=1.6]" } else { "" };
                let _ = writeln!(out, "  n{} -> n{}{style};", i.id(), n.id());
            }
        }
        out += "}\n";
        Ok(out)
    }

    fn node_line(&self, n: &Node, place: &Placement) -> String {
        let mut label = describe(n);
        if let Some(name) = self.names.get(&n.id()) {
            label = format!("{name}\n{label}");
        }
        if let Some(ks) = place.recomputed.get(&n.id()) {
            let list: Vec<String> = ks.iter().map(|k| k.to_string()).collect();
            label += &format!("\n(also in kernel {})", list.join(", "));
        }
        let style = if n.realized_value().is_some() {
            "shape=box, style=filled, fillcolor=\"#e8e8e8\""
        } else if is_view(n.prim()) {
            "style=dashed"
        } else {
            "shape=ellipse"
        };
        format!("n{} [label=\"{}\", {style}];", n.id(), escape(&label))
    }
}

/// Which kernel draws each node.
#[derive(Default)]
struct Placement {
    kernels: Vec<String>,
    home: HashMap<u64, usize>,
    /// Kernels past the first that compute a node again.
    recomputed: HashMap<u64, Vec<usize>>,
}

impl Placement {
    fn of(plan: &[kiln_core::PlannedKernel], nodes: &[Node]) -> Placement {
        let mut p = Placement { kernels: plan.iter().map(|k| k.name.clone()).collect(), ..Placement::default() };
        for (k, kernel) in plan.iter().enumerate() {
            for &id in &kernel.nodes {
                match p.home.get(&id) {
                    None => {
                        p.home.insert(id, k);
                    }
                    Some(&first) if first != k => {
                        let again = p.recomputed.entry(id).or_default();
                        if !again.contains(&k) {
                            again.push(k);
                        }
                    }
                    _ => {}
                }
            }
        }
        // A view computes nothing: it is index arithmetic in the kernel of
        // its first consumer (consumers come later in `nodes`).
        let mut consumer_home: HashMap<u64, usize> = HashMap::new();
        for n in nodes.iter().rev() {
            if is_view(n.prim())
                && n.realized_value().is_none()
                && let Some(&k) = consumer_home.get(&n.id())
            {
                p.home.insert(n.id(), k);
            }
            if let Some(&k) = p.home.get(&n.id()) {
                for i in n.inputs() {
                    consumer_home.entry(i.id()).or_insert(k);
                }
            }
        }
        p
    }
}

/// Every node behind `roots`, inputs before users.
fn all_nodes(roots: &[Node]) -> Vec<Node> {
    let mut seen = HashSet::new();
    let mut order = Vec::new();
    let mut stack: Vec<(Node, bool)> = roots.iter().rev().map(|r| (r.clone(), false)).collect();
    while let Some((n, expanded)) = stack.pop() {
        if expanded {
            order.push(n);
            continue;
        }
        if !seen.insert(n.id()) {
            continue;
        }
        stack.push((n.clone(), true));
        for i in n.inputs().into_iter().rev() {
            stack.push((i, false));
        }
    }
    order
}

fn is_view(p: &Prim) -> bool {
    matches!(p, Prim::Reshape { .. } | Prim::Permute { .. } | Prim::Slice { .. } | Prim::Expand { .. })
}

/// The op with what distinguishes it, then its type: `sum [1]\nf32[64, 10]`.
fn describe(n: &Node) -> String {
    let p = n.prim();
    let detail = match p {
        Prim::Fill { value, .. } => format!(" {value}"),
        Prim::Cast { to } => format!(" → {to}"),
        Prim::Reduce { axes, .. } => format!(" {axes:?}"),
        Prim::ArgReduce { axis, .. } => format!(" [{axis}]"),
        Prim::Permute { perm } => format!(" {perm:?}"),
        Prim::Concat { axis } | Prim::Gather { axis } => format!(" axis {axis}"),
        // The rest are told apart by their name and their type line alone.
        _ => String::new(),
    };
    format!("{}{detail}\n{}{:?}", p.name(), n.dtype(), n.shape())
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
