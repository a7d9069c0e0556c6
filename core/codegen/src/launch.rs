//! A kernel item's launches, chosen from the item, [`Caps`] and the
//! [`Variants`] alone: the variant that fits it (vec4 walks, row lanes or
//! streams, reduction passes, matmul operands), its kernel key, its meta
//! block and its grid. The runtime binds the buffers and records.

mod attention;
mod bind;
mod matmul;
mod quant;

pub use attention::{AttentionOperands, attention};
pub use bind::{Binder, BoundLaunch, bind};
pub use matmul::{MatmulLaunch, MatmulOperands, matmul};
pub use quant::quant_matmul;

use crate::attention::KeySharing;
use crate::fused::{
    ROWS_PER_INVOCATION, RowLanes, VEC, Walk, elementwise_vectorizable, vectorizable, vectorizable_reading_rows,
};
use crate::matmul::MatmulConfig;
use crate::reduce::{Monoid, REDUCE_STREAM_MIN, REDUCE_WG, ReducePass, Runs, reduce_shape, runs_len, whole_spans};
use crate::row_stream::stream_lanes;
use crate::{Caps, KernelKey, MAX_LOOP, META_WORDS, Meta, RowLayout, WG, held_packed};
use kiln_ir::dtype::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::ir::ReduceOp;
use kiln_ir::shape::{Layout, numel};
use kiln_sched::lower::{Access, Args, Op, Sig};
use kiln_sched::schedule::{Item, Target};

/// The choices of kernel variant that hang on the kind of adapter (and that
/// tests pin, so that every variant runs on the adapters they have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variants {
    /// The subgroup width row kernels are generated for.
    pub subgroup_width: Option<u32>,
    /// Whether tree reductions (and the integer-weight product) combine
    /// each workgroup's partials in workgroup memory: on GPUs, where a barrier is cheap and each pass a
    /// dispatch; not on CPU adapters, whose barriers are costly (measured
    /// in docs/BENCHMARKS.md, 'What was tried' (reductions)).
    pub workgroup_reductions: bool,
    /// Whether vec4 matmuls read B from column panels where they can;
    /// `None`: by B's size on CPU adapters.
    pub matmul_panels: Option<bool>,
    /// How `softmax(scores) @ v` runs ([`AttentionPlan::of`]).
    pub attention: AttentionPlan,
}

/// How `softmax(scores) @ v` runs: as one attention kernel
/// ([`crate::attention`]) sharing keys one way, or apart (the scores, the
/// softmax and the product).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionPlan {
    Apart,
    OneKernel(KeySharing),
}

impl AttentionPlan {
    /// GPUs share key tiles through workgroup memory. CPU adapters read a
    /// value every invocation shares lane by lane, so the tiles ran 3–5×
    /// slower on lavapipe than three kernels; they share keys by subgroup
    /// broadcasts where the width is fixed (docs/BENCHMARKS.md, 'What was
    /// tried' (gpt)).
    pub fn of(caps: &Caps) -> AttentionPlan {
        match (caps.cpu, caps.subgroup_size) {
            (false, _) if caps.workgroup_memory => AttentionPlan::OneKernel(KeySharing::Workgroup),
            (true, Some(width)) if caps.subgroups => AttentionPlan::OneKernel(KeySharing::Subgroup(width)),
            _ => AttentionPlan::Apart,
        }
    }

    /// Whether a device with `caps` can run this plan.
    pub fn possible(self, caps: &Caps) -> bool {
        match self {
            AttentionPlan::Apart => true,
            AttentionPlan::OneKernel(KeySharing::Workgroup) => caps.workgroup_memory,
            AttentionPlan::OneKernel(KeySharing::Subgroup(_)) => caps.subgroups,
        }
    }
}

impl Variants {
    /// What a device with `caps` runs unless a test pins otherwise.
    pub fn of(caps: &Caps) -> Variants {
        Variants {
            subgroup_width: caps.subgroup_size,
            workgroup_reductions: !caps.cpu && caps.workgroup_memory,
            matmul_panels: None,
            attention: AttentionPlan::of(caps),
        }
    }
}

