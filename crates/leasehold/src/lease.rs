//! The lease primitive: an exclusive, kernel-arbitrated lock on a lock file.
//!
//! Contract, in the order things happen:
//!
//! * **Open.** The final path component is never followed (`O_NOFOLLOW`), the open never
//!   blocks (`O_NONBLOCK`: a FIFO cannot hang us), the descriptor is close-on-exec, a missing
//!   file is created with mode 0600 (missing parents 0700), and the file is never truncated,
//!   written or removed. Anything but a regular file is refused with
//!   [`Error::NotRegularFile`] and left exactly as it was.
//! * **Lock.** `flock(LOCK_EX|LOCK_NB)`. The kernel is the only arbiter: there is no TTL, no
//!   pid file and no stale-lock guessing, so a crashed holder never blocks a successor (the
//!   kernel drops its lock when its descriptors close) and a live but wedged holder is never
//!   expropriated (its resumed writes would tear the store).
//! * **Verify.** After locking, the locked `(dev, ino)` must still be what stands at the
//!   path. If the file was unlinked or replaced in between, the lock is on an orphan inode and
//!   proves nothing: close, reopen, retry — at most [`MAX_REOPENS`] times.
//! * **Same process.** Two leases on one file in one process exclude each other, on every
//!   file system: an in-process table keyed by `(dev, ino)` backs the kernel, because where
//!   `flock` is emulated with per-process POSIX locks (NFS) the kernel would grant both.
//! * **Release** closes the descriptor; it is idempotent, and `Drop` does it.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::io::Errno;

#[cfg(test)]
use crate::budget::CancelToken;
use crate::budget::{Budget, Exhausted};
use crate::error::{Error, FileKind, HolderInfo, Holders, Result};
use crate::options::LeaseOptions;
use crate::sys::{self, Entry};

pub use crate::sys::FileId;

#[cfg(feature = "tokio")]
mod asynchronous;

/// How many times a lock file replaced between open and lock is reopened before giving up.
pub const MAX_REOPENS: u32 = 3;

/// Retry schedule after a wake-up event: the kernel reports the close of a holder's file a
/// moment before it drops the holder's lock, so the first retry can lose that race.
const AFTER_EVENT: [Duration; 7] = [
    Duration::ZERO,
    Duration::from_micros(20),
    Duration::from_micros(40),
    Duration::from_micros(80),
    Duration::from_micros(160),
    Duration::from_micros(320),
    Duration::from_micros(640),
];

/// Safety-net re-check interval while an event source is watching (a release by `LOCK_UN`
/// without close raises no event): it starts here and doubles up to [`WATCHED_MAX`].
const WATCHED_MIN: Duration = Duration::from_millis(5);
const WATCHED_MAX: Duration = Duration::from_millis(100);
/// Back-off where no event source exists (not Linux, or inotify exhausted).
const POLL_MIN: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(16);

/// Inodes locked by leases of this process.
static HELD: Mutex<BTreeSet<FileId>> = Mutex::new(BTreeSet::new());

fn held_table() -> MutexGuard<'static, BTreeSet<FileId>> {
    // The table holds plain data; a panic elsewhere cannot leave it inconsistent.
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A claim in the in-process table, removed on drop.
#[derive(Debug)]
struct Claim(FileId);

impl Claim {
    fn take(id: FileId) -> Option<Claim> {
        // The guard must be gone before a `Claim` could be dropped (its Drop locks the table).
        let inserted = held_table().insert(id);
        inserted.then(|| Claim(id))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        held_table().remove(&self.0);
    }
}

/// A directory handle that lock files can be opened relative to (`openat`).
///
/// Opening relative to a handle instead of joining path strings means that a directory
/// renamed or swapped after it was opened cannot redirect where locks are taken, and that a
/// held lease keeps working after its directory is renamed.
#[derive(Debug, Clone)]
pub struct LockDir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

