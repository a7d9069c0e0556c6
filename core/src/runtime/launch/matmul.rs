//! Recording a matmul: its kernel per K chunk and batch slice, after a copy
//! of B into column panels where that pays.

use super::{Bound, Recording};
use crate::codegen::fused::VEC;
use crate::codegen::matmul::MatmulConfig;
use crate::codegen::operand_textures::{OperandTexture, PACK_WG};
use crate::codegen::reduce::MATMUL_K_CHUNK;
use crate::codegen::{KernelKey, Meta};
use crate::dtype::DType;
use crate::error::{KilnError, Result};
use crate::ir::DeviceBuffer;
use crate::runtime::Gpu;
use crate::runtime::textures::PooledTexture;
use crate::sched::lower::{Access, Args, Body, LeafDesc, Op, Sig};
use crate::sched::schedule::product_dims;
use crate::shape::{Layout, numel};
use std::sync::Arc;

/// Fewest bytes of B (K × N) for which a CPU adapter reads B from a copy in
/// column panels. Walking a column panel of a row-major B touches a new
/// page at every k, and at 2048 × 2048 (rows 8 KiB apart) the panel's pages
/// outnumber what the TLB holds: in a scratch kernel of kiln's layout on
/// lavapipe, 2048³ ran 1.14–1.18× as fast from panels, 1024³ 1.04×
/// (docs/BENCHMARKS.md, 'What was tried' (matmul)).
const PANELS_MIN_BYTES: u64 = 8 << 20;

impl Gpu {
    /// Whether the matmul `config` reads B (`b`, K × N) from a copy laid
    /// out as column panels: `[N / tile_n, K, tile_n]`, each panel's rows
    /// contiguous. Only for vec4 kernels, B split evenly into more than one
    /// panel and the same B for every batch; by size on CPU adapters unless
    /// a test pins it (`TestHooks::set_matmul_panels`).
    fn reads_b_in_panels(&self, config: &MatmulConfig, b: &Layout, k: usize, n: usize) -> bool {
        let r = b.shape.len();
        let (_, tile_n) = config.tile();
        let possible =
            config.vec && n > tile_n && n.is_multiple_of(tile_n) && b.strides[..r - 2].iter().all(|&s| s == 0);
        let by_size = || self.info.is_cpu_adapter() && DType::F32.storage_bytes(k * n) >= PANELS_MIN_BYTES;
        let wanted = self.overrides.matmul_panels().unwrap_or_else(by_size);
        possible && wanted
    }

    /// Whether a texture config reads this product's operands from
    /// textures (`textures`: A's and B's): f32 operands, one batch, N a
    /// multiple of 4 (the kernel stores vec4s) and textures within the
    /// adapter's limits. Otherwise its vec4 twin runs.
    fn reads_textures(&self, dtype: DType, batch: usize, n: usize, textures: (OperandTexture, OperandTexture)) -> bool {
        let caps = &self.caps;
        dtype == DType::F32 && batch == 1 && n.is_multiple_of(VEC) && textures.0.fits(caps) && textures.1.fits(caps)
    }
}