/// The kernels `item` launches on a device with `caps`, in order; its
/// matmul (if it is one) takes the kernel family's `config` for its
/// product of (m, k, n), as from the tuner. For rendering a schedule with
/// no device at hand.
pub fn item_kernels(
    caps: &Caps,
    variants: &Variants,
    op: &'static str,
    item: &Item,
    config: impl FnOnce(DType, (usize, usize, usize)) -> MatmulConfig,
) -> Result<Vec<KernelKey>> {
    let bound = bind(caps, variants, op, item, |d, dims| Ok(config(d, dims)), &mut Unbound)?;
    Ok(bound.into_iter().map(|b| b.launch.key).collect())
}

/// Binds nothing: for the kernels alone.
struct Unbound;

impl Binder for Unbound {
    type Handle = ();
    fn buffer(&mut self, _: &std::sync::Arc<dyn kiln_ir::ir::DeviceBuffer>) {}
    fn scratch(&mut self, _: &'static str, _: DType, _: &[usize]) -> Result<()> {
        Ok(())
    }
    fn texture(&mut self, _: &crate::operand_textures::OperandTexture) -> Result<()> {
        Ok(())
    }
}

/// One launch of a kernel: which kernel, its parameters and its grid.
#[derive(Debug, Clone)]
pub struct Launch {
    pub key: KernelKey,
    pub meta: Meta,
    pub groups: [u32; 3],
    /// The elements it computes (for logs).
    pub elements: usize,
}

impl Launch {
    /// Append this launch's meta block to `blocks`, the meta blocks of a
    /// launch list (one `META_WORDS` slot each); its slot.
    pub fn append_meta(&self, blocks: &mut Vec<u32>) -> Result<usize> {
        let meta = &self.meta.0;
        if meta.len() > META_WORDS {
            let (name, words) = (self.key.name(), meta.len());
            return Err(KilnError::Gpu(format!(
                "{name}: kernel parameters overflow the meta block ({words} words of {META_WORDS})"
            )));
        }
        let slot = blocks.len() / META_WORDS;
        blocks.extend(meta);
        blocks.resize((slot + 1) * META_WORDS, 0);
        Ok(slot)
    }
}

/// A 1-D grid of `workgroups`, folded into y past the device's limit.
pub fn grid(caps: &Caps, op: &'static str, workgroups: usize) -> Result<[u32; 3]> {
    let max = caps.max_workgroups_per_dimension as usize;
    let x = workgroups.clamp(1, max);
    let y = workgroups.div_ceil(x);
    if y > max {
        return Err(KilnError::Invalid { op, detail: format!("{workgroups} workgroups exceed the adapter's grid") });
    }
    Ok([x as u32, y as u32, 1])
}

/// Whether body `b` of `sig` computes from row statistics and scalars
/// alone, reading no leaf.
fn reads_only_row_values(sig: &Sig, b: usize) -> bool {
    sig.bodies[b].ops.iter().all(|(op, _)| matches!(op, Op::Row(_) | Op::Param(_) | Op::Pointwise(_)))
}

/// Whether every leaf of `sig` can be read four elements at a time; with
/// `straddling`, also `Mod` and `Div` leaves that do not split into vec4s
/// ([`reads_per_element`]) whose period or repeat is at least 4, read per
/// element ([`Walk::Vec4Straddling`]).
fn aligned4(sig: &Sig, args: &Args, straddling: bool) -> bool {
    sig.leaves.iter().zip(&args.layouts).all(|(leaf, l)| match leaf.access {
        Access::Contiguous => l.offset.is_multiple_of(VEC),
        Access::Mod | Access::Div => !reads_per_element(leaf.access, l) || (straddling && Access::of(l).1 >= VEC),
        Access::Strided => strided_rows_split_into_vec4s(l),
    })
}

