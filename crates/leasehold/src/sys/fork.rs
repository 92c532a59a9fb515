//! In a forked child: letting go of descriptors by number (`lease/posix/fork.rs`). The
//! numbers come from a table, not from owned descriptors, so they are borrowed and replaced
//! as raw numbers: rustix's safe calls take owned or borrowed descriptors only.

use std::mem::ManuallyDrop;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

use rustix::fs::{Mode, OFlags};
use rustix::io::FdFlags;

use crate::kind::FileId;

/// Points each descriptor number of `opened` that is still open on the file named with it
/// at `/dev/null` (`dup2`, then close-on-exec), never closing the number; `false` where
/// `/dev/null` cannot be opened or a `dup2` failed (those copies stay).
///
/// Only in a child right after `fork`, before it starts a thread: nothing else can open or
/// close a descriptor meanwhile (the safety arguments below rest on it).
pub(crate) fn let_go(opened: &[(RawFd, FileId)]) -> bool {
    let Ok(null) = rustix::fs::open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
    else {
        return false;
    };
    let mut all = true;
    for &(raw, id) in opened {
        // SAFETY: the borrow lasts for the `fstat` alone, in a process with one thread (see
        // above): a number that is not open makes the call fail with EBADF, and none can be
        // closed or reused while it runs.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        match super::fd_id(fd) {
            Ok(now) if now == id => {}
            _ => continue, // closed since, or another file now: not ours to touch
        }
        // SAFETY: `raw` is open (just checked, one thread). Wrapped in `ManuallyDrop`, it is
        // never closed here: its owner (a lease object, a gone thread's job) still closes it
        // in the end, then `/dev/null`.
        let mut target = ManuallyDrop::new(unsafe { OwnedFd::from_raw_fd(raw) });
        let replaced = rustix::io::dup2(&null, &mut target)
            .and_then(|()| rustix::io::fcntl_setfd(&*target, FdFlags::CLOEXEC));
        all &= replaced.is_ok();
    }
    all
}
