//! The exclusive lease values: [`Lease`], and the [`LeaseHandle`] that keeps a lock file
//! open to take its lease ([`HandleGuard`]) many times cheaply. They are taken through
//! `LeaseOptions` (`options.rs`); `mod.rs` gives each its default-options constructors.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

#[cfg(unix)]
use std::os::fd::BorrowedFd;

use super::blocking;
use super::claim::Mode;
use super::os::{Imp, imp};
use super::platform::{Platform, PlatformHeld, PlatformOpened, PlatformOptions, PlatformTarget};
use super::wait::Acquisition;
use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::kind::FileId;

/// An exclusive lease, held until [`release`](Lease::release) or drop.
///
/// While a `Lease` is held, no other process (and no other `Lease` in this process) holds the
/// same lock. The lease never expires: a holder that stalls keeps it until it releases or its
/// process exits, because handing a stalled writer's store to someone else lets its resumed
/// writes tear the store.
///
/// It is `#[must_use]`: a lease that is not bound is released at once, which is never what
/// taking it meant (bind it, `let _lease = ...`, for as long as the lock must be held):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// let dir = tempfile::tempdir().unwrap();
/// leasehold::Lease::try_acquire(dir.path().join("a.lock")).unwrap(); // error: unused `Lease`
/// ```
#[derive(Debug)]
#[must_use = "a lease is released when dropped: bind it (`let _lease = ...`) for as long as the lock must be held"]
pub struct Lease {
    pub(super) held: Option<imp::Held>,
    pub(super) target: imp::Target,
    /// Whether the descriptor was made inheritable ([`Lease::share_with_children`]): then
    /// children may hold its open file description, and it is never unlocked and kept.
    children: AtomicBool,
}

impl Lease {
    /// The lease `held` on `target`, not shared with children.
    pub(super) fn new(held: imp::Held, target: imp::Target) -> Lease {
        Lease {
            held: Some(held),
            target,
            children: AtomicBool::new(false),
        }
    }

    /// The lease, unless released — or inherited through a `fork` and let go in the child
    /// ([`after_fork_in_child`](crate::after_fork_in_child())).
    fn live(&self) -> Option<&imp::Held> {
        self.held.as_ref().filter(|h| !h.forgotten())
    }

    /// The lock file's path (for a lease taken in a [`LockDir`](crate::LockDir), the directory's path joined
    /// with the name).
    pub fn path(&self) -> &Path {
        self.target.display()
    }

    /// Whether the lease is still held (not yet released).
    pub fn is_held(&self) -> bool {
        self.live().is_some()
    }

    /// The identity of the locked inode, while held (`None` on Windows, where the lease is a
    /// kernel object, not a file).
    pub fn file_id(&self) -> Option<FileId> {
        self.live().and_then(imp::Held::file_id)
    }

    /// Checks that the lease still stands for its path.
    ///
    /// A lease whose lock file was unlinked or replaced excludes nobody: a newcomer locks the
    /// new file. Nor does one whose path now leads elsewhere — a directory above the lock
    /// file renamed, a symlink on the way re-pointed — so the whole path is resolved again
    /// and must still name the locked inode. Stores call this before every durable write and
    /// fail closed on an error. It costs one `fstatat` (POSIX: the path walked from the root
    /// or the working directory); a lease taken in a [`LockDir`](crate::LockDir) adds one per directory of
    /// the chain the handle was reached through.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the path names another file (or none), [`Error::Released`]
    /// after [`release`](Self::release).
    pub fn verify(&self) -> Result<()> {
        let held = self.live().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        Imp::verify(&self.target, held)
    }

    /// Removes the lock file while holding its lease, if the path still names the locked
    /// inode (`Ok(true)`: removed). For the keyed pattern's collector only: it holds this
    /// lease exclusively, so no one else holds the inode, and whoever opened the file before
    /// the unlink finds, once it has locked, that the path no longer names its inode and
    /// tries again (the post-lock check every acquisition makes; docs/design.md has the
    /// argument). Windows keeps no lock files: `Ok(false)`.
    ///
    /// # Errors
    /// [`Error::Released`], or an I/O error from the check or the unlink.
    pub(crate) fn unlink_locked(&self) -> Result<bool> {
        let held = self.live().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        Imp::unlink_held(&self.target, held)
    }

