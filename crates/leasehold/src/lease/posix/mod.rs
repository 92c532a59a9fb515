//! The primitive on POSIX (Linux, macOS, the BSDs): `flock` on a lock file.
//!
//! The fixed set of functions `lease/mod.rs` builds on: [`Dir`] (directory handles),
//! [`Target`] (where a lock file is), [`open`], [`try_lock`], [`KernelWait`] (a wait in the
//! kernel's own `flock` queue), [`accept`], [`still_at_path`], [`verify`], [`holders`] and the
//! error mapping. Every system call is made through `sys`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rustix::io::Errno;

use super::claim::{Claim, Key, Mode};
use crate::error::{Error, Result};
use crate::holders::Unusable;
use crate::kind::{FileId, FileKind};
use crate::options::LeaseOptions;
use crate::sys::{self, Entry, Notifier};

/// Whether waiters here are woken by a notifier (else they poll: Windows).
pub(crate) const NOTIFIES: bool = true;

/// An opened directory that lock files are opened relative to (`openat`).
#[derive(Debug, Clone)]
pub(crate) struct Dir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
    /// The directory's identity when it was opened.
    id: FileId,
    /// How it was reached, so that [`Dir::verify`] can walk the chain again.
    parent: Option<Arc<Dir>>,
}

impl Dir {
    pub(crate) fn open(path: &Path) -> Result<Dir> {
        let fd = sys::open_dir_at(sys::cwd(), path, true)
            .map_err(|e| dir_error(sys::cwd(), path, path, e))?;
        let id = sys::fd_id(fd.as_fd()).map_err(|e| path_error(path, "stat directory", e))?;
        Ok(Dir {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
            id,
            parent: None,
        })
    }

    /// Checks that every directory from the path the chain was opened as down to this one
    /// still is the directory that was opened: the configured path (symlinks followed, as at
    /// [`Dir::open`]) names the root's inode, and each child name (never followed) names its
    /// child's inode. A directory renamed or replaced anywhere on the way means newcomers
    /// resolve elsewhere, so a lease held in it no longer excludes them.
    pub(crate) fn verify(&self) -> Result<()> {
        let (at, name, follow) = match &self.parent {
            None => (sys::cwd(), self.path.as_path(), true),
            Some(parent) => (
                parent.fd.as_fd(),
                Path::new(self.path.file_name().unwrap_or_default()),
                false,
            ),
        };
        match sys::dir_id_at(at, name, follow) {
            Ok(Some(now)) if now == self.id => {}
            Ok(_) => {
                return Err(Error::LeaseLost {
                    path: self.path.clone(),
                });
            }
            Err(e) => return Err(path_error(&self.path, "verify directory", e)),
        }
        match &self.parent {
            Some(parent) => parent.verify(),
            None => Ok(()),
        }
    }

    /// The names of the entries of this directory.
    pub(crate) fn names(&self) -> Result<Vec<std::ffi::OsString>> {
        sys::dir_names(self.fd.as_fd()).map_err(|e| path_error(&self.path, "list directory", e))
    }

    pub(crate) fn create(path: &Path) -> Result<Dir> {
        create_dirs(path)?;
        Dir::open(path)
    }

    pub(crate) fn child(&self, name: &str, create: bool) -> Result<Dir> {
        let path = self.path.join(name);
        plain(name, &path, "open directory")?;
        if create {
            match sys::mkdir_at(self.fd.as_fd(), Path::new(name)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(dir_error(self.fd.as_fd(), Path::new(name), &path, e)),
            }
        }
        let fd = sys::open_dir_at(self.fd.as_fd(), Path::new(name), false)
            .map_err(|e| dir_error(self.fd.as_fd(), Path::new(name), &path, e))?;
        let id = sys::fd_id(fd.as_fd()).map_err(|e| path_error(&path, "stat directory", e))?;
        Ok(Dir {
            fd: Arc::new(fd),
            path,
            id,
            parent: Some(Arc::new(self.clone())),
        })
    }

    pub(crate) fn has_lock_file(&self, name: &str) -> Result<bool> {
        let path = self.path.join(name);
        plain(name, &path, "inspect lock file")?;
        match sys::entry_at(self.fd.as_fd(), Path::new(name)) {
            Ok(Entry::Missing) => Ok(false),
            Ok(Entry::Regular(_)) => Ok(true),
            Ok(Entry::Other(kind)) => Err(Error::NotRegularFile { path, kind }),
            Err(e) => Err(path_error(&path, "inspect lock file", e)),
        }
    }

    /// Opens a data file `name` in this directory as carefully as a lock file: never
    /// following a final symlink, never opening anything but a regular file (a device node is
    /// refused before it is opened), never blocking on a FIFO, close-on-exec. `write` opens
    /// it for appending; `create` creates a missing one (0600). `Ok(None)`: no such file;
    /// otherwise the file and whether it existed before.
    pub(crate) fn open_file(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool)>> {
        let path = self.path.join(name);
        plain(name, &path, "open file")?;
        let existed = match sys::entry_at(self.fd.as_fd(), Path::new(name)) {
            Ok(Entry::Other(kind)) => return Err(Error::NotRegularFile { path, kind }),
            Ok(Entry::Missing) if !create => return Ok(None),
            Ok(Entry::Missing) => false,
            Ok(Entry::Regular(_)) => true,
            Err(e) => return Err(path_error(&path, "inspect file", e)),
        };
        let fd = match sys::open_data_file(self.fd.as_fd(), Path::new(name), write, create) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(e) => return Err(path_error(&path, "open file", e)),
        };
        match sys::fd_entry(fd.as_fd()) {
            Ok(Entry::Regular(_)) => Ok(Some((std::fs::File::from(fd), existed))),
            Ok(Entry::Other(kind)) => Err(Error::NotRegularFile { path, kind }),
            Ok(Entry::Missing) => Err(path_error(&path, "stat file", Errno::NOENT)),
            Err(e) => Err(path_error(&path, "stat file", e)),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Makes the directory's entries durable (`fsync` of the directory).
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        sys::sync_dir_fd(self.fd.as_fd())
    }
}

