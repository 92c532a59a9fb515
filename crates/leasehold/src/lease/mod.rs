//! The lease primitive: an exclusive (or shared), kernel-arbitrated lock, documented once here
//! over a private per-platform implementation (`posix/`: `flock` on a lock file;
//! `windows.rs`: a named kernel semaphore; `single.rs`: WASI, which has no inter-process
//! lock, where a lease is the in-process claim alone and only behind
//! [`LeaseOptions::single_process`]), each of which meets the one contract of `platform.rs`
//! (`os.rs` picks this build's).
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
//!
//! The files, each depending only on those listed before it: `claim.rs` (the in-process
//! claim table), `platform.rs` (the contract and `PlatformOptions`), the platform files,
//! `os.rs` (this build's platform), `wait.rs` (one acquisition's decisions) and its drivers
//! `blocking.rs` and `asynchronous.rs`, `lock_dir.rs` ([`LockDir`]), `held.rs` ([`Lease`],
//! [`LeaseHandle`]), `shared.rs` ([`SharedLease`]), `options.rs` ([`LeaseOptions`]: every
//! way of taking a lease), `any.rs` ([`AnyLease`]); this file names the public items and
//! gives the lease values their default-options constructors.

use std::path::Path;

use crate::budget::Budget;
use crate::error::Result;
use crate::holders as lookup;
use crate::kind::Holders;

mod any;
#[cfg(feature = "tokio")]
mod asynchronous;
mod blocking;
pub(crate) mod claim;
mod held;
mod lock_dir;
mod options;
mod os;
mod platform;
#[cfg(unix)]
mod posix;
mod shared;
#[cfg(target_os = "wasi")]
mod single;
mod wait;
#[cfg(windows)]
mod windows;

use os::Imp;
#[cfg(unix)]
use os::imp;
use platform::Platform;

pub use any::AnyLease;
pub use held::{HandleGuard, Lease, LeaseHandle};
pub use lock_dir::LockDir;
pub use options::{LeaseOptions, SharedMount};
#[cfg(unix)]
pub use shared::unlock_descriptor;
pub use shared::{LockMode, SharedLease};
pub use wait::MAX_REOPENS;

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
/// An inherited [`RecordLease`](crate::RecordLease) says the same in any process but the one
/// that took it, with or without this call, and its release or drop there leaves the
/// parent's baton alone.
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

/// The default-options constructors of the lease values (each is [`LeaseOptions::default`]
/// and the method of [`LeaseOptions`] it names).
impl Lease {
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
}

impl LeaseHandle {
    /// Opens a handle on `path` with default [`LeaseOptions`].
    ///
    /// # Errors
    /// As [`LeaseOptions::open_handle`].
    pub fn open(path: impl AsRef<Path>) -> Result<LeaseHandle> {
        LeaseOptions::default().open_handle(path)
    }
}

impl SharedLease {
    /// Takes a shared lease on `path` if no exclusive holder has it and no exclusive waiter
    /// is queued for it right now (default [`LeaseOptions`]).
    ///
    /// # Errors
    /// As [`LeaseOptions::try_acquire`].
    pub fn try_acquire(path: impl AsRef<Path>) -> Result<SharedLease> {
        LeaseOptions::default().try_acquire_shared(path)
    }

    /// Takes a shared lease on `path`, waiting within `budget` (default [`LeaseOptions`]).
    ///
    /// # Errors
    /// As [`LeaseOptions::acquire`].
    pub fn acquire(path: impl AsRef<Path>, budget: &Budget) -> Result<SharedLease> {
        LeaseOptions::default().acquire_shared(path, budget)
    }

    /// [`SharedLease::acquire`] for async code (see [`Lease::acquire_async`](super::Lease::acquire_async)).
    ///
    /// # Errors
    /// As [`LeaseOptions::acquire`].
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        path: impl AsRef<Path>,
        budget: impl Into<Budget>,
    ) -> Result<SharedLease> {
        LeaseOptions::default()
            .acquire_shared_async(path, budget)
            .await
    }
}

/// Who holds the lock file at `path`, without taking, creating or disturbing anything.
///
/// A missing file (or missing parent directory) is [`Holders::Free`]. A final symlink is
/// never followed. On platforms that do not reveal lock holders a present file answers
/// [`Holders::Unknown`].
///
/// # Errors
/// [`Error::NotRegularFile`](crate::Error::NotRegularFile) for anything but a regular file, [`Error::ParentNotDirectory`](crate::Error::ParentNotDirectory)
/// when a component that exists is not a directory, [`Error::PermissionDenied`](crate::Error::PermissionDenied);
/// [`Error::InvalidPath`](crate::Error::InvalidPath) for an empty path or one holding a NUL byte.
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
/// [`Error::Untrusted`](crate::Error::Untrusted) naming the path and who else could change it; an I/O error of the
/// look.
pub fn check_trusted(path: impl AsRef<Path>) -> Result<()> {
    Imp::check_trusted(path.as_ref())
}

#[cfg(all(test, unix))]
pub(crate) mod tests;
