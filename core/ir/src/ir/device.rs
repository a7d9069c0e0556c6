//! A value on a device as the layers above the runtime see it: a buffer
//! they cannot look into, a layout over it and a dtype.

use crate::dtype::DType;
use crate::shape::Layout;
use std::any::Any;
use std::sync::Arc;

/// `Send + Sync` natively; nothing on wasm, where wgpu's handles are
/// neither and the browser runs kiln on one thread.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSendSync: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync + ?Sized> MaybeSendSync for T {}
#[cfg(target_arch = "wasm32")]
pub trait MaybeSendSync {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> MaybeSendSync for T {}

/// A device's buffer. Only the runtime that made it looks inside (it is an
/// `Any`); the IR and the scheduler hold it and compare it by identity.
pub trait DeviceBuffer: Any + std::fmt::Debug + MaybeSendSync {}

/// A value in a device buffer, seen through a layout.
#[derive(Clone, Debug)]
pub struct DeviceArray {
    pub buffer: Arc<dyn DeviceBuffer>,
    pub layout: Layout,
    pub dtype: DType,
}

/// A buffer's identity, for sets and map keys (the address without the
/// vtable, which may differ between codegen units for one type).
pub fn buffer_id(buffer: &Arc<dyn DeviceBuffer>) -> *const () {
    Arc::as_ptr(buffer) as *const ()
}

/// A device's buffer pool, as `Device::stats` reports it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes in buffers that tensors (or a running realization) hold.
    pub bytes_in_use: u64,
    /// Bytes in free buffers kept for reuse.
    pub bytes_free: u64,
    /// Buffers created since the pool began (misses of the free list).
    pub buffers_created: u64,
}

/// A pool's size class for `bytes`: four classes per power of two (≤ 25%
/// waste), so a training loop's buffers are reused whatever their sizes.
pub fn size_class(bytes: u64) -> u64 {
    let bytes = bytes.max(256);
    let step = (1u64 << (63 - bytes.leading_zeros())) / 4;
    bytes.div_ceil(step) * step
}