/// Whether the four elements of a strided leaf at any 4-aligned flat index
/// are one aligned vec4 of its buffer: its innermost axis is contiguous and
/// a multiple of 4 long, and its offset and other strides are multiples of
/// 4 (a permute or slice that keeps rows whole, such as B's column panels
/// for a matmul, or attention's head split).
fn strided_rows_split_into_vec4s(l: &Layout) -> bool {
    let (Some(&len), Some(&step)) = (l.shape.last(), l.strides.last()) else { return false };
    let outer = l.strides.iter().zip(&l.shape).rev().skip(1);
    step == 1
        && len.is_multiple_of(VEC)
        && l.offset.is_multiple_of(VEC)
        && outer.into_iter().all(|(&s, &d)| d == 1 || s.rem_euclid(VEC as isize) == 0)
}

/// Whether a leaf read as `access` through `l` does not split into the
/// vec4s of a 4-aligned walk: a `Div` leaf whose rows are not a multiple
/// of 4 long (its vec4s would straddle two rows), a `Mod` leaf whose
/// period or offset is not one (its vec4s would wrap, or be unaligned).
fn reads_per_element(access: Access, l: &Layout) -> bool {
    let (_, period) = Access::of(l);
    match access {
        Access::Div => !period.is_multiple_of(VEC),
        Access::Mod => !(period.is_multiple_of(VEC) && l.offset.is_multiple_of(VEC)),
        Access::Contiguous | Access::Strided => false,
    }
}

/// Whether a vec4 walk reads each packed leaf (f16 unless `half`, bf16)
/// four elements at a time, a pair of words: not where it would read
/// single elements (a row-broadcast leaf's, and every broadcast leaf's in
/// a straddling walk), since a packed buffer of an odd number of words is
/// one word longer than its pairs.
fn packed_leaves_read_whole(sig: &Sig, args: &Args, half: bool) -> bool {
    let leaves = || sig.leaves.iter().zip(&args.layouts);
    let straddling = leaves().any(|(leaf, l)| reads_per_element(leaf.access, l));
    leaves().filter(|(leaf, _)| held_packed(leaf.dtype, half)).all(|(leaf, _)| match leaf.access {
        Access::Contiguous | Access::Strided => true,
        Access::Mod => !straddling,
        Access::Div => false,
    })
}

/// The shape, leaf layouts and params of a fused body, in meta order.
pub fn fused_meta(meta: &mut Meta, sig: &Sig, args: &Args, shape: &[usize]) {
    shape.iter().for_each(|&d| {
        meta.u(d);
    });
    for (leaf, layout) in sig.leaves.iter().zip(&args.layouts) {
        match leaf.access {
            Access::Contiguous => meta.u(layout.offset),
            Access::Mod | Access::Div => meta.u(layout.offset).u(Access::of(layout).1),
            Access::Strided => meta.layout(layout.offset, &layout.strides),
        };
    }
    for (&d, &v) in sig.params.iter().zip(&args.params) {
        meta.scalar(d, v);
    }
}