/// Where a lock file is: a path (resolved against the working directory) or a name inside an
/// opened [`Dir`] — or, for [`LeaseOptions::lock_descriptor`](super::LeaseOptions), no path
/// at all (`checked == false`: a descriptor the caller opened, whose inode nothing can be
/// checked against).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    dir: Option<Arc<OwnedFd>>,
    name: PathBuf,
    /// How messages name the lock, where that is not `name` (a lock in a [`Dir`], or a
    /// descriptor): one path copy fewer per acquisition on the common path.
    display: Option<PathBuf>,
    /// Whether the lock has a gate (see [`gate`]), named after `name` when it is needed.
    gated: bool,
    /// Whether the locked inode is checked against `name` (false only for descriptors).
    checked: bool,
}

impl Target {
    pub(crate) fn path(_opts: &LeaseOptions, path: &Path) -> Result<Target> {
        Ok(Target {
            dir: None,
            name: path.to_path_buf(),
            display: None,
            gated: true,
            checked: true,
        })
    }

    pub(crate) fn at(dir: &Dir, name: &str) -> Result<Target> {
        let display = dir.path.join(name);
        plain(name, &display, "open lock file")?;
        Ok(Target {
            dir: Some(dir.fd.clone()),
            name: PathBuf::from(name),
            display: Some(display),
            gated: true,
            checked: true,
        })
    }

    /// The same lock without a gate: for an internal lock whose exclusive holder never waits
    /// (the keyed namespace's collector lock), where a turnstile protects nobody and its
    /// gate file would only be one more file in the namespace.
    pub(crate) fn without_gate(mut self) -> Target {
        self.gated = false;
        self
    }

    /// A descriptor the caller opened (`display` names it in messages): no path, no gate.
    pub(crate) fn descriptor(display: PathBuf) -> Target {
        Target {
            dir: None,
            name: PathBuf::new(),
            display: Some(display),
            gated: false,
            checked: false,
        }
    }

    fn dir(&self) -> BorrowedFd<'_> {
        match &self.dir {
            None => sys::cwd(),
            Some(d) => d.as_fd(),
        }
    }

    pub(crate) fn display(&self) -> &Path {
        self.display.as_deref().unwrap_or(&self.name)
    }

    /// The gate's name, relative to `dir` (computed when needed: only shared acquirers and
    /// waiters use it).
    fn gate(&self) -> Option<PathBuf> {
        let lock = self.name.file_name().filter(|_| self.gated)?;
        Some(self.name.with_file_name(gate::name(lock)))
    }

    /// The readers' gate's name, relative to `dir` (see [`gate`]; computed when needed, as
    /// [`gate`](Self::gate) is).
    fn readers_gate(&self) -> Option<PathBuf> {
        let lock = self.name.file_name().filter(|_| self.gated)?;
        Some(self.name.with_file_name(gate::readers_name(lock)))
    }

    /// The writers' queue's name, relative to `dir` (see [`gate`]; computed when needed).
    fn writers_gate(&self) -> Option<PathBuf> {
        let lock = self.name.file_name().filter(|_| self.gated)?;
        Some(self.name.with_file_name(gate::writers_name(lock)))
    }
}

/// A lock file opened for locking, not yet locked.
#[derive(Debug)]
pub(crate) struct Opened {
    fd: OwnedFd,
    id: FileId,
}

/// A caller's descriptor, duplicated (the same open file description, so the lock taken is
/// the description's), as a lock to take; it must be a regular file or a directory.
pub(crate) fn open_descriptor(target: &Target, fd: BorrowedFd<'_>) -> Result<Opened> {
    let path = target.display();
    let (id, kind) = sys::fd_identity(fd).map_err(|e| path_error(path, "stat descriptor", e))?;
    if let Some(kind) = kind.filter(|k| *k != FileKind::Directory) {
        return Err(Error::NotRegularFile {
            path: path.to_path_buf(),
            kind,
        });
    }
    let fd = sys::dup_cloexec(fd).map_err(|e| path_error(path, "duplicate descriptor", e))?;
    Ok(Opened { fd, id })
}

impl Opened {
    pub(crate) fn key(&self) -> Key {
        (self.id.dev, self.id.ino)
    }
    pub(crate) fn file_id(&self) -> Option<FileId> {
        Some(self.id)
    }
}

/// The locked file, its identity and its in-process claim. Field order matters: the
/// descriptor closes first (dropping the kernel lock, unless a child still holds the open
/// file description), then a gate kept from an exclusive wait is unlocked (see [`gate`]),
/// gate descriptors already unlocked close, and the claim leaves the table last.
///
/// A lease is released by closing, never by `flock(LOCK_UN)` on its description: the
/// description may be shared (COMMAND of `run` and `flock`, a child given the lease with
/// `share_with_children`, a `fork`), and `LOCK_UN` drops the lock for every holder of it
/// (<https://github.com/leasehold/leasehold/issues/22> item 1: a waiting `run` whose gate
/// hand-back unlocked a duplicate of its descriptor let a second `run` in beside COMMAND's
/// background child).
#[derive(Debug)]
pub(crate) struct Held {
    fd: OwnedFd,
    /// The gate an exclusive waiter holds until it releases (see [`gate`]).
    gate: Option<gate::HeldGate>,
    id: FileId,
    /// Whether this process marked itself waiting for this lease (Linux; see
    /// `sys::mark_waiting`): the mark is removed when a handle unlocks.
    marked: bool,
    /// Gate descriptors already unlocked, closed after the lock file's.
    spare: gate::Spare,
    _claim: Claim,
}

impl Held {
    pub(crate) fn file_id(&self) -> Option<FileId> {
        Some(self.id)
    }
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
    /// Whether other processes wait for this lease (Linux: their marks, `sys::mark_waiting`;
    /// elsewhere nobody can tell cheaply, and the answer is `false`).
    pub(crate) fn others_waiting(&self) -> bool {
        #[cfg(all(target_os = "linux", not(leasehold_portable)))]
        return sys::others_waiting(self.fd.as_fd());
        #[cfg(not(all(target_os = "linux", not(leasehold_portable))))]
        false
    }