impl Recording {
    /// `out = epilogue(a @ b)` (f32), with the kernel `config` or, given
    /// none, the one the tuner picks. `args` binds `a`'s and `b`'s buffers
    /// first, then whatever the epilogue (a fused body) reads.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &mut self,
        gpu: &Gpu,
        config: Option<MatmulConfig>,
        op: &'static str,
        a: &Layout,
        b: &Layout,
        operand_dtype: DType,
        shape: &[usize],
        out: &Arc<dyn DeviceBuffer>,
        epilogue: Option<Sig>,
        mut args: Args,
    ) -> Result<()> {
        let r = shape.len();
        let (m, k, n) = product_dims(a, b);
        let config = match config {
            Some(c) => c,
            None => gpu.matmul_config(operand_dtype, m, n, k)?,
        };
        let batch_shape = &shape[..r - 2];
        let batch: usize = batch_shape.iter().product();
        if numel(shape) == 0 {
            return Ok(());
        }
        let max = gpu.info.limits.max_compute_workgroups_per_dimension as usize;
        let vec_ok = operand_dtype == DType::F32
            && k.is_multiple_of(VEC)
            && n.is_multiple_of(VEC)
            && a.strides[r - 1] == 1
            && b.strides[r - 1] == 1
            && [a.offset as isize, b.offset as isize]
                .iter()
                .chain(&a.strides[..r - 1])
                .chain(&b.strides[..r - 1])
                .all(|s| s % VEC as isize == 0);
        let (tile_m, tile_n) = config.tile();
        let textures = (OperandTexture::a(m, k, tile_m), OperandTexture::b(k, n, tile_n));
        let tex = config.tex && gpu.reads_textures(operand_dtype, batch, n, textures);
        let config = MatmulConfig { tex, vec: tex || config.vec && vec_ok, ..config };
        let (gx, gy) = (n.div_ceil(tile_n), m.div_ceil(tile_m));
        if gx > max || gy > max {
            return Err(KilnError::Invalid { op, detail: format!("an output of {m}×{n} exceeds the adapter's grid") });
        }
        // What the kernel reads A and B from: textures, or buffers with B
        // perhaps in column panels (and the elements between its panels).
        let mut bindings = vec![Bound::Buffer(out.clone())];
        let (b, panel_stride) = if config.tex {
            let ta = self.operand_texture(gpu, op, a, args.buffers[0].clone(), textures.0)?;
            let tb = self.operand_texture(gpu, op, b, args.buffers[1].clone(), textures.1)?;
            bindings.extend([Bound::Texture(ta), Bound::Texture(tb)]);
            (b.clone(), 0)
        } else if gpu.reads_b_in_panels(&config, b, k, n) {
            args.buffers[1] = self.column_panels(gpu, op, b, args.buffers[1].clone(), k, n, tile_n)?;
            let mut strides = vec![0; r];
            (strides[r - 2], strides[r - 1]) = (tile_n as isize, 1);
            (Layout { shape: b.shape.clone(), strides, offset: 0 }, (k * tile_n) as isize)
        } else {
            (b.clone(), tile_n as isize * b.strides[r - 1])
        };
        // Then the buffers the textures do not replace: A's and B's, the epilogue's.
        let replaced = if config.tex { 2 } else { 0 };
        bindings.extend(args.buffers.iter().skip(replaced).cloned().map(Bound::Buffer));
        let sig = epilogue;
        let batch_rank = batch_shape.len();
        let key = KernelKey::Matmul { dtype: operand_dtype, batch_rank, epilogue: sig.clone(), config };
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
                if let Some(sig) = &sig {
                    crate::codegen::launch::fused_meta(&mut meta, sig, &args, shape);
                }
                let groups = [gx as u32, gy as u32, (batch - b0).min(max) as u32];
                self.dispatch_binding(gpu, &key, meta, bindings.clone(), groups, m * n)?;
            }
        }
        Ok(())
    }

    /// Records a copy of the operand `l` (over `buffer`; its last two axes,
    /// one batch) into a texture laid out as `tex`.
    fn operand_texture(
        &mut self,
        gpu: &Gpu,
        op: &'static str,
        l: &Layout,
        buffer: Arc<dyn DeviceBuffer>,
        tex: OperandTexture,
    ) -> Result<Arc<PooledTexture>> {
        let r = l.shape.len();
        let (rows, cols, row_stride, col_stride) = (l.shape[r - 2], l.shape[r - 1], l.strides[r - 2], l.strides[r - 1]);
        let vec4 = col_stride == 1
            && cols.is_multiple_of(VEC)
            && l.offset.is_multiple_of(VEC)
            && row_stride.rem_euclid(VEC as isize) == 0;
        let texture = gpu.textures.get(tex.width, tex.height, tex.layers);
        let mut meta = Meta::default();
        meta.u(tex.width as usize).u(tex.height as usize).u(tex.layers as usize);
        meta.u(rows).u(cols).u(l.offset).i(row_stride).i(col_stride);
        tex.coefficients().iter().for_each(|&c| {
            meta.u(c as usize);
        });
        let texels = tex.texels() as usize;
        let groups = crate::codegen::launch::grid(&gpu.caps, op, texels.div_ceil(PACK_WG as usize))?;
        let bindings = vec![Bound::Buffer(buffer), Bound::Texture(texture.clone())];
        self.dispatch_binding(gpu, &KernelKey::OperandTexture { vec4 }, meta, bindings, groups, texels)?;
        Ok(texture)
    }

    /// Records a copy of B (`b` over `buffer`, K × N, the same for every
    /// batch) into column panels of `tile_n` (`[N / tile_n, K, tile_n]`,
    /// contiguous): an elementwise kernel reading B through a strided view
    /// whose rows are vec4s.
    #[allow(clippy::too_many_arguments)]
    fn column_panels(
        &mut self,
        gpu: &Gpu,
        op: &'static str,
        b: &Layout,
        buffer: Arc<dyn DeviceBuffer>,
        k: usize,
        n: usize,
        tile_n: usize,
    ) -> Result<Arc<dyn DeviceBuffer>> {
        let r = b.shape.len();
        let (row, column) = (b.strides[r - 2], b.strides[r - 1]);
        let view = Layout {
            shape: vec![n / tile_n, k, tile_n],
            strides: vec![tile_n as isize * column, row, column],
            offset: b.offset,
        };
        let panels = gpu.alloc(op, DType::F32, &view.shape)?;
        let leaf = LeafDesc { dtype: DType::F32, buffer: Some(0), access: Access::of(&view).0 };
        let copy = Body { ops: vec![(Op::Load(0), DType::F32)], roots: vec![0] };
        let sig = Sig { rank: 3, leaves: vec![leaf], params: vec![], buffers: vec![DType::F32], bodies: vec![copy] };
        let shape = view.shape.clone();
        let args = Args { layouts: vec![view], params: vec![], buffers: vec![buffer] };
        self.elementwise(gpu, op, sig, args, &shape, &[(DType::F32, panels.clone())], None)?;
        Ok(panels)
    }
}
