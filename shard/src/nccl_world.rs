//! A mesh of this process's CUDA GPUs exchanging through NCCL (feature
//! `nccl`; cudarc loads `libnccl.so` at run time, so a build without NCCL
//! still runs, and asking for it is an error naming what is missing).
//! NCCL moves the parts between the GPUs (an all-gather); the sum stays in
//! rank order, in f64, on the host (`collective.rs`), so a mesh gives the
//! same bits through NCCL as through the other engines.

use crate::collective::{Collective, expect_local_parts};
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::Comm;
use cudarc::nccl::result::{group_end, group_start};
use kiln::{KilnError, Result};
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// One rank per GPU, all in this process, with an NCCL communicator each.
pub struct NcclWorld {
    comms: Mutex<Comms>,
    world: usize,
}

struct Comms(Vec<Comm>);

// SAFETY: an NCCL communicator may be used from any thread, one call at a
// time; every call goes through the mutex.
unsafe impl Send for Comms {}

fn unavailable(what: &'static str, detail: impl Into<String>) -> KilnError {
    KilnError::Unavailable { what, detail: detail.into() }
}

fn nccl_error(what: &str) -> impl Fn(cudarc::nccl::result::NcclError) -> KilnError + '_ {
    move |e| KilnError::Gpu(format!("NCCL: {what}: {e:?}"))
}

fn driver_error(what: &str) -> impl Fn(cudarc::driver::result::DriverError) -> KilnError + '_ {
    move |e| KilnError::Gpu(format!("CUDA driver: {what}: {e}"))
}

/// Whether NCCL can be loaded; the error says how to get it (cudarc
/// panics on a missing library).
pub fn nccl_available() -> Result<()> {
    // SAFETY: only tries to dlopen the library's candidate names.
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err(unavailable(
            "NCCL (libnccl.so)",
            "install it for CUDA 13 (Debian's libnccl-dev, or `pip install nvidia-nccl-cu13`); cudarc loads \
             `libnccl.so`, so where only `libnccl.so.2` is installed (the wheel, Debian's libnccl2), link \
             `libnccl.so` to it in a directory on LD_LIBRARY_PATH",
        ));
    }
    Ok(())
}

impl NcclWorld {
    /// A world of one rank per GPU in `ordinals` (a world of 1 included),
    /// in rank order; put the devices of the same GPUs, in the same order,
    /// in the mesh (`Mesh::over`).
    pub fn local(ordinals: &[usize]) -> Result<NcclWorld> {
        // SAFETY: only tries to dlopen the library's candidate names.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            let detail = "install NVIDIA's GPU driver, version 580 or newer";
            return Err(unavailable("the CUDA driver (libcuda.so)", detail));
        }
        nccl_available()?;
        if ordinals.is_empty() {
            return Err(KilnError::Invalid { op: "nccl", detail: "a world needs at least one GPU".into() });
        }
        let streams = ordinals
            .iter()
            .map(|&o| {
                let ctx = CudaContext::new(o).map_err(|e| {
                    unavailable("a CUDA GPU", format!("the driver loaded, but GPU {o} did not open: {e}"))
                })?;
                // SAFETY: each buffer of the world is used on its GPU's one
                // stream only. With tracking on, the context's first stream
                // would wait for the whole GPU, which ends any CUDA graph
                // capture a kiln device runs meanwhile.
                unsafe { ctx.disable_event_tracking() };
                ctx.new_stream().map_err(driver_error("stream"))
            })
            .collect::<Result<Vec<Arc<CudaStream>>>>()?;
        let comms = Comm::from_devices(streams).map_err(nccl_error("creating the communicators"))?;
        Ok(NcclWorld { comms: Mutex::new(Comms(comms)), world: ordinals.len() })
    }

    /// NCCL's version, as `major.minor.patch` (no GPU needed).
    pub fn version() -> Result<String> {
        nccl_available()?;
        let mut v = 0;
        // SAFETY: writes one int.
        unsafe { cudarc::nccl::sys::ncclGetVersion(&mut v) }.result().map_err(nccl_error("version"))?;
        Ok(format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100))
    }
}

impl Collective for NcclWorld {
    fn world_size(&self) -> usize {
        self.world
    }

    fn local_ranks(&self) -> Range<usize> {
        0..self.world
    }

    /// Each rank's part copied to its GPU, gathered on every GPU by one
    /// grouped `ncclAllGather` (equal counts: parts are padded to the
    /// longest), and rank 0's copy read back.
    fn all_gather(&self, local: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>> {
        expect_local_parts(self, local.len())?;
        let len = local.iter().map(Vec::len).max().unwrap_or(0);
        if len == 0 {
            return Ok(local);
        }
        let comms = self.comms.lock().unwrap_or_else(|e| e.into_inner());
        let mut sends = Vec::with_capacity(self.world);
        let mut gathered = Vec::with_capacity(self.world);
        for (comm, part) in comms.0.iter().zip(&local) {
            let stream = comm.stream();
            let mut padded = part.clone();
            padded.resize(len, 0.0);
            sends.push(stream.clone_htod(&padded).map_err(driver_error("copying a part to its GPU"))?);
            gathered.push(stream.alloc_zeros::<f32>(len * self.world).map_err(driver_error("allocating"))?);
        }
        group_start().map_err(nccl_error("group start"))?;
        // The group is closed whatever happens: an open one would hold this
        // thread's later calls.
        let queued =
            comms.0.iter().zip(&sends).zip(&mut gathered).try_for_each(|((comm, send), out)| {
                comm.all_gather(send, out).map(drop).map_err(nccl_error("all-gather"))
            });
        let closed = group_end().map(drop).map_err(nccl_error("group end"));
        queued.and(closed)?;
        let all = comms.0[0].stream().clone_dtoh(&gathered[0]).map_err(driver_error("reading the gathered parts"))?;
        Ok(local.iter().enumerate().map(|(r, part)| all[r * len..r * len + part.len()].to_vec()).collect())
    }

    /// One process: every rank runs the same program and config.
    fn agree(&self, _: &str, _: u64) -> Result<()> {
        Ok(())
    }
}
