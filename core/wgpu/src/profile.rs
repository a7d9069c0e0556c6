//! Kernel timings from the device's own clock. While profiling is on, every
//! launch gets a compute pass of its own whose start and end the device
//! timestamps (the `timestamp-query` feature of WebGPU; without profiling
//! all of a submit's launches share one pass); `Device::kernel_profile`
//! reads the stamps back. The device clock leaves out what the host spends
//! recording and submitting, which is what separates a slow kernel from a
//! slow dispatch.
//!

use super::context::Context;
use super::pipelines::Kernel;
use crate::error::{KilnError, Result};
use kiln_runtime::KernelTiming;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One launch to encode: its kernel, bindings and grid.
pub(super) struct Launch<'a> {
    pub kernel: &'a Kernel,
    pub bind_group: wgpu::BindGroup,
    pub groups: [u32; 3],
}

/// Whether launches are timed, and those timed in submits not yet read back.
#[derive(Default)]
pub(super) struct Profiler {
    on: AtomicBool,
    pending: Mutex<Vec<Stamped>>,
}

/// The launches of one query set (up to `QUERY_SET_MAX_QUERIES / 2`) and
/// the buffer their stamps are copied to.
struct Stamped {
    launches: Vec<(String, [u32; 3])>,
    staging: wgpu::Buffer,
}

/// Stamps per launch: the start and the end of its pass.
const STAMPS: u32 = 2;

impl Profiler {
    /// Encode `launches` into `encoder`: in one compute pass, or while
    /// profiling in one timestamped pass each.
    pub fn encode_launches(
        &self,
        device: &wgpu::Device,
        encoder: &mut wgpu::CommandEncoder,
        launches: &[Launch],
        label: &str,
    ) {
        if launches.is_empty() {
            return;
        }
        if !self.on.load(Ordering::Relaxed) {
            let desc = wgpu::ComputePassDescriptor { label: Some(label), timestamp_writes: None };
            let mut pass = encoder.begin_compute_pass(&desc);
            launches.iter().for_each(|l| Self::record(&mut pass, l));
            return;
        }
        for chunk in launches.chunks((wgpu::QUERY_SET_MAX_QUERIES / STAMPS) as usize) {
            let count = chunk.len() as u32 * STAMPS;
            let query_set = device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kiln profile"),
                ty: wgpu::QueryType::Timestamp,
                count,
            });
            for (i, l) in chunk.iter().enumerate() {
                let first = i as u32 * STAMPS;
                let stamps = wgpu::ComputePassTimestampWrites {
                    query_set: &query_set,
                    beginning_of_pass_write_index: Some(first),
                    end_of_pass_write_index: Some(first + 1),
                };
                let desc = wgpu::ComputePassDescriptor { label: Some(label), timestamp_writes: Some(stamps) };
                Self::record(&mut encoder.begin_compute_pass(&desc), l);
            }
            let bytes = u64::from(count) * 8;
            let buffer = |usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("kiln profile"),
                    size: bytes,
                    usage: usage | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            };
            let resolved = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
            let staging = buffer(wgpu::BufferUsages::MAP_READ);
            encoder.resolve_query_set(&query_set, 0..count, &resolved, 0);
            encoder.copy_buffer_to_buffer(&resolved, 0, &staging, 0, bytes);
            let launches = chunk.iter().map(|l| (l.kernel.name.clone(), l.groups)).collect();
            self.pending.lock().unwrap().push(Stamped { launches, staging });
        }
    }

    fn record(pass: &mut wgpu::ComputePass<'_>, l: &Launch) {
        pass.set_pipeline(&l.kernel.pipeline);
        pass.set_bind_group(0, &l.bind_group, &[]);
        pass.dispatch_workgroups(l.groups[0], l.groups[1], l.groups[2]);
    }

    /// Turn per-launch timing on or off; an error naming the adapter when
    /// it has no timestamps.
    pub fn set(&self, ctx: &Context, on: bool) -> Result<()> {
        if on && !ctx.has_timestamps() {
            return Err(KilnError::Invalid {
                op: "set_kernel_profiling",
                detail: format!("{} ({}) has no timestamp queries", ctx.info.name, ctx.info.backend),
            });
        }
        self.on.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Every launch timed since the last call, in launch order (waits for
    /// their submits to finish).
    pub async fn take(&self, ctx: &Context) -> Result<Vec<KernelTiming>> {
        let stamped = std::mem::take(&mut *self.pending.lock().unwrap());
        let period = f64::from(ctx.queue.get_timestamp_period());
        let mut out = Vec::new();
        for s in stamped {
            // A copy, whatever the mapping's alignment (on the web it is a JS copy).
            let ticks: Vec<u64> = ctx.map_read(s.staging.slice(..), bytemuck::pod_collect_to_vec).await?;
            for ((name, groups), t) in s.launches.into_iter().zip(ticks.chunks(STAMPS as usize)) {
                // A clock that wraps or steps back reads as 0, not as ages.
                let nanos = t[1].saturating_sub(t[0]) as f64 * period;
                out.push(KernelTiming { name, groups, nanos });
            }
        }
        ctx.check_errors()?;
        Ok(out)
    }
}
