//! The primitive on Windows: a named kernel semaphore whose existence is the lock.
//!
//! The same platform contract as `posix/` ([`Platform`], which [`Windows`] at the end of
//! this file implements), and the same guarantees where they make sense; the differences,
//! and why:
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
//!   holder is never expropriated.
//! * **Wait.** No kernel event announces that a named object was destroyed, so a waiter polls
//!   with bounded back-off (1 ms doubling to 16 ms; `wait.rs`): a release by another process
//!   is noticed within ~16 ms, as is a token's flag raised by a signal handler; a
//!   `CancelToken::cancel` and a release by another lease of this process wake the waiter at
//!   once (its notifier). There is no kernel queue ([`KernelWait`] cannot be started).
//! * **Verify.** Nobody can take a held object away, so `verify` only asks whether the path
//!   still names the same object: when a directory on the way was re-pointed (a junction
//!   changed), newcomers would lock another object, and the lease is reported lost.
//! * **Holders.** Windows cannot tell who holds a named object, and even looking (opening it)
//!   would keep a released object alive for a moment and make a newcomer fail: `holders`
//!   answers `Unknown`.
//! * The object lives in the session namespace (`Local\`): processes in different logon
//!   sessions (a service and a desktop app) do not exclude each other.

use std::ffi::OsStr;
use std::io;
use std::os::windows::io::OwnedHandle;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::claim::{Claim, Key, Mode};
use super::platform::PlatformOptions;
use super::platform::{
    Platform, PlatformDataDir, PlatformDir, PlatformHeld, PlatformOpened, PlatformTarget,
};
use crate::error::{Error, Result};
use crate::holders::Unusable;
use crate::kind::{FileId, FileKind};
use crate::sys::{self, Created, Notifier, Stood, naming};

/// `ERROR_DIRECTORY`: "the directory name is invalid" (a file where a directory was expected).
const ERROR_DIRECTORY: i32 = 267;
/// `ERROR_FILENAME_EXCED_RANGE`.
const ERROR_FILENAME_EXCED_RANGE: i32 = 206;
/// `ERROR_TOO_MANY_OPEN_FILES`.
const ERROR_TOO_MANY_OPEN_FILES: i32 = 4;

/// A directory that leases are taken in, resolved once to its real path.
#[derive(Debug, Clone)]
pub(crate) struct Dir {
    path: PathBuf,
    real: PathBuf,
}

