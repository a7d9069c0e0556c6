//! A matmul item's launches: the variant of its config that fits the
//! operands (vec4, textures), whether B is first copied into column panels
//! or a transposed operand into rows, and one kernel launch per K chunk and
//! batch slice.

use super::{Launch, Variants, elementwise, grid};
use crate::fused::VEC;
use crate::matmul::MatmulConfig;
use crate::operand_textures::{OperandTexture, PACK_WG};
use crate::reduce::MATMUL_K_CHUNK;
use crate::transpose::TRANSPOSE_WG;
use crate::{Caps, KernelKey, Meta};
use kiln_ir::dtype::DType;
use kiln_ir::error::{KilnError, Result};
use kiln_ir::shape::{Layout, numel};
use kiln_sched::lower::{Access, Args, Body, LeafDesc, Op, Sig};
use kiln_sched::schedule::product_dims;

/// Fewest bytes of B (K × N) for which a CPU adapter reads B from a copy in
/// column panels. Walking a column panel of a row-major B touches a new
/// page at every k, and at 2048 × 2048 (rows 8 KiB apart) the panel's pages
/// outnumber what the TLB holds: in a scratch kernel of kiln's layout on
/// lavapipe, 2048³ ran 1.14–1.18× as fast from panels, 1024³ 1.04×
/// (docs/BENCHMARKS.md, 'What was tried' (matmul)).
const PANELS_MIN_BYTES: u64 = 8 << 20;

/// Fewest rows of the output (B) or columns (A) across which a vec4
/// kernel reuses an operand for which a transposed operand (its last axis
/// strided: a backward pass's `g @ wᵀ` and `xᵀ @ g`) is first copied into
/// rows: vec4 loads need unit strides, and the copy, one pass over the
/// operand, then costs little against the product's reads of it. On
/// lavapipe the GPT's MLP gradients ran 1.6–1.7× as slow from the
/// transposed views as from rows (docs/BENCHMARKS.md, 'What was tried'
/// (matmul)). Below it (a decoding step's one row against a transposed
/// weight) the copy would read the weight once more than the product does.
const ROW_COPY_MIN_REUSE: usize = 32;

/// How a matmul kernel reads A and B.
#[derive(Debug, Clone)]
pub enum MatmulOperands {
    /// From their buffers, or, for an operand with a shape here (A, B),
    /// from a contiguous copy of that shape and of the operands' dtype:
    /// B's column panels (`[N / tile_n, K, tile_n]`, f32), or a transposed
    /// operand in rows (a broadcast batch axis kept as one).
    Buffers { copies: [Option<Vec<usize>>; 2] },
    /// A and B from textures laid out as these.
    Textures { a: OperandTexture, b: OperandTexture },
}

/// Everything a matmul item launches.
#[derive(Debug, Clone)]
pub struct MatmulLaunch {
    pub operands: MatmulOperands,
    /// The copies of the operands that come first, A's before B's (each's
    /// bindings: the copy, then the operand's buffer), or A and B into
    /// their textures (each: the operand's buffer, then its texture).
    pub copies: Vec<Launch>,
    /// One per K chunk and batch slice. Bindings: the output, A and B (or
    /// their textures, or A and B's panels), then the epilogue's buffers.
    pub launches: Vec<Launch>,
}