    /// Unlocks without closing (`LOCK_UN`), giving back the still-open file; `None` when the
    /// unlock failed and the file was closed instead (which releases for certain). Only for a
    /// [`LeaseHandle`](super::LeaseHandle)'s lease, whose description nobody else holds: it
    /// has no `share_with_children` and no `as_fd` (see [`Held`] for why a description that
    /// may be shared is never unlocked).
    pub(crate) fn unlock_keep(self) -> Option<Opened> {
        let Held {
            gate,
            fd,
            id,
            marked,
            spare,
            _claim,
        } = self;
        let kept = match sys::unlock(fd.as_fd()) {
            Ok(()) => {
                // A mark left from waiting for this lease goes now, after the unlock, so it
                // costs the waiters the kernel just woke nothing.
                #[cfg(all(target_os = "linux", not(leasehold_portable)))]
                if marked {
                    sys::unmark_waiting(fd.as_fd());
                }
                let _ = marked;
                Some(Opened { fd, id })
            }
            Err(_) => None,
        };
        drop(gate); // after the unlock: readers queued on the gate find the lock free
        drop(spare);
        drop(_claim); // the in-process claim goes last
        kept
    }
}

/// A descriptor the kernel locked for a waiter, not yet checked against the path.
pub(crate) struct Granted {
    fd: OwnedFd,
    id: FileId,
    /// Whether it was granted after waiting in the kernel's queue (and so marked).
    marked: bool,
    /// What the wait kept of the gates (see [`gate`]).
    passed: gate::Passed,
}

/// The outcome of one non-blocking try.
pub(crate) enum Attempt {
    Acquired(Held),
    Busy(Opened, Claim),
    Replaced,
}

/// File systems already classified, by device: `fstatfs` on every acquisition measured as a
/// tenth of the uncontended cost, and a mounted device's file system does not change.
static NETWORK_FS: Mutex<Option<HashMap<u64, Option<&'static str>>>> = Mutex::new(None);

/// The device last found local, plus one (0: none yet). Most processes lock files on one
/// file system; this spares them the table's mutex and hash lookup on every acquisition.
static LAST_LOCAL: AtomicU64 = AtomicU64::new(0);

fn network_fs(fd: BorrowedFd<'_>, dev: u64, path: &Path) -> Result<Option<&'static str>> {
    if LAST_LOCAL.load(Ordering::Relaxed) == dev.wrapping_add(1) {
        return Ok(None);
    }
    if let Some(known) = NETWORK_FS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|m| m.get(&dev).copied())
    {
        if known.is_none() {
            LAST_LOCAL.store(dev.wrapping_add(1), Ordering::Relaxed);
        }
        return Ok(known);
    }
    let fs = sys::network_fs(fd).map_err(|e| path_error(path, "statfs lock file", e))?;
    if fs.is_none() {
        LAST_LOCAL.store(dev.wrapping_add(1), Ordering::Relaxed);
    }
    NETWORK_FS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(dev, fs);
    Ok(fs)
}

/// Opens the lock file, refusing anything but a regular file.
pub(crate) fn open(opts: &LeaseOptions, target: &Target) -> Result<Opened> {
    let (dir, name, path) = (target.dir(), target.name.as_path(), target.display());
    // No look before the open: the open's own flags refuse what must never be opened — a
    // symlink (`O_NOFOLLOW`: ELOOP), a socket (ENXIO), a directory (`O_CREAT`: EISDIR) — and
    // make a FIFO harmless (`O_NONBLOCK`), and the `fstat` below refuses whatever else got
    // opened. A device node is thus opened (non-blocking, never as a controlling terminal)
    // before it is refused. Why not `lstat` first, as before: it measured ~20 % of an
    // uncontended cycle on the reference VM (a path walk), the one system call beyond what
    // the contract needs (issue 12), and it still left a race between the look and the open.
    let fd = match sys::open_lock_file(dir, name, opts.create) {
        Ok(fd) => fd,
        Err(Errno::NOENT) if opts.create && opts.create_parents && target.dir.is_none() => {
            if let Some(parent) = name.parent().filter(|p| !p.as_os_str().is_empty()) {
                create_dirs(parent).map_err(|e| e.for_lock_path(path))?;
            }
            sys::open_lock_file(dir, name, true)
                .map_err(|e| path_error(path, "open lock file", e))?
        }
        Err(e) => return Err(path_error(path, "open lock file", e)),
    };
    let (entry, untrusted) = sys::fd_entry_judged(fd.as_fd(), !opts.allow_shared_state)
        .map_err(|e| path_error(path, "stat lock file", e))?;
    let id = match entry {
        Entry::Regular(id) => id,
        Entry::Other(kind) => {
            return Err(Error::NotRegularFile {
                path: path.to_path_buf(),
                kind,
            });
        }
        Entry::Missing => return Err(path_error(path, "stat lock file", Errno::NOENT)),
    };
    if let Some(reason) = untrusted {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason,
        });
    }
    if !opts.allow_network_fs
        && let Some(fs) = network_fs(fd.as_fd(), id.dev, path)?
    {
        return Err(Error::NetworkFilesystem {
            path: path.to_path_buf(),
            fs,
        });
    }
    Ok(Opened { fd, id })
}

/// One non-blocking try under a granted claim: flock, then verify that the inode is still the
/// file at the path (a lock on an orphaned inode proves nothing). `may_wait`: the caller
/// waits if this is busy (an exclusive try then defers to waiting readers, see `gate`).
pub(crate) fn try_lock(
    target: &Target,
    opened: Opened,
    claim: Claim,
    mode: Mode,
    may_wait: bool,
) -> Result<Attempt> {
    #[cfg(test)]
    super::tests::before_lock_hook();
    let shared = mode == Mode::Shared;
    if !shared && may_wait && gate::readers_waiting(target, opened.id) {
        // Readers wait (this release may just have woken them): queue behind them instead
        // of taking the lock back first.
        return Ok(Attempt::Busy(opened, claim));
    }
    // A shared try passes the gate first: while an exclusive waiter holds it, newcomers
    // are busy (they wait behind it, see `gate`). The gate closes once the try is done.
    let gate = match shared {
        true => gate::open(target, true),
        false => None,
    };
    if gate.as_ref().is_some_and(|g| !gate::pass_now(g)) {
        return Ok(Attempt::Busy(opened, claim));
    }
    let locked = sys::try_lock(opened.fd.as_fd(), shared);
    drop(gate);
    match locked {
        Ok(true) => {}
        Ok(false) => return Ok(Attempt::Busy(opened, claim)),
        Err(e) => return Err(lock_error(target.display(), e)),
    }
    let granted = Granted {
        fd: opened.fd,
        id: opened.id,
        marked: false,
        passed: gate::Passed::default(),
    };
    Ok(match accept(target, granted, claim)? {
        Some(held) => Attempt::Acquired(held),
        None => Attempt::Replaced,
    })
}

