//! The lease primitive: an exclusive (or shared), kernel-arbitrated lock, documented once here
//! over a private per-platform implementation (`posix/`: `flock` on a lock file;
//! `windows.rs`: a named kernel semaphore; `single.rs`: WASI, which has no inter-process
//! lock, where a lease is the in-process claim alone and only behind
//! [`LeaseOptions::single_process`]), each of which meets the one contract written here,
//! [`Platform`].
//!
//! Contract, in the order things happen — open (no-follow, non-blocking, 0600, never
//! truncated or removed; anything but a regular file refused), claim (the in-process table,
//! `claim.rs`), lock (`flock`, the kernel the only arbiter), verify (the locked inode still
//! stands at the path, else reopen, at most [`MAX_REOPENS`] times), wait (in the kernel's
//! queue, within a [`Budget`]: `wait.rs`), release (by closing). Each step's reasons are
//! stated once, in docs/design.md ("The lease primitive"); shared leases ([`SharedLease`],
//! `shared.rs`, `posix/gate.rs`) in its "Shared leases".
//!
//! One acquisition, from the top: [`LeaseOptions::acquire`] → `wait.rs`
//! (`Acquisition::next`) → `posix/mod.rs` (`open`, `try_lock`) and `posix/kernel_wait.rs`
//! (`KernelWait`) → `sys/unix.rs` (`flock`).

use std::fmt::Debug;
use std::path::Path;

#[cfg(unix)]
use std::os::fd::BorrowedFd;

use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::holders as lookup;
use crate::kind::{FileId, FileKind, Holders};

mod any;
#[cfg(feature = "tokio")]
mod asynchronous;
mod blocking;
pub(crate) mod claim;
mod options;
mod platform;
mod shared;
mod wait;

#[cfg(unix)]
#[path = "posix/mod.rs"]
mod imp;
#[cfg(windows)]
#[path = "windows.rs"]
mod imp;
#[cfg(target_os = "wasi")]
#[path = "single.rs"]
mod imp;

/// This build's platform (see [`Platform`]).
#[cfg(unix)]
type Imp = imp::Posix;
/// This build's platform (see [`Platform`]).
#[cfg(windows)]
type Imp = imp::Windows;
/// This build's platform (see [`Platform`]).
#[cfg(target_os = "wasi")]
type Imp = imp::Single;

use claim::Mode;
pub(crate) use platform::{
    Attempt, Platform, PlatformDataDir, PlatformDir, PlatformHeld, PlatformOpened, PlatformOptions,
    PlatformTarget,
};
use wait::Acquisition;