impl LockDir {
    /// Opens an existing directory. The path is the caller's configuration, so symlinks in it
    /// are followed, as for any path prefix (a home directory moved to another disk and linked
    /// back keeps working); what lies *inside* is opened with [`child`](Self::child), which
    /// never follows one.
    pub fn open(path: impl AsRef<Path>) -> Result<LockDir> {
        let path = path.as_ref();
        let fd = sys::open_dir_at(sys::cwd(), path, true)
            .map_err(|e| dir_error(sys::cwd(), path, path, e))?;
        Ok(LockDir {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
        })
    }

    /// Opens a directory, creating it and missing parents with mode 0700.
    pub fn create(path: impl AsRef<Path>) -> Result<LockDir> {
        let path = path.as_ref();
        create_dirs(path)?;
        LockDir::open(path)
    }

    /// Opens the child directory `name`, which must be a real directory (not a symlink);
    /// with `create`, creates it (0700) when missing.
    pub fn child(&self, name: &str, create: bool) -> Result<LockDir> {
        let path = self.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(Error::Io {
                op: "open directory",
                path,
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a plain name"),
            });
        }
        if create {
            match sys::mkdir_at(self.fd.as_fd(), Path::new(name)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(dir_error(self.fd.as_fd(), Path::new(name), &path, e)),
            }
        }
        let fd = sys::open_dir_at(self.fd.as_fd(), Path::new(name), false)
            .map_err(|e| dir_error(self.fd.as_fd(), Path::new(name), &path, e))?;
        Ok(LockDir {
            fd: Arc::new(fd),
            path,
        })
    }

    /// What stands at `name` in this directory (never following a symlink): `Ok(true)` for a
    /// regular file, `Ok(false)` when nothing is there, an error for anything else.
    pub fn has_lock_file(&self, name: &str) -> Result<bool> {
        let path = self.path.join(name);
        match sys::entry_at(self.fd.as_fd(), Path::new(name)) {
            Ok(Entry::Missing) => Ok(false),
            Ok(Entry::Regular(_)) => Ok(true),
            Ok(Entry::Other(kind)) => Err(Error::NotRegularFile { path, kind }),
            Err(e) => Err(path_error(&path, "inspect lock file", e)),
        }
    }

    /// The path this handle was opened as (for messages; the handle is what is used).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory descriptor.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Where a lock file is: a path (resolved against the working directory) or a name inside an
/// opened [`LockDir`].
#[derive(Debug, Clone)]
enum Target {
    Path(PathBuf),
    At {
        dir: Arc<OwnedFd>,
        name: PathBuf,
        display: PathBuf,
    },
}

impl Target {
    fn dir(&self) -> BorrowedFd<'_> {
        match self {
            Target::Path(_) => sys::cwd(),
            Target::At { dir, .. } => dir.as_fd(),
        }
    }
    fn name(&self) -> &Path {
        match self {
            Target::Path(p) => p,
            Target::At { name, .. } => name,
        }
    }
    fn display(&self) -> &Path {
        match self {
            Target::Path(p) => p,
            Target::At { display, .. } => display,
        }
    }
}

impl LeaseOptions {
    /// Takes the lease on `path` if it is free right now.
    pub fn try_acquire(&self, path: impl AsRef<Path>) -> Result<Lease> {
        self.acquire_target(
            Target::Path(path.as_ref().to_path_buf()),
            &Budget::no_wait(),
        )
    }

    /// Takes the lease on `path`, waiting within `budget`.
    pub fn acquire(&self, path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        self.acquire_target(Target::Path(path.as_ref().to_path_buf()), budget)
    }

    /// Takes the lease on the lock file `name` inside `dir` if it is free right now.
    pub fn try_acquire_at(&self, dir: &LockDir, name: &str) -> Result<Lease> {
        self.acquire_at(dir, name, &Budget::no_wait())
    }

    /// Takes the lease on the lock file `name` inside `dir`, waiting within `budget`.
    /// `name` must be a single plain component.
    pub fn acquire_at(&self, dir: &LockDir, name: &str, budget: &Budget) -> Result<Lease> {
        let target = self.target_at(dir, name)?;
        self.acquire_target(target, budget)
    }

