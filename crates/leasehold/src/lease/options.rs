//! Options for taking a lease, and every way of taking one with them: exclusive and shared
//! leases, on a path or in a [`LockDir`], blocking or async, handles and caller's
//! descriptors. The options are the same on every platform; what they mean there is said in
//! each method's documentation.

use std::path::Path;

#[cfg(unix)]
use std::os::fd::{AsRawFd, BorrowedFd};

use super::blocking;
use super::claim::Mode;
use super::held::{Lease, LeaseHandle};
use super::lock_dir::LockDir;
use super::os::{Imp, imp};
use super::platform::{Platform, PlatformOptions, PlatformTarget};
#[cfg(unix)]
use super::shared::LockMode;
use super::shared::SharedLease;
use super::wait::Acquisition;
use crate::budget::Budget;
use crate::error::Error;
use crate::error::Result;

/// Options for taking a lease. `LeaseOptions::default()` accepts a missing lock file
/// (creating it, mode 0600, on POSIX), creates missing parent directories, refuses network,
/// FUSE and overlay file systems, refuses an existing lock file — or a lock file's
/// directory — that another user owns or may write, and refuses to lease at all where the
/// platform has no lock other processes honour (WebAssembly/WASI: see
/// [`single_process`](Self::single_process)).
#[derive(Debug, Clone, Copy)]
pub struct LeaseOptions {
    pub(crate) create: bool,
    pub(crate) create_parents: bool,
    pub(crate) allow_network_fs: bool,
    pub(crate) allow_shared_state: bool,
    pub(crate) single_process: bool,
    /// Whether a lock file replaced under a try or a wait is followed (reopened, up to
    /// `MAX_REOPENS` times); see [`follow_replaced`](Self::follow_replaced).
    pub(crate) follow_replaced: bool,
    /// What [`acquire_mount_lease`](Self::acquire_mount_lease) does on a mount whose locks
    /// stay on each host; see [`on_shared_mount`](Self::on_shared_mount).
    pub(crate) shared_mount: SharedMount,
}

/// What an exclusive [`acquire_mount_lease`](LeaseOptions::acquire_mount_lease) does on a
/// mount whose kernel locks stay on each host ([`MountLocks::HostOnly`](crate::MountLocks::HostOnly):
/// NFS with `local_lock=all|flock` or `nolock`, SMB with `nobrl`, sshfs and most FUSE),
/// where two hosts would both get the kernel's lock. Set with
/// [`LeaseOptions::on_shared_mount`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SharedMount {
    /// Refuse, as every network file system is refused
    /// ([`Error::NetworkFilesystem`], naming both opt-ins), unless
    /// [`allow_network_filesystem`](LeaseOptions::allow_network_filesystem) takes the
    /// kernel's lock anyway. The default.
    #[default]
    Refuse,
    /// Take a [`RecordLease`](crate::RecordLease) with this TTL (POSIX): a lease built on
    /// `rename` alone, which excludes processes on every host sharing the directory, carries
    /// a fencing token, and ends a TTL after its holder stopped renewing (at once for a
    /// holder of this host whose process is gone). See docs/network-fs.md for what it
    /// guarantees. Elsewhere (Windows, WASI) it changes nothing.
    Record {
        /// The holder's TTL: what each renewal (every third of it) buys, and how long a
        /// waiter on another host waits past a holder that stopped renewing. Raised to 30 ms,
        /// lowered to a day.
        ttl: std::time::Duration,
    },
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            create: true,
            create_parents: true,
            allow_network_fs: false,
            allow_shared_state: false,
            single_process: false,
            follow_replaced: true,
            shared_mount: SharedMount::Refuse,
        }
    }
}

impl LeaseOptions {
    /// The defaults: accept a missing lock file, create missing parents, refuse network file
    /// systems.
    pub fn new() -> LeaseOptions {
        LeaseOptions::default()
    }

