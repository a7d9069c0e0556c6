//! A schedule: what realizing some nodes takes, as plain data. An ordered
//! list of kernel items, each with its structure (the [`Sig`] codegen
//! renders), the buffers it reads and writes and its per-launch arguments,
//! plus the buffer slots the items allocate, with sizes and lifetimes. It
//! is made without a device ([`crate::walk::Scheduler`]); a runtime gives
//! each slot a buffer, renders and records each item, and submits once.

use crate::lower::{Access, Args, LeafDesc, Op, Sig};
use kiln_ir::dtype::DType;
use kiln_ir::ir::{ArgOp, DeviceArray, DeviceBuffer, Node, ReduceOp};
use kiln_ir::quant::QuantFormat;
use kiln_ir::shape::{Layout, numel};
use std::any::Any;
use std::sync::Arc;

/// What the scheduler needs to know of the device it schedules for.
pub trait Target: kiln_ir::ir::MaybeSendSync {
    /// Storage buffers one kernel may bind.
    fn max_bindings(&self) -> usize;
    /// Meta words left for a fused body's leaves and params in a kernel of `rank`.
    fn meta_room(&self, rank: usize) -> usize;
    /// Whether `rows` rows of `len` reduce in the streaming row kernel
    /// (so that a last-axis reduction over them stays a row stage).
    fn streams_rows(&self, rows: usize, len: usize) -> bool;
    /// Whether the device runs this [`Item::Attention`] (its kernel's
    /// workgroup memory, loops, meta block and bindings fit).
    fn runs_attention(&self, item: &Item) -> bool;
}

/// How a tree reduction combines: a reduction, or an arg reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Monoid {
    Reduce(ReduceOp),
    Arg(ArgOp),
}

/// A buffer the schedule allocates (or, when planning without a device, a
/// value realized elsewhere): a placeholder that items bind in place of a
/// device buffer until the runtime gives slot `index` one.
#[derive(Debug)]
pub struct Slot {
    pub index: usize,
}

impl DeviceBuffer for Slot {}

/// The slot `buffer` stands for, if it is one.
pub fn slot_of(buffer: &Arc<dyn DeviceBuffer>) -> Option<usize> {
    let any: &dyn Any = buffer.as_ref();
    any.downcast_ref::<Slot>().map(|s| s.index)
}

/// A slot's size, where it comes from, and the items that use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// The op that asked for it (for errors: a buffer over the device's limit).
    pub op: &'static str,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// A value realized on another device (planning only): no item writes it.
    pub external: bool,
    /// The first and last item that binds it (`None` when none does).
    pub lifetime: Option<(usize, usize)>,
}

impl SlotInfo {
    pub fn bytes(&self) -> u64 {
        self.dtype.storage_bytes(numel(&self.shape))
    }
}

/// One kernel's worth of work (a tree reduction or a long matmul may take
/// several launches).
#[derive(Debug, Clone)]
pub enum Item {
    /// Body 0's roots over `shape`, written to `outputs` (contiguous), or
    /// its one root into `region` of `outputs[0]`.
    Elementwise {
        sig: Sig,
        args: Args,
        shape: Vec<usize>,
        outputs: Vec<(DType, Arc<dyn DeviceBuffer>)>,
        region: Option<Layout>,
    },
    /// Body 0 seen as `[rows, len]` (`view_shape`: kept axes, then reduced
    /// ones) reduced along each row into `values` (and `indices`).
    Reduce {
        monoid: Monoid,
        sig: Sig,
        args: Args,
        view_shape: Vec<usize>,
        rows: usize,
        values: Arc<dyn DeviceBuffer>,
        indices: Option<Arc<dyn DeviceBuffer>>,
    },
    /// The row kernel over `shape = [rows.., len]`: `stages` folded along
    /// each row, then the last body written per element (or once per row).
    Row {
        sig: Sig,
        args: Args,
        stages: Vec<ReduceOp>,
        shape: Vec<usize>,
        outputs: Vec<(DType, Arc<dyn DeviceBuffer>)>,
        per_row: bool,
    },
    /// `out = epilogue(a @ b)` in f32; `args` binds A's and B's buffers
    /// first, then what the epilogue reads.
    Matmul {
        a: Layout,
        b: Layout,
        operands: DType,
        shape: Vec<usize>,
        out: Arc<dyn DeviceBuffer>,
        epilogue: Option<Sig>,
        args: Args,
    },
    /// `out = softmax(scores) @ v` along the last axis, `scores =
    /// epilogue(q @ kt)` (`[batch.., tq, tk]`), computed a tile of keys at a
    /// time with an online softmax, so the scores never reach memory
    /// (flash attention). `args` binds q's, kt's and v's buffers first,
    /// then what the scores' epilogue reads.
    Attention {
        q: Layout,
        kt: Layout,
        v: Layout,
        scores: Sig,
        /// The output's shape, `[batch.., tq, dv]`.
        shape: Vec<usize>,
        /// The output's strides (1 along `dv`): contiguous, or such that
        /// the one permute reading it sees contiguous memory (the heads'
        /// merge before an output projection).
        out_strides: Vec<isize>,
        /// Whether the scores hide each key after its query (a causal
        /// mask, [`crate::attention::Pattern::causal`]).
        causal: bool,
        out: Arc<dyn DeviceBuffer>,
        args: Args,
    },
    /// `out = x @ wᵀ` for integer weights: `args` binds x `[rows, k]`, the
    /// codes and the scales (contiguous, at their layouts' offsets); with
    /// `packed_x`, x is int8 codes packed four per u32.
    QuantMatmul {
        format: QuantFormat,
        packed_x: bool,
        /// The scales' float dtype.
        scales: DType,
        rows: usize,
        k: usize,
        n: usize,
        out: Arc<dyn DeviceBuffer>,
        args: Args,
    },
}

