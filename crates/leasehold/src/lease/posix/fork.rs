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
//! So [`after_fork_in_child`](crate::after_fork_in_child), called in the child right after
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
//! file identity ([`register`]); in the child a number is let go only if it still is that
//! file (a later descriptor with the same number on another file is left alone). A descriptor
//! of the same lock file that the caller opened with the number the library once used is
//! let go too (in the child only; never one the caller opened on another file).

use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Mutex;

use crate::kind::FileId;
use crate::sys;

/// The lock files and gates the library opened: by descriptor number, the file it was.
static OPENED: Mutex<Option<HashMap<RawFd, FileId>>> = Mutex::new(None);

/// Records that the library opened `fd` on the lock file or gate `id` (see the module
/// documentation).
pub(crate) fn register(fd: BorrowedFd<'_>, id: FileId) {
    crate::mutex::lock(&OPENED)
        .get_or_insert_with(HashMap::new)
        .insert(fd.as_raw_fd(), id);
}

/// See [`crate::after_fork_in_child`]: `false` where some of the library's state could not
/// be reset (its lock was held at the fork by a thread that is gone).
pub(crate) fn after_fork_in_child() -> bool {
    let opened: Vec<(RawFd, FileId)> = match OPENED.try_lock() {
        Ok(mut o) => o
            .take()
            .map(|m| m.into_iter().collect())
            .unwrap_or_default(),
        Err(std::sync::TryLockError::Poisoned(p)) => p
            .into_inner()
            .take()
            .map(|m| m.into_iter().collect())
            .unwrap_or_default(),
        Err(std::sync::TryLockError::WouldBlock) => return false,
    };
    let nulled = sys::fork::let_go(&opened);
    let claims = crate::lease::claim::forget_all();
    let waits = super::kernel_wait::forget_all();
    nulled && claims && waits
}
