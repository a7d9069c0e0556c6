//! Recording a matmul item: the launches codegen chose for it, with B's
//! column panels or the operand textures allocated here first.

use super::{Bound, Recording};
use crate::codegen::launch::{self, MatmulOperands};
use crate::codegen::matmul::MatmulConfig;
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::DeviceBuffer;
use crate::runtime::Gpu;
use crate::sched::lower::{Args, Sig};
use crate::sched::schedule::product_dims;
use crate::shape::Layout;
use std::sync::Arc;

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
        args: Args,
    ) -> Result<()> {
        let (m, k, n) = product_dims(a, b);
        let config = match config {
            Some(c) => c,
            None => gpu.tuner.config(gpu, operand_dtype, m, n, k)?,
        };
        let variants = gpu.variants();
        let Some(plan) =
            launch::matmul(&gpu.ctx.caps, &variants, config, op, a, b, operand_dtype, shape, epilogue, &args)?
        else {
            return Ok(());
        };
        let mut buffers = args.buffers.into_iter().map(Bound::Buffer).collect::<Vec<_>>();
        match plan.operands {
            MatmulOperands::Buffers => {}
            MatmulOperands::Panels { shape } => {
                let panels = gpu.resources.alloc(op, DType::F32, &shape)?;
                let copied = vec![Bound::Buffer(panels.clone()), buffers[1].clone()];
                self.dispatch_binding(gpu, &plan.copies[0], copied)?;
                buffers[1] = Bound::Buffer(panels);
            }
            MatmulOperands::Textures { a, b } => {
                for (operand, (tex, copy)) in [a, b].into_iter().zip(&plan.copies).enumerate() {
                    let texture = gpu.resources.textures.get(tex.width, tex.height, tex.layers);
                    let copied = vec![buffers[operand].clone(), Bound::Texture(texture.clone())];
                    self.dispatch_binding(gpu, copy, copied)?;
                    buffers[operand] = Bound::Texture(texture);
                }
            }
        }
        let bindings: Vec<Bound> = std::iter::once(Bound::Buffer(out.clone())).chain(buffers).collect();
        for l in &plan.launches {
            self.dispatch_binding(gpu, l, bindings.clone())?;
        }
        Ok(())
    }
}