/// The launch of an elementwise kernel over `shape` writing body 0's
/// roots as `outputs` (contiguous), or its one root into `out_region`
/// of the first output; `None` when there is nothing to compute.
pub fn elementwise(
    caps: &Caps,
    op: &'static str,
    sig: Sig,
    args: &Args,
    shape: &[usize],
    outputs: &[DType],
    out_region: Option<&Layout>,
) -> Result<Option<Launch>> {
    let n = numel(shape);
    if n == 0 {
        return Ok(None);
    }
    let dtypes = outputs.to_vec();
    // f16 as WGSL's `f16` where the adapter has it and the kernel has any.
    let half = caps.f16_compute && (dtypes.contains(&DType::F16) || sig.has_dtype(DType::F16));
    let vec4 = out_region.is_none()
        && n.is_multiple_of(VEC)
        && elementwise_vectorizable(&sig)
        && aligned4(&sig, args, true)
        && packed_leaves_read_whole(&sig, args, half);
    let walk = if vec4 { vec4_walk(&sig, args, n) } else { Walk::Flat };
    let threads = match walk {
        Walk::Vec4Rows => {
            let period = shared_period(&sig, args, Access::Mod).flatten().expect("a bias");
            (period / VEC) * (n / period).div_ceil(ROWS_PER_INVOCATION)
        }
        Walk::Vec4Segments => n / (VEC * ROWS_PER_INVOCATION),
        Walk::Vec4 | Walk::Vec4Straddling => n.div_ceil(VEC).div_ceil(ROWS_PER_INVOCATION),
        Walk::Flat if dtypes.iter().any(|&d| held_packed(d, half)) => n.div_ceil(2),
        Walk::Flat => n,
    };
    let groups = grid(caps, op, threads.div_ceil(WG as usize))?;
    let mut meta = Meta::default();
    meta.u(n).u(groups[0] as usize * WG as usize);
    fused_meta(&mut meta, &sig, args, shape);
    if let Some(l) = out_region {
        meta.layout(l.offset, &l.strides);
    }
    let invocations = groups[0] as usize * groups[1] as usize * WG as usize;
    let whole = walk != Walk::Flat && invocations * VEC * ROWS_PER_INVOCATION == n;
    let key = KernelKey::Elementwise { sig, outputs: dtypes, out_strided: out_region.is_some(), walk, whole, half };
    Ok(Some(Launch { key, meta, groups, elements: n }))
}

/// The launch of the row kernel over `shape = [rows.., len]`: `stages`
/// folded along each row, then the last body written as `outputs` (per
/// element, or once per row with `per_row`), for subgroups
/// `subgroup_width` wide; `None` when there is nothing to compute.
#[allow(clippy::too_many_arguments)]
pub fn row(
    caps: &Caps,
    subgroup_width: Option<u32>,
    op: &'static str,
    sig: Sig,
    args: &Args,
    stages: Vec<ReduceOp>,
    shape: &[usize],
    outputs: &[DType],
    per_row: bool,
) -> Result<Option<Launch>> {
    let len = *shape.last().expect("row kernels have rank ≥ 1");
    let rows = numel(shape) / len.max(1);
    if rows == 0 || len == 0 {
        return Ok(None);
    }
    let dtypes = outputs.to_vec();
    // Rows read in lanes or as vec4s: word-sized values written per element.
    let word_outputs = dtypes.iter().all(|&d| !d.is_packed() && d != DType::Bool) && vectorizable_reading_rows(&sig);
    let words = !per_row && word_outputs;
    let vec4 = words && len.is_multiple_of(VEC) && aligned4(&sig, args, false);
    let (memory, cpu, width) = (caps.workgroup_memory, caps.cpu, subgroup_width);
    let lanes = words.then(|| RowLanes::for_device(memory, cpu, width, &sig, &stages, len, vec4)).flatten();
    let (layout, vec4) = match lanes {
        Some(l) => (RowLayout::Lanes(l), vec4),
        None if caps.streams_rows(rows, len) => {
            // The stream reads a row's statistics as vec4s also where
            // they end in one value per row computed from them alone,
            // and rows that do not split into vec4s as the vec4s
            // covering them.
            let wide = word_outputs && (!per_row || reads_only_row_values(&sig, stages.len()));
            let vec4 = wide && len.is_multiple_of(VEC) && aligned4(&sig, args, false);
            let straddling = wide && !vec4 && len >= VEC && aligned4(&sig, args, true);
            let walked = if straddling { len + VEC - 1 } else { len };
            match stream_lanes(&sig, &stages, per_row, walked, vec4 || straddling) {
                Some(lanes) => (RowLayout::Stream { lanes, straddling }, vec4),
                None => {
                    let detail = format!("{} stages over rows of {len}: too many loop iterations", stages.len());
                    return Err(KilnError::Invalid { op, detail });
                }
            }
        }
        None => (RowLayout::Invocation, vec4),
    };
    let (invocations, wg) = match layout {
        RowLayout::Lanes(l) => (rows * l.lanes as usize, l.workgroup_size()),
        RowLayout::Stream { lanes, .. } => (rows * lanes as usize, lanes),
        RowLayout::Invocation => (rows, WG),
    };
    let groups = grid(caps, op, invocations.div_ceil(wg as usize))?;
    let mut meta = Meta::default();
    meta.u(rows).u(len).u(groups[0] as usize * wg as usize);
    fused_meta(&mut meta, &sig, args, shape);
    let key = KernelKey::Row { sig, stages, outputs: dtypes, per_row, vec4, layout };
    Ok(Some(Launch { key, meta, groups, elements: numel(shape) }))
}