/// A locked descriptor becomes a [`Held`] lease if its inode is still the file at the path;
/// `Ok(None)` (the descriptor closed, releasing the orphan's lock) when it was replaced.
pub(crate) fn accept(target: &Target, granted: Granted, claim: Claim) -> Result<Option<Held>> {
    let Granted {
        fd,
        id,
        marked,
        passed: gate::Passed { held: gate, spare },
    } = granted;
    if !target.checked {
        // A caller's descriptor: there is no path to check it against.
        return Ok(Some(Held {
            fd,
            id,
            marked,
            gate,
            spare,
            _claim: claim,
        }));
    }
    match sys::entry_at(target.dir(), &target.name) {
        Ok(Entry::Regular(now)) if now == id => Ok(Some(Held {
            fd,
            id,
            marked,
            gate,
            spare,
            _claim: claim,
        })),
        Ok(_) | Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(path_error(target.display(), "verify lock file", e)),
    }
}

/// Blocks this thread in the kernel's queue for `opened` (no helper: one wake-up fewer on
/// the handoff's critical path, measured ~16 µs on the 2-core reference VM). Only for waits
/// that nothing can end but the grant: an unlimited budget without a cancellation token.
pub(crate) fn lock_inline(target: &Target, opened: Opened, mode: Mode) -> Result<Granted> {
    #[cfg(all(target_os = "linux", not(leasehold_portable)))]
    sys::mark_waiting(opened.fd.as_fd());
    // The mark stays until the lease's descriptor closes (which drops it) or a handle
    // unlocks (`Held::unlock_keep`): removing it here measured ~1 µs on the handoff path.
    let res = gate::block(
        opened.fd.as_fd(),
        gate::open_for_wait(target, opened.id, mode == Mode::Shared),
        mode == Mode::Shared,
    );
    let passed = res.map_err(|e| lock_error(target.display(), e))?;
    Ok(Granted {
        fd: opened.fd,
        id: opened.id,
        marked: true,
        passed,
    })
}

/// Whether the inode `id` is still the file at the path (else a waiter follows the path).
pub(crate) fn still_at_path(target: &Target, id: Option<FileId>) -> bool {
    !target.checked
        || matches!(
            sys::entry_at(target.dir(), &target.name),
            Ok(Entry::Regular(now)) if Some(now) == id
        )
}

/// Checks that a held lease's inode is still the file at the path (one `fstatat`).
pub(crate) fn verify(target: &Target, held: &Held) -> Result<()> {
    match sys::entry_at(target.dir(), &target.name) {
        Ok(Entry::Regular(now)) if now == held.id => Ok(()),
        Ok(_) | Err(Errno::NOENT) => Err(Error::LeaseLost {
            path: target.display().to_path_buf(),
        }),
        Err(e) => Err(path_error(target.display(), "verify lock file", e)),
    }
}

/// See `lease::check_trusted`.
pub(crate) fn check_trusted(path: &Path) -> Result<()> {
    match sys::untrusted_at(sys::cwd(), path) {
        Ok(None) => Ok(()),
        Ok(Some(reason)) => Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason,
        }),
        Err(e) => Err(path_error(path, "inspect", e)),
    }
}

/// Removes a held lease's lock file, if the path still names the locked inode: `Ok(true)`
/// when it was unlinked. Only the collector of keyed lock files calls this, holding both the
/// file's exclusive lock and the namespace's exclusive lock: nobody else ever unlinks or
/// replaces a lock file, so the path cannot change between the check and the unlink.
pub(crate) fn unlink_held(target: &Target, held: &Held) -> Result<bool> {
    match sys::entry_at(target.dir(), &target.name) {
        Ok(Entry::Regular(now)) if now == held.id => {}
        Ok(_) => return Ok(false),
        Err(e) => return Err(path_error(target.display(), "inspect lock file", e)),
    }
    match sys::unlink_at(target.dir(), &target.name) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(path_error(target.display(), "remove lock file", e)),
    }
}

/// The modification time of a held lease's lock file (lock files are never written, so it
/// is when the file was created unless someone touched it).
pub(crate) fn modified(target: &Target, held: &Held) -> Result<std::time::SystemTime> {
    sys::fd_modified(held.fd.as_fd()).map_err(|e| path_error(target.display(), "stat lock file", e))
}

/// Maps a failed holder look-up to the error naming `path`.
pub(crate) fn holders_error(path: &Path, u: Unusable) -> Error {
    match u {
        Unusable::NotRegular(kind) => Error::NotRegularFile {
            path: path.to_path_buf(),
            kind,
        },
        Unusable::Os(e) => match e.raw_os_error() {
            Some(raw) => path_error(path, "inspect lock file", Errno::from_raw_os_error(raw)),
            None => Error::Io {
                op: "inspect lock file",
                path: path.to_path_buf(),
                source: e,
            },
        },
    }
}

// ---------------------------------------------------------------------------------------
// Waiting in the kernel's queue
// ---------------------------------------------------------------------------------------

/// A wait in the kernel's own `flock` queue, run by a helper thread, that the waiter can
/// abandon at any moment.
///
/// Why the kernel's queue: a waiter that sleeps on an event and then retries `LOCK_NB` loses
/// the race to a releaser that re-locks at once — the kernel wakes blocked lockers directly
/// when a lock is dropped, but an event reaches a poller only after the release, and the
/// poller must then be scheduled and retry (measured: 0.2 % owner changes with two processes
/// in a back-to-back loop where blocking `flock(LOCK_EX)` gives 52 %; see BENCHMARKS.md).
/// Blocking in `flock` cannot be cancelled without signals, so a helper thread blocks instead
/// of the waiter, and the waiter sleeps on its notifier and its budget's cancellation pipe.
///
/// The price, measured (issue 12, BENCHMARKS.md "Issue 12 — after"): a grant lands on the
/// helper, which must then wake the waiting thread — a second thread wake-up on the
/// handoff's critical path, 16–18 µs p50 on the 2-vCPU reference VM (an idle vCPU's wake-up
/// through the hypervisor; an eventfd ping-pong between two busy threads costs 4 µs), so a
/// cancellable handoff is 2.5–3.8× a blocking `flock`'s instead of the 1.3× the issue asks.
/// The alternative — the waiting thread itself blocked in `flock`, a signal to end the wait
/// — needs a handler installed without `SA_RESTART` (else the kernel restarts `flock`):
/// `signal-hook` always sets `SA_RESTART`, and `sigaction` itself is `unsafe`, which this
/// crate does not write. Waits nothing but a grant can end (no deadline, no token) block the
/// calling thread inline (`lock_inline`) and pay one wake-up, as `flock` does.
///
/// Abandoning (dropping) the wait leaves the helper blocked; when the kernel grants it the
/// lock nobody wants any more, it closes the descriptor at once, so the lease is held by
/// nobody of ours for more than the few microseconds that takes. A later waiter in this
/// process on the same inode adopts the abandoned wait instead of starting another, so a
/// process never has more than one helper per inode and mode.
pub(crate) struct KernelWait {
    slot: Arc<Slot>,
    id: FileId,
}

