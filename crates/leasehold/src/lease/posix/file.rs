//! A lock file on its way to a lease: [`Opened`] (opened, not yet locked), [`Granted`] (locked
//! for a waiter by the kernel, not yet checked against its path) and [`Held`] (the lease).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::error::path_error;
use super::target::Target;
use super::{descriptors, gate};
use crate::error::Result;
use crate::kind::FileId;
use crate::lease::claim::{self, Claim, Key};
use crate::lease::platform::{PlatformHeld, PlatformOpened, PlatformTarget};
use crate::sys;

/// A lock file opened for locking, not yet locked.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(super) fd: OwnedFd,
    pub(super) id: FileId,
    /// Whether the last try found the gate held (a shared try, see [`gate`]), for the error
    /// of a try-once acquisition: it was held up there, not at the lock.
    pub(super) at_gate: bool,
    /// The claim table's generation when it was opened: one opened before a `fork` is, in
    /// the child, `/dev/null` ([`fork`](super::fork)) and is never locked again.
    pub(super) generation: u64,
}

/// A caller's descriptor, duplicated (the same open file description, so the lock taken is
/// the description's), as a lock to take.
///
/// Any kind of file is accepted, as `flock(2)` and `flock(1)` accept it: the refusal of
/// FIFOs, devices and sockets guards *opening a path* (which could block or follow), and the
/// caller has already opened this one (`flock 9` on a FIFO or a pipe was
/// refused).
pub(crate) fn open_descriptor(target: &Target, fd: BorrowedFd<'_>) -> Result<Opened> {
    let path = target.display();
    let (id, _) = sys::fd_identity(fd).map_err(|e| path_error(path, "stat descriptor", e))?;
    let fd = sys::dup_cloexec(fd).map_err(|e| path_error(path, "duplicate descriptor", e))?;
    descriptors::register(fd.as_fd(), id);
    Ok(Opened {
        fd,
        id,
        at_gate: false,
        generation: claim::generation(),
    })
}

impl PlatformOpened for Opened {
    fn key(&self) -> Key {
        (self.id.dev, self.id.ino)
    }

    fn file_id(&self) -> Option<FileId> {
        Some(self.id)
    }

    fn forgotten(&self) -> bool {
        self.generation != claim::generation()
    }
}

/// The locked file, its identity and its in-process claim. Field order matters: the
/// descriptor closes first (dropping the kernel lock, unless a child still holds the open
/// file description), then a gate kept from an exclusive wait is unlocked (see [`gate`]),
/// gate descriptors already unlocked close, and the claim leaves the table last.
///
/// A lease is released by closing, never by `flock(LOCK_UN)` on its description: the
/// description may be shared (COMMAND of `run` and `flock`, a child given the lease with
/// `share_with_children`, a `fork`), and `LOCK_UN` drops the lock for every holder of it
/// (a waiting `run` whose gate
/// hand-back unlocked a duplicate of its descriptor let a second `run` in beside COMMAND's
/// background child).
#[derive(Debug)]
pub(crate) struct Held {
    pub(super) fd: OwnedFd,
    /// The gate an exclusive waiter holds until it releases (see [`gate`]).
    pub(super) gate: Option<gate::HeldGate>,
    pub(super) id: FileId,
    /// Whether this process marked itself waiting for this lease (Linux; see
    /// `sys::mark_waiting`): the mark is removed when a handle unlocks.
    pub(super) marked: bool,
    /// Gate descriptors already unlocked, closed after the lock file's.
    pub(super) spare: gate::Spare,
    pub(super) _claim: Claim,
}

impl PlatformHeld for Held {
    type Opened = Opened;

    fn file_id(&self) -> Option<FileId> {
        Some(self.id)
    }

    fn forgotten(&self) -> bool {
        self._claim.forgotten()
    }

    /// Whether other processes wait for this lease (Linux: their marks, `sys::mark_waiting`;
    /// elsewhere nobody can tell cheaply, and the answer is `false`).
    fn others_waiting(&self) -> bool {
        #[cfg(all(target_os = "linux", not(leasehold_portable)))]
        return sys::others_waiting(self.fd.as_fd());
        #[cfg(not(all(target_os = "linux", not(leasehold_portable))))]
        false
    }

    /// Unlocks without closing (`LOCK_UN`), giving back the still-open file; `None` when the
    /// unlock failed and the file was closed instead (which releases for certain). Only for a
    /// [`LeaseHandle`](crate::LeaseHandle)'s lease, whose description nobody else holds: it
    /// has no `share_with_children` and no `as_fd` (see [`Held`] for why a description that
    /// may be shared is never unlocked).
    fn unlock_keep(self) -> Option<Opened> {
        let Held {
            gate,
            fd,
            id,
            marked,
            spare,
            _claim,
        } = self;
        let kept = match sys::unlock(fd.as_fd()) {
            Ok(()) => {
                // A mark left from waiting for this lease goes now, after the unlock, so it
                // costs the waiters the kernel just woke nothing.
                #[cfg(all(target_os = "linux", not(leasehold_portable)))]
                if marked {
                    sys::unmark_waiting(fd.as_fd());
                }
                let _ = marked;
                Some(Opened {
                    fd,
                    id,
                    at_gate: false,
                    generation: claim::generation(),
                })
            }
            Err(_) => None,
        };
        drop(gate); // after the unlock: readers queued on the gate find the lock free
        drop(spare);
        drop(_claim); // the in-process claim goes last
        kept
    }
}

impl Held {
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A descriptor the kernel locked for a waiter, not yet checked against the path.
pub(crate) struct Granted {
    pub(super) fd: OwnedFd,
    pub(super) id: FileId,
    /// Whether it was granted after waiting in the kernel's queue (and so marked).
    pub(super) marked: bool,
    /// What the wait kept of the gates (see [`gate`]).
    pub(super) passed: gate::Passed,
}
