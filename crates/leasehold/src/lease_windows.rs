//! The lease primitive on Windows: a named kernel semaphore whose existence is the lock.
//!
//! Same public names and the same contract as the POSIX primitive where it makes sense; the
//! differences, and why:
//!
//! * **No lock file is opened, created or held.** The lease is the kernel object named
//!   `Local\leasehold-<hex sha256(key)>` (see `sys/naming.rs`), where the key is the real path
//!   of the lock file's parent directory joined with its name, case-folded. Readers, searches,
//!   antivirus scanners and directory removal are never blocked by a lease, and nothing can
//!   delete or replace the lock under its holder.
//! * **Lock.** `CreateSemaphoreW` creates the object (the lease is ours) or reports that it
//!   exists (contention: the extra handle is closed at once). The kernel destroys the object
//!   when the holder's handle closes — on release, and when the holder dies, even by
//!   `TerminateProcess` — so a crashed holder never blocks a successor, and a live but wedged
//!   holder is never expropriated. Two leases in one process exclude each other the same way.
//! * **Wait.** No kernel event announces that a named object was destroyed, so a waiter polls
//!   with bounded back-off (1 ms doubling to 16 ms), checking its [`Budget`]'s deadline and
//!   cancellation before every sleep: a release is noticed within ~16 ms, a cancellation too.
//! * **Verify.** Nobody can take a held object away, so [`Lease::verify`] only asks whether the
//!   path still names the same object: when a directory on the way was re-pointed (a junction
//!   changed), newcomers would lock another object, and the lease is reported lost.
//! * **Holders.** Windows cannot tell who holds a named object, and even looking (opening it)
//!   would keep a released object alive for a moment and make a newcomer fail: [`holders`]
//!   answers [`Holders::Unknown`].
//! * The object lives in the session namespace (`Local\`): processes in different logon
//!   sessions (a service and a desktop app) do not exclude each other.

use std::ffi::OsStr;
use std::io;
use std::os::windows::io::OwnedHandle;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use crate::budget::{Budget, Exhausted};
use crate::error::{Error, FileKind, HolderInfo, Holders, Result};
use crate::options::LeaseOptions;
use crate::sys::{self, Created, naming};

/// Back-off of a waiting acquisition: no event exists for "object destroyed".
const POLL_MIN: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(16);

/// `ERROR_DIRECTORY`: "the directory name is invalid" (a file where a directory was expected).
const ERROR_DIRECTORY: i32 = 267;
/// `ERROR_FILENAME_EXCED_RANGE`.
const ERROR_FILENAME_EXCED_RANGE: i32 = 206;
/// `ERROR_TOO_MANY_OPEN_FILES`.
const ERROR_TOO_MANY_OPEN_FILES: i32 = 4;

/// A directory that leases are taken in, resolved once to its real path.
///
/// The lock name of every lease taken in it derives from the real path resolved at
/// [`open`](Self::open), so a held lease is unaffected by renaming the directory, and two
/// handles on one directory reached through different spellings lease the same names.
#[derive(Debug, Clone)]
pub struct LockDir {
    path: PathBuf,
    real: PathBuf,
}