    fn target_at(&self, dir: &LockDir, name: &str) -> Result<Target> {
        let display = dir.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(Error::Io {
                op: "open lock file",
                path: display,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "lock name must be a single plain file name",
                ),
            });
        }
        Ok(Target::At {
            dir: dir.fd.clone(),
            name: PathBuf::from(name),
            display,
        })
    }

    fn acquire_target(&self, target: Target, budget: &Budget) -> Result<Lease> {
        let held = Waiter {
            opts: *self,
            target: &target,
            budget,
            started: Instant::now(),
        }
        .run(None)?;
        Ok(Lease {
            held: Some(held),
            target,
        })
    }

    /// Opens a [`LeaseHandle`] on `path`: the lock file stays open so the lease can be taken
    /// and released many times at the cost of `flock` + `fstatat` + unlock.
    pub fn open_handle(&self, path: impl AsRef<Path>) -> Result<LeaseHandle> {
        let target = Target::Path(path.as_ref().to_path_buf());
        let budget = Budget::no_wait();
        let opened = Waiter {
            opts: *self,
            target: &target,
            budget: &budget,
            started: Instant::now(),
        }
        .open()?;
        Ok(LeaseHandle {
            opts: *self,
            target,
            opened: Some(opened),
        })
    }
}

/// A file opened for locking, not yet locked.
#[derive(Debug)]
struct Opened {
    fd: OwnedFd,
    id: FileId,
}

enum Attempt {
    Acquired(Held),
    Busy(Opened),
    Replaced,
}

/// Where one round of an acquisition left off.
enum Step {
    Done(Held),
    Wait(Opened, Option<sys::Watch>),
    Reopen,
}

/// One acquisition: open, lock, verify, and wait within a budget.
struct Waiter<'a> {
    opts: LeaseOptions,
    target: &'a Target,
    budget: &'a Budget,
    started: Instant,
}

