//! A GPU device's wgpu handles and what it is: the device and queue, its
//! [`DeviceInfo`] and [`Caps`], the errors wgpu reports outside an error
//! scope, and waiting for the queue. Mapping a buffer completes through a
//! callback, so waits are futures: the browser cannot block, and native
//! code drives them with `pollster::block_on`.

use super::oneshot::oneshot;
use crate::codegen::Caps;
use crate::error::{KilnError, Result};
use kiln_runtime::DeviceInfo;
use std::sync::{Arc, Mutex};

pub(super) struct Context {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: DeviceInfo,
    /// `info.caps`, kept: kernel choices read it at every launch.
    pub caps: Caps,
    /// Errors wgpu reported outside an error scope; any is a kiln bug,
    /// surfaced as `Err` by the next realization instead of a panic.
    errors: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Option<String>>>,
}

impl Context {
    /// Takes over `device`'s uncaptured errors and its loss.
    pub fn new(device: wgpu::Device, queue: wgpu::Queue, info: DeviceInfo) -> Context {
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| sink.lock().unwrap().push(e.to_string())));
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let lost_sink = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            *lost_sink.lock().unwrap() = Some(format!("{reason:?}: {msg}"));
        });
        Context { device, queue, caps: info.caps.clone(), info, errors, lost }
    }

    /// The first error wgpu reported since the last call, or the device's loss.
    pub fn check_errors(&self) -> Result<()> {
        if let Some(reason) = self.lost.lock().unwrap().clone() {
            return Err(KilnError::DeviceLost(reason));
        }
        let errors = std::mem::take(&mut *self.errors.lock().unwrap());
        match errors.into_iter().next() {
            None => Ok(()),
            Some(e) if e.to_lowercase().contains("out of memory") => Err(KilnError::OutOfMemory(e)),
            Some(e) => Err(KilnError::Gpu(e)),
        }
    }

    /// Whether the device can timestamp passes.
    pub fn has_timestamps(&self) -> bool {
        self.device.features().contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// Wait for every submit so far to finish.
    pub async fn synchronize(&self) -> Result<()> {
        let (sender, receiver) = oneshot();
        self.queue.on_submitted_work_done(move || sender.send(()));
        #[cfg(not(target_arch = "wasm32"))]
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| KilnError::Gpu(e.to_string()))?;
        receiver.await;
        self.check_errors()
    }

    /// Map `slice` of a staging buffer for reading once the submits that
    /// write it finish, hand its bytes to `read`, and unmap it.
    pub async fn map_read<T>(&self, slice: wgpu::BufferSlice<'_>, read: impl FnOnce(&[u8]) -> T) -> Result<T> {
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