    /// With `false`, a missing lock file is [`Error::NotFound`] — used where only a known key
    /// may allocate a lock file. With `true` (the default) a missing file is created with mode
    /// 0600 on POSIX; on Windows it is never created, because there the lease is a named
    /// kernel object, not the file.
    #[must_use]
    pub fn create(mut self, create: bool) -> LeaseOptions {
        self.create = create;
        self
    }

    /// Whether missing parent directories of a path are created (mode 0700 on POSIX). On
    /// Windows the parent must exist before locking: its real path is part of the lock's name.
    #[must_use]
    pub fn create_parents(mut self, create: bool) -> LeaseOptions {
        self.create_parents = create;
        self
    }

    /// Allows lock files on network, FUSE and overlay file systems (NFS, SMB/CIFS, AFS, Coda,
    /// FUSE: sshfs, bindfs, ...; overlayfs; UNC paths and mapped drives on Windows). Off by
    /// default: `flock` there may block forever even with `LOCK_NB`, or fail to exclude
    /// other clients or other paths (a bindfs mount and its backing path do not exclude
    /// each other, nor do an overlay's merged path and its upper or lower directory), and a
    /// Windows kernel object excludes only processes on this machine. The refusal comes
    /// before anything is created on the mount (the lock file, missing parents).
    ///
    /// An overlay (Linux) is refused only where this mount namespace can reach one of its
    /// upper or lower directories (as its line in `/proc/self/mountinfo` names them), or
    /// cannot tell (no mountinfo; layer paths relative to the mounter's working
    /// directory): a Docker or Podman container's root file system is an overlay whose
    /// layers only the host sees, so every process that can take the lock goes through the
    /// merged path, and it is accepted without opting in. Opting in is your statement that
    /// your mount's locking is sound — for an overlay whose layers are reachable, that
    /// every user of the lock goes through the merged path. The CLI opts in with
    /// `LEASEHOLD_ALLOW_NETWORK_FS=1`.
    #[must_use]
    pub fn allow_network_filesystem(mut self, allow: bool) -> LeaseOptions {
        self.allow_network_fs = allow;
        self
    }

    /// Accepts an existing lock file, or a directory on the way to it (its own or any above
    /// it, from `/` down), that belongs to another user (neither this process's effective
    /// user nor root) or that its group or others may write (a directory: unless it is
    /// sticky and root's, as `/tmp` is), and a symlink on the way that another user owns.
    /// Off by default, as OpenSSH's StrictModes: the owner of a lock file can unlink it while
    /// you hold it, and whoever may write a directory on the way can rename the lock file (or
    /// a directory holding it) away, as the owner of a symlink on the way can re-point it,
    /// after which a second process locks a new file and both believe they hold the lease;
    /// anyone who may write the file can do the same. All are checked before anything is
    /// created. With the opt-in, [`Lease::verify`](crate::Lease::verify) still reports a
    /// lock so moved away (the stores call it before every write; `leasehold run` checks it
    /// while COMMAND runs). Turn it on only where
    /// several users share the lock on purpose (a group-writable lock file in a shared
    /// directory). The shared-mode gate files beside a lock file follow the rule whatever
    /// this option says, and one that fails it is ignored rather than refused (it costs
    /// fairness only; see [`SharedLease`]). POSIX only; the CLI opts in with
    /// `LEASEHOLD_ALLOW_SHARED=1`.
    #[must_use]
    pub fn allow_shared_state(mut self, allow: bool) -> LeaseOptions {
        self.allow_shared_state = allow;
        self
    }

