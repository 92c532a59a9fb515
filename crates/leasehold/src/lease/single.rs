//! The primitive where the platform has no inter-process lock (WASI, `wasm32-wasip1`): a
//! lease is a claim in this process's claim table (`claim.rs`) and nothing else, and only
//! behind [`LeaseOptions::single_process`](crate::LeaseOptions::single_process).
//!
//! The same platform contract as `posix/` and `windows.rs` ([`Platform`], which [`Single`]
//! implements); the differences, and why:
//!
//! * **Opt-in or nothing.** WASI preview 1 has no `flock`, no record locks and no named
//!   kernel objects, and a host may preopen one directory into several instances (or share
//!   it with native processes). A claim excludes only this instance's other leases, so
//!   granting one silently would fail open. Without the opt-in, [`open`] refuses with
//!   [`Error::Unsupported`] naming the path, before anything is created.
//! * **Open** as on POSIX: the lock file is opened read-only, never following a final
//!   symlink, never blocking on a FIFO, created (and its parents) when missing, never
//!   written, truncated or removed; anything but a regular file is refused untouched.
//! * **The claim is the lock.** Its key is the file's `(dev, ino)`, so two paths to one file
//!   are one lease (a runtime without inode numbers: the path, see [`claim_key`]). Under a granted claim [`try_lock`] only checks that the path still names
//!   the claimed inode (a replaced lock file is reopened, as on POSIX); it is never busy.
//!   Exclusive and shared modes, the FIFO queue and the turnstile that keeps shared claims
//!   from starving an exclusive waiter are the claim table's, as in every process.
//! * **Wait.** There is no kernel queue ([`KernelWait`] cannot be started): a waiter queues
//!   in the claim table, whose release hands it the claim and pokes its notifier; the waiter
//!   also wakes every 1 → 16 ms to judge its budget, so a deadline ends the wait on time and
//!   a cancellation within 16 ms (`wasm32-wasip1` has one thread: nobody can wake a sleeper,
//!   so a wait sleeps out its nap). A wait for a lease this very thread holds can only end
//!   by its budget.
//! * **Directories** are paths (std has no stable `openat` on WASI): a [`Dir`] remembers
//!   the identity of each directory it was reached through, and `verify` walks the chain
//!   again, so a lease in a renamed directory is reported lost rather than excluding nobody.
//! * **Trust and network file systems** are the host's business: WASI has no users or mode
//!   bits and no file-system type, so neither check applies.
//! * **Holders**: [`Holders::Unknown`](crate::Holders::Unknown) (another instance is
//!   invisible); contention with this process's own leases still says "this process".

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::io::Errno;

use super::claim::{Claim, Key, Mode};
use super::platform::PlatformOptions;
use super::platform::{
    Platform, PlatformDataDir, PlatformDir, PlatformHeld, PlatformOpened, PlatformTarget,
};
use crate::error::{Error, Result};
use crate::holders::Unusable;
use crate::kind::{FileId, FileKind};
use crate::sys::{self, Notifier, Stood};

/// What the platform is called in [`Error::Unsupported`].
const PLATFORM: &str = "WASI";

/// A directory that lock files (and data) are reached in, by path, with the identity of
/// every directory on the way as it was when opened.
#[derive(Debug, Clone)]
pub(crate) struct Dir {
    path: PathBuf,
    id: FileId,
    parent: Option<Arc<Dir>>,
}

impl PlatformDir for Dir {
    fn open(path: &Path) -> Result<Dir> {
        match sys::stat_follow(path) {
            Ok(Stood::Directory(id)) => Ok(Dir {
                path: path.to_path_buf(),
                id,
                parent: None,
            }),
            Ok(Stood::Missing) => Err(Error::NotFound {
                path: path.to_path_buf(),
            }),
            Ok(Stood::Regular(_)) => Err(Error::NotDirectory {
                path: path.to_path_buf(),
                kind: FileKind::Regular,
            }),
            Ok(Stood::Other(kind)) => Err(Error::NotDirectory {
                path: path.to_path_buf(),
                kind,
            }),
            Err(e) => Err(dir_error(path, "open directory", e)),
        }
    }

    fn create(path: &Path) -> Result<Dir> {
        create_dirs(path)?;
        Dir::open(path)
    }

