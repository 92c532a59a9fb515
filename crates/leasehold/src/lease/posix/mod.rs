//! The primitive on POSIX (Linux, macOS, the BSDs): `flock` on a lock file.
//!
//! The platform contract of `lease/platform.rs` ([`Platform`], which [`Posix`] at the end of
//! this file implements, each step's body in its item). The files, each depending only on
//! those before it: `error.rs` (errno to the typed error), `descriptors.rs` (the lock files
//! and gates this process opened, for a forked child), `dir.rs` ([`Dir`], directory handles)
//! and `data.rs` (its data operations), `target.rs` ([`Target`], where a lock file is),
//! `gate.rs` (the shared-mode gates: the cross-process half of the turnstile), `file.rs`
//! ([`Opened`], [`Granted`], [`Held`]), `kernel_wait.rs` ([`KernelWait`] and the helper
//! threads that block in `flock` for a waiter), `fork.rs` (a forked child letting go); this
//! file judges the way to a lock file and takes it: open, claim, lock, verify, release.
//! Every system call is made through `sys`.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::io::Errno;

use super::claim::{Claim, Mode};
use super::platform::{Platform, PlatformDir, PlatformOptions, PlatformTarget};
use crate::error::{Error, Result};
use crate::holders::Unusable;
use crate::kind::FileId;
use crate::sys::{self, Entry, Notifier};

mod data;
mod descriptors;
mod dir;
mod error;
mod file;
pub(crate) mod fork;
pub(crate) mod gate;
mod kernel_wait;
mod target;

pub(crate) use dir::Dir;
pub(crate) use error::path_error;
use error::{create_dirs, lock_error};
pub(crate) use file::{Granted, Held, Opened, open_descriptor};
pub(crate) use kernel_wait::KernelWait;
pub(crate) use target::Target;

/// The outcome of one non-blocking try (the one enum of every platform).
type Attempt = super::platform::Attempt<Posix>;

/// File systems already classified, by device: `fstatfs` on every acquisition measured as a
/// tenth of the uncontended cost, and a mounted device's file system does not change. (An
/// overlay's verdict, whether its layer directories can be reached here, is kept for the
/// process too: it reads `/proc/self/mountinfo`, and a mount namespace that later comes to
/// show a layer is a change of the machine's set-up, not of a lock's.)
static NETWORK_FS: Mutex<Option<HashMap<u64, Option<&'static str>>>> = Mutex::new(None);

/// The device last found local, plus one (0: none yet). Most processes lock files on one
/// file system; this spares them the table's mutex and hash lookup on every acquisition.
static LAST_LOCAL: AtomicU64 = AtomicU64::new(0);

/// Whether the device `dev` holds a network, FUSE or overlay file system (its name), asking
/// `look` (`statfs`) only the first time the process sees the device.
fn network_fs(
    dev: u64,
    look: impl FnOnce() -> std::result::Result<Option<&'static str>, Errno>,
    path: &Path,
    op: &'static str,
) -> Result<Option<&'static str>> {
    if LAST_LOCAL.load(Ordering::Relaxed) == dev.wrapping_add(1) {
        return Ok(None);
    }
    if let Some(known) = guard(&NETWORK_FS)
        .as_ref()
        .and_then(|m| m.get(&dev).copied())
    {
        if known.is_none() {
            LAST_LOCAL.store(dev.wrapping_add(1), Ordering::Relaxed);
        }
        return Ok(known);
    }
    let fs = look().map_err(|e| path_error(path, op, e))?;
    if fs.is_none() {
        LAST_LOCAL.store(dev.wrapping_add(1), Ordering::Relaxed);
    }
    guard(&NETWORK_FS)
        .get_or_insert_with(HashMap::new)
        .insert(dev, fs);
    Ok(fs)
}

/// The error of a failed open of the lock file. `O_CREAT` on a symlink that another user
/// owns in a sticky directory fails with `EACCES` before `O_NOFOLLOW`'s `ELOOP` (the
/// kernel's protected-symlink and protected-regular rules), and a FIFO there the same way:
/// what stands at the name is then looked at (`lstat`), so the refusal says what it is, as
/// `status` does, rather than blaming permissions.
fn open_error(target: &Target, e: Errno) -> Error {
    let path = target.display();
    if e == Errno::ACCESS
        && let Ok(Entry::Other(kind)) = sys::entry_at(target.dir(), &target.name)
    {
        return Error::NotRegularFile {
            path: path.to_path_buf(),
            kind,
        };
    }
    path_error(path, "open lock file", e)
}