    /// What an exclusive [`acquire_mount_lease`](Self::acquire_mount_lease) or
    /// [`try_acquire_mount_lease`](Self::try_acquire_mount_lease) does when the lock path's
    /// mount keeps kernel locks on each host ([`MountLocks::of`](crate::MountLocks::of) says
    /// `HostOnly`): [`SharedMount::Refuse`] (the default) or [`SharedMount::Record`], which
    /// returns a [`MountLease::Record`](crate::MountLease::Record). The mount is classified at
    /// each such acquisition; a local or cross-host mount gets the kernel's lease as
    /// without the option (a cross-host network mount still needs
    /// [`allow_network_filesystem`](Self::allow_network_filesystem)). Shared leases and the
    /// other acquisitions ([`acquire`](Self::acquire), handles, [`LockDir`]) never take a
    /// record lease. The CLI's `run` sets it with `LEASEHOLD_SHARED_MOUNT=record:SECS`.
    #[must_use]
    pub fn on_shared_mount(mut self, choice: SharedMount) -> LeaseOptions {
        self.shared_mount = choice;
        self
    }

    /// What [`on_shared_mount`](Self::on_shared_mount) set.
    pub fn shared_mount(&self) -> SharedMount {
        self.shared_mount
    }

    /// Declares that this program is the only one that will ever take leases in the
    /// directories it uses, so that a lease may be a claim in this process's claim table
    /// alone where the platform has no inter-process lock.
    ///
    /// Only WASI (`wasm32-wasip1`) needs it: WASI has no file locking at all, and a WASI host can preopen one directory into
    /// several instances (or share it with native processes), which would all "hold" the
    /// same lease if leasehold granted one silently — failing open, the one thing a lock must
    /// not do. Without the opt-in, acquiring there is [`Error::Unsupported`]. With it,
    /// a lease excludes the other leases of this instance (exclusive and shared modes, FIFO
    /// waiters, budgets and cancellation as everywhere), and nothing else: the invariant you
    /// state is that no other instance or process uses the same directory.
    ///
    /// On Linux, macOS, the BSDs and Windows the option changes nothing: the kernel lock is
    /// always taken, so a second process is still excluded with it set (tested). It exists
    /// everywhere so that portable code can set it once.
    #[must_use]
    pub fn single_process(mut self, only: bool) -> LeaseOptions {
        self.single_process = only;
        self
    }

    /// With `false`, an acquisition whose lock file is replaced (or removed) while it tries or
    /// waits gives up at once with [`Error::Unstable`] instead of reopening the path: for the
    /// keyed pattern's waits, which go back to the admission after the collector removed the
    /// file they waited on rather than reopen the path by themselves (see
    /// `patterns::keyed`). Nothing is held afterwards.
    pub(crate) fn follow_replaced(mut self, follow: bool) -> LeaseOptions {
        self.follow_replaced = follow;
        self
    }

    /// Whether network, FUSE and overlay file systems are allowed (see
    /// [`allow_network_filesystem`](Self::allow_network_filesystem)).
    pub fn allows_network_filesystem(&self) -> bool {
        self.allow_network_fs
    }

    /// Whether state other users own or may write is accepted (see
    /// [`allow_shared_state`](Self::allow_shared_state)); stores built on the lease apply the
    /// same rule to the directories and documents they keep beside it.
    pub fn allows_shared_state(&self) -> bool {
        self.allow_shared_state
    }

    /// What the platform is told of these options (see [`PlatformOptions`]).
    pub(crate) fn platform(&self) -> PlatformOptions {
        PlatformOptions {
            create: self.create,
            create_parents: self.create_parents,
            allow_network_fs: self.allow_network_fs,
            allow_shared_state: self.allow_shared_state,
            single_process: self.single_process,
        }
    }
}

impl LeaseOptions {
    /// Takes the lease on `path` if it is free right now.
    ///
    /// # Errors
    /// [`Error::Contended`] when another holder has it (see [`Error::holders`]); the
    /// unusable-path errors ([`Error::NotRegularFile`], [`Error::ParentNotDirectory`],
    /// [`Error::PermissionDenied`], [`Error::NameTooLong`], [`Error::NetworkFilesystem`]);
    /// [`Error::Unstable`] when the lock file keeps being replaced; [`Error::Io`];
    /// [`Error::Unsupported`] on WASI unless [`single_process`](Self::single_process) is set.
    pub fn try_acquire(&self, path: impl AsRef<Path>) -> Result<Lease> {
        self.acquire(path, &Budget::no_wait())
    }

