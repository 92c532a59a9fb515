//! The contract every platform file meets (`posix/`, `windows.rs`, `single.rs`), written
//! once: the traits below, the outcome of a try ([`Attempt`]) and what a platform is told of
//! the caller's options ([`PlatformOptions`]). The platform files depend on this file and on
//! `claim.rs` alone; everything above them reaches them through it.

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::claim::{Claim, Key, Mode};
use crate::error::{Error, Result};
use crate::holders::Unusable;
use crate::kind::{FileId, FileKind};
use crate::sys::Notifier;

/// What a platform is told of the caller's [`LeaseOptions`](crate::LeaseOptions): the
/// options build it (`options.rs`) and pass it down, so that a platform file needs nothing
/// from the layers above it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlatformOptions {
    /// A missing lock file is created.
    pub(crate) create: bool,
    /// Missing parent directories are created.
    pub(crate) create_parents: bool,
    /// Network, FUSE and overlay file systems are accepted.
    #[cfg_attr(target_os = "wasi", allow(dead_code))]
    pub(crate) allow_network_fs: bool,
    /// State that other users could have prepared is accepted (the ownership rule is off).
    #[cfg_attr(not(unix), allow(dead_code))]
    pub(crate) allow_shared_state: bool,
    /// A lease may be the in-process claim alone (WASI).
    #[cfg_attr(not(target_os = "wasi"), allow(dead_code))]
    pub(crate) single_process: bool,
}

/// The contract every platform file meets — `posix/` (`flock` on a lock file),
/// `windows.rs` (a named kernel semaphore), `single.rs` (WASI: the in-process claim alone)
/// — written once, so that the compiler checks each of them against it, the way
/// parking_lot's `ThreadParkerT` does for its per-platform parkers.
///
/// Everything above the platform — the public types of this module, the decisions of a
/// wait (`wait.rs`) and its two drivers (`blocking.rs`, `asynchronous.rs`), the shared
/// leases (`shared.rs`) and the options (`options.rs`) — reaches it only through this
/// trait, [`PlatformDir`], [`PlatformTarget`], [`PlatformOpened`] and [`PlatformHeld`], and
/// the per-platform extras that are `#[cfg]` by nature (POSIX: `Dir::as_fd`, `Held::as_fd`,
/// `Target::descriptor`, `open_descriptor` and `path_error`, for descriptors, inheritance
/// and [`LeaseOptions::lock_descriptor`](crate::LeaseOptions::lock_descriptor); Windows: `Dir::real_path`, `Target::object_name`).
/// Whatever else a platform file holds is private to it.
///
/// One acquisition, in order (the module documentation states the guarantees): [`open`]
/// (refuse anything but a regular file) → the in-process claim (`claim.rs`) →
/// [`try_lock`] (one non-blocking lock, then the inode check) → when busy, a wait in the
/// kernel's queue ([`start_wait`] and [`poll_wait`], or [`lock_inline`] where only a grant
/// can end the wait; a platform without a queue gives the file back and the waiter polls)
/// → [`accept`] (the inode check of a grant) → [`verify`] while held → release by dropping
/// the [`Held`](Self::Held).
///
/// [`open`]: Self::open
/// [`try_lock`]: Self::try_lock
/// [`start_wait`]: Self::start_wait
/// [`poll_wait`]: Self::poll_wait
/// [`lock_inline`]: Self::lock_inline
/// [`accept`]: Self::accept
/// [`verify`]: Self::verify
pub(crate) trait Platform: Sized {
    /// Whether a waiter is woken by its notifier alone (POSIX: the kernel-wait helper, a
    /// releasing lease of this process or a cancellation pokes it). Elsewhere waiters also
    /// poll with back-off: nothing announces a destroyed Windows object, and WASI's one
    /// thread cannot be woken while it sleeps.
    const NOTIFIES: bool;

    /// An opened directory: what [`LockDir`](crate::LockDir) wraps.
    type Dir: PlatformDataDir;
    /// Where a lock is: a path, or a name in a [`Self::Dir`].
    type Target: PlatformTarget<Dir = Self::Dir>;
    /// A lock opened for locking, not yet locked (what a [`LeaseHandle`](crate::LeaseHandle) keeps between
    /// leases).
    type Opened: PlatformOpened;
    /// A held lease. Dropping it releases, by closing: never by unlocking an open file
    /// description that a child may share.
    type Held: PlatformHeld<Opened = Self::Opened>;
    /// A lock the kernel granted a waiter, not yet checked against the path.
    type Granted;
    /// A wait in the kernel's own lock queue; dropping it abandons the wait, and nothing of
    /// ours holds the lease afterwards.
    type KernelWait;
    /// Opens the lock, refusing anything but a regular file (and whatever `opts` refuse).
    fn open(opts: &PlatformOptions, target: &Self::Target) -> Result<Self::Opened>;