/// One pass of a tree reduction: its launch, and how many partials per
/// row it leaves (1 for the last pass, which writes the result).
#[derive(Debug, Clone)]
pub struct ReducePassLaunch {
    pub launch: Launch,
    pub partials: usize,
}

/// The passes of a tree reduction of body 0 of `sig` over `[rows, len]`
/// (the input seen as kept axes then reduced axes; `view_shape`), each
/// pass's partials combined by the next, combining each workgroup's in
/// workgroup memory when `workgroup`. The first pass reads the fused
/// input, later ones the partials (dtype: `partials_dtype(&sig)`).
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    caps: &Caps,
    workgroup: bool,
    op: &'static str,
    monoid: Monoid,
    sig: Sig,
    args: &Args,
    view_shape: &[usize],
    rows: usize,
) -> Result<Vec<ReducePassLaunch>> {
    if rows == 0 {
        return Ok(Vec::new());
    }
    let len = numel(view_shape) / rows;
    let value_dtype = partials_dtype(&sig);
    let plain = matches!(monoid, Monoid::Reduce(_)) && vectorizable(&sig);
    let columns = column_view(&sig, args, view_shape, rows);
    let runs = if let Some((sig, args, _)) = &columns {
        // Four neighbouring rows at a time where they split into vec4s.
        let vec4 = plain && rows.is_multiple_of(VEC) && aligned4(sig, args, false);
        if vec4 { Runs::Vec4 } else { Runs::Scalar }
    } else if plain && len.is_multiple_of(VEC) && aligned4(&sig, args, false) {
        Runs::Vec4
    } else if plain && len >= VEC && aligned4(&sig, args, true) {
        Runs::Straddling
    } else {
        Runs::Scalar
    };
    // A straddling run may hold two rows' elements: no shared statistic.
    let row_leaves = columns.is_none() && runs == Runs::Vec4 && row_constant_leaves(&sig, args, len);
    let mut len = runs_len(runs, len);
    // What the first pass reads: the fused input over rows, or over columns.
    let (sig, column_args, first_shape) = match columns {
        Some((sig, args, shape)) => (sig, Some(args), shape),
        None => (sig, None, view_shape.to_vec()),
    };
    let columns = column_args.is_some();
    let first_args = column_args.as_ref().unwrap_or(args);
    let mut prologue = Some(sig);
    let mut passes = Vec::new();
    loop {
        // The first pass reads the fused input; later ones the partials.
        let first = prologue.is_some();
        // Partials are read as vec4s where each row's split into them
        // (not an arg reduction's, whose indices go with them).
        let runs = match first {
            true => runs,
            false if matches!(monoid, Monoid::Reduce(_)) && len.is_multiple_of(VEC) => Runs::Vec4,
            false => Runs::Scalar,
        };
        let step = if runs == Runs::Scalar { 1 } else { VEC };
        let streams = first && matches!(monoid, Monoid::Reduce(_)) && rows * len >= REDUCE_STREAM_MIN;
        let (pass, groups, partials, workgroups) = if first && columns {
            // One invocation per chunk of a row (or of 4 neighbouring
            // rows), leaving a partial per row.
            let chunks = column_chunks(rows / step, len, rows * len, workgroup);
            (ReducePass::over_columns(runs), chunks, chunks, (rows / step * chunks).div_ceil(REDUCE_WG))
        } else {
            let (per_thread, _) = reduce_shape(monoid, streams, workgroup);
            let groups = len.div_ceil(per_thread * step);
            // Partials this pass leaves per row: one per invocation, or one
            // per workgroup of REDUCE_WG invocations.
            let partials = if workgroup { groups.div_ceil(REDUCE_WG) } else { groups };
            let workgroups = if workgroup { rows * partials } else { (rows * groups).div_ceil(REDUCE_WG) };
            let pass = ReducePass {
                runs,
                workgroup,
                streams,
                row_leaves: row_leaves && first,
                whole: whole_spans(monoid, streams, workgroup, len, step),
                one_row: rows == 1,
                columns: false,
            };
            (pass, groups, partials, workgroups)
        };
        let groups_grid = grid(caps, op, workgroups)?;
        let mut meta = Meta::default();
        meta.u(rows).u(len).u(groups).u(groups_grid[0] as usize * REDUCE_WG);
        let prologue_sig = prologue.take();
        if let Some(sig) = &prologue_sig {
            fused_meta(&mut meta, sig, first_args, &first_shape);
        }
        let key = KernelKey::Reduce { monoid, prologue: prologue_sig, partials: value_dtype, pass };
        passes.push(ReducePassLaunch {
            launch: Launch { key, meta, groups: groups_grid, elements: rows * len },
            partials,
        });
        if partials == 1 {
            return Ok(passes);
        }
        len = partials;
    }
}

