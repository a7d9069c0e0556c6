//! `vjp`, `grad`, `value_and_grad` and `stop_gradient`. Each call traces the
//! closure afresh: the primals' leaves are replaced by identity nodes that
//! start a [`Trace`], `f` builds an ordinary graph over them, and the
//! backward pass is more ordinary graph (it fuses, realizes and can be
//! differentiated again like any other). No global tape.

use crate::backprop::backprop;
use crate::tree::{Structure, Tree};
use kiln_core::ir::Trace;
use kiln_core::{KilnError, Result};
use kiln_ops::Tensor;
use std::sync::{Arc, Mutex};

/// A tensor the transforms treat as a constant: its value, no gradient.
pub fn stop_gradient(x: &Tensor) -> Result<Tensor> {
    Ok(Tensor::from_node(x.node().detached()?, x.device().clone()))
}

/// Ends the trace when dropped, so an error or a panic in `f` ends it too.
struct TraceGuard(Arc<Trace>);

impl Drop for TraceGuard {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The pullback of [`vjp`]: maps output cotangents to primal cotangents.
/// While it lives, nodes of the traced graph keep their inputs when
/// realized; drop it to let them go.
pub struct Vjp<P, O> {
    guard: TraceGuard,
    primals: P,
    leaves: Vec<Tensor>,
    outputs: Vec<Tensor>,
    out_structure: Structure,
    _out: std::marker::PhantomData<fn() -> O>,
}

/// Replace every leaf of `primals` by a traced identity of it; integer and
/// bool leaves are an error naming their path.
fn trace_primals<P: Tree>(op: &'static str, primals: &P, trace: &Arc<Trace>) -> Result<(P, Vec<Tensor>)> {
    let mut leaves = Vec::new();
    for (path, t) in primals.named_leaves() {
        if !t.dtype().is_float() {
            return Err(KilnError::DType {
                op,
                detail: format!(
                    "leaf `{path}` is {} {:?}; only f32 and f16 leaves can be differentiated \
                     (pass integer or bool data through the closure instead)",
                    t.dtype(),
                    t.shape()
                ),
            });
        }
        leaves.push(Tensor::from_node(t.node().trace_leaf(trace)?, t.device().clone()));
    }
    Ok((primals.unflatten(leaves.clone())?, leaves))
}

fn vjp_as<P: Tree, O: Tree>(op: &'static str, f: impl FnOnce(&P) -> Result<O>, primals: &P) -> Result<(O, Vjp<P, O>)> {
    let guard = TraceGuard(Trace::start());
    let (traced, leaves) = trace_primals(op, primals, &guard.0)?;
    let out = f(&traced)?;
    let pullback = Vjp {
        outputs: out.leaves(),
        out_structure: out.structure(),
        guard,
        primals: primals.unflatten(primals.leaves())?,
        leaves,
        _out: std::marker::PhantomData,
    };
    Ok((out, pullback))
}

/// Evaluate `f(primals)` and return its output with a pullback for
/// cotangents of the output (a tree of `f`'s output's structure).
pub fn vjp<P: Tree, O: Tree>(f: impl FnOnce(&P) -> Result<O>, primals: &P) -> Result<(O, Vjp<P, O>)> {
    vjp_as("vjp", f, primals)
}

impl<P: Tree, O: Tree> Vjp<P, O> {
    /// Cotangents of the primals, in their tree structure (zeros for
    /// leaves `f` did not use). `cotangents` must match the output's
    /// paths, shapes and dtypes.
    pub fn pullback(&self, cotangents: &O) -> Result<P> {
        self.pullback_as("vjp", cotangents)
    }

    fn pullback_as(&self, op: &'static str, cotangents: &O) -> Result<P> {
        self.out_structure.expect_same(op, "cotangent", &cotangents.structure())?;
        let seeds: Vec<(Tensor, Tensor)> = self.outputs.iter().cloned().zip(cotangents.leaves()).collect();
        let grads = backprop(&self.guard.0, &seeds, &self.leaves)?;
        let grads = grads
            .into_iter()
            .zip(self.primals.leaves())
            .map(|(g, p)| g.map_or_else(|| p.zeros_like(), Ok))
            .collect::<Result<Vec<_>>>()?;
        self.primals.unflatten(grads)
    }
}

/// `f`'s value and its gradient with respect to every leaf of the
/// parameter tree. `f` must return a float tensor with one element. The
/// first call fixes the tree's structure (paths, shapes, dtypes); a later
/// call with another structure is an error naming the first difference.
pub fn value_and_grad<P: Tree, F: Fn(&P) -> Result<Tensor>>(f: F) -> impl Fn(&P) -> Result<(Tensor, P)> {
    value_and_grad_as("value_and_grad", f)
}

/// The gradient of `f` with respect to every leaf of the parameter tree,
/// in the tree's structure. See [`value_and_grad`].
pub fn grad<P: Tree, F: Fn(&P) -> Result<Tensor>>(f: F) -> impl Fn(&P) -> Result<P> {
    let vg = value_and_grad_as("grad", f);
    move |p: &P| vg(p).map(|(_, g)| g)
}

fn value_and_grad_as<P: Tree, F: Fn(&P) -> Result<Tensor>>(
    op: &'static str,
    f: F,
) -> impl Fn(&P) -> Result<(Tensor, P)> {
    let first: Mutex<Option<Structure>> = Mutex::new(None);
    move |params: &P| {
        let structure = params.structure();
        match &mut *first.lock().unwrap() {
            Some(seen) => seen.expect_same(op, "parameters", &structure)?,
            empty => *empty = Some(structure),
        }
        let (out, pullback) = vjp_as(op, &f, params)?;
        if out.numel() != 1 || !out.dtype().is_float() {
            return Err(KilnError::Shape {
                op,
                detail: format!(
                    "f returned a {} {:?} tensor; {op} needs a float output with one element \
                     (reduce it, or use vjp with a cotangent)",
                    out.dtype(),
                    out.shape()
                ),
            });
        }
        let grads = pullback.pullback_as(op, &out.ones_like()?)?;
        Ok((out, grads))
    }
}