    /// One non-blocking try under a granted claim: lock, then check that the locked inode
    /// is still the file at the path. `may_wait`: the caller waits if this is busy.
    fn try_lock(
        target: &Self::Target,
        opened: Self::Opened,
        claim: Claim,
        mode: Mode,
        may_wait: bool,
    ) -> Result<Attempt<Self>>;

    /// A granted lock becomes a held lease if its inode is still the file at the path;
    /// `Ok(None)` (the lock dropped) when the file was replaced.
    fn accept(
        target: &Self::Target,
        granted: Self::Granted,
        claim: Claim,
    ) -> Result<Option<Self::Held>>;

    /// Blocks this thread in the kernel's queue: only for a wait that nothing but the grant
    /// can end (no deadline, no cancellation token), and only where [`NOTIFIES`] holds.
    /// When a signal handler interrupts it (`EINTR`), `interrupted` is asked on this thread:
    /// `Continue` blocks again in the same place in line, `Break` ends the wait with
    /// `Ok(None)` — nothing held, no gate held, the lock not granted.
    ///
    /// [`NOTIFIES`]: Self::NOTIFIES
    fn lock_inline(
        target: &Self::Target,
        opened: Self::Opened,
        mode: Mode,
        interrupted: &dyn Fn() -> std::ops::ControlFlow<()>,
    ) -> Result<Option<Self::Granted>>;

    /// Starts (or adopts) a wait in the kernel's queue that `notifier` announces the end of;
    /// `Err` gives the file back where the platform has no such queue (the waiter polls).
    fn start_wait(
        target: &Self::Target,
        opened: Self::Opened,
        mode: Mode,
        notifier: Arc<Notifier>,
    ) -> std::result::Result<Self::KernelWait, Self::Opened>;

    /// The grant, once the kernel made it; the error if the wait failed; `None` meanwhile.
    fn poll_wait(wait: &Self::KernelWait, target: &Self::Target) -> Option<Result<Self::Granted>>;

    /// Where a busy try of `opened` was held up, if not at the lock itself (POSIX: a
    /// shared-mode gate another process holds): that file, as messages name it, for the
    /// error that ends a try-once there ([`Error::GateHeld`]). Default: at the lock.
    fn busy_at(_target: &Self::Target, _opened: &Self::Opened) -> Option<PathBuf> {
        None
    }

    /// Where a kernel wait is blocked, if not at the lock itself (as [`busy_at`]), for the
    /// error that ends a wait there.
    ///
    /// [`busy_at`]: Self::busy_at
    fn waiting_at(_target: &Self::Target, _wait: &Self::KernelWait) -> Option<PathBuf> {
        None
    }

    /// Whether the inode `id` is still the file at the path (else a waiter follows the
    /// path).
    fn still_at_path(target: &Self::Target, id: Option<FileId>) -> bool;

    /// Whether the file a kernel wait is queued on has no name left (unlinked, or renamed
    /// over): its holder may hold it for as long as it likes, while a newcomer locks the
    /// file now at the path, so a waiter queued on it leaves and follows the path (asked on
    /// a slow timer: see `wait.rs`). Default: never (no kernel queue).
    fn orphaned(_wait: &Self::KernelWait) -> bool {
        false
    }

    /// Checks that a held lease still stands for its path ([`Error::LeaseLost`] if not).
    fn verify(target: &Self::Target, held: &Self::Held) -> Result<()>;

    /// Removes a held lease's lock file if the path still names the locked inode (`Ok(true)`:
    /// removed): the keyed collector's protocol, nothing else.
    fn unlink_held(target: &Self::Target, held: &Self::Held) -> Result<bool>;

    /// The modification time of a held lease's lock file.
    fn modified(target: &Self::Target, held: &Self::Held) -> Result<SystemTime>;

    /// See [`check_trusted`](crate::check_trusted).
    fn check_trusted(path: &Path) -> Result<()>;

    /// The error naming `path` for a failed holder look-up.
    fn holders_error(path: &Path, u: Unusable) -> Error;
}

/// An opened directory of a [`Platform`]: the inside of [`LockDir`](crate::LockDir), whose methods document
/// each of these.
pub(crate) trait PlatformDir: Sized + Clone + Debug {
    /// See [`LockDir::open`](crate::LockDir::open).
    fn open(path: &Path) -> Result<Self>;
    /// See [`LockDir::create`](crate::LockDir::create).
    fn create(path: &Path) -> Result<Self>;
    /// See [`LockDir::child`](crate::LockDir::child).
    fn child(&self, name: &str, create: bool) -> Result<Self>;
    /// See [`LockDir::has_lock_file`](crate::LockDir::has_lock_file).
    fn has_lock_file(&self, name: &str) -> Result<bool>;
    /// See [`LockDir::path`](crate::LockDir::path).
    fn path(&self) -> &Path;
    /// See [`LockDir::open_file`](crate::LockDir::open_file).
    fn open_file(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool)>>;
    /// See [`LockDir::sync`](crate::LockDir::sync).
    fn sync(&self) -> std::io::Result<()>;
    /// See [`LockDir::verify`](crate::LockDir::verify).
    fn verify(&self) -> Result<()>;
    /// See [`LockDir::names`](crate::LockDir::names).
    fn names(&self) -> Result<Vec<std::ffi::OsString>>;
}