/// The (m, k, n) of a product of A (`a`, `[.., m, k]`) and B (`b`, `[.., k, n]`).
pub fn product_dims(a: &Layout, b: &Layout) -> (usize, usize, usize) {
    let r = a.shape.len();
    (a.shape[r - 2], a.shape[r - 1], b.shape[r - 1])
}

impl Item {
    /// The buffers the item writes.
    pub fn writes(&self) -> Vec<&Arc<dyn DeviceBuffer>> {
        match self {
            Item::Elementwise { outputs, .. } | Item::Row { outputs, .. } => outputs.iter().map(|o| &o.1).collect(),
            Item::Reduce { values, indices, .. } => std::iter::once(values).chain(indices).collect(),
            Item::Matmul { out, .. } | Item::QuantMatmul { out, .. } | Item::Attention { out, .. } => vec![out],
        }
    }

    /// The buffers the item reads.
    pub fn reads(&self) -> &[Arc<dyn DeviceBuffer>] {
        match self {
            Item::Elementwise { args, .. }
            | Item::Reduce { args, .. }
            | Item::Row { args, .. }
            | Item::Matmul { args, .. }
            | Item::Attention { args, .. }
            | Item::QuantMatmul { args, .. } => &args.buffers,
        }
    }

    /// A matmul's epilogue as an elementwise pass over its output that
    /// reads the product from `product` (f32, contiguous, the item's
    /// shape): what follows a product computed by a library call (cuBLAS)
    /// that cannot run kiln's epilogue. `None` for any other item.
    pub fn epilogue_pass(&self, product: Arc<dyn DeviceBuffer>) -> Option<Item> {
        let Item::Matmul { shape, out, epilogue: Some(sig), args, .. } = self else { return None };
        let (mut sig, mut args) = (sig.clone(), args.clone());
        sig.buffers.push(DType::F32);
        args.buffers.push(product);
        sig.leaves.push(LeafDesc {
            dtype: DType::F32,
            buffer: Some(sig.buffers.len() - 1),
            access: Access::Contiguous,
        });
        args.layouts.push(Layout::contiguous(shape));
        let acc = sig.leaves.len() - 1;
        for (op, _) in sig.bodies.iter_mut().flat_map(|b| b.ops.iter_mut()) {
            if *op == Op::Acc {
                *op = Op::Load(acc);
            }
        }
        let outputs = vec![(DType::F32, out.clone())];
        Some(Item::Elementwise { sig, args, shape: shape.clone(), outputs, region: None })
    }

    /// A short name of the item's kind, for tests and pictures.
    pub fn kind(&self) -> &'static str {
        match self {
            Item::Elementwise { .. } => "elementwise",
            Item::Reduce { .. } => "reduce",
            Item::Row { .. } => "row",
            Item::Matmul { .. } => "matmul",
            Item::Attention { .. } => "attention",
            Item::QuantMatmul { .. } => "quant_matmul",
        }
    }
}

/// An item, the op it runs for (named in errors) and the IR nodes it computes.
#[derive(Debug, Clone)]
pub struct KernelItem {
    pub op: &'static str,
    pub item: Item,
    pub covers: Vec<u64>,
}

/// The work of realizing some nodes, in order.
#[derive(Debug, Default)]
pub struct Schedule {
    pub items: Vec<KernelItem>,
    pub slots: Vec<SlotInfo>,
    /// The nodes the schedule computes, each with where its value lands.
    pub results: Vec<(Node, DeviceArray)>,
    /// The inputs realized elsewhere that placeholder slots stand for
    /// (schedules made without a device), each with its slot.
    pub inputs: Vec<(usize, Node)>,
}

impl Schedule {
    /// Fill in each slot's lifetime from the items that bind it.
    pub(crate) fn note_lifetimes(&mut self) {
        for (i, k) in self.items.iter().enumerate() {
            for b in k.item.reads().iter().chain(k.item.writes()) {
                if let Some(s) = slot_of(b) {
                    let l = &mut self.slots[s].lifetime;
                    *l = Some(l.map_or((i, i), |(first, _)| (first, i)));
                }
            }
        }
    }
}