/// The launches of `out = epilogue(a @ b)` (an f32 output of `shape` from
/// `operand_dtype` operands) with the kernel family's `config`; `None`
/// when the output is empty. `args` holds the epilogue's layouts and
/// params.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    caps: &Caps,
    variants: &Variants,
    config: MatmulConfig,
    op: &'static str,
    a: &Layout,
    b: &Layout,
    operand_dtype: DType,
    shape: &[usize],
    epilogue: Option<Sig>,
    args: &Args,
) -> Result<Option<MatmulLaunch>> {
    let r = shape.len();
    let (m, k, n) = product_dims(a, b);
    if numel(shape) == 0 {
        return Ok(None);
    }
    let batch_shape = &shape[..r - 2];
    let batch: usize = batch_shape.iter().product();
    let max = caps.max_workgroups_per_dimension as usize;
    let (tile_m, tile_n) = config.tile();
    let textures = (OperandTexture::a(m, k, tile_m), OperandTexture::b(k, n, tile_n));
    let tex = config.tex && reads_textures(caps, operand_dtype, batch, n, textures);
    // A transposed operand is copied into rows where that lets a vec4
    // config read vec4s and the product reuses it enough.
    let rows = |l: &Layout, reuse: usize| {
        let copy = config.vec && !tex && k > 0 && l.strides[r - 1] != 1 && reuse >= ROW_COPY_MIN_REUSE;
        copy.then(|| RowCopy::of(l))
    };
    let planned = [rows(a, n), rows(b, m)];
    let read = |l: &Layout, copy: &Option<RowCopy>| copy.as_ref().map_or_else(|| l.clone(), |c| c.read.clone());
    // A copy is only made for a strided operand, which alone is never
    // eligible, so copies the vec4 kernel cannot use go.
    let vec_ok = vec_eligible(operand_dtype, k, n, &read(a, &planned[0]), &read(b, &planned[1]));
    let row_copies = if vec_ok { planned } else { [None, None] };
    let (a_read, b_read) = (read(a, &row_copies[0]), read(b, &row_copies[1]));
    let config = MatmulConfig { tex, vec: tex || config.vec && vec_ok, ..config };
    let (gx, gy) = (n.div_ceil(tile_n), m.div_ceil(tile_m));
    if gx > max || gy > max {
        return Err(KilnError::Invalid { op, detail: format!("an output of {m}×{n} exceeds the adapter's grid") });
    }
    let (operands, copies, a, b, panel_stride) = if config.tex {
        let texture = |l, t| operand_texture(caps, op, l, t, operand_dtype);
        let copies = vec![texture(a, textures.0)?, texture(b, textures.1)?];
        (MatmulOperands::Textures { a: textures.0, b: textures.1 }, copies, a.clone(), b.clone(), 0)
    } else {
        let (mut shapes, mut copies) = ([None, None], Vec::new());
        let mut copy = |operand: usize, view: &Layout| -> Result<()> {
            copies.push(copy_launch(caps, op, view, operand_dtype)?);
            shapes[operand] = Some(view.shape.clone());
            Ok(())
        };
        if let Some(c) = &row_copies[0] {
            copy(0, &c.view)?;
        }
        // Panels read B through any strides, so they take a transposed B's
        // row copy's place.
        let (b, panel_stride) = if operand_dtype == DType::F32 && reads_b_in_panels(caps, variants, &config, b, k, n) {
            copy(1, &column_panels(b, k, n, tile_n))?;
            let mut strides = vec![0; r];
            (strides[r - 2], strides[r - 1]) = (tile_n as isize, 1);
            (Layout { shape: b.shape.clone(), strides, offset: 0 }, (k * tile_n) as isize)
        } else {
            if let Some(c) = &row_copies[1] {
                copy(1, &c.view)?;
            }
            (b_read.clone(), tile_n as isize * b_read.strides[r - 1])
        };
        (MatmulOperands::Buffers { copies: shapes }, copies, a_read, b, panel_stride)
    };
    let batch_rank = batch_shape.len();
    let key = KernelKey::Matmul { dtype: operand_dtype, batch_rank, epilogue, config };
    let mut launches = Vec::new();
    for b0 in (0..batch).step_by(max) {
        for k0 in (0..k.max(1)).step_by(MATMUL_K_CHUNK) {
            let k1 = (k0 + MATMUL_K_CHUNK).min(k);
            let mut meta = Meta::default();
            meta.u(m).u(k).u(n).u(k0).u(k1).u((k0 > 0) as usize).u(b0);
            meta.i(a.strides[r - 2]).i(a.strides[r - 1]).i(b.strides[r - 2]).i(b.strides[r - 1]);
            meta.u(a.offset).u(b.offset).u((k1 == k) as usize).i(panel_stride);
            batch_shape.iter().for_each(|&d| {
                meta.u(d);
            });
            a.strides[..r - 2].iter().chain(&b.strides[..r - 2]).for_each(|&s| {
                meta.i(s);
            });
            if let KernelKey::Matmul { epilogue: Some(sig), .. } = &key {
                super::fused_meta(&mut meta, sig, args, shape);
            }
            let groups = [gx as u32, gy as u32, (batch - b0).min(max) as u32];
            launches.push(Launch { key: key.clone(), meta, groups, elements: m * n });
        }
    }
    Ok(Some(MatmulLaunch { operands, copies, launches }))
}