impl LockDir {
    /// Opens an existing directory. The path is the caller's configuration, so links and
    /// junctions in it are followed, as for any path prefix; what lies *inside* is opened with
    /// [`child`](Self::child), which never follows one.
    pub fn open(path: impl AsRef<Path>) -> Result<LockDir> {
        let path = path.as_ref();
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                return Err(Error::NotDirectory {
                    path: path.to_path_buf(),
                    kind: kind_of(&m.file_type()),
                });
            }
            Err(e) => return Err(dir_error(path, "open directory", e)),
        }
        let real =
            std::fs::canonicalize(path).map_err(|e| dir_error(path, "resolve directory", e))?;
        Ok(LockDir {
            path: path.to_path_buf(),
            real,
        })
    }

    /// Opens a directory, creating it and missing parents.
    pub fn create(path: impl AsRef<Path>) -> Result<LockDir> {
        let path = path.as_ref();
        create_dirs(path)?;
        LockDir::open(path)
    }

    /// Opens the child directory `name`, which must be a real directory (not a symbolic link
    /// or junction); with `create`, creates it when missing.
    pub fn child(&self, name: &str, create: bool) -> Result<LockDir> {
        let path = self.path.join(name);
        if !is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, "open directory"));
        }
        let inside = self.real.join(name);
        if create {
            match std::fs::create_dir(&inside) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(dir_error(&path, "create directory", e)),
            }
        }
        // `symlink_metadata` reports junctions as links too: neither is followed here.
        match std::fs::symlink_metadata(&inside) {
            Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {}
            Ok(m) => {
                return Err(Error::NotDirectory {
                    path,
                    kind: kind_of(&m.file_type()),
                });
            }
            Err(e) => return Err(dir_error(&path, "open directory", e)),
        }
        // Resolved again for the name's stored case.
        let real =
            std::fs::canonicalize(&inside).map_err(|e| dir_error(&path, "resolve directory", e))?;
        Ok(LockDir { path, real })
    }

    /// What stands at `name` in this directory (never following a link): `Ok(true)` for a
    /// regular file, `Ok(false)` when nothing is there, an error for anything else. Leases on
    /// Windows never create lock files, so this is `false` unless someone else made one.
    pub fn has_lock_file(&self, name: &str) -> Result<bool> {
        let path = self.path.join(name);
        if !is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, "inspect lock file"));
        }
        match entry(&self.real.join(name)) {
            Ok(None) => Ok(false),
            Ok(Some(m)) if is_regular(&m) => Ok(true),
            Ok(Some(m)) => Err(Error::NotRegularFile {
                path,
                kind: kind_of(&m.file_type()),
            }),
            Err(e) => Err(io_error(&path, "inspect lock file", e)),
        }
    }

    /// The path this directory was opened as (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's real path, as the file system resolved it when it was opened.
    pub fn real_path(&self) -> &Path {
        &self.real
    }
}

/// Where a lock is: a path resolved at acquisition, or a name inside a [`LockDir`].
#[derive(Debug, Clone)]
enum Target {
    Path(PathBuf),
    At {
        dir: PathBuf,
        name: String,
        display: PathBuf,
    },
}