    /// Takes the lease on `path`, waiting within `budget`.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), plus [`Error::TimedOut`] when the budget's
    /// deadline passed and [`Error::Cancelled`] when its token fired. Either way the waiter
    /// is abandoned and nothing of ours holds the lease.
    pub fn acquire(&self, path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        let target = lock_target(self, path.as_ref())?;
        self.acquire_target(target, budget, Mode::Exclusive)
    }

    /// Takes the lease on the lock file `name` inside `dir` if it is free right now.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire); a `name` that is not one plain component is
    /// refused.
    pub fn try_acquire_at(&self, dir: &LockDir, name: &str) -> Result<Lease> {
        self.acquire_at(dir, name, &Budget::no_wait())
    }

    /// Takes the lease on the lock file `name` inside `dir`, waiting within `budget`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn acquire_at(&self, dir: &LockDir, name: &str, budget: &Budget) -> Result<Lease> {
        let target = imp::Target::at(&self.platform(), &dir.0, name)?;
        self.acquire_target(target, budget, Mode::Exclusive)
    }

    /// [`acquire_at`](Self::acquire_at) in either mode, without the shared leases' gate: the
    /// keyed pattern's acquisition that found its key busy holds its namespace's collector
    /// lock *shared* for one more try, and its collector holds it *exclusive* for one batch
    /// and never waits long (see `patterns::keyed`), so no turnstile is needed there.
    pub(crate) fn acquire_at_mode(
        &self,
        dir: &LockDir,
        name: &str,
        budget: &Budget,
        mode: Mode,
    ) -> Result<Lease> {
        let target = imp::Target::at(&self.platform(), &dir.0, name)?.without_gate();
        self.acquire_target(target, budget, mode)
    }

    /// [`acquire_at_mode`](Self::acquire_at_mode) without blocking the executor.
    #[cfg(feature = "tokio")]
    pub(crate) async fn acquire_at_mode_async(
        &self,
        dir: &LockDir,
        name: &str,
        budget: &Budget,
        mode: Mode,
    ) -> Result<Lease> {
        let target = imp::Target::at(&self.platform(), &dir.0, name)?.without_gate();
        self.acquire_target_async(target, budget, mode).await
    }

    fn acquire_target(&self, target: imp::Target, budget: &Budget, mode: Mode) -> Result<Lease> {
        let held = blocking::run(Acquisition::new(
            self.platform(),
            self.follow_replaced,
            &target,
            budget,
            mode,
            None,
        ))?;
        Ok(Lease::new(held, target))
    }

    /// Takes the lease on `path`, waiting within `budget` without blocking the executor.
    /// Dropping the future abandons the wait and leaves nothing held.
    ///
    /// The future owns the options (they are `Copy`) and the budget — pass it by value, or
    /// `&budget` to keep your own — so it can be built from temporaries, as inside
    /// `tokio::select!`:
    ///
    /// ```
    /// # #[cfg(feature = "tokio")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use leasehold::{Budget, LeaseOptions};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("job.lock");
    /// tokio::select! {
    ///     lease = LeaseOptions::new().acquire_async(&path, Budget::unlimited()) => drop(lease.unwrap()),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(60)) => panic!("the lock is free"),
    /// }
    /// # }
    /// # #[cfg(not(feature = "tokio"))]
    /// # fn main() {}
    /// ```
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        self,
        path: impl AsRef<Path>,
        budget: impl Into<Budget>,
    ) -> Result<Lease> {
        let budget = budget.into();
        let target = lock_target(&self, path.as_ref())?;
        self.acquire_target_async(target, &budget, Mode::Exclusive)
            .await
    }

    /// Takes the lease on `name` inside `dir`, waiting within `budget` without blocking the
    /// executor (see [`LeaseOptions::acquire_at`]; the budget as for
    /// [`acquire_async`](Self::acquire_async)).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    #[cfg(feature = "tokio")]
    pub async fn acquire_at_async(
        self,
        dir: &LockDir,
        name: &str,
        budget: impl Into<Budget>,
    ) -> Result<Lease> {
        let budget = budget.into();
        let target = imp::Target::at(&self.platform(), &dir.0, name)?;
        self.acquire_target_async(target, &budget, Mode::Exclusive)
            .await
    }

    #[cfg(feature = "tokio")]
    async fn acquire_target_async(
        &self,
        target: imp::Target,
        budget: &Budget,
        mode: Mode,
    ) -> Result<Lease> {
        let held = super::asynchronous::run(Acquisition::new(
            self.platform(),
            self.follow_replaced,
            &target,
            budget,
            mode,
            None,
        ))
        .await?;
        Ok(Lease::new(held, target))
    }

    /// Opens a [`LeaseHandle`] on `path`: the lock file stays open so the lease can be taken
    /// and released many times at the cost of `flock` + `fstatat` + unlock.
    ///
    /// # Errors
    /// The unusable-path errors of [`try_acquire`](Self::try_acquire), and [`Error::Io`].
    pub fn open_handle(&self, path: impl AsRef<Path>) -> Result<LeaseHandle> {
        let target = lock_target(self, path.as_ref())?;
        let opened = Imp::open(&self.platform(), &target)?;
        Ok(LeaseHandle {
            opts: self.platform(),
            follow_replaced: self.follow_replaced,
            target,
            opened: Some(opened),
            mode: Mode::Exclusive,
        })
    }

    /// A [`LeaseHandle`] on `name` inside `dir` that takes the lease in `mode`, without the
    /// shared leases' gate (as [`acquire_at_mode`](Self::acquire_at_mode)) and without the
    /// post-lock check that the path still names the locked inode; the file is opened by the
    /// first lock. Only for the keyed pattern's collector lock, which a keyed acquisition
    /// that found its key busy takes shared: a kept descriptor saves an open and a close
    /// each time, and the skipped `fstatat` another one. Nothing ever removes that
    /// file, the handles are reopened whenever the namespace is checked again (see
    /// `patterns::keyed`), and no key's exclusion rests on it: each key's lease makes its
    /// own post-lock check, and the collector unlinks only under the lock of the inode it
    /// removes.
    pub(crate) fn handle_at_mode(
        &self,
        dir: &LockDir,
        name: &str,
        mode: Mode,
    ) -> Result<LeaseHandle> {
        Ok(LeaseHandle {
            opts: self.platform(),
            follow_replaced: self.follow_replaced,
            target: imp::Target::at(&self.platform(), &dir.0, name)?
                .without_gate()
                .unchecked(),
            opened: None,
            mode,
        })
    }
}