struct Slot {
    state: Mutex<SlotState>,
}

enum SlotState {
    Waiting(Arc<Notifier>),
    Abandoned,
    /// The locked descriptor, and what the lease keeps of the gates.
    Granted(OwnedFd, gate::Passed),
    Failed(Errno),
    Taken,
}

/// Kernel waits in progress: (inode, shared?, slot).
static PENDING: Mutex<Vec<(FileId, bool, Arc<Slot>)>> = Mutex::new(Vec::new());

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl KernelWait {
    /// Starts (or adopts) a kernel wait for `opened` in `mode`; `notifier` is poked on grant.
    /// (`Err` gives the file back where no kernel queue exists: never on POSIX.)
    pub(crate) fn start(
        target: &Target,
        opened: Opened,
        mode: Mode,
        notifier: Arc<Notifier>,
    ) -> std::result::Result<KernelWait, Opened> {
        let shared = mode == Mode::Shared;
        let mut pending = guard(&PENDING);
        for (id, sh, slot) in pending.iter() {
            if *id == opened.id && *sh == shared {
                let mut state = guard(&slot.state);
                if matches!(*state, SlotState::Abandoned) {
                    *state = SlotState::Waiting(notifier);
                    return Ok(KernelWait {
                        slot: slot.clone(),
                        id: opened.id,
                    });
                }
            }
        }
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Waiting(notifier)),
        });
        pending.push((opened.id, shared, slot.clone()));
        drop(pending);
        let (id, job_slot) = (opened.id, slot.clone());
        // Opened here, by the waiter, so the helper needs nothing of the target.
        let gates = gate::open_for_wait(target, opened.id, shared);
        let started = helpers::run(Box::new(move || {
            let fd = opened.fd;
            #[cfg(all(target_os = "linux", not(leasehold_portable)))]
            sys::mark_waiting(fd.as_fd());
            // The mark stays with the lease (see `lock_inline`).
            let res = gate::block(fd.as_fd(), gates, shared);
            guard(&PENDING).retain(|(_, _, s)| !Arc::ptr_eq(s, &job_slot));
            let mut state = guard(&job_slot.state);
            if let SlotState::Waiting(n) = &*state {
                let n = n.clone();
                *state = match res {
                    Ok(passed) => SlotState::Granted(fd, passed),
                    Err(e) => SlotState::Failed(e),
                };
                n.poke();
            }
            // Abandoned: `fd` closes here, releasing a lock nobody wants.
        }));
        if !started {
            // No helper thread (the process is at its thread limit): the wait fails at once
            // instead of never ending. The job, and the descriptor in it, are gone.
            guard(&PENDING).retain(|(_, _, s)| !Arc::ptr_eq(s, &slot));
            *guard(&slot.state) = SlotState::Failed(Errno::AGAIN);
        }
        Ok(KernelWait { slot, id })
    }

    /// The locked descriptor once the kernel granted it; the error if `flock` failed.
    pub(crate) fn poll(&self, target: &Target) -> Option<Result<Granted>> {
        let mut state = guard(&self.slot.state);
        match std::mem::replace(&mut *state, SlotState::Taken) {
            SlotState::Granted(fd, passed) => Some(Ok(Granted {
                fd,
                id: self.id,
                marked: true,
                passed,
            })),
            SlotState::Failed(e) => Some(Err(lock_error(target.display(), e))),
            other => {
                *state = other;
                None
            }
        }
    }
}

impl Drop for KernelWait {
    fn drop(&mut self) {
        // Take the pending list first (the helper's order), so an adopter never sees a slot
        // half-way.
        let _pending = guard(&PENDING);
        let mut state = guard(&self.slot.state);
        if matches!(*state, SlotState::Waiting(_)) {
            *state = SlotState::Abandoned;
        } else if matches!(*state, SlotState::Granted(..)) {
            *state = SlotState::Taken; // drops the descriptor: releases at once
        }
    }
}

/// Helper threads that block in `flock` on behalf of waiters, kept for reuse.
///
/// A thread is spawned only when no idle one is parked; an idle thread exits after
/// [`IDLE_FOR`](helpers::IDLE_FOR). Each parked thread has its own channel, so a job is
/// handed to exactly one thread, which is then no longer idle: a second wait never queues
/// behind a first one that may block for good.
mod helpers {
    use super::*;
    use std::sync::mpsc::{self, RecvTimeoutError, Sender};

    pub(super) const IDLE_FOR: Duration = Duration::from_secs(10);

    pub(super) type Job = Box<dyn FnOnce() + Send>;