/// A reduction over `[rows, len]` (`view_shape`: kept axes, then reduced
/// ones) that reads its rows across memory (some leaf steps by one element
/// from row to row, and none along a row), seen as `[reduced.., kept..]`:
/// its signature, args and shape for a first pass over columns
/// ([`ReducePass::columns`]), in which consecutive flat indices are
/// neighbouring rows. None for a reduction along rows.
fn column_view(sig: &Sig, args: &Args, view_shape: &[usize], rows: usize) -> Option<(Sig, Args, Vec<usize>)> {
    let kept = (0..=view_shape.len()).find(|&k| numel(&view_shape[..k]) == rows)?;
    let innermost = |axes: std::ops::Range<usize>| axes.rev().find(|&d| view_shape[d] > 1);
    let (row_axis, element_axis) = (innermost(0..kept)?, innermost(kept..view_shape.len())?);
    let mut across = false;
    for (leaf, l) in sig.leaves.iter().zip(&args.layouts) {
        match leaf.access {
            Access::Contiguous => return None,
            Access::Strided if l.strides[element_axis].abs() == 1 => return None,
            Access::Strided => across |= l.strides[row_axis].abs() == 1,
            Access::Mod | Access::Div => {}
        }
    }
    if !across {
        return None;
    }
    let perm: Vec<usize> = (kept..view_shape.len()).chain(0..kept).collect();
    let (mut sig, mut args) = (sig.clone(), args.clone());
    args.layouts.iter_mut().for_each(|l| *l = l.permute(&perm));
    for body in &mut sig.bodies {
        for (op, _) in &mut body.ops {
            if let Op::Gather { axis, .. } = op {
                *axis = perm.iter().position(|&p| p == *axis).expect("a permutation");
            }
        }
    }
    // A gather's source stays strided (it is read through coordinates).
    let gathered: Vec<usize> = gather_sources(&sig).collect();
    for (k, (leaf, l)) in sig.leaves.iter_mut().zip(&args.layouts).enumerate() {
        leaf.access = if gathered.contains(&k) { Access::Strided } else { Access::of(l).0 };
    }
    Some((sig, args, perm.iter().map(|&p| view_shape[p]).collect()))
}

/// The leaves `sig`'s gathers read from.
fn gather_sources(sig: &Sig) -> impl Iterator<Item = usize> + '_ {
    sig.bodies.iter().flat_map(|b| &b.ops).filter_map(|(op, _)| match op {
        Op::Gather { src, .. } => Some(*src),
        Op::Load(_) | Op::Iota { .. } | Op::Row(_) | Op::Acc | Op::Param(_) | Op::Pointwise(_) => None,
    })
}