impl Waiter<'_> {
    fn path(&self) -> &Path {
        self.target.display()
    }

    fn try_once(&self) -> bool {
        self.budget.deadline().is_some_and(|d| d <= self.started)
    }

    /// Acquires, reusing `reuse` (a file a [`LeaseHandle`] keeps open) for the first try.
    fn run(&self, mut reuse: Option<Opened>) -> Result<Held> {
        let mut reopens = 0;
        loop {
            match self.step(&mut reuse)? {
                Step::Done(held) => return Ok(held),
                Step::Wait(opened, watch) => {
                    if let Some(held) = self.wait(opened, watch.as_ref())? {
                        return Ok(held);
                    }
                }
                Step::Reopen => {}
            }
            self.count_reopen(&mut reopens)?;
        }
    }

    /// Opens (or reuses) the lock file and tries it; when busy and the budget allows
    /// waiting, starts the watch and tries once more before the caller sleeps.
    fn step(&self, reuse: &mut Option<Opened>) -> Result<Step> {
        // Deadlines are judged while waiting: a replaced file is reopened and tried even when
        // the budget allows no waiting, because that is not contention.
        if self.budget.flagged() {
            return Err(Error::Cancelled {
                path: self.path().to_path_buf(),
            });
        }
        let opened = match reuse.take() {
            Some(o) => o,
            None => self.open()?,
        };
        Ok(match self.attempt(opened)? {
            Attempt::Busy(opened) if !self.try_once() => {
                // Watch first, then try again, then sleep: a release between the failed try
                // and the watch is caught by the second try, one after it by the watch. (The
                // uncontended path never pays for the watch.)
                let watch = sys::Watch::new(opened.fd.as_fd(), self.path());
                match self.attempt(opened)? {
                    Attempt::Busy(opened) => Step::Wait(opened, watch),
                    Attempt::Acquired(held) => Step::Done(held),
                    Attempt::Replaced => Step::Reopen,
                }
            }
            Attempt::Busy(opened) => return Err(self.timed_out(opened.id)),
            Attempt::Acquired(held) => Step::Done(held),
            Attempt::Replaced => Step::Reopen,
        })
    }

    fn count_reopen(&self, reopens: &mut u32) -> Result<()> {
        *reopens += 1;
        if *reopens >= MAX_REOPENS {
            return Err(Error::Unstable {
                path: self.path().to_path_buf(),
                attempts: *reopens,
            });
        }
        Ok(())
    }

    /// Contention (try-once) or a passed deadline, naming the inode waited on; its holders
    /// are looked up only if someone asks (see [`HolderInfo`]).
    fn timed_out(&self, id: FileId) -> Error {
        let holders = HolderInfo::of_inode(id);
        if self.budget.deadline().is_some_and(|d| d <= self.started) {
            return Error::Contended {
                path: self.path().to_path_buf(),
                holders,
            };
        }
        Error::TimedOut {
            path: self.path().to_path_buf(),
            holders,
            waited: self.started.elapsed(),
        }
    }

    /// Opens the lock file, refusing anything but a regular file.
    fn open(&self) -> Result<Opened> {
        let (dir, name, path) = (self.target.dir(), self.target.name(), self.path());
        // Look before opening: a device node is refused without ever being opened.
        match sys::entry_at(dir, name) {
            Ok(Entry::Other(kind)) => {
                return Err(Error::NotRegularFile {
                    path: path.to_path_buf(),
                    kind,
                });
            }
            Ok(Entry::Missing) if !self.opts.create => {
                return Err(Error::NotFound {
                    path: path.to_path_buf(),
                });
            }
            Ok(_) | Err(Errno::NOENT) => {}
            Err(e) => return Err(path_error(path, "inspect lock file", e)),
        }
        let fd = match sys::open_lock_file(dir, name, self.opts.create) {
            Ok(fd) => fd,
            Err(Errno::NOENT)
                if self.opts.create
                    && self.opts.create_parents
                    && matches!(self.target, Target::Path(_)) =>
            {
                if let Some(parent) = name.parent().filter(|p| !p.as_os_str().is_empty()) {
                    create_dirs(parent).map_err(|e| with_path(e, path))?;
                }
                sys::open_lock_file(dir, name, true)
                    .map_err(|e| path_error(path, "open lock file", e))?
            }
            Err(e) => return Err(path_error(path, "open lock file", e)),
        };
        let id = match sys::fd_entry(fd.as_fd()) {
            Ok(Entry::Regular(id)) => id,
            Ok(Entry::Other(kind)) => {
                return Err(Error::NotRegularFile {
                    path: path.to_path_buf(),
                    kind,
                });
            }
            Ok(Entry::Missing) => unreachable!("fstat of an open descriptor"),
            Err(e) => return Err(path_error(path, "stat lock file", e)),
        };
        let network = match self.opts.allow_network_fs {
            true => None,
            false => {
                sys::network_fs(fd.as_fd()).map_err(|e| path_error(path, "statfs lock file", e))?
            }
        };
        if let Some(fs) = network {
            return Err(Error::NetworkFilesystem {
                path: path.to_path_buf(),
                fs,
            });
        }
        Ok(Opened { fd, id })
    }

    /// One non-blocking try: claim in-process, flock, verify the inode is still at the path.
    fn attempt(&self, opened: Opened) -> Result<Attempt> {
        let Some(claim) = Claim::take(opened.id) else {
            return Ok(Attempt::Busy(opened));
        };
        #[cfg(test)]
        tests::before_lock_hook();
        match sys::try_lock_exclusive(opened.fd.as_fd()) {
            Ok(true) => {}
            Ok(false) => return Ok(Attempt::Busy(opened)),
            Err(e) => return Err(Error::from_lock_errno(self.path(), e)),
        }
        match sys::entry_at(self.target.dir(), self.target.name()) {
            Ok(Entry::Regular(now)) if now == opened.id => Ok(Attempt::Acquired(Held {
                fd: opened.fd,
                id: opened.id,
                _claim: claim,
            })),
            // Locked an orphan: closing `opened` (dropped here) releases it.
            Ok(_) | Err(Errno::NOENT) => Ok(Attempt::Replaced),
            Err(e) => Err(path_error(self.path(), "verify lock file", e)),
        }
    }

    /// Waits for the lease on an already opened file. `Ok(None)`: the file was replaced and
    /// must be reopened.
    fn wait(&self, mut opened: Opened, watch: Option<&sys::Watch>) -> Result<Option<Held>> {
        let mut pace = Pacing::new(watch.is_some());
        loop {
            self.check_budget(&opened)?;
            let mut fds: Vec<BorrowedFd<'_>> = Vec::with_capacity(2);
            if let Some(w) = watch {
                fds.push(w.as_fd());
            }
            if let Some(c) = self.budget.cancel_token() {
                fds.push(c.fd());
            }
            let ready =
                sys::wait_readable(&fds, Some(pace.nap(self.budget))).map_err(|source| {
                    Error::Io {
                        op: "wait for lock",
                        path: self.path().to_path_buf(),
                        source,
                    }
                })?;
            let woke = watch.is_some() && ready & 1 == 1;
            for (i, pause) in pace.tries(woke).iter().enumerate() {
                if self.budget.flagged() {
                    break;
                }
                if !pause.is_zero() {
                    std::thread::sleep(*pause);
                }
                match self.attempt(opened)? {
                    Attempt::Acquired(held) => return Ok(Some(held)),
                    Attempt::Replaced => return Ok(None),
                    Attempt::Busy(o) => opened = o,
                }
                // Events are consumed only after the first try failed, so the likely path
                // (the event was the holder's release) pays no read. A release that raced
                // the drain is still seen: later tries of this schedule follow the drain,
                // and any event after it leaves the watch readable for the next poll.
                if let Some(w) = watch.filter(|_| i == 0 && woke) {
                    w.drain();
                }
            }
            if !self.still_at_path(&opened) {
                return Ok(None);
            }
        }
    }

    /// Ends a wait whose budget ran out: cancellation first, then the deadline.
    fn check_budget(&self, opened: &Opened) -> Result<()> {
        match self.budget.exhausted() {
            Some(Exhausted::Cancelled) => Err(Error::Cancelled {
                path: self.path().to_path_buf(),
            }),
            Some(Exhausted::Deadline) => Err(self.timed_out(opened.id)),
            None => Ok(()),
        }
    }

    /// Whether the file we wait on is still the one at the path. If it was replaced, the
    /// next holder locks the new file and the waiter must follow it.
    fn still_at_path(&self, opened: &Opened) -> bool {
        matches!(
            sys::entry_at(self.target.dir(), self.target.name()),
            Ok(Entry::Regular(now)) if now == opened.id
        )
    }
}

