//! The scheduler's mechanics: walks the unrealized part of a graph,
//! holding each node as a fused value (see [`crate::expr`]), and emits a
//! kernel item where the rules of `policy.rs` say a value must exist
//! in memory (roots, operands of matmuls and concats, shared values that
//! would cost too much to recompute, ...), lowering each kernel's values
//! ([`crate::lower`]).
//!
//! A last-axis reduction stays pending as a row stage, so that softmax,
//! layer norm and cross-entropy become one row kernel; a matmul stays
//! pending so that its consumer (bias, activation) becomes its epilogue;
//! `softmax(epilogue(q @ kt)) @ v`, read by no one else, becomes one
//! attention item ([`crate::attention`]).
//! The walk touches no device: buffers it needs are [`Slot`]s of the
//! [`Schedule`] it builds.

use crate::attention::{self, Pattern};
use crate::expr::{
    Fused, Kind, PendingMatmul, RowStage, View, apply_view, as_buffer, fresh_id, map_leaves, matmuls, node, postorder,
    row_stages, tagged,
};
use crate::lower::{Args, Lowerer, Sig};
use crate::pointwise::Pointwise;
use crate::policy::{self, FUSED_OPS_MAX};
use crate::postdom;
use crate::schedule::{Item, KernelItem, Monoid, Schedule, Slot, SlotInfo, Target};
use kiln_ir::dtype::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::ir::{DeviceArray, DeviceBuffer};
use kiln_ir::ir::{Node, Prim, Realized};
use kiln_ir::quant::QuantFormat;
use kiln_ir::shape::{Layout, contiguous_strides, numel};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The policy's public limits, at the path other crates know them by.
pub use crate::policy::{RECOMPUTE_MAX, ROW_MAX_LEN};

/// What to do with an input realized on another device (the CPU reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostInputs {
    /// Refuse it: a schedule to run needs its inputs on its device.
    Refuse,
    /// Stand it in with a slot of its own (a schedule to look at).
    Placeholder,
}

/// Builds a [`Schedule`] for a target, one root set at a time.
pub struct Scheduler<'a> {
    target: &'a dyn Target,
    host: HostInputs,
    schedule: Schedule,
    vals: HashMap<u64, Fused>,
    consumers: HashMap<u64, usize>,
    computed_ids: HashSet<u64>,
    matmuls: HashMap<u64, DeviceArray>,
    stages: HashMap<u64, DeviceArray>,
    /// Attention patterns by their final matmul, until the walk reaches it.
    attention: HashMap<u64, Pattern>,
    /// Nodes of those patterns the walk leaves alone until then: softmax
    /// nodes are not built, scores not materialized.
    unbuilt: HashSet<u64>,
    unsettled: HashSet<u64>,
    /// Shared values whose readers all lie in one kernel, each with the ops
    /// from it to that kernel's sink: not materialized for their cost
    /// while the whole fits in one kernel ([`postdom`]).
    read_in_one_kernel: HashMap<u64, usize>,
}

fn leaf(a: DeviceArray) -> Fused {
    node(a.dtype, Kind::Buf(a))
}

/// `a` (a 4-byte result) seen as `dtype`: a cast when that is f16.
fn narrowed(a: DeviceArray, dtype: DType) -> Fused {
    let d = a.dtype;
    let buf = leaf(a);
    if d == dtype { buf } else { node(dtype, Kind::Pointwise(Pointwise::Cast(buf))) }
}

/// A value to read back: its array, and the words of its buffer it spans.
pub struct Readback {
    pub array: DeviceArray,
    pub first_word: u64,
    pub words: u64,
}