impl Target {
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
        self.acquire(path, &Budget::no_wait())
    }

    /// Takes the lease on `path`, waiting within `budget`.
    pub fn acquire(&self, path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        self.acquire_target(Target::Path(path.as_ref().to_path_buf()), budget)
    }

    /// Takes the lease on the lock `name` inside `dir` if it is free right now.
    pub fn try_acquire_at(&self, dir: &LockDir, name: &str) -> Result<Lease> {
        self.acquire_at(dir, name, &Budget::no_wait())
    }

    /// Takes the lease on the lock `name` inside `dir`, waiting within `budget`. `name` must
    /// be a single plain component.
    pub fn acquire_at(&self, dir: &LockDir, name: &str, budget: &Budget) -> Result<Lease> {
        let target = target_at(dir, name)?;
        self.acquire_target(target, budget)
    }

    fn acquire_target(&self, target: Target, budget: &Budget) -> Result<Lease> {
        let started = Instant::now();
        let name = self.resolve(&target)?;
        let mut interval = POLL_MIN;
        loop {
            if let Some(lease) = self.attempt(&target, &name, budget, started)? {
                return Ok(lease);
            }
            std::thread::sleep(next_sleep(budget, &mut interval));
        }
    }

    /// One try. `Ok(None)`: busy, and the budget allows waiting on.
    fn attempt(
        &self,
        target: &Target,
        name: &str,
        budget: &Budget,
        started: Instant,
    ) -> Result<Option<Lease>> {
        let path = target.display();
        if budget.flagged() {
            return Err(Error::Cancelled {
                path: path.to_path_buf(),
            });
        }
        match sys::create_named(name) {
            Ok(Created::Held(handle)) => {
                return Ok(Some(Lease {
                    held: Some(handle),
                    target: target.clone(),
                    name: name.to_string(),
                }));
            }
            Ok(Created::Exists) => {}
            Err(e) => return Err(io_error(path, "create lock object", e)),
        }
        let held = HolderInfo::known(Holders::Held { pids: Vec::new() });
        if budget.deadline().is_some_and(|d| d <= started) {
            return Err(Error::Contended {
                path: path.to_path_buf(),
                holders: held,
            });
        }
        match budget.exhausted() {
            Some(Exhausted::Cancelled) => Err(Error::Cancelled {
                path: path.to_path_buf(),
            }),
            Some(Exhausted::Deadline) => Err(Error::TimedOut {
                path: path.to_path_buf(),
                holders: held,
                waited: started.elapsed(),
            }),
            None => Ok(None),
        }
    }

    /// Checks the target and computes its object name (creating missing parents if allowed).
    fn resolve(&self, target: &Target) -> Result<String> {
        let path = target.display();
        let (parent, file_name) = match target {
            Target::At { dir, name, .. } => (dir.clone(), name.clone()),
            Target::Path(p) => {
                let Some(file_name) = p.file_name().and_then(OsStr::to_str) else {
                    return Err(Error::Io {
                        op: "open lock file",
                        path: p.clone(),
                        source: io::Error::new(
                            io::ErrorKind::InvalidInput,
                            "a lock path must end in a file name (valid Unicode)",
                        ),
                    });
                };
                if matches!(p.components().next_back(), Some(Component::ParentDir)) {
                    return Err(not_plain(p.clone(), "open lock file"));
                }
                let parent = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                if self.create_parents {
                    create_dirs(&parent).map_err(|e| with_path(e, p))?;
                }
                (parent, file_name.to_string())
            }
        };
        // Look at what stands at the path: like the POSIX lease, refuse anything but a
        // regular file (a directory or a link there is a configuration mistake).
        match entry(&parent.join(&file_name)) {
            Ok(None) if !self.create => {
                return Err(Error::NotFound {
                    path: path.to_path_buf(),
                });
            }
            Ok(Some(m)) if !is_regular(&m) => {
                return Err(Error::NotRegularFile {
                    path: path.to_path_buf(),
                    kind: kind_of(&m.file_type()),
                });
            }
            Ok(_) => {}
            Err(e) => return Err(io_error(path, "inspect lock file", e)),
        }
        let key = match target {
            Target::At { dir, .. } => naming::lock_key(
                &dir.to_string_lossy(),
                &file_name,
                std::path::MAIN_SEPARATOR,
            ),
            Target::Path(_) => naming::resolve_key(&parent, &file_name)
                .map_err(|e| with_path(dir_error(&parent, "resolve directory", e), path))?,
        };
        if !self.allow_network_fs && is_network_path(&key) {
            return Err(Error::NetworkFilesystem {
                path: path.to_path_buf(),
                fs: "network share",
            });
        }
        Ok(naming::object_name(&key))
    }
}

/// How long to sleep before the next try: the back-off interval, capped by the time left.
fn next_sleep(budget: &Budget, interval: &mut Duration) -> Duration {
    let sleep = match budget.remaining() {
        Some(left) => left.min(*interval),
        None => *interval,
    };
    *interval = (*interval * 2).min(POLL_MAX);
    sleep
}