/// The data half of a [`PlatformDir`]: the files and directories a store keeps below a
/// directory handle, reached through it one component at a time and never through a
/// symlink. [`LockDir`](crate::LockDir)'s methods of the same names document each of these; the platform
/// files implement them beside their directory handle (`posix/data.rs`, `windows.rs`,
/// `single.rs`).
pub(crate) trait PlatformDataDir: PlatformDir {
    /// See [`LockDir::entry`](crate::LockDir::entry).
    fn entry(&self, name: &str) -> Result<Option<FileKind>>;
    /// See [`LockDir::create_child`](crate::LockDir::create_child).
    fn create_child(&self, name: &str, mode: u32) -> Result<Self>;
    /// See [`LockDir::open_read`](crate::LockDir::open_read).
    fn open_read(&self, name: &str) -> Result<Option<(std::fs::File, u32)>>;
    /// See [`LockDir::create_new`](crate::LockDir::create_new).
    fn create_new(&self, name: &str, mode: u32) -> Result<Option<std::fs::File>>;
    /// See [`LockDir::rename`](crate::LockDir::rename); a missing `from` is [`Error::NotFound`].
    fn rename(&self, from: &str, to_dir: &Self, to: &str) -> Result<()>;
    /// See [`LockDir::remove_file`](crate::LockDir::remove_file), and [`LockDir::remove_dir`](crate::LockDir::remove_dir) with `dir`; a missing entry
    /// is [`Error::NotFound`].
    fn remove(&self, name: &str, dir: bool) -> Result<()>;
}

/// Where a lock of a [`Platform`] is.
pub(crate) trait PlatformTarget: Sized + Clone + Debug {
    /// The platform's directory handle.
    type Dir;
    /// A lock file at `path` (resolved against the working directory).
    fn path(opts: &PlatformOptions, path: &Path) -> Result<Self>;
    /// The lock file `name` in `dir`; a `name` that is not one plain component is refused.
    fn at(opts: &PlatformOptions, dir: &Self::Dir, name: &str) -> Result<Self>;
    /// The same lock without the shared leases' gate (for an internal lock whose exclusive
    /// holder waits only a moment: the keyed namespace's collector lock).
    fn without_gate(self) -> Self;
    /// The same lock, not checked against its path once locked: only for the keyed
    /// namespace's collector lock as its kept descriptors take it (see
    /// `LeaseOptions::handle_at_mode`).
    fn unchecked(self) -> Self;
    /// How messages name the lock.
    fn display(&self) -> &Path;
}

/// A lock of a [`Platform`] opened for locking, not yet locked.
pub(crate) trait PlatformOpened: Debug {
    /// The in-process claim table's key (see `claim.rs`).
    fn key(&self) -> Key;
    /// The identity of the opened inode (`None` where a lease is no file: Windows).
    fn file_id(&self) -> Option<FileId>;
    /// Whether it was opened before a `fork` and let go in the child
    /// ([`after_fork_in_child`](crate::after_fork_in_child())): never to be locked again.
    fn forgotten(&self) -> bool {
        false
    }
}

/// A held lease of a [`Platform`].
pub(crate) trait PlatformHeld: Debug {
    /// What an unlock without closing gives back.
    type Opened;
    /// The identity of the locked inode (`None` where a lease is no file: Windows).
    fn file_id(&self) -> Option<FileId>;
    /// Whether other processes wait for this lease, where that is cheap to tell (else
    /// `false`): a [`LeaseHandle`](crate::LeaseHandle) then closes instead of unlocking, so they get their turn.
    fn others_waiting(&self) -> bool;
    /// Unlocks without closing, giving back the still-open lock for the next try; `None`
    /// when it was closed instead. Only for a [`LeaseHandle`](crate::LeaseHandle)'s lease, whose open file
    /// description nobody else holds.
    fn unlock_keep(self) -> Option<Self::Opened>;
    /// Whether this is a copy a forked child inherited and let go
    /// (`leasehold::after_fork_in_child`): its lease object says it is not held.
    fn forgotten(&self) -> bool {
        false
    }
}

/// The outcome of one non-blocking try ([`Platform::try_lock`]). Not every platform makes
/// every outcome: a Windows object cannot be replaced under us, and on WASI the claim is
/// the lock, so a claimed try is never busy.
#[cfg_attr(not(unix), allow(dead_code))]
pub(crate) enum Attempt<P: Platform> {
    /// The lease is ours.
    Acquired(P::Held),
    /// Someone else holds it: the file and the claim, to wait with.
    Busy(P::Opened, Claim),
    /// The lock file was replaced between open and lock: reopen.
    Replaced,
}