impl PlatformDir for Dir {
    fn open(path: &Path) -> Result<Dir> {
        match sys::stat_follow(path) {
            Ok(Stood::Directory) => {}
            Ok(Stood::Regular) => {
                return Err(Error::NotDirectory {
                    path: path.to_path_buf(),
                    kind: FileKind::Regular,
                });
            }
            Ok(Stood::Other(kind)) => {
                return Err(Error::NotDirectory {
                    path: path.to_path_buf(),
                    kind,
                });
            }
            Ok(Stood::Missing) => {
                return Err(Error::NotFound {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(dir_error(path, "open directory", e)),
        }
        let real = sys::real_path(path).map_err(|e| dir_error(path, "resolve directory", e))?;
        Ok(Dir {
            path: path.to_path_buf(),
            real,
        })
    }

    fn create(path: &Path) -> Result<Dir> {
        create_dirs(path)?;
        Dir::open(path)
    }

    fn child(&self, name: &str, create: bool) -> Result<Dir> {
        let path = self.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, "open directory"));
        }
        let inside = self.real.join(name);
        if create {
            match sys::create_dir(&inside) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(dir_error(&path, "create directory", e)),
            }
        }
        // Links and junctions are reported as links: neither is followed here.
        match sys::stat_nofollow(&inside) {
            Ok(Stood::Directory) => {}
            Ok(Stood::Regular) => {
                return Err(Error::NotDirectory {
                    path,
                    kind: FileKind::Regular,
                });
            }
            Ok(Stood::Other(kind)) => return Err(Error::NotDirectory { path, kind }),
            Ok(Stood::Missing) => return Err(Error::NotFound { path }),
            Err(e) => return Err(dir_error(&path, "open directory", e)),
        }
        // Resolved again for the name's stored case.
        let real = sys::real_path(&inside).map_err(|e| dir_error(&path, "resolve directory", e))?;
        Ok(Dir { path, real })
    }

    fn has_lock_file(&self, name: &str) -> Result<bool> {
        let path = self.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, "inspect lock file"));
        }
        match sys::stat_nofollow(&self.real.join(name)) {
            Ok(Stood::Missing) => Ok(false),
            Ok(Stood::Regular) => Ok(true),
            Ok(Stood::Directory) => Err(Error::NotRegularFile {
                path,
                kind: FileKind::Directory,
            }),
            Ok(Stood::Other(kind)) => Err(Error::NotRegularFile { path, kind }),
            Err(e) => Err(io_error(&path, "inspect lock file", e)),
        }
    }

    /// Opens a data file `name` (never following a final link): the file and whether it
    /// existed before; `Ok(None)` when missing and `create` is false.
    fn open_file(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool)>> {
        let path = self.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, "open file"));
        }
        let inside = self.real.join(name);
        let existed = match sys::stat_nofollow(&inside) {
            Ok(Stood::Missing) if !create => return Ok(None),
            Ok(Stood::Missing) => false,
            Ok(Stood::Regular) => true,
            Ok(Stood::Directory) => {
                return Err(Error::NotRegularFile {
                    path,
                    kind: FileKind::Directory,
                });
            }
            Ok(Stood::Other(kind)) => return Err(Error::NotRegularFile { path, kind }),
            Err(e) => return Err(io_error(&path, "inspect file", e)),
        };
        match sys::open_data_file(&inside, write, create) {
            Ok(f) => Ok(Some((f, existed))),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => Err(Error::NotRegularFile {
                path,
                kind: FileKind::Other,
            }),
            Err(e) => Err(io_error(&path, "open file", e)),
        }
    }

    /// Windows cannot `fsync` a directory; NTFS journals the entry itself.
    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Leases in a `LockDir` are bound to the directory resolved when it was opened (their
    /// object names derive from its real path), so there is no chain to walk again.
    fn verify(&self) -> Result<()> {
        Ok(())
    }

    /// The entries of the directory (no lock file among them: Windows keeps none, so the
    /// keyed collector finds nothing to collect).
    fn names(&self) -> Result<Vec<std::ffi::OsString>> {
        sys::dir_names(&self.real).map_err(|e| io_error(&self.path, "list directory", e))
    }
}

/// Data below a directory (see `LockDir`'s data methods): the same operations as on POSIX,
/// over the real path joined with the name, each component looked at without following
/// (`symlink_metadata`: links and junctions are reported, not followed) before it is used.
/// std offers no handle-relative calls here, so a component swapped between the look and
/// the use is not excluded (as the result store's directories were treated before).
impl PlatformDataDir for Dir {
    fn entry(&self, name: &str) -> Result<Option<FileKind>> {
        let path = self.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, "inspect"));
        }
        match sys::stat_nofollow(&self.real.join(name)) {
            Ok(Stood::Missing) => Ok(None),
            Ok(Stood::Regular) => Ok(Some(FileKind::Regular)),
            Ok(Stood::Directory) => Ok(Some(FileKind::Directory)),
            Ok(Stood::Other(kind)) => Ok(Some(kind)),
            Err(e) => Err(io_error(&path, "inspect", e)),
        }
    }

    /// No modes on Windows; NTFS journals the new entry (no directory sync).
    fn create_child(&self, name: &str, _mode: u32) -> Result<Dir> {
        self.child(name, true)
    }

    /// No permission bits on Windows: 0o644.
    fn open_read(&self, name: &str) -> Result<Option<(std::fs::File, u32)>> {
        Ok(self.open_file(name, false, false)?.map(|(f, _)| (f, 0o644)))
    }

    fn create_new(&self, name: &str, _mode: u32) -> Result<Option<std::fs::File>> {
        let path = self.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, "create file"));
        }
        match sys::create_new(&self.real.join(name)) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(io_error(&path, "create file", e)),
        }
    }

    /// A link or junction standing at `to` is refused rather than replaced (what the result
    /// store's Windows directories did before they were handles).
    fn rename(&self, from: &str, to_dir: &Dir, to: &str) -> Result<()> {
        let path = self.path.join(from);
        for (name, p) in [(from, &path), (to, &to_dir.path.join(to))] {
            if !sys::is_plain_name(OsStr::new(name)) {
                return Err(not_plain(p.clone(), "rename"));
            }
        }
        let dest = to_dir.real.join(to);
        if let Ok(Stood::Other(kind)) = sys::stat_nofollow(&dest) {
            return Err(Error::NotRegularFile {
                path: to_dir.path.join(to),
                kind,
            });
        }
        sys::rename(&self.real.join(from), &dest).map_err(|e| io_error(&path, "rename", e))
    }

    fn remove(&self, name: &str, dir: bool) -> Result<()> {
        let (op, remove): (_, fn(&Path) -> io::Result<()>) = match dir {
            true => ("remove directory", sys::remove_dir),
            false => ("remove file", sys::remove_file),
        };
        let path = self.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(not_plain(path, op));
        }
        remove(&self.real.join(name)).map_err(|e| io_error(&path, op, e))
    }
}

