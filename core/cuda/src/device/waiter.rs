//! Wakes a read's future when its copy lands, so that awaiting a read does
//! not spin a core while the GPU works: one thread per driver engine waits
//! for each watched copy's event in turn (copies land in stream order) and
//! wakes the task that last polled it.

use cudarc::driver::{CudaContext, CudaEvent, result};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;

/// What a read's future and the waiting thread share.
#[derive(Default)]
pub struct Signal {
    passed: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    /// Wake `waker` (the latest poller's) when the event passes; `None`:
    /// nobody waits any more.
    pub fn wake_later(&self, waker: Option<&Waker>) {
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = waker.cloned();
    }

    /// Whether the waiting thread is done with the event (it passed, or
    /// waiting for it failed): no wake will come after this.
    pub fn passed(&self) -> bool {
        self.passed.load(Ordering::Acquire)
    }
}

type Job = (Arc<CudaEvent>, Arc<Signal>);

/// The waiting thread's queue, in the order the copies were enqueued.
pub struct Waiter {
    jobs: Sender<Job>,
}

impl Waiter {
    /// A thread waiting on `ctx`'s events, until the waiter is dropped.
    pub fn start(ctx: Arc<CudaContext>) -> std::io::Result<Waiter> {
        let (jobs, queue) = channel::<Job>();
        std::thread::Builder::new().name("kiln-cuda-reads".into()).spawn(move || {
            // Raw calls: cudarc's first return any error another call left
            // in the context (and skip their work). A failed wait wakes the
            // future too, which then asks the event itself.
            // SAFETY: the context lives as long as this thread holds it.
            let _ = unsafe { result::ctx::set_current(ctx.cu_ctx()) };
            for (event, signal) in queue {
                // SAFETY: the event is live (held by the job). It was made
                // with blocking sync, so this waits without spinning.
                let _ = unsafe { result::event::synchronize(event.cu_event()) };
                signal.passed.store(true, Ordering::Release);
                let waker = signal.waker.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(waker) = waker {
                    // A waker that panics must not stop the other reads' wakes.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| waker.wake()));
                }
            }
        })?;
        Ok(Waiter { jobs })
    }

    /// Wake `signal`'s waker once `event` has passed; false if the
    /// thread is gone (the caller then polls). Called as the copy is
    /// enqueued, so that the thread waits for copies in stream order.
    pub fn watch(&self, event: Arc<CudaEvent>, signal: Arc<Signal>) -> bool {
        self.jobs.send((event, signal)).is_ok()
    }
}
