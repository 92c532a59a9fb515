//! Shared leases, and locks on descriptors the caller opened.
//!
//! A [`SharedLease`] is taken on the same lock files as a [`Lease`](super::Lease), with the
//! same safe open and inode verification: shared holders coexist, and shared and exclusive
//! holders exclude each other — across processes, and against any other `flock` user of the
//! file (util-linux `flock -s`, Python's `fcntl.flock`, std's `File::lock_shared`).
//!
//! **No writer starvation.** An exclusive waiter gets the lease as soon as the shared holders
//! present when it started waiting have released, even while shared holders overlap each
//! other without a gap: new shared acquirers wait behind it — in this process through the
//! claim queue (`claim.rs`), across processes through the lock's gate (`posix/gate.rs`),
//! which every leasehold process honours. (Plain `flock -s` readers starve a `flock -x`
//! writer for ever; BENCHMARKS.md has both figures.) A gate file is used only where it
//! passes the lock file's ownership rule (whatever [`LeaseOptions::allow_shared_state`](crate::LeaseOptions::allow_shared_state)
//! says); one that another user could have prepared is ignored — that costs fairness, never
//! exclusion — and
//! an acquirer whose budget runs out while it is held up at a gate gets
//! [`Error::GateHeld`], naming the gate and its holders.
//!
//! **No reader starvation.** Nor do writers that release and queue again at once starve the
//! readers waiting behind them: a shared waiter reserves its turn on the readers' gate, and
//! exclusive waiters (and a waiting process's later exclusive acquisitions) let the readers
//! already waiting go first — readers and writers take turns (`posix/gate.rs`).
//!
//! **No upgrade.** `flock` converts a shared lock to an exclusive one non-atomically — it
//! drops the shared lock first, so another writer can get in between — and a failed
//! non-blocking conversion leaves the caller with no lock at all, silently. So a
//! `SharedLease` has no way to become exclusive: to write, release it, then acquire a
//! [`Lease`](super::Lease), and re-read whatever was read under the shared lease.
//!
//! **Nested shared leases.** A shared acquisition by a process that already holds the same
//! lock file shared — a [`SharedLease`] of this process, or an ancestor's shared lease whose
//! descriptor it inherited and which said so through [`SharedLease::child_env`] (as
//! `leasehold run --shared` and `leasehold flock -s` do for COMMAND) — is granted past any
//! waiting exclusive acquirer, in this process or another: it does not wait at the lock's
//! gate, nor in the in-process queue. Otherwise it would wait behind a writer that waits for
//! the outer lease, for good. The process cannot tell a nested acquisition from one of
//! another of its threads, so those pass too, which costs a waiting writer fairness (never
//! exclusion) while this process's shared leases keep overlapping. A second *exclusive*
//! lease inside a shared one still waits for the first (no upgrade), and a shared lease
//! nested in util-linux `flock -s` (which sets no variable) still waits at the gate.

use std::path::Path;

#[cfg(unix)]
use std::os::fd::{AsRawFd, BorrowedFd};

use super::claim::Mode;
use super::os::{Imp, imp};
use super::platform::{Platform, PlatformHeld, PlatformTarget};
use crate::error::{Error, Result};
use crate::kind::FileId;

/// Whether a lock excludes everyone ([`Exclusive`](LockMode::Exclusive)) or only exclusive
/// holders ([`Shared`](LockMode::Shared)): for [`LeaseOptions::lock_descriptor`](crate::LeaseOptions::lock_descriptor), where the
/// mode is the caller's choice at run time (path leases have a type per mode: [`Lease`](super::Lease)
/// and [`SharedLease`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// `LOCK_EX`.
    Exclusive,
    /// `LOCK_SH`.
    Shared,
}

impl From<LockMode> for Mode {
    fn from(m: LockMode) -> Mode {
        match m {
            LockMode::Exclusive => Mode::Exclusive,
            LockMode::Shared => Mode::Shared,
        }
    }
}