/// Whether a texture config reads this product's operands from textures
/// (`textures`: A's and B's): float operands (packed ones are unpacked by
/// the copy into the texture), one batch, N a multiple of 4 (the kernel
/// stores vec4s) and textures with texels (K > 0: an empty texture is
/// invalid) within the adapter's limits. Otherwise its vec4 twin runs.
fn reads_textures(
    caps: &Caps,
    dtype: DType,
    batch: usize,
    n: usize,
    textures: (OperandTexture, OperandTexture),
) -> bool {
    let usable = |t: OperandTexture| t.texels() > 0 && t.fits(caps);
    dtype.is_float() && batch == 1 && n.is_multiple_of(VEC) && usable(textures.0) && usable(textures.1)
}

/// Whether the matmul `config` reads B (`b`, K × N) from a copy laid out
/// as column panels: only for vec4 kernels, B split evenly into more than
/// one panel and the same B for every batch; by size on CPU adapters
/// unless pinned ([`Variants::matmul_panels`]).
fn reads_b_in_panels(caps: &Caps, variants: &Variants, config: &MatmulConfig, b: &Layout, k: usize, n: usize) -> bool {
    let r = b.shape.len();
    let (_, tile_n) = config.tile();
    let possible =
        config.vec && k > 0 && n > tile_n && n.is_multiple_of(tile_n) && b.strides[..r - 2].iter().all(|&s| s == 0);
    let by_size = || caps.cpu && DType::F32.storage_bytes(k * n) >= PANELS_MIN_BYTES;
    possible && variants.matmul_panels.unwrap_or_else(by_size)
}

/// The launch copying operand `l` (its last two axes, one batch, of
/// `dtype`) into a texture laid out as `tex`.
fn operand_texture(caps: &Caps, op: &'static str, l: &Layout, tex: OperandTexture, dtype: DType) -> Result<Launch> {
    let r = l.shape.len();
    let (rows, cols, row_stride, col_stride) = (l.shape[r - 2], l.shape[r - 1], l.strides[r - 2], l.strides[r - 1]);
    let vec4 = col_stride == 1
        && cols.is_multiple_of(VEC)
        && l.offset.is_multiple_of(VEC)
        && row_stride.rem_euclid(VEC as isize) == 0;
    let mut meta = Meta::default();
    meta.u(tex.width as usize).u(tex.height as usize).u(tex.layers as usize);
    meta.u(rows).u(cols).u(l.offset).i(row_stride).i(col_stride);
    tex.coefficients().iter().for_each(|&c| {
        meta.u(c as usize);
    });
    let texels = tex.texels() as usize;
    let groups = grid(caps, op, texels.div_ceil(PACK_WG as usize))?;
    Ok(Launch { key: KernelKey::OperandTexture { vec4, dtype }, meta, groups, elements: texels })
}

/// Whether `view` reads its rows contiguously and its columns strided, in
/// whole vec4s: R, C, the column stride, the offset and every batch stride
/// multiples of 4.
fn transposes_in_blocks(view: &Layout) -> bool {
    let r = view.shape.len();
    let four = |x: isize| x.rem_euclid(VEC as isize) == 0;
    r >= 2
        && view.strides[r - 2] == 1
        && view.shape[r - 2].is_multiple_of(VEC)
        && view.shape[r - 1].is_multiple_of(VEC)
        && view.strides[r - 1] > 0
        && four(view.strides[r - 1])
        && view.offset.is_multiple_of(VEC)
        && view.strides[..r - 2].iter().all(|&s| s >= 0 && four(s))
}