    /// The lock file's modification time, while held (when it was created: lock files are
    /// never written).
    ///
    /// # Errors
    /// [`Error::Released`], or an I/O error from `fstat`.
    pub(crate) fn modified(&self) -> Result<std::time::SystemTime> {
        let held = self.live().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        Imp::modified(&self.target, held)
    }

    /// Releases the lease by closing its descriptor. Idempotent. The lock file stays.
    ///
    /// If the descriptor was shared with child processes (see
    /// [`share_with_children`](Self::share_with_children)), the kernel keeps the lock until
    /// they have closed it too.
    pub fn release(&mut self) {
        self.held = None;
    }

    /// Releases the lease and keeps its descriptor open in `handle` for the next
    /// [`LeaseHandle::lock_lease`], as a [`HandleGuard`]'s release does: unless other
    /// processes wait (then it closes the file, and waiters get the chance a closing releaser
    /// gives them), and unless the lease was taken before a `fork` in this child. A lease of
    /// another lock file than `handle`'s, or one whose descriptor was shared with children
    /// ([`share_with_children`](Self::share_with_children), whose lock an unlock would
    /// take from them too), is released as [`release`](Self::release) releases it, and
    /// `handle` is left as it was.
    pub fn release_into(&mut self, handle: &mut LeaseHandle) {
        let Some(held) = self.held.take() else {
            return;
        };
        if self.target.display() != handle.target.display()
            || held.forgotten()
            || held.others_waiting()
            || self.children.load(Ordering::Relaxed)
        {
            return;
        }
        handle.opened = held.unlock_keep();
    }

    /// Lets child processes spawned from now on inherit the lease, as `flock(1)` does: the
    /// lock then lasts until the last process holding the descriptor has exited, even if this
    /// process dies first. Use it only around spawning the children that should hold it.
    ///
    /// # Errors
    /// [`Error::Released`], or [`Error::Io`] from `fcntl`.
    #[cfg(unix)]
    pub fn share_with_children(&self, share: bool) -> Result<()> {
        let held = self.live().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        // Once children may have it, they may hold it still after it is made private again.
        self.children.fetch_or(share, Ordering::Relaxed);
        crate::sys::set_inheritable(held.as_fd(), share)
            .map_err(|e| imp::path_error(self.path(), "set descriptor inheritance", e))
    }

    /// The locked descriptor, while held.
    #[cfg(unix)]
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        self.live().map(imp::Held::as_fd)
    }

    /// The kernel object that is the lease: `Local\leasehold-<hex sha256>`.
    #[cfg(windows)]
    pub fn object_name(&self) -> &str {
        self.target.object_name()
    }
}

/// A lock file kept open so that one lease can be taken many times cheaply.
///
/// Each [`lock`](Self::lock) costs `flock` + `fstatat` (the inode verification) and each
/// release one `flock(LOCK_UN)`: no open, no close, no allocation. The guarantees are those of
/// [`Lease`]; if the lock file was replaced since the handle opened it, the handle follows the
/// path to the new file. `&mut self` makes one handle hold at most one lease at a time.
///
/// Fairness: a release that re-locks at once would win every race against a waiter the
/// kernel has just woken (measured: 1 handoff in 24,530 in a back-to-back loop). On Linux
/// waiters mark themselves (a POSIX read lock, which flock ignores), and a handle whose
/// release sees such a mark (one `F_GETLK`) closes its file instead of unlocking it, so its
/// next `lock` reopens and waiters get the chance a closing releaser gives them.
///
/// The lease taken through it is a [`HandleGuard`], which borrows the handle: one clear name
/// for each, the handle that stays open and the guard that holds the lock for a while.
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// let mut handle = leasehold::LeaseHandle::open(dir.path().join("hot.lock")).unwrap();
/// for _ in 0..3 {
///     let guard: leasehold::HandleGuard<'_> = handle.try_lock().unwrap();
///     guard.verify().unwrap();
/// } // each guard unlocks as it is dropped; the file stays open for the next
/// ```
#[derive(Debug)]
#[must_use = "a handle that is dropped closes its lock file: keep it to take its lease cheaply"]
pub struct LeaseHandle {
    pub(super) opts: PlatformOptions,
    /// See `LeaseOptions::follow_replaced`.
    pub(super) follow_replaced: bool,
    pub(super) target: imp::Target,
    pub(super) opened: Option<imp::Opened>,
    /// Exclusive for every public handle; shared only for the keyed pattern's collector-lock
    /// handles ([`LeaseOptions::handle_at_mode`](crate::LeaseOptions::handle_at_mode)).
    pub(super) mode: Mode,
}