impl<'a> Scheduler<'a> {
    pub fn new(target: &'a dyn Target, host: HostInputs) -> Scheduler<'a> {
        Scheduler {
            target,
            host,
            schedule: Schedule::default(),
            vals: HashMap::new(),
            consumers: HashMap::new(),
            computed_ids: HashSet::new(),
            matmuls: HashMap::new(),
            stages: HashMap::new(),
            attention: HashMap::new(),
            unbuilt: HashSet::new(),
            unsettled: HashSet::new(),
            read_in_one_kernel: HashMap::new(),
        }
    }

    /// The schedule built so far, its slots' lifetimes filled in.
    pub fn finish(mut self) -> Schedule {
        self.schedule.note_lifetimes();
        self.schedule
    }

    /// A new slot of `shape` elements of `dtype`, for `op`.
    fn alloc(&mut self, op: &'static str, dtype: DType, shape: &[usize]) -> Arc<dyn DeviceBuffer> {
        self.slot(op, dtype, shape, false)
    }

    fn slot(&mut self, op: &'static str, dtype: DType, shape: &[usize], external: bool) -> Arc<dyn DeviceBuffer> {
        let index = self.schedule.slots.len();
        self.schedule.slots.push(SlotInfo { op, dtype, shape: shape.to_vec(), external, lifetime: None });
        Arc::new(Slot { index })
    }

    /// Append a kernel item computing the IR nodes `covers`.
    fn push(&mut self, op: &'static str, item: Item, covers: Vec<u64>) {
        self.schedule.items.push(KernelItem { op, item, covers });
    }

    /// Schedule every unrealized node that `roots` need; roots end in buffers.
    pub fn run(&mut self, roots: &[Node]) -> Result<()> {
        let order = Node::topo_unrealized(roots);
        for n in &order {
            for i in n.inputs() {
                *self.consumers.entry(i.id()).or_default() += 1;
            }
        }
        self.read_in_one_kernel = postdom::read_in_one_kernel(&order, roots, FUSED_OPS_MAX);
        for (matmul, pattern) in attention::find(&order, roots, &self.consumers) {
            self.unbuilt.extend(pattern.softmax.iter().map(Node::id));
            self.unsettled.insert(pattern.scores.id());
            self.attention.insert(matmul, pattern);
        }
        for n in &order {
            if self.unbuilt.contains(&n.id()) {
                continue;
            }
            let v = self.build(n)?;
            self.vals.insert(n.id(), v.clone());
            if !self.unsettled.contains(&n.id()) {
                self.settle(n, &v)?;
            }
        }
        self.materialize_roots(roots)
    }

    /// Materialize `n` (of value `v`) now if its consumers would each
    /// recompute too much of it ([`policy::materializes_shared`]).
    fn settle(&mut self, n: &Node, v: &Fused) -> Result<()> {
        let readers = self.consumers.get(&n.id()).copied().unwrap_or(0);
        let one_kernel = self.read_in_one_kernel.get(&n.id()).copied();
        if policy::materializes_shared(v, n, readers, one_kernel) && !self.materialize_view_source(n)? {
            self.array(n)?;
        }
        Ok(())
    }

    /// `n = softmax(scores) @ v` as one attention item, when its scores
    /// are still one matmul's epilogue and the device runs the kernel.
    fn attention(&mut self, n: &Node, pattern: &Pattern) -> Result<Option<DeviceArray>> {
        let s = &pattern.scores;
        let scores = self.vals[&s.id()].clone();
        let [mm] = &matmuls(&scores)[..] else { return Ok(None) };
        if !policy::takes_as_epilogue(&scores, s.shape()) {
            return Ok(None);
        }
        let v = self.array(&n.inputs()[1])?;
        if !policy::attention_operands_fit(mm, v.dtype) {
            return Ok(None);
        }
        let mut low = Lowerer::new(s.shape().len(), &[], Some(mm));
        low.args.buffers = vec![mm.a.buffer.clone(), mm.b.buffer.clone(), v.buffer.clone()];
        low.sig.buffers = vec![DType::F32; 3];
        low.body(&[&scores]);
        let out = self.alloc("attention", DType::F32, n.shape());
        let (q, kt, v, shape) = (mm.a.layout.clone(), mm.b.layout.clone(), v.layout, n.shape().to_vec());
        let out_strides = match &pattern.merged_by {
            Some(perm) => contiguous_through(perm, &shape),
            None => contiguous_strides(&shape),
        };
        let out_layout = Layout { shape: shape.clone(), strides: out_strides.clone(), offset: 0 };
        let causal = pattern.causal;
        let item =
            Item::Attention { q, kt, v, scores: low.sig, shape, out_strides, causal, out: out.clone(), args: low.args };
        if !self.target.runs_attention(&item) {
            self.schedule.slots.pop();
            return Ok(None);
        }
        let mut covers = low.covers;
        covers.extend(pattern.softmax.iter().map(Node::id).chain([n.id()]));
        self.push("attention", item, covers);
        Ok(Some(DeviceArray { buffer: out, layout: out_layout, dtype: DType::F32 }))
    }

    /// Walk a pattern's held nodes after all, as if it had not been found.
    fn release(&mut self, pattern: &Pattern) -> Result<()> {
        let s = &pattern.scores;
        self.unsettled.remove(&s.id());
        let scores = self.vals[&s.id()].clone();
        self.settle(s, &scores)?;
        for n in &pattern.softmax {
            self.unbuilt.remove(&n.id());
            let v = self.build(n)?;
            self.vals.insert(n.id(), v.clone());
            self.settle(n, &v)?;
        }
        Ok(())
    }

    /// For a shared view of a matmul's epilogue (the qkv projection plus its
    /// bias, split into heads and read three ways): compute the matmul with
    /// that epilogue once, and let the views read its buffer, instead of a
    /// raw matmul and a copy through the views. False when `n` is not such
    /// a view.
    fn materialize_view_source(&mut self, n: &Node) -> Result<bool> {
        let mut views = Vec::new();
        let mut source = n.clone();
        // A realized view is a buffer of its own: the walk stops there.
        while matches!(source.prim(), Prim::Reshape { .. } | Prim::Permute { .. } | Prim::Slice { .. })
            && source.realized_value().is_none()
        {
            views.push(source.clone());
            source = source.inputs()[0].clone();
        }
        let Some(v) = self.vals.get(&source.id()).cloned() else { return Ok(false) };
        if views.is_empty() || !policy::takes_as_epilogue(&v, source.shape()) {
            return Ok(false);
        }
        self.array(&source)?;
        for view in views.iter().rev() {
            let v = self.build(view)?;
            self.vals.insert(view.id(), v);
        }
        Ok(true)
    }

    /// The fused value of a node (a buffer leaf when it is realized).
    fn value(&mut self, n: &Node) -> Result<Fused> {
        if let Some(v) = self.vals.get(&n.id()) {
            return Ok(v.clone());
        }
        match (n.realized_value(), self.host) {
            (Some(Realized::Gpu(a)), _) => Ok(leaf(a)),
            (Some(Realized::Host(_)), HostInputs::Placeholder) => {
                let buffer = self.slot(n.prim().name(), n.dtype(), n.shape(), true);
                self.schedule.inputs.push((self.schedule.slots.len() - 1, n.clone()));
                Ok(leaf(DeviceArray { buffer, layout: Layout::contiguous(n.shape()), dtype: n.dtype() }))
            }
            _ => Err(KilnError::Invalid {
                op: n.prim().name(),
                detail: "the input lives on another device (the CPU reference); move it first".into(),
            }),
        }
    }

    /// The node's value in a buffer (any layout), computing it if needed.
    pub fn array(&mut self, n: &Node) -> Result<DeviceArray> {
        let v = self.value(n)?;
        let a = match as_buffer(&v) {
            Some(a) => a.clone(),
            None => self.materialize(&v, n.shape())?,
        };
        self.set_array(n, a.clone());
        Ok(a)
    }

    fn set_array(&mut self, n: &Node, a: DeviceArray) {
        self.vals.insert(n.id(), leaf(a.clone()));
        if n.realized_value().is_none() && self.computed_ids.insert(n.id()) {
            self.schedule.results.push((n.clone(), a));
        }
    }

    /// `n` computed and laid out to be read back: contiguous, and starting
    /// on a whole word (a packed value at an odd offset is copied).
    pub fn readback(&mut self, n: &Node) -> Result<Readback> {
        self.run(std::slice::from_ref(n))?;
        let mut array = self.array(n)?;
        if array.layout.word_span(array.dtype).is_none() {
            array = self.contiguous(&array)?;
        }
        let (first_word, words) = array.layout.word_span(array.dtype).expect("a contiguous copy starts on a word");
        Ok(Readback { array, first_word, words })
    }

    /// A contiguous copy of `a`.
    pub fn contiguous(&mut self, a: &DeviceArray) -> Result<DeviceArray> {
        self.materialize(&leaf(a.clone()), &a.layout.shape.clone())
    }

    fn build(&mut self, n: &Node) -> Result<Fused> {
        let inputs = n.inputs();
        let dtype = n.dtype();
        let x = |p: &mut Self, i: usize| p.value(&inputs[i]);
        Ok(match n.prim() {
            Prim::Input { .. } => {
                return Err(KilnError::Invalid { op: "input", detail: "input node without data".into() });
            }
            Prim::Fill { value, .. } => tagged(n.id(), dtype, Kind::Fill(*value)),
            Prim::Iota { start, step, len, .. } => {
                tagged(n.id(), dtype, Kind::Iota { layout: Layout::contiguous(&[*len]), start: *start, step: *step })
            }
            Prim::Unary(op) => self.combine(n, &inputs, |v| Kind::Pointwise(Pointwise::Unary(*op, v[0].clone())))?,
            Prim::Binary(op) => {
                self.combine(n, &inputs, |v| Kind::Pointwise(Pointwise::Binary(*op, v[0].clone(), v[1].clone())))?
            }
            Prim::Where => self
                .combine(n, &inputs, |v| Kind::Pointwise(Pointwise::Where(v[0].clone(), v[1].clone(), v[2].clone())))?,
            Prim::Cast { .. } => self.combine(n, &inputs, |v| Kind::Pointwise(Pointwise::Cast(v[0].clone())))?,
            Prim::Reduce { op, axes, .. } => {
                let x = x(self, 0)?;
                self.reduce(n, &inputs[0], x, Monoid::Reduce(*op), axes)?
            }
            Prim::ArgReduce { op, axis, .. } => {
                let x = x(self, 0)?;
                self.reduce(n, &inputs[0], x, Monoid::Arg(*op), &[*axis])?
            }
            Prim::Reshape { shape } => self.view(&inputs[0], View::Reshape(shape))?,
            Prim::Permute { perm } => self.view(&inputs[0], View::Permute(perm))?,
            Prim::Slice { specs } => self.view(&inputs[0], View::Slice(specs))?,
            Prim::Expand { shape } => {
                let x = x(self, 0)?;
                let x = match policy::recomputed_by_broadcast(&x, inputs[0].shape(), shape) {
                    true => leaf(self.array(&inputs[0])?),
                    false => x,
                };
                self.view_of(&inputs[0], x, View::Expand(shape))?
            }
            Prim::Matmul => {
                if let Some(pattern) = self.attention.remove(&n.id()) {
                    if let Some(out) = self.attention(n, &pattern)? {
                        return Ok(leaf(out));
                    }
                    self.release(&pattern)?;
                }
                let (a, b) = (self.array(&inputs[0])?, self.array(&inputs[1])?);
                let mm = PendingMatmul { id: fresh_id(), origin: n.id(), a, b, shape: n.shape().to_vec() };
                tagged(n.id(), dtype, Kind::Mm { mm: Arc::new(mm), layout: Layout::contiguous(n.shape()) })
            }
            Prim::Concat { axis } => self.concat(n, &inputs, *axis)?,
            Prim::Gather { axis } => {
                let src = self.array(&inputs[0])?;
                tagged(n.id(), dtype, Kind::Gather { src, axis: *axis, index: x(self, 1)? })
            }
            Prim::QuantMatmul { format } => tagged(n.id(), dtype, Kind::Buf(self.quant_matmul(n, *format)?)),
        })
    }

    /// An elementwise op over its inputs' fused values; when the result
    /// would bind too many buffers, need too much meta or grow too large
    /// ([`policy::fits_one_kernel`]), the inputs are materialized first.
    fn combine(&mut self, n: &Node, inputs: &[Node], f: impl Fn(&[Fused]) -> Kind) -> Result<Fused> {
        let vals = inputs.iter().map(|i| self.value(i)).collect::<Result<Vec<_>>>()?;
        let fused = tagged(n.id(), n.dtype(), f(&vals));
        if policy::fits_one_kernel(&fused, n.shape().len(), self.target) {
            return Ok(fused);
        }
        let arrays = inputs.iter().map(|i| self.array(i).map(leaf)).collect::<Result<Vec<_>>>()?;
        Ok(tagged(n.id(), n.dtype(), f(&arrays)))
    }

    fn view(&mut self, input: &Node, view: View) -> Result<Fused> {
        let x = self.value(input)?;
        self.view_of(input, x, view)
    }

    /// `view` of `input`, whose value is `x`.
    fn view_of(&mut self, input: &Node, x: Fused, view: View) -> Result<Fused> {
        if let Some(v) = apply_view(&x, &view) {
            return Ok(v);
        }
        let copy = self.materialize(&x, input.shape())?;
        Ok(apply_view(&leaf(copy), &view).expect("a contiguous buffer takes any view"))
    }

    /// A reduction: pending as a row stage when it runs along a short last
    /// axis with enough rows ([`policy::becomes_row_stage`]), otherwise a
    /// tree reduction now.
    fn reduce(&mut self, n: &Node, input: &Node, x: Fused, monoid: Monoid, axes: &[usize]) -> Result<Fused> {
        let (op, dtype, out_shape) = (n.prim().name(), n.dtype(), n.shape().to_vec());
        let xs = input.shape();
        let rank = xs.len();
        let len: usize = axes.iter().map(|&a| xs[a]).product();
        let rows = numel(xs) / len.max(1);
        if let Monoid::Reduce(r) = monoid {
            if len == 0 {
                // Only sum and prod get here (inference rejects the rest).
                return Ok(tagged(n.id(), dtype, Kind::Fill(r.identity().unwrap_or(0.0))));
            }
            if policy::becomes_row_stage(axes, rank, rows, len, self.target) {
                let input = self.stage_input(x, xs)?;
                let stage = RowStage { id: fresh_id(), origin: n.id(), op: r, input, shape: xs.to_vec() };
                return Ok(tagged(
                    n.id(),
                    dtype,
                    Kind::Row { stage: Arc::new(stage), layout: Layout::contiguous(&out_shape) },
                ));
            }
        }
        let perm: Vec<usize> = (0..rank).filter(|d| !axes.contains(d)).chain(axes.iter().copied()).collect();
        let x = match apply_view(&x, &View::Permute(&perm)) {
            Some(v) => v,
            None => apply_view(&leaf(self.materialize(&x, xs)?), &View::Permute(&perm)).expect("buffer view"),
        };
        let x = self.force_pending(&x)?;
        let view_shape: Vec<usize> = perm.iter().map(|&d| xs[d]).collect();
        let mut low = Lowerer::new(rank, &[], None);
        low.body(&[&x]);
        let wide = x.dtype.wide();
        let values = self.alloc(op, wide, &[rows]);
        let indices = match monoid {
            Monoid::Arg(_) => Some(self.alloc(op, DType::I32, &[rows])),
            Monoid::Reduce(_) => None,
        };
        let mut covers = std::mem::take(&mut low.covers);
        covers.push(n.id());
        let (sig, args, values2, indices2) = (low.sig, low.args, values.clone(), indices.clone());
        let item = Item::Reduce { monoid, sig, args, view_shape, rows, values: values2, indices: indices2 };
        self.push(op, item, covers);
        let layout = Layout::contiguous(&out_shape);
        Ok(match indices {
            Some(buffer) => leaf(DeviceArray { buffer, layout, dtype: DType::I32 }),
            None => narrowed(DeviceArray { buffer: values, layout, dtype: wide }, dtype),
        })
    }

    /// A row stage's input: no pending matmul, and every stage it reads
    /// runs over the same rows (or is materialized first).
    fn stage_input(&mut self, x: Fused, shape: &[usize]) -> Result<Fused> {
        let x = self.force_matmuls(&x)?;
        if policy::rows_aligned(&x, shape) { Ok(x) } else { self.force_rows(&x) }
    }

    fn concat(&mut self, n: &Node, inputs: &[Node], axis: usize) -> Result<Fused> {
        let (shape, dtype) = (n.shape().to_vec(), n.dtype());
        let wide = dtype.wide();
        let out = self.alloc("concat", wide, &shape);
        let out_layout = Layout::contiguous(&shape);
        let mut start = 0;
        for part in inputs {
            let v = self.value(part)?;
            let v = self.force_pending(&v)?;
            let v = if v.dtype == wide { v } else { node(wide, Kind::Pointwise(Pointwise::Cast(v))) };
            let region = Layout { offset: start * out_layout.strides[axis] as usize, ..out_layout.clone() };
            let mut low = Lowerer::new(shape.len(), &[], None);
            low.body(&[&v]);
            let outputs = vec![(wide, out.clone())];
            let mut covers = std::mem::take(&mut low.covers);
            covers.push(n.id());
            let (sig, args, shape) = (low.sig, low.args, part.shape().to_vec());
            self.push("concat", Item::Elementwise { sig, args, shape, outputs, region: Some(region) }, covers);
            start += part.shape()[axis];
        }
        Ok(narrowed(DeviceArray { buffer: out, layout: out_layout, dtype: wide }, dtype))
    }

    /// Compute `v` (of `shape`) into a new contiguous buffer.
    fn materialize(&mut self, v: &Fused, shape: &[usize]) -> Result<DeviceArray> {
        let mms = matmuls(v);
        if !mms.is_empty() {
            if let Some(a) = self.matmul_with_epilogue(v, &mms, shape)? {
                return Ok(a);
            }
            // The product seen through a reshape (as `vmap` folds a batch of
            // row vectors into one product): the epilogue at its own shape.
            if let [mm] = &mms[..]
                && mm.shape != shape
                && numel(&mm.shape) == numel(shape)
                && let Some(at_product) = apply_view(v, &View::Reshape(&mm.shape))
                && let Some(a) = self.matmul_with_epilogue(&at_product, &mms, &mm.shape)?
            {
                return Ok(DeviceArray { layout: Layout::contiguous(shape), ..a });
            }
            let v = self.force_matmuls(v)?;
            return self.materialize(&v, shape);
        }
        if !row_stages(v).is_empty() {
            return self.row_kernel(v, shape);
        }
        let mut out = self.elementwise(std::slice::from_ref(v), shape)?;
        Ok(out.remove(0))
    }

    /// One elementwise kernel computing every value in `vals` (all of `shape`).
    fn elementwise(&mut self, vals: &[Fused], shape: &[usize]) -> Result<Vec<DeviceArray>> {
        let mut low = Lowerer::new(shape.len(), &[], None);
        low.body(&vals.iter().collect::<Vec<_>>());
        let mut outputs = Vec::new();
        for v in vals {
            outputs.push((v.dtype, self.alloc("elementwise", v.dtype, shape)));
        }
        let (sig, args) = (low.sig, low.args);
        let item = Item::Elementwise { sig, args, shape: shape.to_vec(), outputs: outputs.clone(), region: None };
        self.push("elementwise", item, low.covers);
        let layout = Layout::contiguous(shape);
        Ok(outputs.into_iter().map(|(dtype, buffer)| DeviceArray { buffer, layout: layout.clone(), dtype }).collect())
    }

    /// `v` as the epilogue of its one pending matmul, when `v` is f32, has
    /// the matmul's shape and reads the matmul's result element for element.
    fn matmul_with_epilogue(
        &mut self,
        v: &Fused,
        mms: &[Arc<PendingMatmul>],
        shape: &[usize],
    ) -> Result<Option<DeviceArray>> {
        let [mm] = mms else { return Ok(None) };
        if !policy::takes_as_epilogue(v, shape) {
            return Ok(None);
        }
        if matches!(v.kind, Kind::Mm { .. }) {
            return self.matmul_raw(mm).map(Some);
        }
        let mut low = Lowerer::new(shape.len(), &[], Some(mm));
        low.args.buffers = vec![mm.a.buffer.clone(), mm.b.buffer.clone()];
        low.sig.buffers = vec![mm.a.dtype, mm.b.dtype];
        low.body(&[v]);
        let out = self.alloc("matmul", DType::F32, shape);
        self.push("matmul", matmul_item(mm, shape, out.clone(), Some(low.sig), low.args), low.covers);
        Ok(Some(DeviceArray { buffer: out, layout: Layout::contiguous(shape), dtype: DType::F32 }))
    }

    /// The matmul's f32 result, computed once.
    fn matmul_raw(&mut self, mm: &PendingMatmul) -> Result<DeviceArray> {
        if let Some(a) = self.matmuls.get(&mm.id) {
            return Ok(a.clone());
        }
        let out = self.alloc("matmul", DType::F32, &mm.shape);
        let args = Args { buffers: vec![mm.a.buffer.clone(), mm.b.buffer.clone()], ..Default::default() };
        self.push("matmul", matmul_item(mm, &mm.shape, out.clone(), None, args), vec![mm.origin]);
        let a = DeviceArray { buffer: out, layout: Layout::contiguous(&mm.shape), dtype: DType::F32 };
        self.matmuls.insert(mm.id, a.clone());
        Ok(a)
    }

    /// `n`'s integer-weight product, its operands contiguous in buffers.
    fn quant_matmul(&mut self, n: &Node, format: QuantFormat) -> Result<DeviceArray> {
        let mut operands = Vec::new();
        for input in n.inputs() {
            let a = self.array(&input)?;
            operands.push(if a.layout.is_contiguous() { a } else { self.contiguous(&a)? });
        }
        // x as int8 codes, four to a word, when it is u32.
        let packed_x = operands[0].dtype == DType::U32;
        let x_last = operands[0].layout.shape.last().copied().unwrap_or(1);
        let (rows, n_out) = (numel(&operands[0].layout.shape) / x_last, operands[1].layout.shape[0]);
        let k = if packed_x { x_last * QuantFormat::INT8.per_word() } else { x_last };
        let args = Args {
            layouts: operands.iter().map(|a| a.layout.clone()).collect(),
            buffers: operands.iter().map(|a| a.buffer.clone()).collect(),
            params: Vec::new(),
        };
        let out = self.alloc("quant_matmul", DType::F32, n.shape());
        let scales = operands[2].dtype;
        let item = Item::QuantMatmul { format, packed_x, scales, rows, k, n: n_out, out: out.clone(), args };
        self.push("quant_matmul", item, vec![n.id()]);
        Ok(DeviceArray { buffer: out, layout: Layout::contiguous(n.shape()), dtype: DType::F32 })
    }

    /// The row kernel for `v`: over `v`'s shape (`[rows.., len]`) or, when
    /// `v` has one value per row, writing one element per row.
    fn row_kernel(&mut self, v: &Fused, shape: &[usize]) -> Result<DeviceArray> {
        let stages = row_stages(v);
        let s = stages[0].shape.clone();
        let len = *s.last().expect("stages have rank ≥ 1");
        // One value per row (a reduction's result), or one per element:
        // the rows' own, or seen through a reshape (`vmap`'s unit axes).
        let per_row = shape != s.as_slice() && numel(shape) * len == numel(&s);
        let body = if shape == s.as_slice() {
            Some(v.clone())
        } else if per_row {
            let mut keep = s[..s.len() - 1].to_vec();
            keep.push(1);
            apply_view(v, &View::Reshape(&keep)).and_then(|k| apply_view(&k, &View::Expand(&s)))
        } else if numel(shape) == numel(&s) {
            apply_view(v, &View::Reshape(&s))
        } else {
            None
        };
        let body = body.filter(|b| policy::one_row_kernel(b, &stages, &s));
        let Some(body) = body else {
            let v = self.force_rows(v)?;
            return self.materialize(&v, shape);
        };
        let out_dtype = v.dtype.wide();
        let body = if body.dtype == out_dtype { body } else { node(out_dtype, Kind::Pointwise(Pointwise::Cast(body))) };
        let mut low = Lowerer::new(s.len(), &stages, None);
        for st in &stages {
            low.body(&[&st.input]);
        }
        low.body(&[&body]);
        let out = self.alloc("row", out_dtype, shape);
        let stages = stages.iter().map(|st| st.op).collect();
        let outputs = vec![(out_dtype, out.clone())];
        let item = Item::Row { sig: low.sig, args: low.args, stages, shape: s, outputs, per_row };
        self.push("row", item, low.covers);
        let wide = DeviceArray { buffer: out, layout: Layout::contiguous(shape), dtype: out_dtype };
        if v.dtype == out_dtype {
            return Ok(wide);
        }
        let narrowed = narrowed(wide, v.dtype);
        self.materialize(&narrowed, shape)
    }

    /// `v` with its pending matmuls computed.
    fn force_matmuls(&mut self, v: &Fused) -> Result<Fused> {
        for mm in matmuls(v) {
            self.matmul_raw(&mm)?;
        }
        let done = &self.matmuls;
        Ok(with_computed(v, |k| match k {
            Kind::Mm { mm, layout } => Some((done[&mm.id].clone(), layout.clone())),
            Kind::Buf(_)
            | Kind::Iota { .. }
            | Kind::Row { .. }
            | Kind::Fill(_)
            | Kind::Pointwise(_)
            | Kind::Gather { .. } => None,
        }))
    }

    /// `v` with the row stages it reads computed (one value per row each;
    /// stages those read are computed inside their kernels).
    fn force_rows(&mut self, v: &Fused) -> Result<Fused> {
        let direct = postorder(v).into_iter().filter_map(|n| match &n.kind {
            Kind::Row { stage, .. } => Some(stage.clone()),
            Kind::Buf(_)
            | Kind::Iota { .. }
            | Kind::Mm { .. }
            | Kind::Fill(_)
            | Kind::Pointwise(_)
            | Kind::Gather { .. } => None,
        });
        for st in direct.collect::<Vec<_>>() {
            if self.stages.contains_key(&st.id) {
                continue;
            }
            let rows_shape = &st.shape[..st.shape.len() - 1];
            let d = st.input.dtype.wide();
            let only = node(d, Kind::Row { stage: st.clone(), layout: Layout::contiguous(rows_shape) });
            let a = self.row_kernel(&only, rows_shape)?;
            self.stages.insert(st.id, a);
        }
        let done = &self.stages;
        Ok(with_computed(v, |k| match k {
            Kind::Row { stage, layout } => Some((done[&stage.id].clone(), layout.clone())),
            Kind::Buf(_)
            | Kind::Iota { .. }
            | Kind::Mm { .. }
            | Kind::Fill(_)
            | Kind::Pointwise(_)
            | Kind::Gather { .. } => None,
        }))
    }

    fn force_pending(&mut self, v: &Fused) -> Result<Fused> {
        let v = self.force_matmuls(v)?;
        self.force_rows(&v)
    }

    /// Give every root a buffer; roots of one shape that are plain
    /// elementwise values share one kernel while it holds them
    /// ([`policy::plain_elementwise`], [`policy::roots_share_a_kernel`]).
    fn materialize_roots(&mut self, roots: &[Node]) -> Result<()> {
        let mut groups: Vec<(Vec<usize>, Vec<Node>)> = Vec::new();
        let mut seen = HashSet::new();
        for r in roots {
            if !seen.insert(r.id()) || r.realized_value().is_some() {
                continue;
            }
            let v = self.value(r)?;
            if !policy::plain_elementwise(&v) {
                self.array(r)?;
                continue;
            }
            // One kernel for the group (as `elementwise` lowers it).
            let fits = |g: &[Node], p: &Self| {
                let vals: Vec<Fused> = g.iter().chain([r]).map(|n| p.vals[&n.id()].clone()).collect();
                policy::roots_share_a_kernel(&vals, r.shape().len(), p.target)
            };
            match groups.iter_mut().find(|(s, g)| s == r.shape() && fits(g, self)) {
                Some((_, g)) => g.push(r.clone()),
                None => groups.push((r.shape().to_vec(), vec![r.clone()])),
            }
        }
        for (shape, group) in groups {
            let vals: Vec<Fused> = group.iter().map(|n| self.vals[&n.id()].clone()).collect();
            let arrays = self.elementwise(&vals, &shape)?;
            for (n, a) in group.iter().zip(arrays) {
                self.set_array(n, a);
            }
        }
        for r in roots {
            if r.realized_value().is_none() {
                self.array(r)?;
            }
        }
        Ok(())
    }
}

/// `v` with each pending leaf that `computed` maps to its result replaced
/// by a read of that buffer through the leaf's layout.
fn with_computed(v: &Fused, computed: impl Fn(&Kind) -> Option<(DeviceArray, Layout)>) -> Fused {
    map_leaves(v, &mut |n| Some(computed(&n.kind).map(|(a, layout)| narrowed(DeviceArray { layout, ..a }, n.dtype))))
        .expect("leaf replacement cannot fail")
}

/// Strides for `shape` under which its view permuted by `perm` is
/// contiguous.
fn contiguous_through(perm: &[usize], shape: &[usize]) -> Vec<isize> {
    let permuted: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut strides = vec![0; shape.len()];
    for (&p, s) in perm.iter().zip(contiguous_strides(&permuted)) {
        strides[p] = s;
    }
    strides
}

/// The item computing `epilogue(mm)` over `shape` into `out`.
fn matmul_item(
    mm: &PendingMatmul,
    shape: &[usize],
    out: Arc<dyn DeviceBuffer>,
    epilogue: Option<Sig>,
    args: Args,
) -> Item {
    let (a, b) = (mm.a.layout.clone(), mm.b.layout.clone());
    Item::Matmul { a, b, operands: mm.a.dtype, shape: shape.to_vec(), out, epilogue, args }
}