/// The launch of [`crate::transpose`] for `view` ([`transposes_in_blocks`]).
fn transpose_launch(caps: &Caps, op: &'static str, view: &Layout) -> Result<Launch> {
    let r = view.shape.len();
    let (rows, cols) = (view.shape[r - 2], view.shape[r - 1]);
    let blocks = (rows / VEC) * (cols / VEC);
    let matrices: usize = view.shape[..r - 2].iter().product();
    let mut meta = Meta::default();
    meta.u(rows).u(cols).u(view.offset / VEC).u(view.strides[r - 1] as usize / VEC).u(blocks).u(matrices);
    for (&extent, &stride) in view.shape[..r - 2].iter().zip(&view.strides[..r - 2]) {
        meta.u(extent).u(stride as usize / VEC);
    }
    let groups = grid(caps, op, (blocks * matrices).div_ceil(TRANSPOSE_WG as usize))?;
    Ok(Launch { key: KernelKey::Transpose { batch_rank: r - 2 }, meta, groups, elements: rows * cols * matrices })
}

/// Whether a vec4 config can read operands at these layouts: float
/// operands (packed ones too: four elements are two whole words), K and N
/// multiples of 4, unit strides along the rows and everything else
/// aligned to 4.
fn vec_eligible(dtype: DType, k: usize, n: usize, a: &Layout, b: &Layout) -> bool {
    let r = a.shape.len();
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
        && k.is_multiple_of(VEC)
        && n.is_multiple_of(VEC)
        && a.strides[r - 1] == 1
        && b.strides[r - 1] == 1
        && [a.offset as isize, b.offset as isize]
            .iter()
            .chain(&a.strides[..r - 1])
            .chain(&b.strides[..r - 1])
            .all(|s| s % VEC as isize == 0)
}

/// A transposed operand copied into rows: `view` reads the operand in the
/// copy's order (its broadcast batch axes, stride 0, taken once), and the
/// kernel reads the copy as `read` (those axes broadcast again).
struct RowCopy {
    view: Layout,
    read: Layout,
}

impl RowCopy {
    fn of(l: &Layout) -> RowCopy {
        let shape: Vec<usize> = l.shape.iter().zip(&l.strides).map(|(&d, &s)| if s == 0 { 1 } else { d }).collect();
        let view = Layout { shape, strides: l.strides.clone(), offset: l.offset };
        let mut strides = Layout::contiguous(&view.shape).strides;
        strides.iter_mut().zip(&l.strides).filter(|(_, s)| **s == 0).for_each(|(c, _)| *c = 0);
        RowCopy { read: Layout { shape: l.shape.clone(), strides, offset: 0 }, view }
    }
}

/// The view of B (`b`, K × N, the same for every batch) in its column
/// panels of `tile_n`, `[N / tile_n, K, tile_n]`: copied contiguously, the
/// panels' rows are vec4s.
fn column_panels(b: &Layout, k: usize, n: usize, tile_n: usize) -> Layout {
    let r = b.shape.len();
    let (row, column) = (b.strides[r - 2], b.strides[r - 1]);
    Layout {
        shape: vec![n / tile_n, k, tile_n],
        strides: vec![tile_n as isize * column, row, column],
        offset: b.offset,
    }
}

/// The launch copying `view` of an operand of `dtype` into a contiguous
/// buffer of its shape: in 4 × 4 blocks where the view is a transposed f32
/// matrix whose blocks are whole vec4s ([`crate::transpose`]), else
/// elementwise.
fn copy_launch(caps: &Caps, op: &'static str, view: &Layout, dtype: DType) -> Result<Launch> {
    if dtype == DType::F32 && transposes_in_blocks(view) {
        return transpose_launch(caps, op, view);
    }
    let leaf = LeafDesc { dtype, buffer: Some(0), access: Access::of(view).0 };
    let copy = Body { ops: vec![(Op::Load(0), dtype)], roots: vec![0] };
    let rank = view.shape.len();
    let sig = Sig { rank, leaves: vec![leaf], params: vec![], buffers: vec![dtype], bodies: vec![copy] };
    let args = Args { layouts: vec![view.clone()], ..Default::default() };
    let launch = elementwise(caps, op, sig, &args, &view.shape, &[dtype], None)?;
    Ok(launch.expect("an operand has elements where the output has"))
}