    fn child(&self, name: &str, create: bool) -> Result<Dir> {
        let path = self.path.join(name);
        plain(name, &path, "open directory")?;
        if create {
            match sys::create_dir(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(dir_error(&path, "create directory", e)),
            }
        }
        // Never following a symlink here: it could redirect where locks are taken.
        match sys::stat_nofollow(&path) {
            Ok(Stood::Directory(id)) => Ok(Dir {
                path,
                id,
                parent: Some(Arc::new(self.clone())),
            }),
            Ok(Stood::Missing) => Err(Error::NotFound { path }),
            Ok(Stood::Regular(_)) => Err(Error::NotDirectory {
                path,
                kind: FileKind::Regular,
            }),
            Ok(Stood::Other(kind)) => Err(Error::NotDirectory { path, kind }),
            Err(e) => Err(dir_error(&path, "open directory", e)),
        }
    }

    fn has_lock_file(&self, name: &str) -> Result<bool> {
        let path = self.path.join(name);
        plain(name, &path, "inspect lock file")?;
        match sys::stat_nofollow(&path) {
            Ok(Stood::Missing) => Ok(false),
            Ok(Stood::Regular(_)) => Ok(true),
            Ok(Stood::Directory(_)) => Err(Error::NotRegularFile {
                path,
                kind: FileKind::Directory,
            }),
            Ok(Stood::Other(kind)) => Err(Error::NotRegularFile { path, kind }),
            Err(e) => Err(io_error(&path, "inspect lock file", e)),
        }
    }

    /// Opens a data file `name` as carefully as a lock file (see `posix/mod.rs`): the file and
    /// whether it existed before; `Ok(None)` when it is missing and `create` is false.
    fn open_file(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool)>> {
        let path = self.path.join(name);
        plain(name, &path, "open file")?;
        let existed = match sys::stat_nofollow(&path) {
            Ok(Stood::Missing) if !create => return Ok(None),
            Ok(Stood::Missing) => false,
            Ok(Stood::Regular(_)) => true,
            Ok(Stood::Directory(_)) => {
                return Err(Error::NotRegularFile {
                    path,
                    kind: FileKind::Directory,
                });
            }
            Ok(Stood::Other(kind)) => return Err(Error::NotRegularFile { path, kind }),
            Err(e) => return Err(io_error(&path, "inspect file", e)),
        };
        let file = match sys::open_data_file(&path, write, create) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(io_error(&path, "open file", e)),
        };
        match sys::fd_stood(file.as_fd()) {
            Ok(Stood::Regular(_)) => Ok(Some((file, existed))),
            Ok(Stood::Directory(_)) => Err(Error::NotRegularFile {
                path,
                kind: FileKind::Directory,
            }),
            Ok(Stood::Other(kind)) => Err(Error::NotRegularFile { path, kind }),
            Ok(Stood::Missing) => Err(Error::NotFound { path }),
            Err(e) => Err(io_error(&path, "stat file", e)),
        }
    }

    /// `fsync` of the directory.
    fn sync(&self) -> io::Result<()> {
        sys::sync_dir(&self.path)
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that every directory this one was reached through is still the directory that
    /// was opened (the root's path followed, each child's name not): see `posix/mod.rs`.
    fn verify(&self) -> Result<()> {
        let now = match self.parent {
            None => sys::stat_follow(&self.path),
            Some(_) => sys::stat_nofollow(&self.path),
        };
        match now {
            Ok(Stood::Directory(id)) if id == self.id => {}
            Ok(_) => {
                return Err(Error::LeaseLost {
                    path: self.path.clone(),
                });
            }
            Err(e) => return Err(io_error(&self.path, "verify directory", e)),
        }
        match &self.parent {
            Some(parent) => parent.verify(),
            None => Ok(()),
        }
    }

    fn names(&self) -> Result<Vec<std::ffi::OsString>> {
        sys::dir_names(&self.path).map_err(|e| io_error(&self.path, "list directory", e))
    }
}

/// Data below a directory (see `LockDir`'s data methods), by path as everything here is:
/// each name is looked at without following before it is used, and the chain of
/// directories is the one `verify` walks.
impl PlatformDataDir for Dir {
    fn entry(&self, name: &str) -> Result<Option<FileKind>> {
        let path = self.path.join(name);
        plain(name, &path, "inspect")?;
        let stood = sys::stat_nofollow(&path).map_err(|e| io_error(&path, "inspect", e))?;
        Ok(match stood {
            Stood::Missing => None,
            Stood::Regular(_) => Some(FileKind::Regular),
            Stood::Directory(_) => Some(FileKind::Directory),
            Stood::Other(kind) => Some(kind),
        })
    }

