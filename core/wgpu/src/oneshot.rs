//! A one-value channel whose receiving end is a future: how a wgpu
//! callback (work done, a buffer mapped) wakes the code awaiting it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

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