/// How a waiter paces itself: how long to sleep before the safety-net re-check, and which
/// retries to make after waking. Shared by the blocking and the async waiter.
struct Pacing {
    min: Duration,
    max: Duration,
    interval: Duration,
}

impl Pacing {
    fn new(watched: bool) -> Pacing {
        let (min, max) = if watched {
            (WATCHED_MIN, WATCHED_MAX)
        } else {
            (POLL_MIN, POLL_MAX)
        };
        Pacing {
            min,
            max,
            interval: min,
        }
    }

    /// The next sleep: the safety-net interval, cut short by the deadline.
    fn nap(&self, budget: &Budget) -> Duration {
        budget
            .remaining()
            .map_or(self.interval, |left| left.min(self.interval))
    }

    /// After a wake-up event: retry on the short schedule and reset the safety net (the
    /// caller drains the event after its first failed try); after a timeout: one retry, and
    /// back the safety net off.
    fn tries(&mut self, woke: bool) -> &'static [Duration] {
        if woke {
            self.interval = self.min;
            &AFTER_EVENT
        } else {
            self.interval = (self.interval * 2).min(self.max);
            &AFTER_EVENT[..1]
        }
    }
}

/// The locked file, its identity and its in-process claim. Field order matters: the
/// descriptor closes (dropping the kernel lock) before the claim leaves the table.
#[derive(Debug)]
struct Held {
    fd: OwnedFd,
    id: FileId,
    _claim: Claim,
}