/// `Ok(false)` for an entry that was not there ([`PlatformDataDir::rename`] and
/// [`PlatformDataDir::remove`]): what a caller cleaning up asks.
fn existed(done: Result<()>) -> Result<bool> {
    match done {
        Ok(()) => Ok(true),
        Err(Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The two kernel services the patterns need beside leases, so that they reach the kernel
/// only through the primitive: positioned reads of a data file opened with
/// [`LockDir::open_file`] (the append log's tail checks) and this process's id, where the
/// platform has one (WASI: `None`; durable rewrites name their temporaries with it).
pub(crate) use crate::sys::{process_id, read_exact_at};

/// The one creation of private directories (`path` and its missing parents, mode 0700 on
/// POSIX), for the durable rewrites' directories: they are made as a lock file's parents are.
pub(crate) use crate::sys::create_dirs;

/// The one hex SHA-256 of the crate (`sys/naming.rs`, pure), for the keyed pattern's lock
/// names: a key's lock file is named as its other hashed names are spelled.
pub(crate) use crate::sys::naming::push_sha256_hex;

/// Call in a child process right after `fork` (without `exec`), before it starts a thread
/// or takes a lease: lets go of every lease, wait and gate the child inherited from its
/// parent, without unlocking any of them, so that the parent's release (or its wait that
/// gave up) frees the lock for everyone at once, the child included.
///
/// A forked child shares its parent's open file descriptions, and a `flock` lock belongs to
/// the description: the child's copies keep a lease locked after the parent released it —
/// until the child exits — and `flock(LOCK_UN)` through them would free the parent's lock.
/// This points each copy at `/dev/null` instead (the descriptor numbers stay taken, so that
/// the owners of those numbers close `/dev/null`, never a descriptor opened since), empties
/// the in-process claim table and the waits in progress (the parent's threads do not exist
/// in the child), and makes every inherited [`Lease`] and [`SharedLease`] say it is not held
/// ([`is_held`](Lease::is_held) false, [`verify`](Lease::verify) `Error::Released`,
/// [`release`](Lease::release) a no-op). The child may take leases of its own afterwards.
///
/// With [`before_fork`] called by the forking thread just before the fork (and
/// [`after_fork_in_parent`] in the parent after it), the library's state is whole in the
/// child; Python's binding registers all three with `os.register_at_fork`. Without
/// `before_fork`, `false` where part of the library's state could not be reset because a
/// thread of the parent held its lock at the instant of the fork (a thread that does not
/// exist in the child): what could be let go was, but leases this process takes afterwards
/// may wait for ever.
/// A `fork` immediately followed by `exec` needs none of this (lease descriptors are
/// close-on-exec, bar one shared with [`Lease::share_with_children`]).
#[cfg(unix)]
pub fn after_fork_in_child() -> bool {
    imp::fork::after_fork_in_child()
}

/// Call on the thread about to `fork` (without `exec`), just before it: takes the library's
/// process-wide locks, so that the child finds its state whole and held by its one thread
/// ([`after_fork_in_child`] lets them go there); [`after_fork_in_parent`] lets them go in
/// the parent. Other threads' acquisitions wait for the fork meanwhile (they never hold
/// one of these locks for longer than a table update).
#[cfg(unix)]
pub fn before_fork() {
    imp::fork::before_fork();
}

/// Call in the parent right after a `fork` that [`before_fork`] prepared: lets the
/// library's locks go again.
#[cfg(unix)]
pub fn after_fork_in_parent() {
    imp::fork::after_fork_in_parent();
}

pub use any::AnyLease;
pub use options::{LeaseOptions, SharedMount};
#[cfg(unix)]
pub use shared::unlock_descriptor;
pub use shared::{LockMode, SharedLease};

/// How many times a lock file replaced between open and lock is reopened before giving up.
pub const MAX_REOPENS: u32 = 3;

/// A directory that lock files (and the data they guard) are opened relative to.
///
/// POSIX: an open directory descriptor (`openat`), so that a directory renamed or swapped
/// after it was opened cannot redirect where locks are taken. A lease held in it stays
/// locked after the directory (or one above it) is renamed, but newcomers resolving the
/// path reach another directory, so its [`Lease::verify`] then reports the loss: it walks
/// the chain this handle was reached through ([`child`](Self::child) by
/// [`child`](Self::child) up to the path given to [`open`](Self::open)). Windows: the directory's real path, resolved once at
/// [`open`](Self::open) (junctions, symbolic links and 8.3 names resolved), from which lock
/// names derive.
#[derive(Debug, Clone)]
pub struct LockDir(imp::Dir);

impl LockDir {
    /// Opens an existing directory. The path is the caller's configuration, so symlinks in it
    /// are followed, as for any path prefix (a home directory moved to another disk and linked
    /// back keeps working); what lies *inside* is opened with [`child`](Self::child), which
    /// never follows one.
    ///
    /// # Errors
    /// [`Error::NotDirectory`] when something else stands there, [`Error::NotFound`],
    /// [`Error::PermissionDenied`], or [`Error::Io`].
    pub fn open(path: impl AsRef<Path>) -> Result<LockDir> {
        imp::Dir::open(path.as_ref()).map(LockDir)
    }

    /// Opens a directory, creating it and missing parents (mode 0700 on POSIX).
    ///
    /// # Errors
    /// As [`open`](Self::open), plus [`Error::ParentNotDirectory`] when a component on the
    /// way is a file.
    pub fn create(path: impl AsRef<Path>) -> Result<LockDir> {
        imp::Dir::create(path.as_ref()).map(LockDir)
    }

    /// Opens the child directory `name`, which must be a real directory (never a symlink or
    /// junction); with `create`, creates it (0700) when missing.
    ///
    /// # Errors
    /// [`Error::NotDirectory`] (naming what stands there), or an I/O error; a `name` that is
    /// not one plain component is refused.
    pub fn child(&self, name: &str, create: bool) -> Result<LockDir> {
        self.0.child(name, create).map(LockDir)
    }

    /// What stands at `name` in this directory (never following a symlink): `Ok(true)` for a
    /// regular file, `Ok(false)` when nothing is there.
    ///
    /// # Errors
    /// [`Error::NotRegularFile`] for anything else.
    pub fn has_lock_file(&self, name: &str) -> Result<bool> {
        self.0.has_lock_file(name)
    }

    /// The path this handle was opened as (for messages; the handle is what is used).
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The directory descriptor.
    #[cfg(unix)]
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// The directory's real path, as the file system resolved it when it was opened.
    #[cfg(windows)]
    pub fn real_path(&self) -> &Path {
        self.0.real_path()
    }

    /// Opens the data file `name` in this directory as carefully as a lock file (see
    /// `imp::Dir::open_file`): the file and whether it existed before; `Ok(None)` when it
    /// does not exist and `create` is false.
    pub(crate) fn open_file(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool)>> {
        self.0.open_file(name, write, create)
    }

    /// Makes the directory's entries durable: `fsync` of the directory on POSIX; nothing on
    /// Windows, which cannot `fsync` a directory (NTFS journals the entry itself). Stores call
    /// it after creating a file in the directory, so that the new name survives a crash.
    ///
    /// # Errors
    /// The `fsync`'s I/O error.
    pub fn sync(&self) -> std::io::Result<()> {
        self.0.sync()
    }

    /// Checks that the chain of directories this handle was reached through still stands:
    /// the path given to [`open`](Self::open) names the same directory (symlinks followed,
    /// as there), and every [`child`](Self::child) name on the way names the same child
    /// (never followed). A handle keeps working after a rename, so without this check a
    /// lease held in a renamed directory would no longer exclude newcomers, who resolve the
    /// path to somewhere else. Costs one `fstatat` per level (POSIX; Windows binds names to
    /// the real path resolved at open and answers `Ok`).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] naming the first directory that moved, or an I/O error.
    pub(crate) fn verify(&self) -> Result<()> {
        self.0.verify()
    }

    /// The names of this directory's entries (`.` and `..` left out), in no particular
    /// order.
    ///
    /// # Errors
    /// An I/O error naming the directory.
    pub fn names(&self) -> Result<Vec<std::ffi::OsString>> {
        self.0.names()
    }
}

/// Data below a directory handle: what a store does with the files and directories its
/// records live in (the result store's candidates, publications and TARGETs), made relative
/// to this handle one component at a time, so that nothing below the directory it was opened
/// as is ever reached through a symlink — another user who can write there cannot redirect a
/// read, a write or a removal, and a directory swapped after it was opened cannot either.
/// Every `name` is one plain component (no separator, not `.` or `..`); another is refused.
///
/// Why our own rather than cap-std's `Dir`: cap-std confines resolution to a directory but
/// *follows* symlinks that stay inside it, and a link inside a TARGET is another user's
/// redirection even when it points inside; `openat(O_NOFOLLOW)` per component gives the
/// kernel's own no-follow check, with no path-string checks of ours.
///
/// POSIX: `openat`, `mkdirat`, `renameat` and `unlinkat` on the handle's descriptor. Windows
/// and WASI (no stable `openat` in std): the same operations on the real path joined with
/// the name, each checked first without following (`symlink_metadata`), so a component
/// swapped between the check and the use is not excluded there.
impl LockDir {
    /// What stands at `name` (never following a symlink: a link is
    /// [`FileKind::Symlink`]); `Ok(None)`: nothing.
    ///
    /// # Errors
    /// An I/O error naming the path.
    pub fn entry(&self, name: &str) -> Result<Option<FileKind>> {
        self.0.entry(name)
    }

    /// Creates the child directory `name` with `mode` (permission bits; the umask applies;
    /// Windows and WASI have no modes) unless it exists, making its name durable (`fsync` of
    /// this directory) when it was created, then opens it as [`child`](Self::child) does: it
    /// must be a real directory.
    ///
    /// # Errors
    /// [`Error::NotDirectory`] when something else stands there, or an I/O error.
    pub fn create_child(&self, name: &str, mode: u32) -> Result<LockDir> {
        self.0.create_child(name, mode).map(LockDir)
    }

    /// Opens the regular file `name` for reading as carefully as a lock file (never
    /// following a final symlink, never blocking on a FIFO, a device refused before it is
    /// opened, close-on-exec): the file and its permission bits (POSIX; 0o644 where there are
    /// none). `Ok(None)`: no such file.
    ///
    /// # Errors
    /// [`Error::NotRegularFile`] for anything but a regular file, or an I/O error.
    pub fn open_read(&self, name: &str) -> Result<Option<(std::fs::File, u32)>> {
        self.0.open_read(name)
    }

    /// Creates the regular file `name` exclusively, for writing, with `mode` (permission
    /// bits; the umask applies): a name that is taken — by a file, a symlink or anything
    /// else — is `Ok(None)`, and nothing standing there is opened or followed. For
    /// temporaries that are renamed into place ([`durable::replace_at`]).
    ///
    /// [`durable::replace_at`]: crate::patterns::durable::replace_at
    ///
    /// # Errors
    /// An I/O error naming the path.
    pub fn create_new(&self, name: &str, mode: u32) -> Result<Option<std::fs::File>> {
        self.0.create_new(name, mode)
    }

    /// Renames the entry `from` of this directory to `to` in `to_dir` (the entries
    /// themselves: a symlink at either name is renamed or replaced, never followed; on
    /// Windows one standing at `to` is refused). `Ok(false)`: `from` did not exist.
    ///
    /// # Errors
    /// An I/O error naming `from`'s path (`to_dir` on another file system, a directory
    /// replacing a file, …).
    pub fn rename(&self, from: &str, to_dir: &LockDir, to: &str) -> Result<bool> {
        existed(self.0.rename(from, &to_dir.0, to))
    }

    /// Removes the entry `name` that is not a directory (a symlink: the link itself).
    /// `Ok(false)`: nothing was there.
    ///
    /// # Errors
    /// An I/O error naming the path (a directory there, no permission, …).
    pub fn remove_file(&self, name: &str) -> Result<bool> {
        existed(self.0.remove(name, false))
    }

    /// Removes the empty directory `name` (never what a symlink points to). `Ok(false)`:
    /// nothing was there.
    ///
    /// # Errors
    /// An I/O error naming the path (not empty, not a directory, …).
    pub fn remove_dir(&self, name: &str) -> Result<bool> {
        existed(self.0.remove(name, true))
    }
}

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
    held: Option<imp::Held>,
    target: imp::Target,
}

impl Lease {
    /// The lease, unless released — or inherited through a `fork` and let go in the child
    /// ([`after_fork_in_child`]).
    fn live(&self) -> Option<&imp::Held> {
        self.held.as_ref().filter(|h| !h.forgotten())
    }

    /// Takes the lease on `path` if it is free right now (default [`LeaseOptions`]).
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("demo.lock");
    /// let lease = leasehold::Lease::try_acquire(&path).unwrap();
    /// assert!(leasehold::Lease::try_acquire(&path).unwrap_err().is_contended());
    /// drop(lease);
    /// assert!(leasehold::Lease::try_acquire(&path).is_ok());
    /// ```
    ///
    /// # Errors
    /// As [`LeaseOptions::try_acquire`].
    pub fn try_acquire(path: impl AsRef<Path>) -> Result<Lease> {
        LeaseOptions::default().try_acquire(path)
    }

    /// Takes the lease on `path`, waiting within `budget` (default [`LeaseOptions`]).
    ///
    /// The waiter sleeps in the kernel's lock queue and gets the lease as soon as, and as
    /// fairly as, a blocking `flock(LOCK_EX)` would, without burning CPU; a cancellation or
    /// deadline ends the wait promptly and leaves nothing held.
    ///
    /// # Errors
    /// As [`LeaseOptions::acquire`].
    pub fn acquire(path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        LeaseOptions::default().acquire(path, budget)
    }

    /// [`Lease::acquire`] for async code: the wait never blocks an executor thread, costs no
    /// thread of its own, and is cancelled by dropping the future. The future owns the
    /// budget (pass it by value, or `&budget` to keep yours), so it can be built inside
    /// `tokio::select!` from a temporary budget:
    ///
    /// ```
    /// # #[cfg(feature = "tokio")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use leasehold::{Budget, Lease};
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("job.lock");
    /// let _holder = Lease::try_acquire(&path).unwrap();
    /// tokio::select! {
    ///     lease = Lease::acquire_async(&path, Budget::unlimited()) => panic!("held: {lease:?}"),
    ///     () = tokio::time::sleep(Duration::from_millis(10)) => {} // gave up: nothing is held
    /// }
    /// # }
    /// # #[cfg(not(feature = "tokio"))]
    /// # fn main() {}
    /// ```
    ///
    /// # Errors
    /// As [`LeaseOptions::acquire`].
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(path: impl AsRef<Path>, budget: impl Into<Budget>) -> Result<Lease> {
        LeaseOptions::default().acquire_async(path, budget).await
    }

    /// The lock file's path (for a lease taken in a [`LockDir`], the directory's path joined
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
    /// or the working directory); a lease taken in a [`LockDir`] adds one per directory of
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
    opts: LeaseOptions,
    target: imp::Target,
    opened: Option<imp::Opened>,
    /// Exclusive for every public handle; shared only for the keyed pattern's collector-lock
    /// handles ([`LeaseOptions::handle_at_mode`]).
    mode: Mode,
}

impl LeaseHandle {
    /// Opens a handle on `path` with default [`LeaseOptions`].
    ///
    /// # Errors
    /// As [`LeaseOptions::open_handle`].
    pub fn open(path: impl AsRef<Path>) -> Result<LeaseHandle> {
        LeaseOptions::default().open_handle(path)
    }

    /// Takes the lease if it is free right now.
    ///
    /// # Errors
    /// As [`LeaseOptions::try_acquire`].
    pub fn try_lock(&mut self) -> Result<HandleGuard<'_>> {
        self.lock(&Budget::no_wait())
    }

    /// Takes the lease, waiting within `budget`.
    ///
    /// # Errors
    /// As [`LeaseOptions::acquire`].
    pub fn lock(&mut self, budget: &Budget) -> Result<HandleGuard<'_>> {
        let acq = Acquisition::new(
            self.opts,
            &self.target,
            budget,
            self.mode,
            // A file this handle kept open before a `fork` is `/dev/null` in the child.
            self.opened.take().filter(|o| !o.forgotten()),
        );
        let held = blocking::run(acq)?;
        Ok(HandleGuard {
            handle: self,
            held: Some(held),
        })
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

/// Who holds the lock file at `path`, without taking, creating or disturbing anything.
///
/// A missing file (or missing parent directory) is [`Holders::Free`]. A final symlink is
/// never followed. On platforms that do not reveal lock holders a present file answers
/// [`Holders::Unknown`].
///
/// # Errors
/// [`Error::NotRegularFile`] for anything but a regular file, [`Error::ParentNotDirectory`]
/// when a component that exists is not a directory, [`Error::PermissionDenied`];
/// [`Error::InvalidPath`] for an empty path or one holding a NUL byte.
pub fn holders(path: impl AsRef<Path>) -> Result<Holders> {
    let path = path.as_ref();
    options::usable(path)?;
    lookup::at_path(path).map_err(|u| Imp::holders_error(path, u))
}

/// Refuses an existing `path` (never following a final symlink) that another user could have
/// prepared: one that belongs to a user other than this process's effective user or root, or
/// that its group or others may write (a sticky, root-owned directory such as `/tmp`
/// excepted) — and so every directory on the way to it, from `/` down, and every symlink on
/// the way (which must belong to this user or root, and is followed). The rule the lease
/// applies to lock files (see [`LeaseOptions::allow_shared_state`]), for the directories and
/// documents a store keeps beside its lock. A missing path is fine. Windows: always `Ok`
/// (ACLs are not judged).
///
/// # Errors
/// [`Error::Untrusted`] naming the path and who else could change it; an I/O error of the
/// look.
pub fn check_trusted(path: impl AsRef<Path>) -> Result<()> {
    Imp::check_trusted(path.as_ref())
}

#[cfg(all(test, unix))]
pub(crate) mod tests {
    /// The pids `holders()` and contention errors name for a lock held by `pids`: Linux reads
    /// them from /proc/locks; the portable build (`--cfg leasehold_portable`, the macOS/BSD
    /// path) cannot tell and names none.
    fn revealed(pids: &[u32]) -> &[u32] {
        if cfg!(leasehold_portable) { &[] } else { pids }
    }

    /// Asserts that nothing holds `path`: `holders()` says so where the OS tells (Linux);
    /// elsewhere (the portable build) a try to take it must succeed.
    fn assert_free(path: &Path) {
        if cfg!(leasehold_portable) {
            drop(Lease::try_acquire(path).expect("free: a try takes it"));
        } else {
            assert_eq!(holders(path).unwrap(), Holders::Free);
        }
    }

    use super::*;
    use crate::budget::CancelToken;
    use crate::kind::FileKind;
    use std::cell::RefCell;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::sync::mpsc;
    use std::time::Duration;
    use std::time::Instant;

    thread_local! {
        static BEFORE_LOCK: RefCell<Option<Box<dyn FnMut()>>> = RefCell::new(None);
    }

    /// Runs the test's hook between open and lock (the window the inode check guards).
    pub(super) fn before_lock_hook() {
        BEFORE_LOCK.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f();
            }
        });
    }

    /// Makes a FIFO without spawning a process where the platform allows: a child forked
    /// from this multi-threaded test process shares every open lock file until it execs, so
    /// other tests' released leases would look held for that moment (flock belongs to the
    /// open file description). rustix has no `mknodat` on macOS; there mkfifo(1) is used.
    pub(crate) fn make_fifo(path: &Path) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        assert!(
            std::process::Command::new("mkfifo")
                .arg(path)
                .status()
                .unwrap()
                .success()
        );
    }

    fn set_hook(f: impl FnMut() + 'static) {
        BEFORE_LOCK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    fn clear_hook() {
        BEFORE_LOCK.with(|h| *h.borrow_mut() = None);
    }

    fn replace(path: &Path) {
        std::fs::remove_file(path).unwrap();
        std::fs::File::create(path).unwrap();
    }

    #[test]
    fn file_replaced_between_open_and_lock_is_detected_and_retried() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("race.lock");
        std::fs::File::create(&path).unwrap();
        let original = std::fs::metadata(&path).unwrap().ino();
        let p = path.clone();
        let mut fired = false;
        set_hook(move || {
            if !fired {
                fired = true;
                replace(&p);
            }
        });
        let lease = Lease::try_acquire(&path).unwrap();
        clear_hook();
        let now = std::fs::metadata(&path).unwrap().ino();
        assert_ne!(now, original, "the hook replaced the file");
        assert_eq!(
            lease.file_id().unwrap().ino,
            now,
            "lease must be on the new file"
        );
        lease.verify().unwrap();
        // The lease really excludes whoever opens the path now.
        assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
    }

    #[test]
    fn a_file_that_keeps_being_replaced_gives_up_after_three_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("churn.lock");
        let p = path.clone();
        set_hook(move || replace(&p));
        let err = Lease::try_acquire(&path).unwrap_err();
        clear_hook();
        assert!(
            matches!(
                err,
                Error::Unstable {
                    attempts: MAX_REOPENS,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn same_process_double_acquisition_contends_and_names_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twice.lock");
        let first = Lease::try_acquire(&path).unwrap();
        let err = Lease::try_acquire(&path).unwrap_err();
        match &err {
            Error::Contended { holders, .. } => {
                assert_eq!(holders.pids(), revealed(&[std::process::id()]))
            }
            other => panic!("expected contention, got {other:?}"),
        }
        drop(first);
        drop(Lease::try_acquire(&path).unwrap());
    }

    #[test]
    fn contention_errors_look_holders_up_only_when_asked() {
        // It observes holders through /proc/locks, which the portable build does not read.
        if cfg!(leasehold_portable) {
            eprintln!(
                "SKIP: contention_errors_look_holders_up_only_when_asked: needs /proc/locks (off in the portable build)"
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lazy.lock");
        let holder = Lease::try_acquire(&path).unwrap();
        let err = Lease::try_acquire(&path).unwrap_err();
        let info = err.holders().expect("contention names its holders").clone();
        // Returning the error read nothing: /proc/locks is costly and stalls other lockers.
        assert_eq!(format!("{info:?}"), "HolderInfo(not looked up)");
        drop(holder);
        // Asked after the release, the answer is the truth at that moment (the portable
        // build cannot tell: Unknown).
        let truth = if cfg!(leasehold_portable) {
            Holders::Unknown
        } else {
            Holders::Free
        };
        assert_eq!(info.get(), &truth);
        let again = Lease::try_acquire(&path).unwrap();
        let err = Lease::try_acquire(&path).unwrap_err();
        // In-process contention names this process, not "another process (pid <ours>)".
        let msg = err.to_string();
        assert!(
            msg.contains("held by this process (another lease of it);"),
            "{msg}"
        );
        assert!(!msg.contains("another process"), "{msg}");
        drop(again);
    }

    #[test]
    fn state_other_users_could_have_prepared_is_refused_unless_shared_state_is_allowed() {
        use std::fs::Permissions;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.lock");
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o620)).unwrap();
        let err = Lease::try_acquire(&path).unwrap_err();
        assert!(
            matches!(&err, Error::Untrusted { path: p, reason } if *p == path
                && reason == "may be written by its group (mode 0620)"),
            "{err:?}"
        );
        assert!(err.is_unusable_path());
        assert_eq!(
            std::fs::metadata(&path).unwrap().mode() & 0o7777,
            0o620,
            "untouched"
        );
        drop(
            LeaseOptions::new()
                .allow_shared_state(true)
                .try_acquire(&path)
                .expect("opted in"),
        );
        // Directories: world-writable is refused, unless sticky and root-owned (as /tmp).
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, Permissions::from_mode(0o777)).unwrap();
        let err = check_trusted(&open).unwrap_err();
        assert!(
            err.to_string()
                .contains("may be written by group and others"),
            "{err}"
        );
        std::fs::set_permissions(&open, Permissions::from_mode(0o1777)).unwrap();
        let sticky = check_trusted(&open);
        if rustix::process::geteuid().is_root() {
            sticky.expect("a sticky directory owned by root");
        } else {
            assert!(sticky.is_err(), "sticky but not root's");
        }
        check_trusted(dir.path().join("missing")).expect("nothing there");
        // A symlink's own mode (0777) is not judged.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/nonexistent", &link).unwrap();
        check_trusted(&link).expect("a symlink's mode means nothing");
    }

    #[test]
    fn release_is_idempotent_and_drop_releases() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rel.lock");
        let mut lease = Lease::try_acquire(&path).unwrap();
        lease.release();
        lease.release();
        assert!(!lease.is_held());
        assert!(matches!(lease.verify(), Err(Error::Released { .. })));
        let again = Lease::try_acquire(&path).unwrap();
        drop(again);
        drop(Lease::try_acquire(&path).unwrap());
        assert!(path.exists(), "a lock file is never removed");
    }

    #[test]
    fn verify_reports_unlinked_and_replaced_lock_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.lock");
        let lease = Lease::try_acquire(&path).unwrap();
        lease.verify().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(lease.verify(), Err(Error::LeaseLost { .. })));
        std::fs::File::create(&path).unwrap();
        assert!(matches!(lease.verify(), Err(Error::LeaseLost { .. })));
    }

    #[test]
    fn creates_file_0600_and_parents_0700_and_preserves_existing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/new.lock");
        drop(Lease::try_acquire(&path).unwrap());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&dir.path().join("a/b")), 0o700);

        let existing = dir.path().join("existing.lock");
        std::fs::write(&existing, b"keep me").unwrap();
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(Lease::try_acquire(&existing).unwrap());
        assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
        assert_eq!(mode(&existing), 0o644);
    }

    #[test]
    fn hostile_paths_are_refused_without_following_or_changing_anything() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("link.lock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let dangling = dir.path().join("dangling.lock");
        std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
        let fifo = dir.path().join("fifo.lock");
        make_fifo(&fifo);
        let sock = dir.path().join("sock.lock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let subdir = dir.path().join("dir.lock");
        std::fs::create_dir(&subdir).unwrap();
        let cases: [(&Path, FileKind); 6] = [
            (&link, FileKind::Symlink),
            (&dangling, FileKind::Symlink),
            (&fifo, FileKind::Fifo),
            (&sock, FileKind::Socket),
            (Path::new("/dev/null"), FileKind::CharDevice),
            (&subdir, FileKind::Directory),
        ];
        for (path, want) in cases {
            for budget in [Budget::no_wait(), Budget::timeout(Duration::from_secs(5))] {
                match LeaseOptions::new().acquire(path, &budget) {
                    Err(Error::NotRegularFile { kind, path: p }) => {
                        assert_eq!(kind, want, "{}", path.display());
                        assert_eq!(p, path);
                    }
                    other => panic!("{}: expected refusal, got {other:?}", path.display()),
                }
            }
            assert!(matches!(holders(path), Err(Error::NotRegularFile { .. })));
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(
            std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert!(
            !dir.path().join("nothing").exists(),
            "dangling link not followed"
        );
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(
            Lease::try_acquire(file.join("under.lock")),
            Err(Error::ParentNotDirectory { .. })
        ));
        assert_eq!(std::fs::read(&file).unwrap(), b"x");
    }

    #[test]
    fn holders_names_this_process_and_free_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.lock");
        assert_eq!(holders(&path).unwrap(), Holders::Free);
        assert_eq!(
            holders(dir.path().join("no/such/parent")).unwrap(),
            Holders::Free
        );
        assert!(!path.exists(), "holders() creates nothing");
        let lease = Lease::try_acquire(&path).unwrap();
        let expected = if cfg!(leasehold_portable) {
            Holders::Unknown
        } else {
            Holders::Held {
                pids: vec![std::process::id()],
            }
        };
        assert_eq!(holders(&path).unwrap(), expected);
        // Looking does not disturb: the lease is still held and still excludes.
        lease.verify().unwrap();
        assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
        drop(lease);
        assert_free(&path);
    }

    #[test]
    fn a_waiter_takes_over_when_the_holder_releases() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.lock");
        let holder = Lease::try_acquire(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        let p = path.clone();
        let waiter = std::thread::spawn(move || {
            tx.send(()).unwrap();
            Lease::acquire(&p, &Budget::timeout(Duration::from_secs(30)))
        });
        rx.recv().unwrap();
        drop(holder);
        let lease = waiter.join().unwrap().expect("waiter gets the lease");
        lease.verify().unwrap();
    }

    #[test]
    fn cancellation_from_another_thread_ends_the_wait_and_leaves_nothing_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.lock");
        let mut holder = Lease::try_acquire(&path).unwrap();
        let token = CancelToken::new();
        let budget = Budget::unlimited().with_cancel(token.clone());
        let p = path.clone();
        let waiter = std::thread::spawn(move || Lease::acquire(&p, &budget));
        token.cancel();
        let res = waiter.join().unwrap();
        assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
        holder.release();
        // Nothing of the abandoned waiter holds the lease: it is free at once.
        assert_free(&path);
        drop(Lease::try_acquire(&path).unwrap());
    }

    #[test]
    fn timeout_gives_up_reports_the_holder_and_leaves_nothing_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.lock");
        let mut holder = Lease::try_acquire(&path).unwrap();
        let started = Instant::now();
        let err = Lease::acquire(&path, &Budget::timeout(Duration::from_millis(150))).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(150));
        match &err {
            Error::TimedOut { holders, .. } => {
                assert_eq!(holders.pids(), revealed(&[std::process::id()]))
            }
            other => panic!("expected timeout, got {other:?}"),
        }
        holder.release();
        assert_free(&path);
        drop(Lease::try_acquire(&path).unwrap());
    }

    #[test]
    fn waiting_for_a_missing_file_that_must_not_be_created_fails_without_creating() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.lock");
        let err = LeaseOptions::new()
            .create(false)
            .try_acquire(&path)
            .unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
        assert!(!path.exists());
    }

    #[test]
    fn lease_handle_reacquires_excludes_and_follows_a_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("warm.lock");
        let mut handle = LeaseHandle::open(&path).unwrap();
        for _ in 0..100 {
            let lease = handle.try_lock().unwrap();
            lease.verify().unwrap();
            assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
            lease.release();
            drop(Lease::try_acquire(&path).unwrap());
        }
        {
            let cold = Lease::try_acquire(&path).unwrap();
            assert!(handle.try_lock().unwrap_err().is_contended());
            drop(cold);
        }
        replace(&path);
        let lease = handle.try_lock().unwrap();
        lease
            .verify()
            .expect("the handle followed the path to the new file");
        assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
        drop(lease);
        assert_free(&path);
    }

    #[test]
    fn lock_dir_follows_a_symlinked_root_but_never_a_symlinked_child() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::fs::write(real.join("file"), b"x").unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("alias")).unwrap();
        std::os::unix::fs::symlink(real.join("sub"), real.join("linked")).unwrap();
        let root =
            LockDir::open(dir.path().join("alias")).expect("a configured root may be a link");
        root.child("sub", false).expect("a real child directory");
        match root.child("linked", true) {
            Err(Error::NotDirectory { kind, path }) => {
                assert_eq!(kind, FileKind::Symlink);
                assert!(path.ends_with("linked"));
            }
            other => panic!("a symlinked child must be refused, got {other:?}"),
        }
        assert!(matches!(
            root.child("file", true),
            Err(Error::NotDirectory {
                kind: FileKind::Regular,
                ..
            })
        ));
        assert_eq!(std::fs::read(real.join("file")).unwrap(), b"x");
        assert!(
            std::fs::symlink_metadata(real.join("linked"))
                .unwrap()
                .is_symlink()
        );
    }

    #[test]
    fn lock_dir_leases_stay_locked_but_fail_verify_once_the_directory_is_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let ld = LockDir::create(&root).unwrap();
        let lease = LeaseOptions::new().try_acquire_at(&ld, "k.lock").unwrap();
        lease.verify().expect("in place");
        let moved = dir.path().join("moved");
        std::fs::rename(&root, &moved).unwrap();
        // Newcomers resolving `root` reach something else: the lease no longer excludes them.
        assert!(
            matches!(lease.verify(), Err(Error::LeaseLost { ref path }) if *path == root),
            "{:?}",
            lease.verify()
        );
        // The lock itself stays held on the file that moved.
        let err = LeaseOptions::new()
            .try_acquire(moved.join("k.lock"))
            .unwrap_err();
        assert!(err.is_contended(), "{err:?}");
        assert!(LeaseOptions::new().try_acquire_at(&ld, "../x").is_err());
        assert!(LeaseOptions::new().try_acquire_at(&ld, "a/b").is_err());
    }
}