/// A shared lease, held until [`release`](SharedLease::release) or drop.
///
/// While it is held no exclusive lease on the same lock file is held by anyone (any process,
/// this one included), and any number of shared leases may be. It never expires. It cannot
/// be upgraded (see the module documentation): release it, then acquire a
/// [`Lease`](super::Lease).
///
/// ```
/// # #[cfg(unix)] { // Windows refuses shared leases (`Error::SharedUnsupported`)
/// use leasehold::{Lease, SharedLease};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("cache.lock");
/// let a = SharedLease::try_acquire(&path).unwrap();
/// let b = SharedLease::try_acquire(&path).unwrap(); // readers coexist
/// assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
/// drop((a, b));
/// let writer = Lease::try_acquire(&path).unwrap();
/// assert!(SharedLease::try_acquire(&path).unwrap_err().is_contended());
/// # drop(writer);
/// # }
/// ```
///
/// There is no conversion to an exclusive lease (this does not compile):
///
/// ```compile_fail
/// let shared = leasehold::SharedLease::try_acquire("cache.lock").unwrap();
/// let exclusive: leasehold::Lease = shared.into();
/// ```
///
/// Like [`Lease`](super::Lease) it is `#[must_use]`: a shared lease that is not bound is
/// released at once.
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// let dir = tempfile::tempdir().unwrap();
/// leasehold::SharedLease::try_acquire(dir.path().join("a.lock")).unwrap(); // error: unused
/// ```
#[derive(Debug)]
#[must_use = "a lease is released when dropped: bind it (`let _lease = ...`) for as long as the lock must be held"]
pub struct SharedLease {
    pub(super) held: Option<imp::Held>,
    pub(super) target: imp::Target,
}

impl SharedLease {
    /// The lease, unless released — or inherited through a `fork` and let go in the child
    /// ([`after_fork_in_child`](crate::after_fork_in_child())).
    fn live(&self) -> Option<&imp::Held> {
        self.held.as_ref().filter(|h| !h.forgotten())
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.target.display()
    }

    /// Whether the lease is still held (not yet released).
    pub fn is_held(&self) -> bool {
        self.live().is_some()
    }

    /// The identity of the locked inode, while held.
    pub fn file_id(&self) -> Option<FileId> {
        self.live().and_then(imp::Held::file_id)
    }

    /// Checks that the lease still stands for its path (see [`Lease::verify`](super::Lease::verify)).
    ///
    /// # Errors
    /// [`Error::LeaseLost`], [`Error::Released`].
    pub fn verify(&self) -> Result<()> {
        let held = self.live().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        Imp::verify(&self.target, held)
    }

    /// Releases the lease by closing its descriptor. Idempotent. The lock file stays.
    pub fn release(&mut self) {
        self.held = None;
    }

    /// Lets child processes spawned from now on inherit the lease (see
    /// [`Lease::share_with_children`](super::Lease::share_with_children)).
    ///
    /// # Errors
    /// [`Error::Released`], or [`Error::Io`] from `fcntl`.
    #[cfg(unix)]
    pub fn share_with_children(&self, share: bool) -> Result<()> {
        let held = self.live().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        crate::sys::set_inheritable(held.as_fd(), share)
            .map_err(|e| imp::path_error(self.path(), "set descriptor inheritance", e))
    }

    /// The environment variable to set for a child process that inherits this lease
    /// ([`share_with_children`](Self::share_with_children)), as `(name, value)`: shared
    /// acquisitions of the same lock file by the child and its descendants are then nested
    /// in this one and skip the lock's gate, as a nested shared acquisition in this process
    /// does (see the module documentation, "Nested shared leases"). The value keeps what this
    /// process inherited itself. `None` once released.
    #[cfg(unix)]
    pub fn child_env(&self) -> Option<(&'static str, String)> {
        let id = self.file_id()?;
        Some((imp::gate::INHERITED_SHARED, imp::gate::inherited_value(id)))
    }

    /// The locked descriptor, while held.
    #[cfg(unix)]
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        self.live().map(imp::Held::as_fd)
    }
}

/// Drops the lock of the open file description behind `fd` (`flock(LOCK_UN)`): for every
/// descriptor sharing it, in every process — what `flock -u` does.
///
/// # Errors
/// [`Error::Io`] (for example `EBADF` for a closed descriptor).
#[cfg(unix)]
pub fn unlock_descriptor(fd: BorrowedFd<'_>) -> Result<()> {
    let display = std::path::PathBuf::from(format!("descriptor {}", fd.as_raw_fd()));
    crate::sys::unlock(fd).map_err(|e| imp::path_error(&display, "unlock", e))
}
