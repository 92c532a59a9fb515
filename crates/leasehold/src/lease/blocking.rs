//! The blocking driver of a wait: sleeps in `poll(2)` on the waiter's notifier and its
//! budget's cancellation pipe (Windows: a plain sleep; its waits poll; WASI: a sleep on the
//! notifier's condition variable, cut short by a grant) until
//! [`Acquisition::next`] has the lease. The decisions are all in `wait.rs`.

use std::time::Duration;

use super::imp::Held;
use super::wait::{Acquisition, Next};
use crate::error::{Error, Result};
use crate::sys;

pub(crate) fn run(acq: Acquisition<'_>) -> Result<Held> {
    let mut acq = acq.may_block();
    loop {
        match acq.next()? {
            Next::Acquired(held) => return Ok(held),
            Next::Block => {
                if let Some(held) = acq.block()? {
                    return Ok(held);
                }
            }
            Next::Wait(timeout) => sleep(&acq, timeout).map_err(|source| Error::Io {
                op: "wait for lock",
                path: acq.path().to_path_buf(),
                source,
            })?,
        }
    }
}

#[cfg(unix)]
fn sleep(acq: &Acquisition<'_>, timeout: Option<Duration>) -> std::io::Result<()> {
    let mut fds = Vec::with_capacity(2);
    if let Some(n) = acq.notifier() {
        fds.push(n.fd());
    }
    if let Some(c) = acq.budget().cancel_token() {
        fds.push(c.fd());
    }
    sys::wait_readable(&fds, timeout).map(|_| ())
}

#[cfg(windows)]
fn sleep(_acq: &Acquisition<'_>, timeout: Option<Duration>) -> std::io::Result<()> {
    sys::sleep(timeout.unwrap_or(Duration::from_millis(16)));
    Ok(())
}

#[cfg(target_os = "wasi")]
fn sleep(acq: &Acquisition<'_>, timeout: Option<Duration>) -> std::io::Result<()> {
    let nap = timeout.unwrap_or(Duration::from_millis(16));
    match acq.notifier() {
        Some(n) => n.wait(nap),
        None => sys::sleep(nap),
    }
    Ok(())
}
