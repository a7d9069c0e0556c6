//! Realization entry points: realize, and read back (a future, see
//! [`super::context`]).

use super::Gpu;
use super::realize::{Plan, Purpose, ReadRequest};
use crate::dtype::{DType, unpack_words};
use crate::error::Result;
use crate::interp::HostArray;
use crate::ir::Node;
use crate::shape::numel;

impl Gpu {
    pub(super) async fn realize(&self, roots: &[Node]) -> Result<()> {
        Plan::record(self, self.schedule(roots)?, Purpose::Run)?.submit(None)?;
        self.tuner.tune_pending(self).await
    }

    pub(super) async fn read(&self, node: &Node) -> Result<HostArray> {
        let mut scheduler = self.scheduler();
        scheduler.run(std::slice::from_ref(node))?;
        let mut value = scheduler.array(node)?;
        let word_aligned = value.dtype != DType::F16 || value.layout.offset % 2 == 0;
        if !value.layout.is_contiguous() || !word_aligned {
            value = scheduler.contiguous(&value)?;
        }
        let plan = Plan::record(self, scheduler.finish(), Purpose::Run)?;
        let value = plan.resolve(&value);
        let n = numel(&value.layout.shape);
        let dtype = value.dtype;
        let shape = value.layout.shape.clone();
        let words = dtype.storage_bytes(n) / 4;
        let first_word = match dtype {
            DType::F16 => value.layout.offset / 2,
            _ => value.layout.offset,
        } as u64;
        let request =
            (words > 0).then(|| ReadRequest { buffer: value.buffer.clone(), offset: first_word * 4, bytes: words * 4 });
        let Some(staging) = plan.submit(request)? else {
            return Ok(HostArray { dtype, shape, data: vec![] });
        };
        let data = self
            .ctx
            .map_read(staging.buffer().slice(..words * 4), |bytes| unpack_words(dtype, bytemuck::cast_slice(bytes), n))
            .await?;
        self.ctx.check_errors()?;
        self.tuner.tune_pending(self).await?;
        Ok(HostArray { dtype, shape, data })
    }
}
