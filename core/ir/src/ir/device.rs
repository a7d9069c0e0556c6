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
    /// The most bytes tensors and realizations have held at once.
    pub peak_bytes_in_use: u64,
}

impl PoolStats {
    /// `class` more bytes in use (the peak follows).
    pub fn take(&mut self, class: u64) {
        self.bytes_in_use += class;
        self.peak_bytes_in_use = self.peak_bytes_in_use.max(self.bytes_in_use);
    }
}

/// A pool's size class for `bytes`: four classes per power of two (≤ 25%
/// waste), so a training loop's buffers are reused whatever their sizes.
pub fn size_class(bytes: u64) -> u64 {
    let bytes = bytes.max(256);
    let step = (1u64 << (63 - bytes.leading_zeros())) / 4;
    bytes.div_ceil(step) * step
}

/// What a buffer a captured realization binds is to a replay (`jit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The `k`th input's buffer: the replay's own input.
    Input(usize),
    /// The `j`th distinct buffer holding an output: fresh for each replay.
    Output(usize),
    /// Anything else (an intermediate, a tensor read from outside the
    /// inputs): kept as it was at capture.
    Fixed,
}

/// Tells each buffer of a capture its [`Role`], numbering output buffers
/// as they are met.
pub struct Roles<'a> {
    inputs: &'a [DeviceArray],
    outputs: &'a [DeviceArray],
    /// The output buffers met so far, in `Role::Output` order.
    pub written: Vec<Arc<dyn DeviceBuffer>>,
}

impl<'a> Roles<'a> {
    pub fn new(inputs: &'a [DeviceArray], outputs: &'a [DeviceArray]) -> Roles<'a> {
        Roles { inputs, outputs, written: Vec::new() }
    }

    pub fn of(&mut self, b: &Arc<dyn DeviceBuffer>) -> Role {
        if let Some(k) = self.inputs.iter().position(|x| Arc::ptr_eq(&x.buffer, b)) {
            return Role::Input(k);
        }
        if !self.outputs.iter().any(|o| Arc::ptr_eq(&o.buffer, b)) {
            return Role::Fixed;
        }
        let j = self.written.iter().position(|w| Arc::ptr_eq(w, b)).unwrap_or_else(|| {
            self.written.push(b.clone());
            self.written.len() - 1
        });
        Role::Output(j)
    }
}