impl LeaseOptions {
    /// Takes a shared lease on `path` if it can be had right now: no exclusive holder and no
    /// exclusive waiter ahead (a waiter of ours holds the gate: see [`SharedLease`]) — unless
    /// this process already holds the file shared, itself or through an ancestor's
    /// [`SharedLease::child_env`]: a nested shared acquisition does not wait behind a writer
    /// that waits for the outer one ([`SharedLease`], "Nested shared leases").
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire); [`Error::SharedUnsupported`] on Windows.
    pub fn try_acquire_shared(&self, path: impl AsRef<Path>) -> Result<SharedLease> {
        self.acquire_shared(path, &Budget::no_wait())
    }

    /// Takes a shared lease on `path`, waiting within `budget` — behind any exclusive waiter
    /// already queued, so that writers are never starved; a nested shared acquisition (this
    /// process already holds the file shared) excepted, as for
    /// [`try_acquire_shared`](Self::try_acquire_shared).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); [`Error::SharedUnsupported`] on Windows.
    pub fn acquire_shared(&self, path: impl AsRef<Path>, budget: &Budget) -> Result<SharedLease> {
        let target = lock_target(self, path.as_ref())?;
        let held = blocking::run(Acquisition::new(
            self.platform(),
            self.follow_replaced,
            &target,
            budget,
            Mode::Shared,
            None,
        ))?;
        Ok(SharedLease {
            held: Some(held),
            target,
        })
    }

    /// Takes a shared lease on `path` without blocking the executor; dropping the future
    /// abandons the wait and leaves nothing held (the budget as for
    /// [`acquire_async`](Self::acquire_async)).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire); [`Error::SharedUnsupported`] on Windows.
    #[cfg(feature = "tokio")]
    pub async fn acquire_shared_async(
        self,
        path: impl AsRef<Path>,
        budget: impl Into<Budget>,
    ) -> Result<SharedLease> {
        let budget = budget.into();
        let target = lock_target(&self, path.as_ref())?;
        let acq = Acquisition::new(
            self.platform(),
            self.follow_replaced,
            &target,
            &budget,
            Mode::Shared,
            None,
        );
        let held = super::asynchronous::run(acq).await?;
        Ok(SharedLease {
            held: Some(held),
            target,
        })
    }

    /// Locks the open file description behind `fd`, a descriptor the caller opened (or
    /// inherited: `exec 9>lockfile` in a shell), in `mode`, waiting within `budget` — what
    /// `flock(1)` does with a descriptor number.
    ///
    /// The lock belongs to the open file description, not to a lease object: it stays after
    /// this call returns, for as long as any descriptor of that description is open, until
    /// [`unlock_descriptor`](super::unlock_descriptor) or until every one of them is closed.
    /// `fd` may be open on any kind of file `flock(2)` locks — a regular file, a directory, a
    /// FIFO or pipe, a device — as with `flock(1)`: the caller opened it, so none of the
    /// dangers of opening a path apply. Unlike a path lease there is no inode-vs-path check
    /// (there is no path to check against: the caller vouches for what it opened), no gate (an exclusive
    /// waiter here does not hold shared acquirers back), and no in-process exclusion once
    /// the call has returned. A description that already holds a lock in the other mode is
    /// converted the way `flock(2)` converts: not atomically.
    ///
    /// # Errors
    /// [`Error::Contended`]/[`Error::TimedOut`], [`Error::Cancelled`], [`Error::Io`] (a
    /// closed descriptor: `EBADF`).
    #[cfg(unix)]
    pub fn lock_descriptor(
        &self,
        fd: BorrowedFd<'_>,
        mode: LockMode,
        budget: &Budget,
    ) -> Result<()> {
        let display = std::path::PathBuf::from(format!("descriptor {}", fd.as_raw_fd()));
        let target = imp::Target::descriptor(display);
        let opened = imp::open_descriptor(&target, fd)?;
        let acq = Acquisition::new(
            self.platform(),
            self.follow_replaced,
            &target,
            budget,
            mode.into(),
            Some(opened),
        );
        // Closing our duplicate leaves the lock with the caller's description.
        drop(blocking::run(acq)?);
        Ok(())
    }
}

/// The target of a lock path, once the path is one a file can have: an empty path, or one
/// holding a NUL byte, is [`Error::InvalidPath`] before anything is opened (the system calls
/// would answer "not found" or a bare "invalid argument", which say nothing of the cause).
fn lock_target(opts: &LeaseOptions, path: &Path) -> Result<imp::Target> {
    usable(path)?;
    imp::Target::path(&opts.platform(), path)
}

/// [`Error::InvalidPath`] for a path no file can have (empty, or holding a NUL byte): the
/// check every call that takes a lock path makes first.
pub(crate) fn usable(path: &Path) -> Result<()> {
    let reason = if path.as_os_str().is_empty() {
        Some("it is empty")
    } else if path.as_os_str().as_encoded_bytes().contains(&0) {
        Some("it holds a NUL byte, which no file name may")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidPath {
            path: path.to_path_buf(),
            reason,
        }),
        None => Ok(()),
    }
}