/// A resolved key on a network share: `\\?\UNC\server\share\...` (what the file system
/// reports for UNC paths and mapped drives alike). Keys are case-folded.
fn is_network_path(key: &str) -> bool {
    key.starts_with(r"\\?\unc\") || (key.starts_with(r"\\") && !key.starts_with(r"\\?\"))
}

fn target_at(dir: &LockDir, name: &str) -> Result<Target> {
    let display = dir.path.join(name);
    if !is_plain_name(OsStr::new(name)) {
        return Err(not_plain(display, "open lock file"));
    }
    Ok(Target::At {
        dir: dir.real.clone(),
        name: name.to_string(),
        display,
    })
}

/// An exclusive lease, held until [`release`](Lease::release) or drop.
///
/// While a `Lease` is held, no other process of this session (and no other `Lease` in this
/// process) holds the lease of the same lock path. It never expires: a holder that stalls
/// keeps it until it releases or its process exits.
#[derive(Debug)]
pub struct Lease {
    held: Option<OwnedHandle>,
    target: Target,
    name: String,
}

impl Lease {
    /// Takes the lease on `path` if it is free right now (default [`LeaseOptions`]).
    pub fn try_acquire(path: impl AsRef<Path>) -> Result<Lease> {
        LeaseOptions::default().try_acquire(path)
    }

    /// Takes the lease on `path`, waiting within `budget` (default [`LeaseOptions`]). The
    /// waiter polls with back-off up to 16 ms; a cancellation or deadline ends the wait within
    /// that and leaves nothing held.
    pub fn acquire(path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        LeaseOptions::default().acquire(path, budget)
    }

    /// The lock path (for a lease taken in a [`LockDir`], the directory's path joined with
    /// the name).
    pub fn path(&self) -> &Path {
        self.target.display()
    }

    /// The kernel object that is the lease: `Local\leasehold-<hex sha256>`.
    pub fn object_name(&self) -> &str {
        &self.name
    }

    /// Whether the lease is still held (not yet released).
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// Checks that the lease still stands for its path.
    ///
    /// Nobody can destroy or replace a named object while we hold a handle to it, so a held
    /// lease is only lost when the *path* now resolves to another object — a directory on the
    /// way was re-pointed (a junction changed), and newcomers would lock elsewhere. A path
    /// that no longer resolves at all (its directory was removed) keeps the lease: whoever
    /// recreates the directory at that path resolves the same name. Leases taken in a
    /// [`LockDir`] are bound to the directory resolved when it was opened.
    pub fn verify(&self) -> Result<()> {
        if self.held.is_none() {
            return Err(Error::Released {
                path: self.path().to_path_buf(),
            });
        }
        let Target::Path(p) = &self.target else {
            return Ok(());
        };
        let (Some(parent), Some(file_name)) = (p.parent(), p.file_name().and_then(OsStr::to_str))
        else {
            return Ok(());
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        match naming::resolve_key(parent, file_name) {
            Ok(key) if naming::object_name(&key) != self.name => {
                Err(Error::LeaseLost { path: p.clone() })
            }
            _ => Ok(()),
        }
    }

    /// Releases the lease by closing the object's handle (the kernel destroys the object).
    /// Idempotent.
    pub fn release(&mut self) {
        self.held = None;
    }
}

/// Who holds the lease of `path`: on Windows always [`Holders::Unknown`] (see the module docs)
/// unless the path is unusable. Never takes, creates or opens anything.
pub fn holders(path: impl AsRef<Path>) -> Result<Holders> {
    let path = path.as_ref();
    match entry(path) {
        Ok(Some(m)) if !is_regular(&m) => Err(Error::NotRegularFile {
            path: path.to_path_buf(),
            kind: kind_of(&m.file_type()),
        }),
        Ok(_) => Ok(Holders::Unknown),
        Err(e) => Err(io_error(path, "inspect lock file", e)),
    }
}

/// What stands at `path`, never following a final link; `None` when nothing does.
fn entry(path: &Path) -> io::Result<Option<std::fs::Metadata>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // A missing directory on the way: nothing stands there either.
        Err(e) if e.raw_os_error() == Some(3) => Ok(None), // ERROR_PATH_NOT_FOUND
        Err(e) => Err(e),
    }
}

fn is_regular(m: &std::fs::Metadata) -> bool {
    m.file_type().is_file() && !m.file_type().is_symlink()
}