/// An exclusive lease on a lock file, held until [`release`](Lease::release) or drop.
///
/// While a `Lease` is held, no other process (and no other `Lease` in this process) holds the
/// same lock file. The lease never expires: a holder that stalls keeps it until it releases
/// or its process exits, because handing a stalled writer's store to someone else lets its
/// resumed writes tear the store.
#[derive(Debug)]
pub struct Lease {
    held: Option<Held>,
    target: Target,
}

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
    pub fn try_acquire(path: impl AsRef<Path>) -> Result<Lease> {
        LeaseOptions::default().try_acquire(path)
    }

    /// Takes the lease on `path`, waiting within `budget` (default [`LeaseOptions`]).
    ///
    /// The waiter sleeps in the kernel and is woken by the holder's release (Linux: inotify
    /// on the lock file's inode), so it notices a release within microseconds without
    /// burning CPU; a cancellation or deadline ends the wait promptly and leaves nothing held.
    pub fn acquire(path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        LeaseOptions::default().acquire(path, budget)
    }

    /// The lock file's path (for a lease taken in a [`LockDir`], the directory's path joined
    /// with the name).
    pub fn path(&self) -> &Path {
        self.target.display()
    }

    /// Whether the lease is still held (not yet released).
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// The identity of the locked inode, while held.
    pub fn file_id(&self) -> Option<FileId> {
        self.held.as_ref().map(|h| h.id)
    }

    /// Checks that the locked inode is still the file at the path.
    ///
    /// A lease whose lock file was unlinked or replaced excludes nobody: a newcomer locks the
    /// new file. Stores call this before every durable write and fail closed on an error.
    /// It costs one `fstatat`.
    pub fn verify(&self) -> Result<()> {
        let held = self.held.as_ref().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        verify_held(&self.target, held)
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
    pub fn share_with_children(&self, share: bool) -> Result<()> {
        let held = self.held.as_ref().ok_or_else(|| Error::Released {
            path: self.path().to_path_buf(),
        })?;
        sys::set_inheritable(held.fd.as_fd(), share)
            .map_err(|e| path_error(self.path(), "set descriptor inheritance", e))
    }

    /// The locked descriptor, while held.
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        self.held.as_ref().map(|h| h.fd.as_fd())
    }
}

/// A lock file kept open so that one lease can be taken many times cheaply.
///
/// Each [`lock`](Self::lock) costs `flock` + `fstatat` (the inode verification) and each
/// release one `flock(LOCK_UN)`: no open, no close, no allocation. The guarantees are those of
/// [`Lease`]; if the lock file was replaced since the handle opened it, the handle follows the
/// path to the new file. `&mut self` makes one handle hold at most one lease at a time.
///
/// Releasing with `LOCK_UN` raises no close event, so waiters in other processes notice it
/// through their safety-net re-check (milliseconds) rather than at once; prefer a cold
/// [`Lease`] where handoff latency under contention matters.
#[derive(Debug)]
pub struct LeaseHandle {
    opts: LeaseOptions,
    target: Target,
    opened: Option<Opened>,
}

impl LeaseHandle {
    /// Opens a handle on `path` with default [`LeaseOptions`].
    pub fn open(path: impl AsRef<Path>) -> Result<LeaseHandle> {
        LeaseOptions::default().open_handle(path)
    }

    /// Takes the lease if it is free right now.
    pub fn try_lock(&mut self) -> Result<HandleLease<'_>> {
        self.lock(&Budget::no_wait())
    }

    /// Takes the lease, waiting within `budget`.
    pub fn lock(&mut self, budget: &Budget) -> Result<HandleLease<'_>> {
        let held = Waiter {
            opts: self.opts,
            target: &self.target,
            budget,
            started: Instant::now(),
        }
        .run(self.opened.take())?;
        Ok(HandleLease {
            handle: self,
            held: Some(held),
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.target.display()
    }
}

/// A lease taken through a [`LeaseHandle`]; released (`LOCK_UN`, file kept open) on drop.
#[derive(Debug)]
pub struct HandleLease<'a> {
    handle: &'a mut LeaseHandle,
    held: Option<Held>,
}

