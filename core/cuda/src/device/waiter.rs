//! Wakes a read's future when its copy lands, so that awaiting a read does
//! not spin a core while the GPU works: one thread per driver engine waits
//! for each watched copy's event in turn (copies land in stream order) and
//! wakes the task that last polled it.

use cudarc::driver::{CudaContext, CudaEvent, result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::task::Waker;

/// What a read's future and the waiting thread share.
#[derive(Default)]
pub struct Signal {
    passed: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    /// Wake `waker` (the latest poller's) when the event passes.
    pub fn wake_later(&self, waker: &Waker) {
        *self.waker.lock().unwrap() = Some(waker.clone());
    }

    /// Whether the waiting thread is done with the event (it passed, or
    /// waiting for it failed): no wake will come after this.
    pub fn passed(&self) -> bool {
        self.passed.load(Ordering::Acquire)
    }
}

type Job = (Arc<CudaEvent>, Arc<Signal>);

/// The waiting thread's queue.
pub struct Waiter {
    jobs: Mutex<Sender<Job>>,
}

impl Waiter {
    /// A thread waiting on `ctx`'s events, until the waiter is dropped.
    pub fn start(ctx: Arc<CudaContext>) -> std::io::Result<Waiter> {
        let (jobs, queue) = channel::<Job>();
        std::thread::Builder::new().name("kiln-cuda-reads".into()).spawn(move || {
            let _ = ctx.bind_to_thread();
            for (event, signal) in queue {
                // Raw: cudarc's wait first returns any error another call
                // left in the context. A failed wait wakes the future too,
                // which then asks the event itself.
                // SAFETY: the event is live (held by the job).
                let _ = unsafe { result::event::synchronize(event.cu_event()) };
                signal.passed.store(true, Ordering::Release);
                if let Some(waker) = signal.waker.lock().unwrap().take() {
                    waker.wake();
                }
            }
        })?;
        Ok(Waiter { jobs: Mutex::new(jobs) })
    }

    /// Wake `signal`'s waker once `event` has passed; false if the
    /// thread is gone (the caller then polls).
    pub fn watch(&self, event: Arc<CudaEvent>, signal: Arc<Signal>) -> bool {
        self.jobs.lock().unwrap().send((event, signal)).is_ok()
    }
}