    /// Parked helpers, each by the sending end of its channel and an ID.
    static IDLE: Mutex<Vec<(u64, Sender<Job>)>> = Mutex::new(Vec::new());
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// Hands `job` to a parked helper or a new one; `false` when no thread could be had.
    pub(super) fn run(mut job: Job) -> bool {
        loop {
            let parked = guard(&IDLE).pop();
            let Some((_, tx)) = parked else { break };
            match tx.send(job) {
                Ok(()) => return true,
                Err(mpsc::SendError(back)) => job = back, // that helper has exited
            }
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("leasehold-wait".into())
            .spawn(move || worker(id, tx, rx, job));
        spawned.is_ok()
    }

    fn worker(id: u64, tx: Sender<Job>, rx: mpsc::Receiver<Job>, first: Job) {
        first();
        loop {
            guard(&IDLE).push((id, tx.clone()));
            match rx.recv_timeout(IDLE_FOR) {
                Ok(job) => job(),
                Err(RecvTimeoutError::Timeout) => {
                    let mut idle = guard(&IDLE);
                    if let Some(pos) = idle.iter().position(|(i, _)| *i == id) {
                        idle.remove(pos);
                        return;
                    }
                    drop(idle);
                    // Someone took our sender and is handing us a job.
                    match rx.recv() {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The gate: the cross-process half of the turnstile of shared leases
// ---------------------------------------------------------------------------------------

/// The gate of a lock file: the cross-process half of the turnstile that keeps shared holders
/// from starving an exclusive waiter (the in-process half is the claim queue, `claim.rs`).
///
/// Why: `flock` grants `LOCK_SH` to a newcomer whenever only shared locks are held, even
/// while a `LOCK_EX` waiter is queued, so readers that overlap each other keep a writer out
/// for ever (util-linux `flock -s` readers do exactly that to a `flock -x` writer; BENCHMARKS.md
/// has the figure).
///
/// The protocol, over three more lock files next to the lock file, the gate, the readers'
/// gate and the writers' queue:
///
/// * An **exclusive waiter** (one that found the lock busy and waits) first passes the
///   readers' gate (takes it exclusively, waiting while shared waiters hold it, and lets it
///   go at once), then queues on the writers' queue (`LOCK_EX`: writers only), then holds
///   the gate exclusively (`LOCK_EX`, waiting for it if need be) while it waits for the
///   lock, and **keeps the queue and the gate with the lease**: its release closes the
///   lock, then unlocks the gate and the queue ([`HeldGate`](gate::HeldGate)). An exclusive *try* never
///   touches the gates (for the readers' gate, see the last point); an exclusive waiter
///   never creates the gate or the readers' gate (shared acquirers do), and creates the
///   writers' queue only next to a gate.
/// * A **shared acquirer** passes the gate: takes it shared (non-blocking on a try), tries
///   `LOCK_SH` on the lock, and lets the gate go at once. A **shared waiter** (the try found
///   the gate or the lock busy) holds the readers' gate shared for its whole wait. Where no
///   writer has the gate, it passes it the same way and, the lock being held exclusively,
///   waits for the lock *without* the gate, so it never blocks the next exclusive waiter
///   for longer than one try. Where a writer has the gate, it probes the lock shared: held
///   exclusively (normally by that writer, holding the lease), it waits on the lock itself,
///   and the writer's release wakes it directly, before the next writer, which must take the
///   gate and then the lock; held shared (the writer waits for those readers), it lets its
///   probe go at once and queues on the gate behind the writer.
/// * An **exclusive acquisition that may wait** (not a try-once), in a process that has
///   waited on this lock while it had a readers' gate, first tries the readers' gate
///   exclusively (non-blocking): held by shared waiters, it does not try the lock but
///   waits as above. A writer that releases and acquires again at once would otherwise
///   take the lock back before the readers its release woke are scheduled (the kernel wakes
///   `flock` waiters, it does not hand the lock over): measured, 18 % of the writers'
///   acquisitions in the bench's mixed loop were such re-takes, and a reader's longest
///   waits spanned 15–23 writer holds. Where no gate is known (every lock only exclusive
///   users ever touched) the check costs one look-up in a process-wide list.
///
/// So once an exclusive waiter holds the gate, no newcomer gets the lock shared: the waiter
/// gets it as soon as the shared holders present when it took the gate (plus any shared
/// waiter that had already passed it) have released, however they overlap — no writer
/// starvation. And once shared waiters wait, exclusive waiters that come after them wait at
/// the readers' gate until those have the lock: a writer that releases and queues again at
/// once cannot take the gate back ahead of the readers its release woke — no reader
/// starvation (measured: without the readers' gate two back-to-back writers made 65 % of
/// the acquisitions against two back-to-back readers and a reader's contended wait p99 was
/// 17× the plain-flock floor's; BENCHMARKS.md, "Shared mode"). A reader that waits on the
/// lock next to a waiting writer (the lock's holder was not the gate's: `flock(1)`, an
/// exclusive try) does not overtake it on Linux, whose queue puts a request behind the
/// conflicting one before it; elsewhere it may, once. Readers and writers thus
/// take turns in phases: the readers waiting when a writer releases go in before the next
/// writer that was not already in line. Exclusive waiters queue on the gate among
/// themselves, in the kernel's order. Everyone takes the readers' gate before the gate and
/// the gate before the lock, and nobody waits for a gate while holding the lock, so there
/// is no deadlock. (One process must not nest shared leases on one file while an exclusive
/// waiter may queue: the inner one waits behind the waiter, which waits for the outer one.)
///
/// Why a writer keeps the gate with its lease, readers wait on the lock while a writer holds
/// it, and writers queue apart from readers: every wake-up on a hand-over's path costs, and
/// on the 2-vCPU reference VM a `flock` call that wakes waiters takes ~8 µs and a woken
/// waiter runs ~15 µs later. Letting the gate go on the grant woke the readers queued on it
/// from the writer's acquisition and queued them on the lock again, and readers that then
/// waited on the gate were woken only by a second wake-up after the writer's release
/// (release to grant 29–34 µs, against 14–15 µs for a reader woken from the lock). And a
/// writer queued on the gate had the readers that came after it queued behind its request
/// (Linux puts a conflicting request behind the waiting one), which the kernel wakes when
/// that writer is granted, before its `flock` returns: writer → writer hand-overs took
/// 29–44 µs against the floor + verify's 15–19 µs. Measured in the bench's mixed loop, the
/// handoff p50 went from 1.45× to 1.00–1.19× the floor + verify figure (BENCHMARKS.md,
/// "Shared mode — one wake-up per hand-over").
///
/// An abandoned exclusive wait (deadline, cancellation, dropped future) keeps its place on
/// the gate until the kernel grants its helper the lock, which it drops at once (see
/// [`KernelWait`]): new shared acquirers are held back for no longer than the waiter itself
/// would have waited, and a later waiter of the process that adopts the helper keeps the
/// place in line.
///
/// Where they live and what they cost: `.<name>.leasehold-gate`,
/// `.<name>.leasehold-gate-readers` and `.<name>.leasehold-gate-writers` in the lock file's
/// directory (`.leasehold-gate-<sha256 of the name>` and so on when that would be too long a
/// file name), each opened
/// exactly like a lock file (relative to the same directory handle, never following a
/// symlink, never blocking, close-on-exec, created 0600, never written, truncated or
/// removed) and used only while it is a regular file. A shared acquisition pays one more
/// open, `fstat`, `flock` and close (BENCHMARKS.md: shared acquire vs the floor), a shared
/// wait the same again for the readers' gate (its two descriptors close with the lease,
/// after the lock file's: [`Spare`](gate::Spare)); an exclusive try pays nothing (an
/// acquisition that may wait, where this process saw a readers' gate, one open, `flock` and
/// close), an exclusive wait three opens and up to five `flock`s, and its release
/// two `flock(LOCK_UN)`s on the gates (never on the lock: see [`Held`]). A lease that waited keeps its gate descriptors while held:
/// two more for a shared one, three more for an exclusive one (count them against
/// `RLIMIT_NOFILE` when holding many leases at once). The gates only
/// ever cost fairness, never exclusion: where they cannot be opened or locked (a read-only
/// directory, a file system without locks) leases work as plain `flock` does, and lockers
/// that do not know them (util-linux `flock(1)`, other libraries) are excluded by the lock
/// itself as before. Descriptors locked with `lock_descriptor` have no path and no gates.
///
/// Not a POSIX record lock on the lock file itself: Linux waiters already mark themselves
/// with whole-file POSIX read locks there (`sys::mark_waiting`), which a write lock would
/// collide with, and on the BSDs and macOS record locks and `flock` share one lock list.
pub(crate) mod gate {
    use super::*;

    /// The gate (and the writers' queue) an exclusive waiter holds with its lease.
    ///
    /// Dropped right after the lease's descriptor closed (see [`Held`]), it unlocks the gate,
    /// then the writers' queue, with `flock(LOCK_UN)`s on the gates' own descriptors (nobody
    /// else has them): the readers queued on the gate, then the next writer, are woken at
    /// once, before the closes that follow (a `close` wakes the waiters only at its end,
    /// measured 3–4 µs on the reference VM, and the next file's waiters one `close` later
    /// still). The lock itself is never unlocked through a duplicate: its description may be
    /// COMMAND's too (see [`Held`]).
    #[derive(Debug)]
    pub(crate) struct HeldGate {
        gate: OwnedFd,
        writers: Option<OwnedFd>,
    }

    impl Drop for HeldGate {
        fn drop(&mut self) {
            // After the lock's close: a reader woken by the gate finds the lock free (unless a
            // child still holds it), else it would queue on the lock and need a second
            // wake-up. The next writer last: the readers that queued while we held go before
            // it.
            let _ = sys::unlock(self.gate.as_fd());
            if let Some(w) = &self.writers {
                let _ = sys::unlock(w.as_fd());
            }
        }
    }

    /// Gate descriptors a shared waiter already unlocked, kept with the lease so that they
    /// close after the lock file's descriptor, off the hand-over's path (each `close` of a
    /// file with waiters measured ~3.5 µs here, twice on every shared wait's grant).
    #[derive(Debug, Default)]
    pub(crate) struct Spare {
        _fds: [Option<OwnedFd>; 2],
    }

    /// What a wait keeps of the gates until the lease is released.
    #[derive(Debug, Default)]
    pub(crate) struct Passed {
        pub(crate) held: Option<HeldGate>,
        pub(crate) spare: Spare,
    }

    /// The suffix of a gate's name (and how an operator recognises one).
    const SUFFIX: &str = ".leasehold-gate";
    /// The suffix of a readers' gate's name.
    const READERS_SUFFIX: &str = ".leasehold-gate-readers";
    /// The suffix of the writers' queue's name.
    const WRITERS_SUFFIX: &str = ".leasehold-gate-writers";
    /// The longest file name the common file systems take (`NAME_MAX`).
    const NAME_MAX: usize = 255;

    /// The gate's file name for the lock file named `lock`.
    pub(crate) fn name(lock: &OsStr) -> std::ffi::OsString {
        named(lock, SUFFIX)
    }

    /// The readers' gate's file name for the lock file named `lock`.
    pub(crate) fn readers_name(lock: &OsStr) -> std::ffi::OsString {
        named(lock, READERS_SUFFIX)
    }

    /// The writers' queue's file name for the lock file named `lock`.
    pub(crate) fn writers_name(lock: &OsStr) -> std::ffi::OsString {
        named(lock, WRITERS_SUFFIX)
    }

    fn named(lock: &OsStr, suffix: &str) -> std::ffi::OsString {
        use std::os::unix::ffi::OsStrExt;
        let bytes = lock.as_bytes();
        if 1 + bytes.len() + suffix.len() <= NAME_MAX {
            let mut n = std::ffi::OsString::from(".");
            n.push(lock);
            n.push(suffix);
            return n;
        }
        use sha2::Digest;
        let digest = sha2::Sha256::digest(bytes);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        std::ffi::OsString::from(format!("{suffix}-{hex}"))
    }

    /// The gates a wait goes through (either may be missing: fairness only).
    pub(crate) struct Gates {
        gate: Option<OwnedFd>,
        readers: Option<OwnedFd>,
        /// Exclusive waits only, and only next to a gate.
        writers: Option<OwnedFd>,
    }

    /// The inodes whose readers' gate a wait of this process has opened (gates are never
    /// removed): where an exclusive acquisition checks for waiting readers first.
    static READERS_GATED: Mutex<Vec<FileId>> = Mutex::new(Vec::new());

    /// Opens the gates of `target` (the inode `id`) for a wait in `shared` or exclusive mode,
    /// and remembers a readers' gate found. The gate and the readers' gate are created by
    /// shared waiters only, as [`open`] does; the writers' queue, which only exclusive waits
    /// use, by an exclusive wait that found a gate (so a lock only exclusive users ever
    /// touched still gets no gate file at all).
    pub(crate) fn open_for_wait(target: &Target, id: FileId, shared: bool) -> Gates {
        let readers = open_file(target, target.readers_gate(), shared);
        if readers.is_some() {
            let mut known = guard(&READERS_GATED);
            if !known.contains(&id) {
                known.push(id);
            }
        }
        let gate = open(target, shared);
        let writers = match (shared, &gate) {
            (false, Some(_)) => open_file(target, target.writers_gate(), true),
            _ => None,
        };
        Gates {
            gate,
            readers,
            writers,
        }
    }

    /// Whether shared waiters hold the readers' gate of `target` (inode `id`) right now; only
    /// looked at where a wait of this process found one.
    pub(crate) fn readers_waiting(target: &Target, id: FileId) -> bool {
        if !guard(&READERS_GATED).contains(&id) {
            return false;
        }
        let Some(readers) = open_file(target, target.readers_gate(), false) else {
            return false;
        };
        matches!(sys::try_lock(readers.as_fd(), false), Ok(false))
    }

    /// Opens the gate of `target`, or `None` where it has none or it cannot be used (see the
    /// module documentation: fairness only). With `create` (shared acquirers) a missing gate
    /// is created 0600; exclusive waiters never create one, so a lock that only ever had
    /// exclusive users never gets a gate (and keyed leases' namespaces none at all). Where
    /// no gate exists no shared lease of ours is held or was ever taken, bar one created at
    /// this very moment, whose first holder then goes unqueued.
    pub(crate) fn open(target: &Target, create: bool) -> Option<OwnedFd> {
        open_file(target, target.gate(), create)
    }

    fn open_file(target: &Target, name: Option<PathBuf>, create: bool) -> Option<OwnedFd> {
        let fd = sys::open_lock_file(target.dir(), &name?, create).ok()?;
        matches!(sys::fd_entry(fd.as_fd()), Ok(Entry::Regular(_))).then_some(fd)
    }

    /// A shared acquirer's non-blocking pass: `false` while an exclusive waiter holds the gate.
    /// A gate that cannot be locked at all lets everyone pass.
    pub(crate) fn pass_now(gate: &OwnedFd) -> bool {
        sys::try_lock(gate.as_fd(), true).unwrap_or(true)
    }

    /// Blocks until the lock on `fd` is granted in `shared` or exclusive mode, through the
    /// gates there are (see the module documentation for the protocol), and answers what the
    /// lease keeps of them. A gate that cannot be locked costs fairness only: the wait goes
    /// on to the lock.
    pub(crate) fn block(
        fd: BorrowedFd<'_>,
        gates: Gates,
        shared: bool,
    ) -> std::result::Result<Passed, Errno> {
        match shared {
            true => block_shared(fd, gates),
            false => block_exclusive(fd, gates),
        }
    }

    fn block_exclusive(fd: BorrowedFd<'_>, gates: Gates) -> std::result::Result<Passed, Errno> {
        let Gates {
            gate,
            readers,
            writers,
        } = gates;
        if let Some(r) = readers {
            // Wait until the readers already waiting have the lock, then let the readers'
            // gate go (it closes here, before this wait is in line: off every hand-over).
            let _ = sys::lock_blocking(r.as_fd(), false);
        }
        let Some(gate) = gate else {
            return sys::lock_blocking(fd, false).map(|()| Passed::default());
        };
        if let Some(w) = &writers {
            // Behind the writer ahead of us, on a file no reader queues on.
            let _ = sys::lock_blocking(w.as_fd(), false);
        }
        let _ = sys::lock_blocking(gate.as_fd(), false);
        sys::lock_blocking(fd, false)?;
        // The lock is ours: the gate stays held with the lease (see the module
        // documentation), and the readers behind it pass when the lease is released.
        Ok(Passed {
            held: Some(HeldGate { gate, writers }),
            spare: Spare::default(),
        })
    }

    fn block_shared(fd: BorrowedFd<'_>, gates: Gates) -> std::result::Result<Passed, Errno> {
        let Gates { gate, readers, .. } = gates;
        if let Some(r) = &readers {
            // Reserve this reader's turn for the whole wait.
            let _ = sys::lock_blocking(r.as_fd(), true);
        }
        let res = match &gate {
            Some(g) => pass_then_lock(fd, g),
            None => sys::lock_blocking(fd, true),
        };
        // The lock is ours (or the wait failed): writers behind us may queue. Unlocked, not
        // closed: the descriptors close with the lease (see `Spare`).
        if let Some(r) = &readers {
            let _ = sys::unlock(r.as_fd());
        }
        res.map(|()| Passed {
            held: None,
            spare: Spare {
                _fds: [gate, readers],
            },
        })
    }

    /// A shared waiter's way through `gate` to the lock on `fd`.
    fn pass_then_lock(fd: BorrowedFd<'_>, gate: &OwnedFd) -> std::result::Result<(), Errno> {
        if !pass_now(gate) {
            // A writer has the gate. Holding the lock, it lets the readers queued on the
            // lock in when it releases, before the next writer: wait on the lock itself, so
            // that the release wakes us directly (through the gate took a second wake-up:
            // measured 29–34 µs from release to grant against 14–15 µs). Waiting for the
            // readers that hold the lock, it must not be overtaken: let our probe go and
            // queue on the gate behind it.
            if !sys::try_lock(fd, true)? {
                return sys::lock_blocking(fd, true);
            }
            let _ = sys::unlock(fd);
            let _ = sys::lock_blocking(gate.as_fd(), true);
        }
        // Through the gate (held shared): try the lock and let the gate go before waiting
        // for the lock, so that no writer waits for the gate behind a reader's wait.
        let now = sys::try_lock(fd, true);
        let _ = sys::unlock(gate.as_fd());
        match now? {
            true => Ok(()),
            false => sys::lock_blocking(fd, true),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

fn plain(name: &str, path: &Path, op: &'static str) -> Result<()> {
    if sys::is_plain_name(OsStr::new(name)) {
        return Ok(());
    }
    Err(Error::Io {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "must be a single plain file name",
        ),
    })
}

/// Creates `path` and its missing parents with mode 0700.
pub(crate) fn create_dirs(path: &Path) -> Result<()> {
    sys::create_dirs(path).map_err(|e| match e.raw_os_error() {
        Some(raw) => dir_error(sys::cwd(), path, path, Errno::from_raw_os_error(raw)),
        None => Error::Io {
            op: "create directory",
            path: path.to_path_buf(),
            source: e,
        },
    })
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

/// A failed `flock`.
fn lock_error(path: &Path, e: Errno) -> Error {
    Error::from_lock_errno(path, e)
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

/// Maps a failure to set up a wait (no descriptor for the notifier).
pub(crate) fn wait_error(path: &Path, e: Errno) -> Error {
    path_error(path, "set up wait", e)
}
