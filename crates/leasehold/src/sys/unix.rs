//! POSIX implementation of the platform boundary (Linux, macOS, BSD).

use std::ffi::OsStr;
use std::io;
use std::ops::ControlFlow;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::kind::{FileId, FileKind, Holders};

/// The directory a relative name is resolved against: the working directory for plain
/// paths, or an opened directory handle for rooted leases (`openat`).
pub(crate) fn cwd() -> BorrowedFd<'static> {
    rustix::fs::CWD
}

/// What stands at a name, without following a final symlink.
pub(crate) enum Entry {
    Missing,
    Regular(FileId),
    Other(FileKind),
}

fn kind_of(ft: FileType) -> Option<FileKind> {
    Some(match ft {
        FileType::RegularFile => return None,
        FileType::Symlink => FileKind::Symlink,
        FileType::Fifo => FileKind::Fifo,
        FileType::Socket => FileKind::Socket,
        FileType::CharacterDevice => FileKind::CharDevice,
        FileType::BlockDevice => FileKind::BlockDevice,
        FileType::Directory => FileKind::Directory,
        _ => FileKind::Other,
    })
}

#[allow(clippy::unnecessary_cast)] // st_dev/st_ino are not u64 on every platform
fn id_of(st: &rustix::fs::Stat) -> FileId {
    FileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`: never follows the final component.
pub(crate) fn entry_at(dir: BorrowedFd<'_>, name: &Path) -> Result<Entry, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(entry_of(&st)),
        Err(Errno::NOENT) => Ok(Entry::Missing),
        Err(e) => Err(e),
    }
}

/// Opens (and, with `create`, creates with mode 0600) a lock file relative to `dir`.
///
/// Read-only, so a lock file is never written or truncated; `O_NOFOLLOW` so a symlink in the
/// final component is refused (`ELOOP`) rather than followed to a victim; `O_NONBLOCK` so a
/// FIFO swapped in at the last moment cannot hang the opener; `O_CLOEXEC` so a lease is never
/// leaked into unrelated child processes; `O_NOCTTY` so a terminal device can never become
/// our controlling terminal.
pub(crate) fn open_lock_file(
    dir: BorrowedFd<'_>,
    name: &Path,
    create: bool,
) -> Result<OwnedFd, Errno> {
    open_data_file(dir, name, false, create)
}

/// Opens a data file (an append-only log) relative to `dir`.
///
/// Like [`open_lock_file`] it never follows a final symlink (`O_NOFOLLOW`: a log swapped for
/// a link to a victim file is refused with `ELOOP`, never written through), never blocks on a
/// FIFO (`O_NONBLOCK`; no effect on regular files), is close-on-exec and never becomes a
/// controlling terminal. With `write` it is opened read-write with `O_APPEND`, so every write
/// lands at the current end of file; with `create` a missing file is created with mode 0600.
pub(crate) fn open_data_file(
    dir: BorrowedFd<'_>,
    name: &Path,
    write: bool,
    create: bool,
) -> Result<OwnedFd, Errno> {
    let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if write {
        flags |= OFlags::RDWR | OFlags::APPEND;
    } else {
        flags |= OFlags::RDONLY;
    }
    if create {
        flags |= OFlags::CREATE;
    }
    rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(0o600))
}

/// Opens a directory handle. With `follow == false` a final symlink is refused (`ELOOP`).
pub(crate) fn open_dir_at(
    dir: BorrowedFd<'_>,
    name: &Path,
    follow: bool,
) -> Result<OwnedFd, Errno> {
    let mut flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    rustix::fs::openat(dir, name, flags, Mode::empty())
}

/// Creates one directory with `mode` (permission bits; the umask applies) relative to `dir`
/// (`mkdirat`, which never follows a final symlink; `EEXIST` is the caller's to judge).
pub(crate) fn mkdir_at(dir: BorrowedFd<'_>, name: &Path, mode: u32) -> Result<(), Errno> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode((mode & 0o7777) as _))
}

/// Creates the regular file `name` relative to `dir` exclusively, for writing, with `mode`
/// (permission bits; the umask applies): `O_CREAT|O_EXCL` never follows a symlink standing
/// at the name and never opens an existing file (`EEXIST`), `O_NOFOLLOW` says so twice, and
/// the descriptor is close-on-exec and never a controlling terminal.
pub(crate) fn create_new_at(dir: BorrowedFd<'_>, name: &Path, mode: u32) -> Result<OwnedFd, Errno> {
    let flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::EXCL
        | OFlags::NOFOLLOW
        | OFlags::CLOEXEC
        | OFlags::NOCTTY;
    rustix::fs::openat(dir, name, flags, Mode::from_raw_mode((mode & 0o777) as _))
}

/// `renameat(from_dir, from, to_dir, to)`: renames the entry itself (a symlink at either
/// name is renamed or replaced, never followed).
pub(crate) fn rename_at(
    from_dir: BorrowedFd<'_>,
    from: &Path,
    to_dir: BorrowedFd<'_>,
    to: &Path,
) -> Result<(), Errno> {
    rustix::fs::renameat(from_dir, from, to_dir, to)
}

/// `unlinkat(dir, name, AT_REMOVEDIR)`: removes an empty directory (never a symlink's target).
pub(crate) fn remove_dir_at(dir: BorrowedFd<'_>, name: &Path) -> Result<(), Errno> {
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)
}

/// The identity of the directory at `name` relative to `dir` (`follow`: a final symlink is
/// followed, as for a configured path; otherwise it is not). `Ok(None)`: nothing there, or
/// something that is not a directory.
pub(crate) fn dir_id_at(
    dir: BorrowedFd<'_>,
    name: &Path,
    follow: bool,
) -> Result<Option<FileId>, Errno> {
    let flags = if follow {
        AtFlags::empty()
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    match rustix::fs::statat(dir, name, flags) {
        Ok(st) if FileType::from_raw_mode(st.st_mode as _) == FileType::Directory => {
            Ok(Some(id_of(&st)))
        }
        Ok(_) | Err(Errno::NOENT) | Err(Errno::NOTDIR) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The identity of an open descriptor, whatever its kind.
pub(crate) fn fd_id(fd: BorrowedFd<'_>) -> Result<FileId, Errno> {
    rustix::fs::fstat(fd).map(|st| id_of(&st))
}

/// The modification time of an open descriptor's file.
pub(crate) fn fd_modified(fd: BorrowedFd<'_>) -> Result<std::time::SystemTime, Errno> {
    let st = rustix::fs::fstat(fd)?;
    let secs = u64::try_from(st.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(st.st_mtime_nsec).unwrap_or(0);
    Ok(std::time::UNIX_EPOCH + Duration::new(secs, nanos.min(999_999_999)))
}

/// `unlinkat(dir, name)` of a file (never a directory; unlink never follows a symlink).
pub(crate) fn unlink_at(dir: BorrowedFd<'_>, name: &Path) -> Result<(), Errno> {
    rustix::fs::unlinkat(dir, name, AtFlags::empty())
}

/// The names in an open directory (`.` and `..` left out), read through a fresh descriptor
/// of it so the handle's own offset is untouched.
///
/// Linux: opened with `O_NOATIME` where the kernel allows it (the directory is ours, or we
/// are privileged; otherwise `EPERM`, and it is opened without). A listing updates the
/// directory's access time under `relatime` whenever the directory changed since the last
/// access — after every rename into it — and that inode update went into the next `fsync`'s
/// journal commit: ~40 µs of a document update on the reference VM (ext4), for a listing
/// the stores make only to collect their own leftovers.
pub(crate) fn dir_names(dir: BorrowedFd<'_>) -> Result<Vec<std::ffi::OsString>, Errno> {
    use std::os::unix::ffi::OsStringExt;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let fd = match rustix::fs::openat(dir, ".", flags | OFlags::NOATIME, Mode::empty()) {
        Err(Errno::PERM) => rustix::fs::openat(dir, ".", flags, Mode::empty()),
        other => other,
    }?;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let fd = rustix::fs::openat(dir, ".", flags, Mode::empty())?;
    let mut names = Vec::new();
    // `Dir::new` reads the descriptor it is given (`read_from` would open a second one).
    for entry in rustix::fs::Dir::new(fd)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsString::from_vec(name.to_vec()));
        }
    }
    Ok(names)
}

/// What the open file `fd` is (a regular file and its identity, or another kind), and its
/// permission bits (`st_mode & 07777`), from one `fstat`.
#[allow(clippy::unnecessary_cast)] // st_mode is u32 on Linux, u16 on macOS
pub(crate) fn fd_entry_mode(fd: BorrowedFd<'_>) -> Result<(Entry, u32), Errno> {
    rustix::fs::fstat(fd).map(|st| (entry_of(&st), st.st_mode as u32 & 0o7777))
}

/// What the open file `fd` is (as [`fd_entry_mode`]) and, when `judge` is set,
/// [`untrusted_at`]'s verdict on it, from one `fstat`: a second `fstat` measured ~7 % of an
/// uncontended acquisition on the reference VM.
pub(crate) fn fd_entry_judged(
    fd: BorrowedFd<'_>,
    judge: bool,
) -> Result<(Entry, Option<String>), Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok((entry_of(&st), judge.then(|| judge_owner(&st)).flatten()))
}

/// What a lock file's directory is, looked at before anything is opened or created in it
/// (the final component followed, as the lock file's own open follows it): its device, for
/// the file-system check, and, with `judge`, [`untrusted_at`]'s verdict on it — whoever may
/// write a directory that is not sticky and root's can rename the lock file in it away while
/// it is held, after which a second holder locks a new file. `Ok(None)`: nothing is there.
/// Something that is not a directory is `ENOTDIR`. One `fstatat`.
#[allow(clippy::unnecessary_cast)] // st_dev is not u64 on every platform
pub(crate) fn dir_judged(
    at: BorrowedFd<'_>,
    name: &Path,
    judge: bool,
) -> Result<Option<(u64, Option<String>)>, Errno> {
    let st = match rustix::fs::statat(at, name, AtFlags::empty()) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    if FileType::from_raw_mode(st.st_mode as _) != FileType::Directory {
        return Err(Errno::NOTDIR);
    }
    Ok(Some((
        st.st_dev as u64,
        judge.then(|| judge_owner(&st)).flatten(),
    )))
}

/// Whether an opened gate file (`lease/posix/gate.rs`) may be used (its identity) or not
/// (`None`), from one `fstat`: a regular file with exactly one link that passes the ownership rule ([`untrusted_at`]).
/// A gate another user could have prepared, or one hard-linked to some other file (the lock
/// file itself, on which a waiter holding its gate would wait for itself), is not used —
/// gates only ever cost fairness.
#[allow(clippy::unnecessary_cast)] // st_nlink is not u64 on every platform
pub(crate) fn fd_gate_usable(fd: BorrowedFd<'_>) -> Result<Option<FileId>, Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok((kind_of(FileType::from_raw_mode(st.st_mode as _)).is_none()
        && st.st_nlink as u64 == 1
        && judge_owner(&st).is_none())
    .then(|| id_of(&st)))
}

fn entry_of(st: &rustix::fs::Stat) -> Entry {
    match kind_of(FileType::from_raw_mode(st.st_mode as _)) {
        None => Entry::Regular(id_of(st)),
        Some(k) => Entry::Other(k),
    }
}

/// Why an existing file or directory another user could have prepared is not trusted
/// (OpenSSH's StrictModes rule), or `None` when it is fine.
///
/// Trusted: owned by this process's effective user or by root (root can replace anything
/// anyway), and writable by neither group nor others — except a directory that is sticky
/// and owned by root (`/tmp`): there nobody but an entry's owner may remove or rename it.
/// A lock file another user owns can be unlinked by that user while we hold it, after
/// which a second holder locks a new file; a group- or world-writable file or directory
/// can be replaced by anyone who may write it.
///
/// This is the verdict for what stands at `name` (never following a final symlink); `None`
/// when nothing is there. For an open descriptor, [`fd_entry_judged`] gives it.
pub(crate) fn untrusted_at(dir: BorrowedFd<'_>, name: &Path) -> Result<Option<String>, Errno> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(judge_owner(&st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A component on the way to a directory that another user could move ([`chain_untrusted`]).
#[derive(Debug)]
pub(crate) struct Unfit {
    /// The component, as reached (symlinks on the way replaced by their targets).
    pub(crate) path: PathBuf,
    /// Why, as [`untrusted_at`] words it.
    pub(crate) reason: String,
    /// Whether it is a symlink (else a directory).
    pub(crate) link: bool,
    /// Whether it is the directory itself (the walk's last component).
    pub(crate) last: bool,
}

/// [`chain_untrusted`]'s verdict.
#[derive(Debug)]
pub(crate) enum Chain {
    /// Every component exists and is fit.
    Fit,
    /// Every component that exists is fit, but the walk stopped at one that is missing or
    /// is not a directory (nothing to remember: another user may create it in a sticky
    /// directory on the way).
    Partial,
    /// This one is not.
    Unfit(Unfit),
}

/// The first component on the way to the directory `path` (relative to the working
/// directory) that another user could move, with why ([`Chain`]).
///
/// Every directory from the root down is judged by the ownership rule ([`untrusted_at`]'s:
/// owned by this process's effective user or root, writable by neither group nor others
/// unless sticky and root's), as OpenSSH's StrictModes judges the path to `authorized_keys`:
/// whoever may write a directory can rename what is in it, and a rename anywhere above a lock
/// file moves it away from its path while it is held. A symlink on the way must itself belong
/// to this user or root (its owner may not re-point it, but may replace it only where it may
/// write the directory holding it, which is judged too); it is followed and its target's chain
/// judged in turn. A relative `path` starts from the working directory's real chain (what
/// `getcwd` names: no symlinks). The walk stops quietly at a component that is missing or is
/// not a directory: the caller's own look reports that, or creates what is missing and asks
/// again. One `lstat` per component, plus one `readlink` per symlink.
pub(crate) fn chain_untrusted(path: &Path) -> Result<Chain, Errno> {
    use std::collections::VecDeque;
    use std::path::Component;
    /// As the kernel's own limit on symlinks followed in one resolution (`MAXSYMLINKS`).
    const MAX_LINKS: usize = 40;
    let mut todo: VecDeque<std::ffi::OsString> = VecDeque::new();
    let mut cur = PathBuf::from("/");
    let push = |todo: &mut VecDeque<std::ffi::OsString>, path: &Path, front: bool| {
        let names: Vec<_> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        if front {
            for n in names.into_iter().rev() {
                todo.push_front(n);
            }
        } else {
            todo.extend(names);
        }
    };
    if !path.is_absolute() {
        let wd = rustix::process::getcwd(Vec::new())?;
        push(
            &mut todo,
            Path::new(OsStr::from_bytes(wd.as_bytes())),
            false,
        );
    }
    push(&mut todo, path, false);
    let root = rustix::fs::lstat("/")?;
    if let Some(reason) = judge_owner(&root) {
        let last = todo.is_empty();
        return Ok(Chain::Unfit(Unfit {
            path: cur,
            reason,
            link: false,
            last,
        }));
    }
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            // `cur` is a real path (every symlink on the way was replaced by its target), so
            // its parent is what the kernel's `..` reaches.
            cur.pop();
            continue;
        }
        let next = cur.join(&name);
        let st = match rustix::fs::lstat(&next) {
            Ok(st) => st,
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(Chain::Partial),
            Err(e) => return Err(e),
        };
        match FileType::from_raw_mode(st.st_mode as _) {
            FileType::Directory => {
                if let Some(reason) = judge_owner(&st) {
                    let last = todo.is_empty();
                    return Ok(Chain::Unfit(Unfit {
                        path: next,
                        reason,
                        link: false,
                        last,
                    }));
                }
                cur = next;
            }
            FileType::Symlink => {
                if let Some(reason) = judge_owner(&st) {
                    return Ok(Chain::Unfit(Unfit {
                        path: next,
                        reason,
                        link: true,
                        last: false,
                    }));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(Errno::LOOP);
                }
                let target = rustix::fs::readlink(&next, Vec::new())?;
                let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push(&mut todo, &target, true);
            }
            _ => return Ok(Chain::Partial),
        }
    }
    Ok(Chain::Fit)
}

#[allow(clippy::unnecessary_cast)] // st_mode/st_uid are not u32 on every platform
fn judge_owner(st: &rustix::fs::Stat) -> Option<String> {
    let mode = st.st_mode as u32;
    let kind = FileType::from_raw_mode(st.st_mode as _);
    let dir = kind == FileType::Directory;
    let me = rustix::process::geteuid().as_raw();
    let uid = st.st_uid as u32;
    if uid != me && uid != 0 {
        return Some(format!(
            "belongs to another user (uid {uid}; this process runs as uid {me})"
        ));
    }
    let sticky_root = dir && uid == 0 && mode & 0o1000 != 0;
    // A symlink's own mode means nothing (always 0777); what it is gets judged by whoever
    // refuses to follow it.
    if mode & 0o022 != 0 && !sticky_root && kind != FileType::Symlink {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "group and others",
            (true, false) => "its group",
            _ => "others",
        };
        return Some(format!(
            "may be written by {who} (mode {:04o})",
            mode & 0o7777
        ));
    }
    None
}

/// Whether the file `fd` is open on has no name left (its link count is 0: it was unlinked,
/// or renamed over). One `fstat`.
#[allow(clippy::unnecessary_cast)] // st_nlink is not u64 on every platform
pub(crate) fn fd_unlinked(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
    Ok(rustix::fs::fstat(fd)?.st_nlink as u64 == 0)
}

/// Identity of an open descriptor and its kind (`None`: a regular file), for a descriptor the
/// caller opened: unlike [`fd_entry_mode`] it names the identity of directories too.
pub(crate) fn fd_identity(fd: BorrowedFd<'_>) -> Result<(FileId, Option<FileKind>), Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok((
        id_of(&st),
        kind_of(FileType::from_raw_mode(st.st_mode as _)),
    ))
}

/// A close-on-exec duplicate of `fd`: the same open file description, so a `flock` taken
/// through it is the description's (and stays when the duplicate is closed).
pub(crate) fn dup_cloexec(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
}

/// `flock(LOCK_EX|LOCK_NB)` (or `LOCK_SH|LOCK_NB` with `shared`). `Ok(false)` means another
/// open file description holds a conflicting lock.
pub(crate) fn try_lock(fd: BorrowedFd<'_>, shared: bool) -> Result<bool, Errno> {
    let op = if shared {
        FlockOperation::NonBlockingLockShared
    } else {
        FlockOperation::NonBlockingLockExclusive
    };
    loop {
        match rustix::fs::flock(fd, op) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK) => return Ok(false),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `flock(LOCK_EX)` (or `LOCK_SH`): sleeps in the kernel's queue until the lock is granted.
/// The kernel-wait helper threads (`lease/posix/kernel_wait.rs`) and inline waits call this.
///
/// A signal handler installed without `SA_RESTART` makes `flock` fail with `EINTR`, the lock
/// not granted; `interrupted` is then asked, on this thread: `Continue` blocks again in the
/// same queue, `Break` returns `Err(EINTR)` — the only way this returns `EINTR`.
pub(crate) fn lock_blocking(
    fd: BorrowedFd<'_>,
    shared: bool,
    interrupted: &dyn Fn() -> ControlFlow<()>,
) -> Result<(), Errno> {
    let op = if shared {
        FlockOperation::LockShared
    } else {
        FlockOperation::LockExclusive
    };
    loop {
        match rustix::fs::flock(fd, op) {
            Err(Errno::INTR) => match interrupted() {
                ControlFlow::Continue(()) => continue,
                ControlFlow::Break(()) => return Err(Errno::INTR),
            },
            other => return other,
        }
    }
}

/// `flock(LOCK_UN)`: used only by handles that keep their file open between leases.
pub(crate) fn unlock(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::fs::flock(fd, FlockOperation::Unlock)
}

/// Marks this process as waiting for the flock on `fd`'s file: a whole-file POSIX read lock
/// (`fcntl(F_SETLK, F_RDLCK)`), which Linux keeps entirely apart from flock locks.
///
/// Why: a releaser that keeps its descriptor open (a `LeaseHandle`) re-locks with one cheap
/// system call, long before a waiter woken by the kernel has been scheduled, so without a
/// sign of waiters it takes the lock back every time (measured: 1 handoff in 24,530). Only
/// Linux: on the BSDs and macOS flock and fcntl locks share one lock list and would conflict.
/// Best effort: a failure only costs fairness, never exclusion.
#[cfg(all(target_os = "linux", not(leasehold_portable)))]
pub(crate) fn mark_waiting(fd: BorrowedFd<'_>) {
    let _ = rustix::fs::fcntl_lock(fd, FlockOperation::NonBlockingLockShared);
}

/// Ends [`mark_waiting`]: all of this process's POSIX locks on the file go, as they do when
/// any descriptor of the file is closed (POSIX lock semantics), which is how a cold lease's
/// mark goes at release. Fine: in-process leases on one file are serialized by the claim
/// table, and a mark only ever costs fairness, never exclusion.
#[cfg(all(target_os = "linux", not(leasehold_portable)))]
pub(crate) fn unmark_waiting(fd: BorrowedFd<'_>) {
    let _ = rustix::fs::fcntl_lock(fd, FlockOperation::NonBlockingUnlock);
}

/// Whether another process has marked itself waiting ([`mark_waiting`]) on the file `fd` is
/// open on: one `fcntl(F_GETLK)` asking about a whole-file write lock, which reports any
/// other process's POSIX lock on the file (this process's own never conflict) and changes
/// nothing. Works on a read-only descriptor: `F_GETLK` checks no access mode. It is the one
/// call a warm handle's cycle makes beyond its floor (BENCHMARKS.md, "Warm handle").
#[cfg(all(target_os = "linux", not(leasehold_portable)))]
pub(crate) fn others_waiting(fd: BorrowedFd<'_>) -> bool {
    use rustix::process::{Flock, FlockType, fcntl_getlk};
    matches!(
        fcntl_getlk(fd, &Flock::from(FlockType::WriteLock)),
        Ok(Some(_))
    )
}

/// Marks a descriptor inheritable (clears `FD_CLOEXEC`) or not.
pub(crate) fn set_inheritable(fd: BorrowedFd<'_>, inheritable: bool) -> Result<(), Errno> {
    let mut flags = rustix::io::fcntl_getfd(fd)?;
    flags.set(rustix::io::FdFlags::CLOEXEC, !inheritable);
    rustix::io::fcntl_setfd(fd, flags)
}

/// The soft `RLIMIT_NOFILE`, for error messages (0 when unknown).
pub(crate) fn nofile_limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(0)
}

/// Names the network, FUSE or overlay file system `fd` lives on, if it does.
///
/// Why this matters (cargo's `flock.rs` tells the same story): on NFS, `flock` is emulated
/// with byte-range locks through the lock manager; when that daemon is missing or slow,
/// `flock(LOCK_NB)` can block forever, and between two clients it may not exclude at all. SMB
/// mounts have similar gaps. A lock that silently fails to exclude is worse than none.
///
/// An overlay is named only where this mount namespace can reach one of its layer
/// directories, or cannot tell (see [`overlay_judged`]).
pub(crate) fn network_fs(fd: BorrowedFd<'_>) -> Result<Option<&'static str>, Errno> {
    let fs = rustix::fs::fstatfs(fd).map(|st| network_fs_of(&st))?;
    Ok(overlay_judged(fs, fd, Path::new("")))
}

/// [`network_fs`] of the file system the directory at `path` lives on (the lock file's
/// directory, looked at before anything is created in it).
pub(crate) fn network_fs_path(path: &Path) -> Result<Option<&'static str>, Errno> {
    let fs = rustix::fs::statfs(path).map(|st| network_fs_of(&st))?;
    Ok(overlay_judged(fs, cwd(), path))
}

/// `fs` as [`network_fs`] reports it, once an overlay's layers were looked at (Linux):
/// refused only where a lock could be taken beside the merged path's, through a layer
/// directory this mount namespace reaches (`sys/overlay.rs`). A container's root overlay,
/// whose layers only the host sees, is a local file system; where nothing can be told (no
/// `/proc/self/mountinfo`, relative layer paths) it stays refused.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn overlay_judged(
    fs: Option<&'static str>,
    at: BorrowedFd<'_>,
    path: &Path,
) -> Option<&'static str> {
    use super::overlay::{Layers, layers_of};
    if fs != Some(OVERLAY) {
        return fs;
    }
    match layers_of(at, path) {
        Layers::Unreachable => None,
        Layers::Reachable => {
            Some("overlay, an upper or lower directory of which is reachable here")
        }
        Layers::Moved => Some(
            "overlay, an upper or lower directory of which was moved from its recorded path within a file system reachable here",
        ),
        Layers::Unknown => Some("overlay, whose layer directories could not be looked up"),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn overlay_judged(
    fs: Option<&'static str>,
    _at: BorrowedFd<'_>,
    _path: &Path,
) -> Option<&'static str> {
    fs
}

/// What [`network_fs_magic`] names overlayfs.
#[cfg(any(target_os = "linux", target_os = "android"))]
const OVERLAY: &str = "overlay";

#[cfg(any(target_os = "linux", target_os = "android"))]
fn network_fs_of(st: &rustix::fs::StatFs) -> Option<&'static str> {
    #[allow(clippy::unnecessary_cast)]
    network_fs_magic(st.f_type as u64)
}

/// Classifies a Linux `statfs.f_type` magic number.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn network_fs_magic(magic: u64) -> Option<&'static str> {
    match magic & 0xffff_ffff {
        0x6969 => Some("nfs"),
        0x517b => Some("smb"),
        0xff53_4d42 => Some("cifs"),
        0xfe53_4d42 => Some("smb2"),
        0x5346_414f => Some("afs"),
        0x7362_6b69 => Some("coda"),
        // FUSE (`fuse` and `fuseblk` share this magic; sshfs, bindfs, s3fs, rclone, ...):
        // flock there is whatever the daemon implements — a bindfs mount and its backing
        // path do not exclude each other, and a network FUSE file system's locks are local
        // to one client — so it is refused by default like a network file system.
        0x6573_5546 => Some("fuse"),
        // overlayfs: a lock taken through the merged path is the overlay inode's, one taken
        // through the upper (or lower) directory the underlying inode's, and the two do not
        // exclude each other (tried with util-linux `flock -n`
        // through both paths). Refused like FUSE where a layer directory can be reached
        // ([`overlay_judged`] looks): otherwise every user of a lock goes through the
        // merged path, as the processes inside one container do.
        0x794c_7630 => Some(OVERLAY),
        _ => None,
    }
}

/// `statfs`'s file-system type name (BSD and macOS: `f_fstypename`).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn fs_type_name(st: &rustix::fs::StatFs) -> Vec<u8> {
    st.f_fstypename
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn network_fs_of(st: &rustix::fs::StatFs) -> Option<&'static str> {
    match fs_type_name(st).as_slice() {
        b"nfs" => Some("nfs"),
        b"smbfs" => Some("smbfs"),
        b"afpfs" => Some("afpfs"),
        b"webdav" => Some("webdav"),
        // macFUSE (sshfs and friends) reports its own type name, older versions osxfuse.
        b"macfuse" | b"osxfuse" => Some("fuse"),
        _ => None,
    }
}

/// What a mount says of itself, for [`MountLocks`](crate::MountLocks) to classify: the
/// file-system type and, where the system shows them, its options.
pub(crate) struct MountSeen {
    /// The file-system type: mountinfo's (`nfs4`, `fuse.sshfs`) on Linux, else `statfs`'s
    /// type name (`f_fstypename`); empty when neither tells (Linux without a mountinfo line:
    /// then [`network`](Self::network) still does).
    pub(crate) fstype: String,
    /// The super options of the mount's mountinfo line (Linux), as the kernel prints them.
    pub(crate) options: Option<Vec<u8>>,
    /// What `statfs` alone names a network, FUSE or overlay file system ([`network_fs`]'s
    /// name, before an overlay's layers are looked at).
    pub(crate) network: Option<&'static str>,
}

/// [`MountSeen`] of the mount `path` (relative to `at`; empty: `at` itself) lives on.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn mount_seen(at: BorrowedFd<'_>, path: &Path) -> Result<MountSeen, Errno> {
    use super::overlay::{mount_line, mount_of};
    let st = match path.as_os_str().is_empty() {
        true => rustix::fs::fstatfs(at)?,
        false => rustix::fs::statfs(path)?,
    };
    let network = network_fs_of(&st);
    let line = mount_of(at, path).and_then(|(mount, _)| {
        let mountinfo = std::fs::read("/proc/self/mountinfo").ok()?;
        let (fstype, options) = mount_line(&mountinfo, mount, |_| true)?;
        Some((
            String::from_utf8_lossy(fstype).into_owned(),
            options.to_vec(),
        ))
    });
    Ok(match line {
        Some((fstype, options)) => MountSeen {
            fstype,
            options: Some(options),
            network,
        },
        None => MountSeen {
            fstype: String::new(),
            options: None,
            network,
        },
    })
}

/// [`MountSeen`] of the mount `path` (relative to `at`; empty: `at` itself) lives on:
/// `statfs`'s type name; the options are not shown.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn mount_seen(at: BorrowedFd<'_>, path: &Path) -> Result<MountSeen, Errno> {
    let st = match path.as_os_str().is_empty() {
        true => rustix::fs::fstatfs(at)?,
        false => rustix::fs::statfs(path)?,
    };
    Ok(MountSeen {
        fstype: String::from_utf8_lossy(&fs_type_name(&st)).into_owned(),
        options: None,
        network: network_fs_of(&st),
    })
}

/// Creates `path` and its missing parents with mode 0700 (`std::fs::DirBuilder`, which
/// handles the races of concurrent creators).
pub(crate) fn create_dirs(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Fills `buf` from `offset` without moving a shared file position (`pread`, through std's
/// `FileExt`, which retries `EINTR` and short reads).
pub(crate) fn read_exact_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// `fsync` of an open directory: makes its entries (creations, renames) durable.
pub(crate) fn sync_dir_fd(dir: BorrowedFd<'_>) -> io::Result<()> {
    rustix::fs::fsync(dir).map_err(io::Error::from)
}

/// What stands at a path, for the holder look-up (never following a final symlink).
pub(crate) enum Looked {
    Missing,
    Regular(Option<FileId>),
    Other(FileKind),
}

/// Looks at `path` without following a final symlink; a missing parent is `Missing`.
pub(crate) fn lookup(path: &Path) -> io::Result<Looked> {
    match entry_at(cwd(), path) {
        Ok(Entry::Missing) => Ok(Looked::Missing),
        Ok(Entry::Regular(id)) => Ok(Looked::Regular(Some(id))),
        Ok(Entry::Other(kind)) => Ok(Looked::Other(kind)),
        Err(e) => Err(e.into()),
    }
}

/// Who holds flock locks on the inode `id` (Linux: `/proc/locks`; elsewhere: unknown).
///
/// Reading `/proc/locks` takes, creates and disturbs nothing, so it is safe to call while
/// others acquire. Lines are matched on `major:minor:inode`; blocked waiters (`->`) and
/// lines whose owner is gone (pid 0) are skipped. Where the file system's `st_dev` differs
/// from the superblock device the kernel prints (btrfs subvolumes, some overlays), an
/// inode-only match is accepted only after `/proc/PID/fd` proves that process has this very
/// inode open: a pid shown must be right. A lock whose locker has exited while descendants
/// still hold the descriptor shows pid 0 (or the dead locker's pid): it is reported held
/// with no pid.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(leasehold_portable)
))]
pub(crate) fn holders(id: FileId) -> Holders {
    let Ok(text) = read_proc_locks() else {
        return Holders::Unknown;
    };
    let major = rustix::fs::major(id.dev as _) as u64;
    let minor = rustix::fs::minor(id.dev as _) as u64;
    let mut exact = Vec::new();
    let mut by_ino = Vec::new();
    for line in text.lines() {
        let mut tok = line.split_whitespace();
        let _ordinal = tok.next();
        let Some(kind) = tok.next() else { continue };
        if kind != "FLOCK" {
            continue; // "->" marks a blocked waiter; POSIX/OFD locks do not conflict with flock
        }
        let (Some(_adv), Some(_mode), Some(pid), Some(dev)) =
            (tok.next(), tok.next(), tok.next(), tok.next())
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<i64>() else {
            continue;
        };
        let mut parts = dev.split(':');
        let (Some(ma), Some(mi), Some(ino)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (Ok(ma), Ok(mi), Ok(ino)) = (
            u64::from_str_radix(ma, 16),
            u64::from_str_radix(mi, 16),
            ino.parse::<u64>(),
        ) else {
            continue;
        };
        if ino != id.ino {
            continue;
        }
        if ma == major && mi == minor {
            exact.push(pid);
        } else if pid > 0 {
            by_ino.push(pid);
        }
    }
    if exact.is_empty() {
        exact = by_ino
            .into_iter()
            .filter(|pid| process_has_open(*pid as u32, id))
            .collect();
    }
    if exact.is_empty() {
        return Holders::Free;
    }
    // pid 0: the locker is gone (its descendants inherited the lock); held, owner unknown.
    // A positive pid is the process that took the lock, which may have died since while a
    // child that inherited the descriptor keeps the lock (`run` SIGKILLed while COMMAND
    // runs), and its pid may even have been reused: as lslocks does, a pid is shown only
    // while that process is alive and has a descriptor of this inode (`/proc/PID/fd`).
    let mut pids: Vec<u32> = exact
        .into_iter()
        .filter(|p| *p > 0)
        .map(|p| p as u32)
        .filter(|p| holds_open(*p, id))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    Holders::Held { pids }
}

/// `/proc/locks` in one `read`, so that the listing is one consistent snapshot.
///
/// The kernel walks the lock list afresh for every `read` call (seq_file), so reading in
/// small chunks — as `read_to_string` starts out doing, with 32-byte probes — can skip or
/// repeat entries while other processes lock and unlock: the core tests saw their own held
/// lease missing. Each call also takes the global `file_rwsem` for writing, stalling every
/// lock operation on the machine. A buffer that came back full is retried twice as large.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(leasehold_portable)
))]
fn read_proc_locks() -> io::Result<String> {
    use std::io::Read;
    let mut size = 1 << 16;
    loop {
        let mut buf = vec![0u8; size];
        let n = std::fs::File::open("/proc/locks")?.read(&mut buf)?;
        if n < size || size >= 1 << 26 {
            buf.truncate(n);
            return String::from_utf8(buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
        }
        size *= 2;
    }
}

/// Whether the locker `pid` named by `/proc/locks` still holds the lock as far as we can
/// see: it has a descriptor of the inode; or, where its descriptors are not ours to read
/// (another user's process), it is at least alive and not a zombie.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(leasehold_portable)
))]
fn holds_open(pid: u32, id: FileId) -> bool {
    match std::fs::read_dir(format!("/proc/{pid}/fd")) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            // "/proc/PID/stat": "PID (comm) S ..."; the state follows the last ')'.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .is_some_and(|state| state != "Z" && state != "X")
            })
        }
        _ => process_has_open(pid, id),
    }
}

#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(leasehold_portable)
))]
fn process_has_open(pid: u32, id: FileId) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    dir.flatten().any(|e| {
        rustix::fs::stat(e.path())
            .map(|st| id_of(&st) == id)
            .unwrap_or(false)
    })
}

/// Who holds flock locks on the inode `id`: this platform does not tell.
#[cfg(not(all(
    any(target_os = "linux", target_os = "android"),
    not(leasehold_portable)
)))]
pub(crate) fn holders(_id: FileId) -> Holders {
    Holders::Unknown
}

/// Whether a name is a single, local path component (no separator, not `.`/`..`, no NUL).
pub(crate) fn is_plain_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/') && !b.contains(&0)
}

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    #[test]
    fn network_file_systems_are_recognised() {
        for (magic, name) in [
            (0x6969u64, "nfs"),
            (0x517b, "smb"),
            (0xff53_4d42, "cifs"),
            (0xfe53_4d42, "smb2"),
        ] {
            assert_eq!(super::network_fs_magic(magic), Some(name));
        }
        // FUSE (fuse and fuseblk report one magic): refused like a network file system.
        assert_eq!(super::network_fs_magic(0x6573_5546), Some("fuse"));
        assert_eq!(super::network_fs_magic(0xef53), None, "ext4 is local");
        // overlayfs: the merged path and the upper directory do not exclude each other.
        assert_eq!(super::network_fs_magic(0x794c_7630), Some("overlay"));
        assert_eq!(super::network_fs_magic(0x0102_1994), None, "tmpfs is local");
    }
}

/// The clock a record lease's validity and a waiter's watch are measured on: one that counts
/// suspended time where the system has one (Linux: `CLOCK_BOOTTIME`; macOS's and the BSDs'
/// `CLOCK_MONOTONIC` counts it too, except OpenBSD's), as a duration since an arbitrary
/// origin of this boot.
pub(crate) fn boot_clock() -> Duration {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let id = rustix::time::ClockId::Boottime;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let id = rustix::time::ClockId::Monotonic;
    let t = rustix::time::clock_gettime(id);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// What identifies this host to a record lease, unhashed: the host name, the boot ID
/// (Linux: `/proc/sys/kernel/random/boot_id`) and the PID namespace (Linux:
/// `/proc/self/ns/pid`'s link), so that a reboot, or a container with PIDs of its own, is
/// another host. Elsewhere the boot ID and namespace are empty.
pub(crate) fn host_identity() -> Vec<u8> {
    let id = rustix::system::uname().nodename().to_bytes().to_vec();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let id = {
        let mut id = id;
        id.push(0);
        id.extend(std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default());
        id.push(0);
        if let Ok(ns) = std::fs::read_link("/proc/self/ns/pid") {
            id.extend(ns.as_os_str().as_bytes());
        }
        id
    };
    id
}

/// The start time of process `pid` (`/proc/PID/stat`'s field 22, in clock ticks since
/// boot), which tells a live process from a later one that reuses its PID; `None` when no
/// such process is there. Only where `/proc` shows this process's own PID namespace
/// ([`proc_is_own`]).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything: fields are
    // counted from the last ')'.
    let after = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[after + 1..]).ok()?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `/proc` shows this process's own PID namespace (`/proc/self` names our PID): after
/// `unshare --pid --fork` without a `/proc` of its own, it shows the parent's, whose PIDs
/// mean other processes.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn proc_is_own() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|l| l.to_str().and_then(|s| s.parse::<u32>().ok()))
        == Some(std::process::id())
}