    /// WASI has no modes; a created name is made durable (`fsync` of this directory).
    fn create_child(&self, name: &str, _mode: u32) -> Result<Dir> {
        let path = self.path.join(name);
        plain(name, &path, "create directory")?;
        match sys::create_dir(&path) {
            Ok(()) => {
                sys::sync_dir(&self.path).map_err(|e| io_error(&self.path, "sync directory", e))?
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(dir_error(&path, "create directory", e)),
        }
        self.child(name, false)
    }

    /// No permission bits on WASI: 0o644.
    fn open_read(&self, name: &str) -> Result<Option<(std::fs::File, u32)>> {
        Ok(self.open_file(name, false, false)?.map(|(f, _)| (f, 0o644)))
    }

    fn create_new(&self, name: &str, _mode: u32) -> Result<Option<std::fs::File>> {
        let path = self.path.join(name);
        plain(name, &path, "create file")?;
        match sys::create_new(&path) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(io_error(&path, "create file", e)),
        }
    }

    fn rename(&self, from: &str, to_dir: &Dir, to: &str) -> Result<()> {
        let (path, dest) = (self.path.join(from), to_dir.path.join(to));
        plain(from, &path, "rename")?;
        plain(to, &dest, "rename")?;
        sys::rename(&path, &dest).map_err(|e| io_error(&path, "rename", e))
    }

    fn remove(&self, name: &str, dir: bool) -> Result<()> {
        let (op, remove): (_, fn(&Path) -> io::Result<()>) = match dir {
            true => ("remove directory", sys::remove_dir),
            false => ("remove file", sys::unlink),
        };
        let path = self.path.join(name);
        plain(name, &path, op)?;
        remove(&path).map_err(|e| io_error(&path, op, e))
    }
}

/// Where a lock file is: a path, or a name inside a [`Dir`] (then its parents are the
/// directory's business and are never created here).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    path: PathBuf,
    in_dir: bool,
}

impl PlatformTarget for Target {
    type Dir = Dir;

    fn path(_opts: &PlatformOptions, path: &Path) -> Result<Target> {
        Ok(Target {
            path: path.to_path_buf(),
            in_dir: false,
        })
    }

    fn at(_opts: &PlatformOptions, dir: &Dir, name: &str) -> Result<Target> {
        let path = dir.path.join(name);
        plain(name, &path, "open lock file")?;
        Ok(Target { path, in_dir: true })
    }

    /// No gate here (the claim table is the whole turnstile): the same target.
    fn without_gate(self) -> Target {
        self
    }

    /// The claim is the whole lock here; nothing is checked against the path anyway.
    fn unchecked(self) -> Target {
        self
    }

    fn display(&self) -> &Path {
        &self.path
    }
}

/// A lock file opened, not yet claimed.
#[derive(Debug)]
pub(crate) struct Opened {
    fd: OwnedFd,
    id: FileId,
    key: Key,
}

impl PlatformOpened for Opened {
    fn key(&self) -> Key {
        self.key
    }

    fn file_id(&self) -> Option<FileId> {
        Some(self.id)
    }
}

/// The open lock file and the claim that is the lease.
#[derive(Debug)]
pub(crate) struct Held {
    fd: OwnedFd,
    id: FileId,
    key: Key,
    _claim: Claim,
}

impl PlatformHeld for Held {
    type Opened = Opened;

    fn file_id(&self) -> Option<FileId> {
        Some(self.id)
    }

    /// Waiters of this process are handed the claim by the table itself; nobody else waits.
    fn others_waiting(&self) -> bool {
        false
    }

    /// Releases the claim and gives back the still-open file for the next try.
    fn unlock_keep(self) -> Option<Opened> {
        let Held {
            fd,
            id,
            key,
            _claim,
        } = self;
        drop(_claim);
        Some(Opened { fd, id, key })
    }
}

/// Never exists here: there is no kernel queue to be granted from.
pub(crate) enum Granted {}

/// The outcome of one non-blocking try (the one enum of every platform).
type Attempt = super::platform::Attempt<Single>;

