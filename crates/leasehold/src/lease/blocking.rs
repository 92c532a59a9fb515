//! The blocking driver of a wait: parks the thread on the waiter's notifier (`sys/wake.rs`:
//! a grant, a claim handed over or a cancellation unparks it) for as long as
//! [`Acquisition::next`] says, until it has the lease. The decisions are all in `wait.rs`.

use std::time::Duration;

use super::os::imp::Held;
use super::wait::{Acquisition, Next};
use crate::error::Result;

/// How long a waiter without a notifier sleeps when told to wait without limit (never asked
/// today: every wait creates its notifier first).
const NAP: Duration = Duration::from_millis(16);

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
            Next::Wait(timeout) => match acq.notifier() {
                Some(n) => n.wait(timeout),
                None => std::thread::sleep(timeout.unwrap_or(NAP)),
            },
        }
    }
}
