//! Realization entry points: realize, and read back (a future, see
//! [`super::context`]).

use super::Gpu;
use super::realize::{Plan, Purpose, ReadRequest};
use crate::dtype::unpack_words;
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
        let value = scheduler.readback(node)?;
        let plan = Plan::record(self, scheduler.finish(), Purpose::Run)?;
        let (words, array) = (value.words, plan.resolve(&value.array));
        let (dtype, shape) = (array.dtype, array.layout.shape.clone());
        let n = numel(&shape);
        let request = (words > 0).then(|| ReadRequest {
            buffer: array.buffer.clone(),
            offset: value.first_word * 4,
            bytes: words * 4,
        });
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
