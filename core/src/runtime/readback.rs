//! Realization entry points and async readback. Mapping a buffer completes
//! through a callback, so readback is a future: the browser cannot block,
//! and native code drives it with `pollster::block_on`.

use super::Gpu;
use super::realize::{Plan, Purpose, ReadRequest};
use crate::dtype::{DType, unpack_words};
use crate::error::{KilnError, Result};
use crate::interp::HostArray;
use crate::ir::Node;
use crate::shape::numel;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

impl Gpu {
    pub(super) async fn realize(&self, roots: &[Node]) -> Result<()> {
        Plan::record(self, self.schedule(roots)?, Purpose::Run)?.submit(None)?;
        self.tune_pending().await
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
            .map_read(staging.buffer().slice(..words * 4), |bytes| unpack_words(dtype, bytemuck::cast_slice(bytes), n))
            .await?;
        self.check_errors()?;
        self.tune_pending().await?;
        Ok(HostArray { dtype, shape, data })
    }

    /// Wait for every submit so far to finish.
    pub(super) async fn synchronize(&self) -> Result<()> {
        let (sender, receiver) = oneshot();
        self.queue.on_submitted_work_done(move || sender.send(()));
        #[cfg(not(target_arch = "wasm32"))]
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| KilnError::Gpu(e.to_string()))?;
        receiver.await;
        self.check_errors()
    }

    /// Map `slice` of a staging buffer for reading once the submits that
    /// write it finish, hand its bytes to `read`, and unmap it.
    pub(super) async fn map_read<T>(&self, slice: wgpu::BufferSlice<'_>, read: impl FnOnce(&[u8]) -> T) -> Result<T> {
        let (sender, receiver) = oneshot();
        slice.map_async(wgpu::MapMode::Read, move |r| sender.send(r.map_err(|e| e.to_string())));
        #[cfg(not(target_arch = "wasm32"))]
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| KilnError::Readback(e.to_string()))?;
        receiver.await.map_err(KilnError::Readback)?;
        let value = read(&slice.get_mapped_range().map_err(|e| KilnError::Readback(e.to_string()))?);
        slice.buffer().unmap();
        Ok(value)
    }
}

/// A one-value channel whose receiving end is a future.
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

pub(super) struct Sender<T>(Arc<Mutex<Slot<T>>>);
pub(super) struct Receiver<T>(Arc<Mutex<Slot<T>>>);

pub(super) fn oneshot<T>() -> (Sender<T>, Receiver<T>) {
    let slot = Arc::new(Mutex::new(Slot { value: None, waker: None }));
    (Sender(slot.clone()), Receiver(slot))
}

impl<T> Sender<T> {
    pub(super) fn send(self, value: T) {
        let mut slot = self.0.lock().unwrap();
        slot.value = Some(value);
        if let Some(w) = slot.waker.take() {
            w.wake();
        }
    }
}

impl<T> Future for Receiver<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut slot = self.0.lock().unwrap();
        match slot.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