/// Invocations a first pass over columns aims for: enough to fill a GPU,
/// or a CPU adapter's threads with room to balance.
const COLUMN_INVOCATIONS: [usize; 2] = [1 << 14, 1 << 16];

/// Fewest elements a chunk of a column holds where the column is split:
/// fewer would spend more on partials than they save.
const COLUMN_CHUNK_MIN: usize = 16;

/// Fewest elements a reduction over columns must have to be split into
/// chunks: a smaller one (a bias's gradient over a batch) takes one pass,
/// since a second kernel's launch would cost more than the parallelism
/// gains.
const COLUMN_SPLIT_MIN: usize = 1 << 16;

/// Chunks per row of a first pass over columns run by `invocations`
/// (rows, or quads of rows): as many as fill the device
/// ([`COLUMN_INVOCATIONS`], the second with `workgroup`, for GPUs), each
/// of at least [`COLUMN_CHUNK_MIN`] elements and at most [`MAX_LOOP`],
/// none empty; one below [`COLUMN_SPLIT_MIN`] elements.
fn column_chunks(invocations: usize, len: usize, elements: usize, workgroup: bool) -> usize {
    let wanted = match elements < COLUMN_SPLIT_MIN {
        true => 1,
        false => COLUMN_INVOCATIONS[workgroup as usize].div_ceil(invocations),
    };
    let span = len.div_ceil(wanted).clamp(COLUMN_CHUNK_MIN, MAX_LOOP);
    len.div_ceil(span)
}

/// The dtype a reduction of `sig`'s body 0 accumulates and leaves partials in.
pub fn partials_dtype(sig: &Sig) -> DType {
    sig.bodies[0].ops[sig.bodies[0].roots[0]].1.wide()
}

/// How a vectorized elementwise launch of `n` elements walks them.
/// - Rows of its broadcast period (`Vec4Rows`) when every `Mod` leaf shares
///   one period of at least 64 elements (so neighbouring invocations still
///   read neighbouring memory) and there are rows to share the loads over.
/// - Eighths of rows (`Vec4Segments`) when there is no `Mod` leaf and every
///   `Div` leaf shares one repeat of at least 256 elements that splits into
///   eight whole vec4 runs (so eight neighbouring invocations read 128
///   contiguous bytes).
/// - Vec4s a grid apart, each element reading its own row or column
///   (`Vec4Straddling`), when a `Mod` or `Div` leaf does not split into
///   vec4s ([`reads_per_element`]); first, since the others would misread.
/// - Otherwise vec4s a grid apart.
fn vec4_walk(sig: &Sig, args: &Args, n: usize) -> Walk {
    if sig.leaves.iter().zip(&args.layouts).any(|(leaf, l)| reads_per_element(leaf.access, l)) {
        return Walk::Vec4Straddling;
    }
    match (shared_period(sig, args, Access::Mod), shared_period(sig, args, Access::Div)) {
        (Some(Some(p)), _) if p >= 64 && p.is_multiple_of(VEC) && n / p >= 2 => Walk::Vec4Rows,
        (None, Some(Some(r))) if r >= 256 && r.is_multiple_of(VEC * ROWS_PER_INVOCATION) && n.is_multiple_of(r) => {
            Walk::Vec4Segments
        }
        _ => Walk::Vec4,
    }
}

/// Whether a reduction over rows of `len` reads `Div` leaves, all of them
/// constant along each row (repeating by a multiple of `len`).
fn row_constant_leaves(sig: &Sig, args: &Args, len: usize) -> bool {
    let mut repeats = periods(sig, args, Access::Div);
    repeats.clone().next().is_some() && repeats.all(|r| r.is_multiple_of(len))
}

/// The period (`Mod`) or repeat (`Div`) of the leaves read as `access`:
/// None without such leaves, Some(None) when they differ.
fn shared_period(sig: &Sig, args: &Args, access: Access) -> Option<Option<usize>> {
    let mut periods = periods(sig, args, access);
    let first = periods.next()?;
    Some(periods.all(|p| p == first).then_some(first))
}