/// Judges the way to the lock file before anything is opened or created there, in one walk
/// the first time a directory is seen (plus one `statfs` the first time a device is seen):
///
/// * unless [`LeaseOptions::allow_shared_state`](crate::LeaseOptions::allow_shared_state), the ownership rule on every component of
///   the lock file's directory, from the root down (`sys::chain_untrusted`, as OpenSSH's
///   StrictModes): each directory must belong to this user or root and be writable by
///   neither group nor others unless it is sticky and root's (`/tmp`), and a symlink on the
///   way must belong to this user or root. Whoever may write a directory that is not sticky
///   and root's can rename the lock file — or any directory between it and that one — away
///   while it is held, after which a second holder locks a new file at the path: two `run`s
///   at once. A lock in a [`Dir`] has its handle's directory judged (`fstat`, no path walk);
///   the stores judge the chain above the directories they open (`check_trusted`);
/// * unless [`LeaseOptions::allow_network_filesystem`](crate::LeaseOptions::allow_network_filesystem), its file system: a network, FUSE or
///   overlay mount is refused before the lock file is created there, not after.
///
/// A directory that does not exist passes: the open then says so, or creates it
/// ([`make_parents`]) and judges it again.
///
/// A lock path's directory found fit under both rules is remembered for the life of the
/// process ([`FIT_DIRS`], by its absolute path: a relative one is joined to the working
/// directory, one `getcwd`), and a chain found fit under the first alone too
/// ([`chain_judged`]): the walk, one `lstat` per component, would otherwise be paid on
/// every acquisition (the single `fstatat` of the lock file's directory alone measured ~25 %
/// of an uncontended cold acquisition on the 2-vCPU reference VM). What a fit chain can
/// become unfit by is this user's or root's doing alone: every component belongs to one of
/// them, and nobody else may write a directory on the way (or, in a sticky one, rename what
/// is not theirs), so nobody else can rename, replace, chmod or chown anything of it. A
/// lease held while its owner does so anyway is caught by `Posix::verify`, which resolves the
/// whole path again. A [`Dir`] found fit is remembered by its handle (`Dir::fit`) on the
/// same grounds: its directory is one inode, which only this user or root may chmod or
/// chown, on a file system an open handle cannot leave; so a keyed acquisition pays no
/// `fstat` and `geteuid` beyond a plain lease's.
fn check_dir(opts: &PlatformOptions, target: &Target) -> Result<()> {
    let fs_check = !opts.allow_network_fs;
    if !target.judge && !fs_check {
        return Ok(());
    }
    let dir_fit = target.dir.as_ref().filter(|_| target.judge && fs_check);
    if dir_fit.is_some_and(|d| d.fit.load(Ordering::Relaxed)) {
        return Ok(());
    }
    let parent = target.parent();
    // The key the verdict is remembered by: the directory's absolute path, as written.
    let key = match (
        target.judge && fs_check && target.dir.is_none(),
        parent.is_absolute(),
    ) {
        (false, _) => None,
        (true, true) => Some(std::borrow::Cow::Borrowed(parent)),
        (true, false) => std::env::current_dir()
            .ok()
            .map(|wd| std::borrow::Cow::Owned(wd.join(parent))),
    };
    if let Some(key) = &key
        && guard(&FIT_DIRS)
            .iter()
            .any(|d| d.as_os_str() == key.as_os_str())
    {
        return Ok(());
    }
    // The chain above the directory (a path target; a [`Dir`]'s own handle is judged below).
    // Remembered only once the whole chain was there and fit (a directory created between
    // the walk and the look below is judged by the look, and the walk made again next time).
    let mut complete = true;
    if target.judge && target.dir.is_none() {
        let chain = chain_judged(parent)
            .map_err(|e| path_error(target.display(), "inspect lock file's directories", e))?;
        match chain {
            sys::Chain::Fit => {}
            sys::Chain::Partial => complete = false,
            sys::Chain::Unfit(unfit) => {
                return Err(unfit_error(
                    unfit,
                    target.display(),
                    Some(target.parent_display()),
                ));
            }
        }
    }
    let looked = sys::dir_judged(target.dir(), parent, target.judge)
        .map_err(|e| path_error(target.display(), "inspect lock file's directory", e))?;
    let Some((dev, untrusted)) = looked else {
        return Ok(());
    };
    if let Some(reason) = untrusted {
        return Err(Error::Untrusted {
            path: target.parent_display(),
            reason: format!(
                "the directory of lock file {} {reason}",
                target.display().display()
            ),
        });
    }
    let look = || match &target.dir {
        Some(d) => sys::network_fs(d.fd.as_fd()),
        None => sys::network_fs_path(parent),
    };
    if fs_check
        && let Some(fs) = network_fs(dev, look, target.display(), "statfs lock file's directory")?
    {
        let locks = match &target.dir {
            Some(d) => crate::mount::at(d.fd.as_fd(), Path::new(""), fs),
            None => crate::mount::at(sys::cwd(), parent, fs),
        };
        return Err(Error::NetworkFilesystem {
            path: target.display().to_path_buf(),
            fs,
            locks,
        });
    }
    if let Some(key) = key.filter(|_| complete) {
        let mut fit = guard(&FIT_DIRS);
        if fit.len() < FIT_DIRS_MAX {
            fit.push(key.into_owned());
        }
    }
    if let Some(d) = dir_fit {
        d.fit.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// The refusal of a component on the way to `what` ([`sys::chain_untrusted`]): named by its
/// path (`dir`, where given, for the directory itself, as the caller wrote it), saying who
/// could move what.
fn unfit_error(unfit: sys::Unfit, what: &Path, dir: Option<PathBuf>) -> Error {
    let what = what.display();
    let (path, reason) = match (unfit.link, unfit.last, dir) {
        (false, true, Some(dir)) => (
            dir,
            format!("the directory of lock file {what} {}", unfit.reason),
        ),
        (false, _, _) => (
            unfit.path,
            format!(
                "a directory above {what} that {}: whoever may write it can move {what} away while it is in use",
                unfit.reason
            ),
        ),
        (true, _, _) => (
            unfit.path,
            format!(
                "a symbolic link on the way to {what} that {}: its owner can re-point it, moving {what} away while it is in use",
                unfit.reason
            ),
        ),
    };
    Error::Untrusted { path, reason }
}

/// Lock path directories found fit (trusted and local) under the default options; see
/// [`check_dir`].
static FIT_DIRS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// How many [`FIT_DIRS`] are remembered; a process locking in more judges the rest each
/// time.
const FIT_DIRS_MAX: usize = 64;

/// Creates the missing parent directories of a lock path (mode 0700), unless
/// [`LeaseOptions::allow_network_filesystem`](crate::LeaseOptions::allow_network_filesystem) only after the nearest one that exists was
/// found on a file system the lock is allowed on: nothing is created on a mount where the
/// lock would be refused.
fn make_parents(opts: &PlatformOptions, target: &Target) -> Result<()> {
    let path = target.display();
    let Some(parent) = target.name.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    if !opts.allow_network_fs {
        let mut nearest = Ok(None);
        let mut nearest_dir = Path::new(".");
        for dir in parent.ancestors() {
            let dir = match dir.as_os_str().is_empty() {
                true => Path::new("."),
                false => dir,
            };
            nearest_dir = dir;
            nearest = sys::network_fs_path(dir);
            if nearest != Err(Errno::NOENT) {
                break;
            }
        }
        match nearest {
            Ok(Some(fs)) => {
                return Err(Error::NetworkFilesystem {
                    path: path.to_path_buf(),
                    fs,
                    locks: crate::mount::at(sys::cwd(), nearest_dir, fs),
                });
            }
            Ok(None) => {}
            Err(e) => return Err(path_error(path, "statfs lock file's directory", e)),
        }
    }
    create_dirs(parent).map_err(|e| e.for_lock_path(path))
}

/// [`sys::chain_untrusted`] of the directory `dir` (relative to the working directory),
/// `None` when fit; a chain found fit and complete is remembered in [`TRUSTED_CHAINS`] by
/// its absolute path (a relative one joined to the working directory: one `getcwd`) and not
/// walked again: every component belongs to this user or root and nobody else may write a
/// directory on the way (in a sticky one, rename what is not theirs), so only they can make
/// it unfit. A chain that stops at a missing directory is not remembered: where the last
/// one that exists is sticky, another user may create the rest.
fn chain_judged(dir: &Path) -> std::result::Result<sys::Chain, Errno> {
    let key = match dir.is_absolute() {
        true => Some(dir.to_path_buf()),
        false => std::env::current_dir().ok().map(|wd| wd.join(dir)),
    };
    if let Some(key) = &key
        && guard(&TRUSTED_CHAINS)
            .iter()
            .any(|d| d.as_os_str() == key.as_os_str())
    {
        return Ok(sys::Chain::Fit);
    }
    let chain = sys::chain_untrusted(dir)?;
    if let (sys::Chain::Fit, Some(key)) = (&chain, key) {
        let mut fit = guard(&TRUSTED_CHAINS);
        if fit.len() < FIT_DIRS_MAX {
            fit.push(key);
        }
    }
    Ok(chain)
}

/// Directories whose chain [`chain_judged`] found fit (absolute paths), as [`FIT_DIRS`].
static TRUSTED_CHAINS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

use crate::mutex::lock as guard;

/// The POSIX platform (see [`Platform`]): each step's body is in its item below (a kernel
/// wait's, in `kernel_wait.rs`).
#[derive(Debug)]
pub(crate) struct Posix;

impl Platform for Posix {
    /// Waiters are woken by their notifier: the kernel-wait helper pokes it on a grant.
    const NOTIFIES: bool = true;

    type Dir = Dir;
    type Target = Target;
    type Opened = Opened;
    type Held = Held;
    type Granted = Granted;
    type KernelWait = KernelWait;

    /// Opens the lock file, refusing anything but a regular file, once its directory passed
    /// [`check_dir`]: nothing is created where the lock would be refused.
    fn open(opts: &PlatformOptions, target: &Target) -> Result<Opened> {
        let (dir, name, path) = (target.dir(), target.name.as_path(), target.display());
        check_dir(opts, target)?;
        // No look at the file before the open: the open's own flags refuse what must never be
        // opened — a symlink (`O_NOFOLLOW`: ELOOP), a socket (ENXIO), a directory (`O_CREAT`:
        // EISDIR) — and make a FIFO harmless (`O_NONBLOCK`), and the `fstat` below refuses
        // whatever else got opened. A device node is thus opened (non-blocking, never as a
        // controlling terminal) before it is refused. Why not `lstat` first, as before: it
        // measured ~20 % of an uncontended cycle on the reference VM (a path walk), the one
        // system call beyond what the contract needed then, and it still left a race
        // between the look and the open.
        let fd = match sys::open_lock_file(dir, name, opts.create) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if opts.create && opts.create_parents && target.dir.is_none() => {
                make_parents(opts, target)?;
                // The directory that is there now (ours, unless someone else made it first).
                check_dir(opts, target)?;
                sys::open_lock_file(dir, name, true).map_err(|e| open_error(target, e))?
            }
            Err(e) => return Err(open_error(target, e)),
        };
        let (entry, untrusted) = sys::fd_entry_judged(fd.as_fd(), target.judge)
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
        // A child forked from now on lets its copy go (`fork::after_fork_in_child`).
        descriptors::register(fd.as_fd(), id);
        // The file's own device too (a file can be a mount point of its own); known after the
        // directory's check in all but that case, so this costs one atomic load.
        if !opts.allow_network_fs
            && let Some(fs) = network_fs(
                id.dev,
                || sys::network_fs(fd.as_fd()),
                path,
                "statfs lock file",
            )?
        {
            return Err(Error::NetworkFilesystem {
                path: path.to_path_buf(),
                fs,
                locks: crate::mount::at(fd.as_fd(), Path::new(""), fs),
            });
        }
        Ok(Opened {
            fd,
            id,
            at_gate: false,
            generation: super::claim::generation(),
        })
    }
    /// One non-blocking try under a granted claim: flock, then verify that the inode is still the
    /// file at the path (a lock on an orphaned inode proves nothing). `may_wait`: the caller
    /// waits if this is busy (an exclusive try then defers to waiting readers, see `gate`).
    fn try_lock(
        target: &Target,
        mut opened: Opened,
        claim: Claim,
        mode: Mode,
        may_wait: bool,
    ) -> Result<Attempt> {
        #[cfg(test)]
        BEFORE_LOCK.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f();
            }
        });
        let shared = mode == Mode::Shared;
        opened.at_gate = false;
        if !shared && may_wait && gate::readers_waiting(target, opened.id) {
            // Readers wait (this release may just have woken them): queue behind them instead
            // of taking the lock back first.
            return Ok(Attempt::Busy(opened, claim));
        }
        // A shared try passes the gate first: while an exclusive waiter holds it, newcomers
        // are busy (they wait behind it, see `gate`). The gate closes once the try is done.
        // Not a nested shared acquisition, though: one while this process (or the ancestor it
        // inherited the lock from) holds the file shared must not wait behind a writer that
        // waits for that holder (see `gate`, "Nested shared leases").
        let gate = match shared && !gate::nested(opened.id) {
            true => gate::open(target, true),
            false => None,
        };
        if gate.as_ref().is_some_and(|g| !gate::pass_now(g)) {
            // Held up at the gate, not at the lock (which may be free): a try-once says so.
            opened.at_gate = true;
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
        Ok(match Posix::accept(target, granted, claim)? {
            Some(held) => Attempt::Acquired(held),
            None => Attempt::Replaced,
        })
    }
    /// A locked descriptor becomes a [`Held`] lease if its inode is still the file at the path;
    /// `Ok(None)` (the descriptor closed, releasing the orphan's lock) when it was replaced.
    fn accept(target: &Target, granted: Granted, mut claim: Claim) -> Result<Option<Held>> {
        let Granted {
            fd,
            id,
            marked,
            passed: gate::Passed { held: gate, spare },
        } = granted;
        // `leasehold_mutant_no_post_lock_check`: a mutant build for the gc torture to catch
        // (RELIABILITY.md), never a shipped configuration.
        if !target.checked || cfg!(leasehold_mutant_no_post_lock_check) {
            // A caller's descriptor: there is no path to check it against.
            claim.hold();
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
            Ok(Entry::Regular(now)) if now == id => {
                // A shared lease now holds the lock: nested shared acquisitions pass (`gate`).
                claim.hold();
                Ok(Some(Held {
                    fd,
                    id,
                    marked,
                    gate,
                    spare,
                    _claim: claim,
                }))
            }
            Ok(_) | Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(path_error(target.display(), "verify lock file", e)),
        }
    }
    /// Blocks this thread in the kernel's queue for `opened` (no helper: one wake-up fewer on
    /// the handoff's critical path, measured ~16 µs on the 2-core reference VM). Only for waits
    /// that nothing can end but the grant — an unlimited budget without a cancellation token —
    /// or a signal, where the budget has an [`on_interrupt`](crate::Budget::on_interrupt) hook:
    /// after each `EINTR` `interrupted` is asked, and `Ok(None)` means it stopped the wait (the
    /// descriptor closes here, taking the waiting mark with it; every gate taken is closed by
    /// `gate::block`; the lock was not granted).
    fn lock_inline(
        target: &Target,
        opened: Opened,
        mode: Mode,
        interrupted: gate::Ask<'_>,
    ) -> Result<Option<Granted>> {
        #[cfg(all(target_os = "linux", not(leasehold_portable)))]
        sys::mark_waiting(opened.fd.as_fd());
        // The mark stays until the lease's descriptor closes (which drops it) or a handle
        // unlocks (`Held::unlock_keep`): removing it here measured ~1 µs on the handoff path.
        let res = gate::block(
            opened.fd.as_fd(),
            gate::open_for_wait(target, opened.id, mode == Mode::Shared),
            mode == Mode::Shared,
            &gate::Place::default(), // nobody asks: only a grant or the hook ends this wait
            interrupted,
        );
        let passed = match res {
            Ok(passed) => passed,
            Err(Errno::INTR) => return Ok(None),
            Err(e) => return Err(lock_error(target.display(), e)),
        };
        Ok(Some(Granted {
            fd: opened.fd,
            id: opened.id,
            marked: true,
            passed,
        }))
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
    fn busy_at(target: &Target, opened: &Opened) -> Option<PathBuf> {
        opened
            .at_gate
            .then(|| gate::held_up_at_gate(target))
            .flatten()
    }
    fn waiting_at(target: &Target, wait: &KernelWait) -> Option<PathBuf> {
        wait.held_up(target)
    }
    /// Whether the inode `id` is still the file at the path (else a waiter follows the path).
    fn still_at_path(target: &Target, id: Option<FileId>) -> bool {
        !target.checked
            || matches!(
                sys::entry_at(target.dir(), &target.name),
                Ok(Entry::Regular(now)) if Some(now) == id
            )
    }
    fn orphaned(wait: &KernelWait) -> bool {
        wait.orphaned()
    }
    /// Checks that a held lease's inode is still the file at the path: the path resolved again
    /// from the root (or the working directory) — so a directory renamed anywhere above the
    /// lock file, or a symlink on the way re-pointed, is a loss as much as the file's own
    /// unlinking — in one `fstatat`; for a lock in a [`Dir`], the name in the handle and then
    /// the handle's chain ([`Dir::verify`], one `fstatat` per level), since a handle keeps
    /// working after a rename that newcomers, resolving the path, do not follow.
    fn verify(target: &Target, held: &Held) -> Result<()> {
        match sys::entry_at(target.dir(), &target.name) {
            Ok(Entry::Regular(now)) if now == held.id => {}
            Ok(_) | Err(Errno::NOENT) => {
                return Err(Error::LeaseLost {
                    path: target.display().to_path_buf(),
                });
            }
            Err(e) => return Err(path_error(target.display(), "verify lock file", e)),
        }
        match &target.dir {
            Some(dir) => dir.verify(),
            None => Ok(()),
        }
    }
    /// Removes a held lease's lock file, if the path still names the locked inode: `Ok(true)`
    /// when it was unlinked. Only the collector of keyed lock files calls this, holding both the
    /// file's exclusive lock and the namespace's exclusive lock: nobody else ever unlinks or
    /// replaces a lock file, so the path cannot change between the check and the unlink.
    fn unlink_held(target: &Target, held: &Held) -> Result<bool> {
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
    fn modified(target: &Target, held: &Held) -> Result<std::time::SystemTime> {
        sys::fd_modified(held.fd.as_fd())
            .map_err(|e| path_error(target.display(), "stat lock file", e))
    }
    /// See `lease::check_trusted`: the chain above `path` ([`chain_judged`]), then `path`
    /// itself, never followed.
    fn check_trusted(path: &Path) -> Result<()> {
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        match chain_judged(parent) {
            Ok(sys::Chain::Fit | sys::Chain::Partial) => {}
            Ok(sys::Chain::Unfit(unfit)) => return Err(unfit_error(unfit, path, None)),
            Err(e) => return Err(path_error(path, "inspect directories", e)),
        }
        match sys::untrusted_at(sys::cwd(), path) {
            Ok(None) => Ok(()),
            Ok(Some(reason)) => Err(Error::Untrusted {
                path: path.to_path_buf(),
                reason,
            }),
            Err(e) => Err(path_error(path, "inspect", e)),
        }
    }
    /// Maps a failed holder look-up to the error naming `path`.
    fn holders_error(path: &Path, u: Unusable) -> Error {
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
}

#[cfg(test)]
thread_local! {
    /// A test's hook between open and lock (the window the inode check guards).
    pub(crate) static BEFORE_LOCK: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        std::cell::RefCell::new(None);
}

/// An inline wait that a signal interrupts asks its budget's hook (Linux: the tests look at
/// the kernel's queue in `/proc/locks`).
#[cfg(all(test, target_os = "linux"))]
mod interrupted;
