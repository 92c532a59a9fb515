//! The tokio driver of a wait (feature `tokio`): the same decisions as the blocking driver
//! (`wait.rs`), slept on tokio's reactor instead of `poll(2)`.
//!
//! The waiter's notifier (poked by the helper that waits in the kernel's queue, or by a
//! releasing lease of this process) and its budget's cancellation pipe are registered with
//! the reactor, so no executor thread is ever parked and no thread is spent per waiter (the
//! kernel-wait helper is per inode and process, shared by every waiter there). Dropping the
//! future drops the acquisition, which abandons its wait: nothing of ours holds the lease
//! afterwards (see `posix/kernel_wait.rs`, `KernelWait`).

use super::imp::Held;
use super::wait::{Acquisition, Next};
use crate::error::Result;

#[cfg(unix)]
use crate::sys;
#[cfg(unix)]
use std::os::fd::OwnedFd;
#[cfg(unix)]
use tokio::io::unix::AsyncFd;

pub(crate) async fn run(mut acq: Acquisition<'_>) -> Result<Held> {
    #[cfg(unix)]
    let cancel = acq
        .budget()
        .cancel_token()
        .and_then(|c| sys::register_readable(c.fd()));
    #[cfg(unix)]
    let mut notifier: Option<AsyncFd<OwnedFd>> = None;
    loop {
        match acq.next()? {
            Next::Acquired(held) => return Ok(held),
            // Never asked of this driver (it does not call `may_block`); go round again.
            Next::Block => {}
            Next::Wait(timeout) => {
                let nap = async {
                    match timeout {
                        Some(t) => tokio::time::sleep(t).await,
                        None => std::future::pending().await,
                    }
                };
                #[cfg(unix)]
                {
                    if notifier.is_none() {
                        notifier = acq.notifier().and_then(|n| sys::register_readable(n.fd()));
                    }
                    tokio::select! {
                        _ = readable(notifier.as_ref()) => {}
                        _ = readable(cancel.as_ref()) => {}
                        _ = nap => {}
                    }
                }
                #[cfg(not(unix))]
                nap.await;
            }
        }
    }
}

#[cfg(unix)]
async fn readable(fd: Option<&AsyncFd<OwnedFd>>) {
    match fd {
        Some(fd) => match fd.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}