impl Dir {
    pub(crate) fn real_path(&self) -> &Path {
        &self.real
    }
}

/// Where a lock is: a path resolved at acquisition, or a name inside a [`Dir`].
#[derive(Debug, Clone)]
pub(crate) struct Target {
    kind: TargetKind,
    display: PathBuf,
    /// The object name, once resolved by [`open`].
    name: Arc<std::sync::OnceLock<String>>,
}

#[derive(Debug, Clone)]
enum TargetKind {
    Path(PathBuf),
    At { dir: PathBuf, name: String },
}

impl PlatformTarget for Target {
    type Dir = Dir;

    fn path(_opts: &PlatformOptions, path: &Path) -> Result<Target> {
        Ok(Target {
            kind: TargetKind::Path(path.to_path_buf()),
            display: path.to_path_buf(),
            name: Arc::default(),
        })
    }

    fn at(_opts: &PlatformOptions, dir: &Dir, name: &str) -> Result<Target> {
        let display = dir.path.join(name);
        if !sys::is_plain_name(OsStr::new(name)) {
            return Err(not_plain(display, "open lock file"));
        }
        Ok(Target {
            kind: TargetKind::At {
                dir: dir.real.clone(),
                name: name.to_string(),
            },
            display,
            name: Arc::default(),
        })
    }

    fn display(&self) -> &Path {
        &self.display
    }

    /// Windows leases have no gate (no shared mode): the same target.
    fn without_gate(self) -> Target {
        self
    }

    /// A named object has no path to check it against: the same target.
    fn unchecked(self) -> Target {
        self
    }
}

impl Target {
    pub(crate) fn object_name(&self) -> &str {
        self.name.get().map_or("", String::as_str)
    }
}

/// A resolved lock: its kernel object's name.
#[derive(Debug)]
pub(crate) struct Opened {
    name: String,
}

impl PlatformOpened for Opened {
    fn key(&self) -> Key {
        key_of(&self.name)
    }

    fn file_id(&self) -> Option<FileId> {
        None
    }
}

/// The claim key of an object name: its leading 16 hex digits of the SHA-256 (already in
/// the name) as two numbers.
fn key_of(name: &str) -> Key {
    let hex = name.strip_prefix(naming::PREFIX).unwrap_or(name);
    let half = |s: &str| u64::from_str_radix(s, 16).unwrap_or(0);
    let a = hex.get(0..16).map_or(0, half);
    let b = hex.get(16..32).map_or(0, half);
    (a, b)
}

/// The object's handle and the in-process claim. Field order: the handle closes (destroying
/// the object) before the claim leaves the table.
#[derive(Debug)]
pub(crate) struct Held {
    _handle: OwnedHandle,
    name: String,
    _claim: Claim,
}

impl PlatformHeld for Held {
    type Opened = Opened;

