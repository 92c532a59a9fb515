//! The tokio driver of a wait (feature `tokio`): the same decisions as the blocking driver
//! (`wait.rs`), slept as a pending task instead of a parked thread.
//!
//! The waiter's notifier (`sys/wake.rs`) keeps the task's `Waker`: the helper that waits in
//! the kernel's queue wakes the task directly on a grant, as does a releasing lease of this
//! process handing it the claim, or a cancellation of its budget's token — nothing is
//! registered with the reactor, no executor thread is ever parked and no thread is spent per
//! waiter (the kernel-wait helper is per inode and process, shared by every waiter there).
//! Dropping the future drops the acquisition, which abandons its wait: nothing of ours holds
//! the lease afterwards (see `posix/kernel_wait.rs`, `KernelWait`).

use std::future::{Future, poll_fn};
use std::task::Poll;

use super::os::imp::Held;
use super::wait::{Acquisition, Next};
use crate::error::Result;

pub(crate) async fn run(mut acq: Acquisition<'_>) -> Result<Held> {
    loop {
        match acq.next()? {
            Next::Acquired(held) => return Ok(held),
            // Never asked of this driver (it does not call `may_block`); go round again.
            Next::Block => {}
            Next::Wait(timeout) => {
                let notifier = acq.notifier().cloned();
                let mut nap = std::pin::pin!(async {
                    match timeout {
                        Some(t) => tokio::time::sleep(t).await,
                        None => std::future::pending().await,
                    }
                });
                // Poked (the notifier keeps this task's waker) or the nap is over, whichever
                // comes first; the poke is checked first, so a pending one costs no timer.
                poll_fn(|cx| {
                    if let Some(n) = &notifier
                        && n.poll_poked(cx).is_ready()
                    {
                        return Poll::Ready(());
                    }
                    nap.as_mut().poll(cx)
                })
                .await;
            }
        }
    }
}
