//! What a `fork` without `exec` does to leases, and how the child lets go of its parent's.
//!
//! A child forked without `exec` (Python's `os.fork` and `multiprocessing`'s default start
//! method on Linux, a C extension's `fork`) gets a copy of every descriptor, close-on-exec
//! or not, and a copy of every lease object. A `flock` lock belongs to the open file
//! description, which the copies share: the child's copy keeps the parent's lease locked
//! after the parent released it, and keeps a wait the parent gave up on in line (its helper's
//! grant then stays with the child) — until the child exits. The child cannot unlock them
//! either: `flock(LOCK_UN)` through its copy would free the parent's lock too.
//!
//! So [`after_fork_in_child`](crate::after_fork_in_child()), called in the child right after
//! the fork, lets go of every copy at once: each descriptor of a lock file or gate this
//! process opened is pointed at `/dev/null` (`dup2`, close-on-exec): the child's reference
//! to the shared description is gone, never unlocked, and the number stays taken, so that
//! whatever still owns it (a lease object, a waiter's helper that no longer exists) closes
//! `/dev/null` in the end, never a descriptor the child opened since. The claim table, the
//! kernel waits and the parked helpers start empty (they are the parent's, and only the
//! forking thread exists in the child), and every lease object the child inherited says it
//! is not held (`is_held` false, `verify` [`Released`](crate::Error::Released), `release` a
//! no-op).
//!
//! Which descriptors: the library records each lock file and gate it opens, by number and
//! file identity (`descriptors.rs`); in the child a number is let go only if it still is that
//! file (a later descriptor with the same number on another file is left alone). A descriptor
//! of the same lock file that the caller opened with the number the library once used is
//! let go too (in the child only; never one the caller opened on another file).
//!
//! A [`RecordLease`](crate::RecordLease) is more than a descriptor: a baton in a directory
//! shared between hosts and a thread that renews it. Its copy remembers the process that
//! took the lease and, in any other, says it is not held (`is_held` false, `verify` and
//! `renew` [`Released`](crate::Error::Released)) and lets go on `release` or drop without
//! touching the baton (giving it back would free the parent's lease under it) or waiting for
//! the renewing thread (the parent's: none runs in the child) — whether or not
//! `after_fork_in_child` ran. The kernel lease it holds as its host's queue is let go as
//! above.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::sync::MutexGuard;

use super::descriptors::{OPENED, Opened};
use crate::kind::FileId;
use crate::sys;

/// Everything [`after_fork_in_child`] resets, locked by the thread about to fork
/// ([`before_fork`]), so that the child finds it whole and held by its one thread.
struct Frozen {
    opened: MutexGuard<'static, Opened>,
    claims: crate::lease::claim::Frozen,
    waits: super::kernel_wait::Frozen,
}

thread_local! {
    /// What [`before_fork`] locked on this thread, until the fork's other half.
    static FROZEN: RefCell<Option<Frozen>> = const { RefCell::new(None) };
}

/// See [`crate::before_fork`].
pub(crate) fn before_fork() {
    if FROZEN.with(|f| f.borrow().is_some()) {
        return;
    }
    // One order, and no code path holds two of these locks at once: no deadlock.
    let claims = crate::lease::claim::freeze();
    let waits = super::kernel_wait::freeze();
    let opened = crate::mutex::lock(&OPENED);
    FROZEN.with(|f| {
        *f.borrow_mut() = Some(Frozen {
            opened,
            claims,
            waits,
        })
    });
}

/// See [`crate::after_fork_in_parent`].
pub(crate) fn after_fork_in_parent() {
    let frozen = FROZEN.with(|f| f.borrow_mut().take());
    drop(frozen);
}

/// See [`crate::after_fork_in_child`]: `false` where some of the library's state could not
/// be reset (its lock was held at the fork by a thread that is gone).
pub(crate) fn after_fork_in_child() -> bool {
    let frozen = FROZEN.with(|f| f.borrow_mut().take());
    let (mut opened, claims, waits) = match frozen {
        Some(Frozen {
            opened,
            claims,
            waits,
        }) => (opened, Some(claims), Some(waits)),
        None => match OPENED.try_lock() {
            Ok(o) => (o, None, None),
            Err(std::sync::TryLockError::Poisoned(p)) => (p.into_inner(), None, None),
            Err(std::sync::TryLockError::WouldBlock) => {
                let claims = crate::lease::claim::forget_all(None);
                let waits = super::kernel_wait::forget_all(None);
                let _ = (claims, waits);
                return false;
            }
        },
    };
    let numbers: Vec<(RawFd, FileId)> = opened
        .take()
        .map(|m| m.into_iter().collect())
        .unwrap_or_default();
    drop(opened);
    let nulled = sys::fork::let_go(&numbers);
    let claims = crate::lease::claim::forget_all(claims);
    let waits = super::kernel_wait::forget_all(waits);
    nulled && claims && waits
}