fn kind_of(ft: &std::fs::FileType) -> FileKind {
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Directory
    } else if ft.is_file() {
        FileKind::Regular
    } else {
        FileKind::Other
    }
}

/// Whether a name is one plain path component: not empty, `.` or `..`, no separator
/// (`\` or `/`), no drive colon and no NUL.
fn is_plain_name(name: &OsStr) -> bool {
    let Some(s) = name.to_str() else {
        return false;
    };
    !s.is_empty() && s != "." && s != ".." && !s.contains(['\\', '/', ':', '\0'])
}

fn not_plain(path: PathBuf, op: &'static str) -> Error {
    Error::Io {
        op,
        path,
        source: io::Error::new(
            io::ErrorKind::InvalidInput,
            "lock name must be a single plain file name",
        ),
    }
}

/// Creates `path` and its missing parents.
pub(crate) fn create_dirs(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| dir_error(path, "create directory", e))
}

/// Explains a failed directory operation: a component that is a file, else the I/O error.
fn dir_error(path: &Path, op: &'static str, e: io::Error) -> Error {
    let file_in_the_way = path
        .ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .any(|a| {
            std::fs::symlink_metadata(a).is_ok_and(|m| !m.is_dir() && !m.file_type().is_symlink())
        });
    if file_in_the_way || e.raw_os_error() == Some(ERROR_DIRECTORY) {
        return Error::ParentNotDirectory {
            path: path.to_path_buf(),
        };
    }
    io_error(path, op, e)
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

/// Maps an I/O error to the typed error a user can act on.
pub(crate) fn io_error(path: &Path, op: &'static str, e: io::Error) -> Error {
    let path = path.to_path_buf();
    match (e.kind(), e.raw_os_error()) {
        (io::ErrorKind::PermissionDenied, _) => Error::PermissionDenied { path },
        (io::ErrorKind::NotFound, _) => Error::NotFound { path },
        (_, Some(ERROR_DIRECTORY)) => Error::ParentNotDirectory { path },
        (_, Some(ERROR_FILENAME_EXCED_RANGE)) => Error::NameTooLong { path },
        (_, Some(ERROR_TOO_MANY_OPEN_FILES)) => Error::TooManyOpenFiles { path, limit: 0 },
        _ => Error::Io {
            op,
            path,
            source: e,
        },
    }
}

#[cfg(feature = "tokio")]
impl LeaseOptions {
    /// Takes the lease on `path`, waiting within `budget` without blocking the executor (the
    /// same bounded back-off, slept with tokio's timer). Dropping the future abandons the
    /// wait and leaves nothing held.
    pub async fn acquire_async(&self, path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        self.acquire_target_async(Target::Path(path.as_ref().to_path_buf()), budget)
            .await
    }

    /// Takes the lease on `name` inside `dir`, waiting within `budget` without blocking the
    /// executor (see [`LeaseOptions::acquire_at`]).
    pub async fn acquire_at_async(
        &self,
        dir: &LockDir,
        name: &str,
        budget: &Budget,
    ) -> Result<Lease> {
        let target = target_at(dir, name)?;
        self.acquire_target_async(target, budget).await
    }

    async fn acquire_target_async(&self, target: Target, budget: &Budget) -> Result<Lease> {
        let started = Instant::now();
        let name = self.resolve(&target)?;
        let mut interval = POLL_MIN;
        loop {
            if let Some(lease) = self.attempt(&target, &name, budget, started)? {
                return Ok(lease);
            }
            tokio::time::sleep(next_sleep(budget, &mut interval)).await;
        }
    }
}

#[cfg(feature = "tokio")]
impl Lease {
    /// Takes the lease on `path`, waiting within `budget` without blocking the executor
    /// (default [`LeaseOptions`]).
    pub async fn acquire_async(path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        LeaseOptions::default().acquire_async(path, budget).await
    }
}