/// The claim key of a lock file: its `(dev, ino)`, so that every spelling of one file is
/// one lease. A runtime that reports no inode numbers (0: some in-memory or browser WASI
/// file systems) would make every file one lease, and a lease nested in another (the keyed
/// pattern's collector lock and a key's lock) would wait for itself; there the key is the
/// leading bytes of the SHA-256 of the path as given instead (spellings then differ).
fn claim_key(id: FileId, path: &Path) -> Key {
    if id.ino != 0 {
        return (id.dev, id.ino);
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(path.as_os_str().as_encoded_bytes());
    let half = |b: &[u8]| b.iter().fold(0u64, |acc, x| (acc << 8) | u64::from(*x));
    (half(&digest[..8]), half(&digest[8..16]))
}

/// No kernel queue: [`start`](Self::start) always gives the file back, and the waiter
/// waits in the claim table.
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

fn plain(name: &str, path: &Path, op: &'static str) -> Result<()> {
    if sys::is_plain_name(OsStr::new(name)) {
        return Ok(());
    }
    Err(Error::Io {
        op,
        path: path.to_path_buf(),
        source: io::Error::new(
            io::ErrorKind::InvalidInput,
            "must be a single plain file name",
        ),
    })
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
        .any(|a| matches!(sys::stat_nofollow(a), Ok(Stood::Regular(_))));
    if file_in_the_way {
        return Error::ParentNotDirectory {
            path: path.to_path_buf(),
        };
    }
    io_error(path, op, e)
}

/// Maps an I/O error to the typed error a user can act on (WASI's errno values, as on POSIX).
pub(crate) fn io_error(path: &Path, op: &'static str, e: io::Error) -> Error {
    let path = path.to_path_buf();
    match Errno::from_io_error(&e) {
        Some(Errno::LOOP) => Error::NotRegularFile {
            path,
            kind: FileKind::Symlink,
        },
        Some(Errno::ISDIR) => Error::NotRegularFile {
            path,
            kind: FileKind::Directory,
        },
        Some(Errno::NOTDIR) => Error::ParentNotDirectory { path },
        Some(Errno::ACCESS | Errno::PERM | Errno::NOTCAPABLE) => Error::PermissionDenied { path },
        Some(Errno::NAMETOOLONG) => Error::NameTooLong { path },
        Some(Errno::NOENT) => Error::NotFound { path },
        Some(Errno::MFILE | Errno::NFILE) => Error::TooManyOpenFiles { path, limit: 0 },
        _ => Error::Io {
            op,
            path,
            source: e,
        },
    }
}

/// The single-process platform, WASI (see [`Platform`]): each step's body is in its item
/// below.
#[derive(Debug)]
pub(crate) struct Single;

impl Platform for Single {
    /// Not by a notifier alone: waiters also poll their budget, as WASI cannot wake a sleeper
    /// on a cancellation.
    const NOTIFIES: bool = false;

    type Dir = Dir;
    type Target = Target;
    type Opened = Opened;
    type Held = Held;
    type Granted = Granted;
    type KernelWait = KernelWait;

    /// Opens the lock file, refusing anything but a regular file — and refusing to lease at
    /// all unless the program declared itself the only one ([`LeaseOptions::single_process`](crate::LeaseOptions::single_process)).
    fn open(opts: &PlatformOptions, target: &Target) -> Result<Opened> {
        let path = target.display();
        if !opts.single_process {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                platform: PLATFORM,
            });
        }
        let fd = match sys::open_lock_file(path, opts.create) {
            Ok(fd) => fd,
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    && opts.create
                    && opts.create_parents
                    && !target.in_dir =>
            {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    create_dirs(parent).map_err(|e| e.for_lock_path(path))?;
                }
                sys::open_lock_file(path, true).map_err(|e| io_error(path, "open lock file", e))?
            }
            Err(e) => return Err(io_error(path, "open lock file", e)),
        };
        match sys::fd_stood(fd.as_fd()) {
            Ok(Stood::Regular(id)) => Ok(Opened {
                fd,
                id,
                key: claim_key(id, path),
            }),
            Ok(Stood::Directory(_)) => Err(Error::NotRegularFile {
                path: path.to_path_buf(),
                kind: FileKind::Directory,
            }),
            Ok(Stood::Other(kind)) => Err(Error::NotRegularFile {
                path: path.to_path_buf(),
                kind,
            }),
            Ok(Stood::Missing) => Err(Error::NotFound {
                path: path.to_path_buf(),
            }),
            Err(e) => Err(io_error(path, "stat lock file", e)),
        }
    }
    /// One try under a granted claim. The claim is the lock; what is left to check is that the
    /// claimed inode is still the file at the path (else newcomers claim another inode).
    fn try_lock(
        target: &Target,
        opened: Opened,
        claim: Claim,
        _mode: Mode,
        _may_wait: bool,
    ) -> Result<Attempt> {
        match sys::stat_nofollow(target.display()) {
            Ok(Stood::Regular(now)) if now == opened.id => Ok(Attempt::Acquired(Held {
                fd: opened.fd,
                id: opened.id,
                key: opened.key,
                _claim: claim,
            })),
            Ok(_) => Ok(Attempt::Replaced),
            Err(e) => Err(io_error(target.display(), "verify lock file", e)),
        }
    }
    /// Never granted (no kernel queue).
    fn accept(_target: &Target, granted: Granted, _claim: Claim) -> Result<Option<Held>> {
        match granted {}
    }
    /// Never called here (no kernel queue to block in: `NOTIFIES` is false).
    fn lock_inline(
        target: &Target,
        _opened: Opened,
        _mode: Mode,
        _interrupted: &dyn Fn() -> std::ops::ControlFlow<()>,
    ) -> Result<Option<Granted>> {
        Err(Error::Io {
            op: "lock",
            path: target.display().to_path_buf(),
            source: io::Error::new(io::ErrorKind::Unsupported, "no kernel lock queue on WASI"),
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
    /// Whether the inode `id` is still the file at the path.
    fn still_at_path(target: &Target, id: Option<FileId>) -> bool {
        matches!(sys::stat_nofollow(target.display()), Ok(Stood::Regular(now)) if Some(now) == id)
    }
    /// Checks that a held lease's inode is still the file at the path.
    fn verify(target: &Target, held: &Held) -> Result<()> {
        match sys::stat_nofollow(target.display()) {
            Ok(Stood::Regular(now)) if now == held.id => Ok(()),
            Ok(_) => Err(Error::LeaseLost {
                path: target.display().to_path_buf(),
            }),
            Err(e) => Err(io_error(target.display(), "verify lock file", e)),
        }
    }
    /// Removes a held lease's lock file if the path still names the claimed inode (the keyed
    /// collector's protocol, see `posix/mod.rs`).
    fn unlink_held(target: &Target, held: &Held) -> Result<bool> {
        match sys::stat_nofollow(target.display()) {
            Ok(Stood::Regular(now)) if now == held.id => {}
            Ok(_) => return Ok(false),
            Err(e) => return Err(io_error(target.display(), "inspect lock file", e)),
        }
        match sys::unlink(target.display()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error(target.display(), "remove lock file", e)),
        }
    }
    /// The modification time of a held lease's lock file.
    fn modified(target: &Target, held: &Held) -> Result<std::time::SystemTime> {
        sys::fd_modified(held.fd.as_fd())
            .map_err(|e| io_error(target.display(), "stat lock file", e))
    }
    /// WASI has no users or mode bits: nothing to judge (see [`LeaseOptions::allow_shared_state`](crate::LeaseOptions::allow_shared_state)).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_keyed_by_inode_and_by_path_where_the_runtime_has_no_inodes() {
        let id = |ino| FileId { dev: 9, ino };
        assert_eq!(claim_key(id(7), Path::new("/a.lock")), (9, 7));
        assert_eq!(claim_key(id(7), Path::new("/other/spelling")), (9, 7));
        let (a, b) = (Path::new("/tmp/a.lock"), Path::new("/tmp/b.lock"));
        assert_ne!(
            claim_key(id(0), a),
            claim_key(id(0), b),
            "no inodes: files stay apart"
        );
        assert_eq!(claim_key(id(0), a), claim_key(id(0), a));
    }

    #[test]
    fn without_the_opt_in_open_refuses_before_touching_the_file_system() {
        let dir = crate::test_dir();
        let path = dir.path().join("p/q.lock");
        let target = Target::path(&crate::LeaseOptions::new().platform(), &path).unwrap();
        let err = Single::open(&crate::LeaseOptions::new().platform(), &target).unwrap_err();
        assert!(
            matches!(&err, Error::Unsupported { path: p, .. } if *p == path),
            "{err:?}"
        );
        assert!(!dir.path().join("p").exists());
        let opened = Single::open(
            &crate::LeaseOptions::new().single_process(true).platform(),
            &target,
        )
        .unwrap();
        assert_eq!(
            opened.file_id(),
            sys::stat_nofollow(&path).ok().and_then(|s| match s {
                Stood::Regular(id) => Some(id),
                _ => None,
            })
        );
    }
}