    fn file_id(&self) -> Option<FileId> {
        None
    }

    /// Nobody can tell who waits for a named object.
    fn others_waiting(&self) -> bool {
        false
    }

    /// Releases and gives back the resolved lock for the next try.
    fn unlock_keep(self) -> Option<Opened> {
        let Held {
            _handle,
            name,
            _claim,
        } = self;
        drop(_handle);
        drop(_claim);
        Some(Opened { name })
    }
}

/// Never exists on Windows: there is no kernel queue to wait in.
pub(crate) enum Granted {}

/// The outcome of one non-blocking try (the one enum of every platform).
type Attempt = super::platform::Attempt<Windows>;

/// No kernel queue on Windows: [`start`](Self::start) always gives the lock back, and the
/// waiter polls.
pub(crate) enum KernelWait {}

impl KernelWait {
    pub(crate) fn start(
        _target: &Target,
        opened: Opened,
        _mode: Mode,
        _notifier: Arc<Notifier>,
    ) -> std::result::Result<KernelWait, Opened> {
        Err(opened)
    }

    pub(crate) fn poll(&self, _target: &Target) -> Option<Result<Granted>> {
        match *self {}
    }
}

impl Drop for KernelWait {
    fn drop(&mut self) {
        match *self {}
    }
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
    sys::create_dirs(path).map_err(|e| dir_error(path, "create directory", e))
}