impl HandleLease<'_> {
    /// Checks that the locked inode is still the file at the path (see [`Lease::verify`]).
    pub fn verify(&self) -> Result<()> {
        let Some(held) = &self.held else {
            return Err(Error::Released {
                path: self.handle.path().to_path_buf(),
            });
        };
        verify_held(&self.handle.target, held)
    }

    /// Releases the lease; the handle keeps the file open for the next [`LeaseHandle::lock`].
    pub fn release(mut self) {
        self.unlock();
    }

    fn unlock(&mut self) {
        if let Some(Held { fd, id, _claim }) = self.held.take() {
            match sys::unlock(fd.as_fd()) {
                Ok(()) => self.handle.opened = Some(Opened { fd, id }),
                Err(_) => drop(fd), // closing releases the lock for certain
            }
            drop(_claim); // the in-process claim goes last
        }
    }
}

impl Drop for HandleLease<'_> {
    fn drop(&mut self) {
        self.unlock();
    }
}

/// Who holds the lock file at `path`, without taking, creating or disturbing anything.
///
/// A missing file (or missing parent directory) is [`Holders::Free`]. Anything
/// but a regular file is an error, and a final symlink is never followed. On platforms that do
/// not reveal lock holders a present file answers [`Holders::Unknown`].
pub fn holders(path: impl AsRef<Path>) -> Result<Holders> {
    let path = path.as_ref();
    match sys::entry_at(sys::cwd(), path) {
        Ok(Entry::Missing) => Ok(Holders::Free),
        Ok(Entry::Regular(id)) => Ok(sys::holders(id)),
        Ok(Entry::Other(kind)) => Err(Error::NotRegularFile {
            path: path.to_path_buf(),
            kind,
        }),
        Err(e) => Err(path_error(path, "inspect lock file", e)),
    }
}

fn verify_held(target: &Target, held: &Held) -> Result<()> {
    match sys::entry_at(target.dir(), target.name()) {
        Ok(Entry::Regular(now)) if now == held.id => Ok(()),
        Ok(_) | Err(Errno::NOENT) => Err(Error::LeaseLost {
            path: target.display().to_path_buf(),
        }),
        Err(e) => Err(path_error(target.display(), "verify lock file", e)),
    }
}

/// Creates `path` and its missing parents with mode 0700.
pub(crate) fn create_dirs(path: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| {
            let errno = e.raw_os_error().map(Errno::from_raw_os_error);
            match errno {
                Some(errno) => dir_error(sys::cwd(), path, path, errno),
                None => Error::Io {
                    op: "create directory",
                    path: path.to_path_buf(),
                    source: e,
                },
            }
        })
}

fn with_path(e: Error, path: &Path) -> Error {
    match e {
        Error::ParentNotDirectory { .. } => Error::ParentNotDirectory {
            path: path.to_path_buf(),
        },
        Error::PermissionDenied { .. } => Error::PermissionDenied {
            path: path.to_path_buf(),
        },
        other => other,
    }
}

/// Explains a failed directory open: what stands at `name` (never following it) if it is not
/// a directory, else a parent that is not one.
fn dir_error(at: BorrowedFd<'_>, name: &Path, path: &Path, e: Errno) -> Error {
    match e {
        Errno::LOOP | Errno::NOTDIR => match sys::entry_at(at, name) {
            Ok(Entry::Other(kind)) if kind != FileKind::Directory => Error::NotDirectory {
                path: path.to_path_buf(),
                kind,
            },
            Ok(Entry::Regular(_)) => Error::NotDirectory {
                path: path.to_path_buf(),
                kind: FileKind::Regular,
            },
            _ => Error::ParentNotDirectory {
                path: path.to_path_buf(),
            },
        },
        other => path_error(path, "open directory", other),
    }
}