/// The periods (`Mod`) or repeats (`Div`) of the leaves read as `access`.
fn periods<'a>(sig: &'a Sig, args: &'a Args, access: Access) -> impl Iterator<Item = usize> + Clone + 'a {
    sig.leaves.iter().zip(&args.layouts).filter(move |(l, _)| l.access == access).map(|(_, l)| Access::of(l).1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_sched::lower::LeafDesc;

    /// A signature reading f32 leaves laid out as `layouts`, and its args.
    fn reading(layouts: &[Layout]) -> (Sig, Args) {
        let leaves = layouts
            .iter()
            .enumerate()
            .map(|(i, l)| LeafDesc { dtype: DType::F32, buffer: Some(i), access: Access::of(l).0 })
            .collect();
        let buffers = vec![DType::F32; layouts.len()];
        let sig = Sig { rank: layouts[0].shape.len(), leaves, params: vec![], buffers, bodies: vec![] };
        (sig, Args { layouts: layouts.to_vec(), ..Default::default() })
    }

    /// `kept` (a shape of the same rank, 1 where broadcast) expanded to `shape`.
    fn broadcast(kept: &[usize], shape: &[usize]) -> Layout {
        Layout::contiguous(kept).expand(shape)
    }

    fn walk(layouts: &[Layout]) -> Walk {
        let (sig, args) = reading(layouts);
        vec4_walk(&sig, &args, numel(&layouts[0].shape))
    }

    #[test]
    fn row_statistics_take_eighths_of_rows() {
        let x = |s: &[usize]| Layout::contiguous(s);
        assert_eq!(walk(&[x(&[20, 4096]), broadcast(&[20, 1], &[20, 4096])]), Walk::Vec4Segments);
        assert_eq!(walk(&[x(&[7, 256]), broadcast(&[7, 1], &[7, 256])]), Walk::Vec4Segments);
        // Rows that do not split into eight vec4 runs, or are short.
        assert_eq!(walk(&[x(&[300, 1020]), broadcast(&[300, 1], &[300, 1020])]), Walk::Vec4);
        assert_eq!(walk(&[x(&[64, 128]), broadcast(&[64, 1], &[64, 128])]), Walk::Vec4);
        // Two repeats; a bias beside the row statistic.
        let planes = [x(&[6, 50, 1024]), broadcast(&[6, 1, 1], &[6, 50, 1024]), broadcast(&[6, 50, 1], &[6, 50, 1024])];
        assert_eq!(walk(&planes), Walk::Vec4);
        let bias = [broadcast(&[1, 1024], &[64, 1024]), broadcast(&[64, 1], &[64, 1024])];
        assert_eq!(walk(&bias), Walk::Vec4Rows);
        // A scalar is a row statistic whose row is the whole tensor.
        let scalar = Layout::contiguous(&[]).expand(&[784, 512]);
        assert_eq!(Access::of(&scalar), (Access::Div, 784 * 512));
        assert_eq!(walk(&[x(&[784, 512]), scalar]), Walk::Vec4Segments);
    }

    #[test]
    fn reductions_hoist_leaves_constant_along_their_rows() {
        let constant = |layouts: &[Layout], len: usize| {
            let (sig, args) = reading(layouts);
            row_constant_leaves(&sig, &args, len)
        };
        let x = Layout::contiguous(&[8, 40960]);
        assert!(constant(&[x.clone(), broadcast(&[8, 1], &[8, 40960])], 40960));
        // A repeat of two rows: [6, 2, 1024] minus [6, 1, 1], summed over the last axis.
        let pairs = [Layout::contiguous(&[6, 2, 1024]), broadcast(&[6, 1, 1], &[6, 2, 1024])];
        assert!(constant(&pairs, 1024));
        // [8, 40, 1024] minus [8, 40, 1], summed over the last two axes.
        let inner = [Layout::contiguous(&[8, 40, 1024]), broadcast(&[8, 40, 1], &[8, 40, 1024])];
        assert!(!constant(&inner, 40960));
        assert!(!constant(&[x], 40960));
    }
}