/// Explains a failed directory operation: a component that is a file, else the I/O error.
fn dir_error(path: &Path, op: &'static str, e: io::Error) -> Error {
    let file_in_the_way = path
        .ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .any(|a| matches!(sys::stat_nofollow(a), Ok(Stood::Regular)));
    if file_in_the_way || e.raw_os_error() == Some(ERROR_DIRECTORY) {
        return Error::ParentNotDirectory {
            path: path.to_path_buf(),
        };
    }
    io_error(path, op, e)
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

/// The Windows platform (see [`Platform`]): each step's body is in its item
/// below.
#[derive(Debug)]
pub(crate) struct Windows;

impl Platform for Windows {
    /// Waiters poll: no kernel event announces a destroyed named object.
    const NOTIFIES: bool = false;

    type Dir = Dir;
    type Target = Target;
    type Opened = Opened;
    type Held = Held;
    type Granted = Granted;
    type KernelWait = KernelWait;

    /// Checks the target and computes its object name (creating missing parents if allowed).
    fn open(opts: &PlatformOptions, target: &Target) -> Result<Opened> {
        let path = target.display();
        let (parent, file_name) = match &target.kind {
            TargetKind::At { dir, name } => (dir.clone(), name.clone()),
            TargetKind::Path(p) => {
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
                if opts.create_parents {
                    create_dirs(&parent).map_err(|e| e.for_lock_path(p))?;
                }
                (parent, file_name.to_string())
            }
        };
        // Like the POSIX lease, refuse anything but a regular file (a directory or a link there
        // is a configuration mistake).
        match sys::stat_nofollow(&parent.join(&file_name)) {
            Ok(Stood::Missing) if !opts.create => {
                return Err(Error::NotFound {
                    path: path.to_path_buf(),
                });
            }
            Ok(Stood::Directory) => {
                return Err(Error::NotRegularFile {
                    path: path.to_path_buf(),
                    kind: FileKind::Directory,
                });
            }
            Ok(Stood::Other(kind)) => {
                return Err(Error::NotRegularFile {
                    path: path.to_path_buf(),
                    kind,
                });
            }
            Ok(_) => {}
            Err(e) => return Err(io_error(path, "inspect lock file", e)),
        }
        let key = match &target.kind {
            TargetKind::At { dir, .. } => naming::lock_key(
                &dir.to_string_lossy(),
                &file_name,
                std::path::MAIN_SEPARATOR,
            ),
            TargetKind::Path(_) => naming::resolve_key(&parent, &file_name)
                .map_err(|e| dir_error(&parent, "resolve directory", e).for_lock_path(path))?,
        };
        if !opts.allow_network_fs && crate::mount::is_network_path(&key) {
            return Err(Error::NetworkFilesystem {
                path: path.to_path_buf(),
                fs: "network share",
                locks: crate::MountLocks::share(),
            });
        }
        let name = naming::object_name(&key);
        let _ = target.name.set(name.clone());
        Ok(Opened { name })
    }
    /// One try under a granted claim: create the named object.
    fn try_lock(
        target: &Target,
        opened: Opened,
        claim: Claim,
        mode: Mode,
        _may_wait: bool,
    ) -> Result<Attempt> {
        if mode == Mode::Shared {
            // A named semaphore's existence is the lock: it has no shared mode, and a counted
            // semaphore cannot tell readers from a writer without a second object and a
            // protocol no other process could be trusted to follow. Refused, typed.
            return Err(Error::SharedUnsupported {
                path: target.display().to_path_buf(),
            });
        }
        match sys::create_named(&opened.name) {
            Ok(Created::Held(handle)) => Ok(Attempt::Acquired(Held {
                _handle: handle,
                name: opened.name,
                _claim: claim,
            })),
            Ok(Created::Exists) => Ok(Attempt::Busy(opened, claim)),
            Err(e) => Err(io_error(target.display(), "create lock object", e)),
        }
    }
    /// Never granted (no kernel queue).
    fn accept(_target: &Target, granted: Granted, _claim: Claim) -> Result<Option<Held>> {
        match granted {}
    }
    /// Never called on Windows (its waits poll).
    fn lock_inline(
        _target: &Target,
        opened: Opened,
        _mode: Mode,
        _interrupted: &dyn Fn() -> std::ops::ControlFlow<()>,
    ) -> Result<Option<Granted>> {
        Err(Error::Io {
            op: "lock",
            path: PathBuf::from(opened.name),
            source: io::Error::new(
                io::ErrorKind::Unsupported,
                "no kernel lock queue on Windows",
            ),
        })
    }
    fn start_wait(
        target: &Target,
        opened: Opened,
        mode: Mode,
        notifier: Arc<Notifier>,
    ) -> std::result::Result<KernelWait, Opened> {
        KernelWait::start(target, opened, mode, notifier)
    }
    fn poll_wait(wait: &KernelWait, target: &Target) -> Option<Result<Granted>> {
        wait.poll(target)
    }
    /// A held object cannot be replaced under us.
    fn still_at_path(_target: &Target, _id: Option<FileId>) -> bool {
        true
    }
    /// Nobody can destroy or replace a named object while we hold a handle to it, so a held
    /// lease is only lost when the *path* now resolves to another object — a directory on the
    /// way was re-pointed (a junction changed), and newcomers would lock elsewhere. A path that
    /// no longer resolves at all (its directory was removed) keeps the lease: whoever recreates
    /// the directory at that path resolves the same name. Leases taken in a `LockDir` are bound
    /// to the directory resolved when it was opened.
    fn verify(target: &Target, held: &Held) -> Result<()> {
        let TargetKind::Path(p) = &target.kind else {
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
            Ok(key) if naming::object_name(&key) != held.name => {
                Err(Error::LeaseLost { path: p.clone() })
            }
            _ => Ok(()),
        }
    }
    /// Checks that the lease still stands for its path.
    ///
    /// A named object vanishes with its last handle: there is no lock file to remove.
    fn unlink_held(_target: &Target, _held: &Held) -> Result<bool> {
        Ok(false)
    }
    /// A kernel object has no modification time; it counts as just made (never collected).
    fn modified(_target: &Target, _held: &Held) -> Result<std::time::SystemTime> {
        Ok(std::time::SystemTime::now())
    }
    /// Windows does not judge ACLs: see `lease::check_trusted`.
    fn check_trusted(_path: &Path) -> Result<()> {
        Ok(())
    }
    /// Maps a failed holder look-up to the error naming `path`.
    fn holders_error(path: &Path, u: Unusable) -> Error {
        match u {
            Unusable::NotRegular(kind) => Error::NotRegularFile {
                path: path.to_path_buf(),
                kind,
            },
            Unusable::Os(e) => io_error(path, "inspect lock file", e),
        }
    }
}