/// Maps an errno to the typed error a user can act on.
pub(crate) fn path_error(path: &Path, op: &'static str, e: Errno) -> Error {
    let path = path.to_path_buf();
    match e {
        Errno::LOOP => Error::NotRegularFile {
            path,
            kind: FileKind::Symlink,
        },
        Errno::ISDIR => Error::NotRegularFile {
            path,
            kind: FileKind::Directory,
        },
        Errno::NXIO => Error::NotRegularFile {
            path,
            kind: FileKind::Socket,
        },
        Errno::NOTDIR => Error::ParentNotDirectory { path },
        Errno::ACCESS | Errno::PERM => Error::PermissionDenied { path },
        Errno::NAMETOOLONG => Error::NameTooLong { path },
        Errno::NOENT => Error::NotFound { path },
        Errno::MFILE | Errno::NFILE => Error::TooManyOpenFiles {
            path,
            limit: sys::nofile_limit(),
        },
        other => Error::Io {
            op,
            path,
            source: other.into(),
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::sync::mpsc;
    use std::time::Duration;

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
    fn in_process_table_excludes_a_second_claim_on_one_inode() {
        // Backs the kernel where flock is emulated per process (NFS): a second claim on the
        // same (dev, ino) in this process is refused until the first is dropped.
        let id = FileId {
            dev: u64::MAX,
            ino: 42,
        };
        let first = Claim::take(id).expect("first claim");
        assert!(Claim::take(id).is_none(), "second claim must be refused");
        drop(first);
        assert!(Claim::take(id).is_some(), "claim is free again after drop");
    }

    #[test]
    fn same_process_double_acquisition_contends_and_names_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twice.lock");
        let first = Lease::try_acquire(&path).unwrap();
        let err = Lease::try_acquire(&path).unwrap_err();
        match &err {
            Error::Contended { holders, .. } => {
                assert_eq!(holders.pids(), &[std::process::id()])
            }
            other => panic!("expected contention, got {other:?}"),
        }
        drop(first);
        Lease::try_acquire(&path).unwrap();
    }

    #[test]
    fn contention_errors_look_holders_up_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lazy.lock");
        let holder = Lease::try_acquire(&path).unwrap();
        let err = Lease::try_acquire(&path).unwrap_err();
        let info = err.holders().expect("contention names its holders").clone();
        // Returning the error read nothing: /proc/locks is costly and stalls other lockers.
        assert_eq!(format!("{info:?}"), "HolderInfo(not looked up)");
        drop(holder);
        // Asked after the release, the answer is the truth at that moment.
        assert_eq!(info.get(), &Holders::Free);
        let again = Lease::try_acquire(&path).unwrap();
        let err = Lease::try_acquire(&path).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("another process (pid {});", std::process::id())),
            "{err}"
        );
        drop(again);
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
        Lease::try_acquire(&path).unwrap();
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
        assert_eq!(
            holders(&path).unwrap(),
            Holders::Held {
                pids: vec![std::process::id()]
            }
        );
        // Looking does not disturb: the lease is still held and still excludes.
        lease.verify().unwrap();
        assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
        drop(lease);
        assert_eq!(holders(&path).unwrap(), Holders::Free);
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
        let token = CancelToken::new().unwrap();
        let budget = Budget::unlimited().with_cancel(token.clone());
        let p = path.clone();
        let waiter = std::thread::spawn(move || Lease::acquire(&p, &budget));
        token.cancel();
        let res = waiter.join().unwrap();
        assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
        holder.release();
        // Nothing of the abandoned waiter holds the lease: it is free at once.
        assert_eq!(holders(&path).unwrap(), Holders::Free);
        Lease::try_acquire(&path).unwrap();
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
            Error::TimedOut { holders, .. } => assert_eq!(holders.pids(), &[std::process::id()]),
            other => panic!("expected timeout, got {other:?}"),
        }
        holder.release();
        assert_eq!(holders(&path).unwrap(), Holders::Free);
        Lease::try_acquire(&path).unwrap();
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
        assert_eq!(holders(&path).unwrap(), Holders::Free);
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
    fn lock_dir_leases_survive_renaming_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let ld = LockDir::create(&root).unwrap();
        let lease = LeaseOptions::new().try_acquire_at(&ld, "k.lock").unwrap();
        let moved = dir.path().join("moved");
        std::fs::rename(&root, &moved).unwrap();
        lease
            .verify()
            .expect("still the file in the (renamed) directory");
        let err = LeaseOptions::new()
            .try_acquire(moved.join("k.lock"))
            .unwrap_err();
        assert!(err.is_contended(), "{err:?}");
        assert!(LeaseOptions::new().try_acquire_at(&ld, "../x").is_err());
        assert!(LeaseOptions::new().try_acquire_at(&ld, "a/b").is_err());
    }
}