impl LeaseHandle {
    /// Takes the lease if it is free right now.
    ///
    /// # Errors
    /// As [`LeaseOptions::try_acquire`](crate::LeaseOptions::try_acquire).
    pub fn try_lock(&mut self) -> Result<HandleGuard<'_>> {
        self.lock(&Budget::no_wait())
    }

    /// Takes the lease, waiting within `budget`.
    ///
    /// # Errors
    /// As [`LeaseOptions::acquire`](crate::LeaseOptions::acquire).
    pub fn lock(&mut self, budget: &Budget) -> Result<HandleGuard<'_>> {
        let held = self.take(budget)?;
        Ok(HandleGuard {
            handle: self,
            held: Some(held),
        })
    }

    /// Takes the lease as [`lock`](Self::lock) does, as a [`Lease`] of its own instead of a
    /// guard that borrows the handle: for a holder that keeps the lease in a value of its own
    /// for a while (an update in progress) and the handle somewhere else meanwhile. The
    /// lease owns the kept descriptor while it is held; give it back with
    /// [`Lease::release_into`], or the lease's release closes it as any lease's does.
    ///
    /// # Errors
    /// As [`LeaseOptions::acquire`](crate::LeaseOptions::acquire).
    pub fn lock_lease(&mut self, budget: &Budget) -> Result<Lease> {
        let held = self.take(budget)?;
        Ok(Lease::new(held, self.target.clone()))
    }

    /// Takes the lock through the kept file, if any, waiting within `budget`.
    fn take(&mut self, budget: &Budget) -> Result<imp::Held> {
        let acq = Acquisition::new(
            self.opts,
            self.follow_replaced,
            &self.target,
            budget,
            self.mode,
            // A file this handle kept open before a `fork` is `/dev/null` in the child.
            self.opened.take().filter(|o| !o.forgotten()),
        );
        blocking::run(acq)
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.target.display()
    }
}

/// The lease taken through a [`LeaseHandle`] ([`LeaseHandle::lock`]), held until
/// [`release`](Self::release) or drop, which unlock (`LOCK_UN`) and keep the file open in the
/// handle for the next lock. It borrows the handle mutably, so a handle holds at most one.
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// let dir = tempfile::tempdir().unwrap();
/// let mut handle = leasehold::LeaseHandle::open(dir.path().join("a.lock")).unwrap();
/// handle.try_lock().unwrap(); // error: unused `HandleGuard`, unlocked at once
/// ```
#[derive(Debug)]
#[must_use = "the guard unlocks when dropped: bind it (`let _guard = ...`) for as long as the lock must be held"]
pub struct HandleGuard<'a> {
    handle: &'a mut LeaseHandle,
    held: Option<imp::Held>,
}

impl HandleGuard<'_> {
    /// Checks that the locked inode is still the file at the path (see [`Lease::verify`]).
    ///
    /// # Errors
    /// As [`Lease::verify`].
    pub fn verify(&self) -> Result<()> {
        let Some(held) = self.held.as_ref().filter(|h| !h.forgotten()) else {
            return Err(Error::Released {
                path: self.handle.path().to_path_buf(),
            });
        };
        Imp::verify(&self.handle.target, held)
    }

    /// Releases the lease; the handle keeps the file open for the next [`LeaseHandle::lock`]
    /// (unless other processes wait: see [`LeaseHandle`]).
    pub fn release(mut self) {
        self.unlock();
    }

    fn unlock(&mut self) {
        if let Some(held) = self.held.take() {
            // Shared holders do not exclude each other, so a shared handle that re-locks at
            // once takes nothing from a waiter: it unlocks without asking.
            let shared = self.handle.mode == Mode::Shared;
            self.handle.opened = match held.forgotten() || (!shared && held.others_waiting()) {
                true => None, // dropping `held` closes the file (`/dev/null` after a fork)
                false => held.unlock_keep(),
            };
        }
    }
}

impl Drop for HandleGuard<'_> {
    fn drop(&mut self) {
        self.unlock();
    }
}
