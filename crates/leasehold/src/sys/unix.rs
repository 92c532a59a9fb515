//! POSIX implementation of the platform boundary (Linux, macOS, BSD).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::error::{FileKind, Holders};

/// Identity of an inode: what a lock is really taken on. Two paths with equal identity are
/// the same lock; a path whose identity changed is a different lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId {
    /// Device number (`st_dev`).
    pub dev: u64,
    /// Inode number (`st_ino`).
    pub ino: u64,
}

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
        Ok(st) => Ok(match kind_of(FileType::from_raw_mode(st.st_mode as _)) {
            None => Entry::Regular(id_of(&st)),
            Some(k) => Entry::Other(k),
        }),
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

/// Creates one directory with mode 0700 relative to `dir` (`EEXIST` is the caller's to judge).
pub(crate) fn mkdir_at(dir: BorrowedFd<'_>, name: &Path) -> Result<(), Errno> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))
}

/// Identity and kind of an open descriptor.
pub(crate) fn fd_entry(fd: BorrowedFd<'_>) -> Result<Entry, Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok(match kind_of(FileType::from_raw_mode(st.st_mode as _)) {
        None => Entry::Regular(id_of(&st)),
        Some(k) => Entry::Other(k),
    })
}

/// `flock(LOCK_EX|LOCK_NB)`. `Ok(false)` means another open file description holds it.
pub(crate) fn try_lock_exclusive(fd: BorrowedFd<'_>) -> Result<bool, Errno> {
    loop {
        match rustix::fs::flock(fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(true),
            Err(Errno::WOULDBLOCK) => return Ok(false),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `flock(LOCK_UN)`: used only by handles that keep their file open between leases.
pub(crate) fn unlock(fd: BorrowedFd<'_>) -> Result<(), Errno> {
    rustix::fs::flock(fd, FlockOperation::Unlock)
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

/// Names the network file system `fd` lives on, if it does.
///
/// Why this matters (cargo's `flock.rs` tells the same story): on NFS, `flock` is emulated
/// with byte-range locks through the lock manager; when that daemon is missing or slow,
/// `flock(LOCK_NB)` can block forever, and between two clients it may not exclude at all. SMB
/// mounts have similar gaps. A lock that silently fails to exclude is worse than none.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn network_fs(fd: BorrowedFd<'_>) -> Result<Option<&'static str>, Errno> {
    let st = rustix::fs::fstatfs(fd)?;
    #[allow(clippy::unnecessary_cast)]
    Ok(network_fs_magic(st.f_type as u64))
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
        _ => None,
    }
}

/// Names the network file system `fd` lives on, if it does (see the Linux variant).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn network_fs(fd: BorrowedFd<'_>) -> Result<Option<&'static str>, Errno> {
    let st = rustix::fs::fstatfs(fd)?;
    let name: Vec<u8> = st
        .f_fstypename
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    Ok(match name.as_slice() {
        b"nfs" => Some("nfs"),
        b"smbfs" => Some("smbfs"),
        b"afpfs" => Some("afpfs"),
        b"webdav" => Some("webdav"),
        _ => None,
    })
}

/// Waits until one of `fds` is readable or `timeout` passes. Returns which were readable.
/// `EINTR` is reported as "nothing ready" so that the caller re-checks its budget.
pub(crate) fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<u32> {
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    let ts = timeout.map(|d| Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as _,
        tv_nsec: d.subsec_nanos() as _,
    });
    match rustix::event::poll(&mut pfds, ts.as_ref()) {
        Ok(_) | Err(Errno::INTR) => {}
        Err(e) => return Err(e.into()),
    }
    let mut mask = 0u32;
    for (i, p) in pfds.iter().enumerate() {
        if !p.revents().is_empty() {
            mask |= 1 << i;
        }
    }
    Ok(mask)
}

/// A self-pipe: the read end becomes readable, and stays so, once anything was written.
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), Errno> {
    let (r, w) = rustix::pipe::pipe()?;
    for fd in [&r, &w] {
        set_inheritable(fd.as_fd(), false)?;
        let fl = rustix::fs::fcntl_getfl(fd)?;
        rustix::fs::fcntl_setfl(fd, fl | OFlags::NONBLOCK)?;
    }
    Ok((r, w))
}

/// Writes one byte to a self-pipe; a full pipe is already readable, so `EAGAIN` is success.
pub(crate) fn poke(fd: BorrowedFd<'_>) {
    let _ = rustix::io::write(fd, &[1u8]);
}

/// Whether `fd` is readable right now (zero-timeout poll).
pub(crate) fn is_readable(fd: BorrowedFd<'_>) -> bool {
    matches!(wait_readable(&[fd], Some(Duration::ZERO)), Ok(m) if m & 1 == 1)
}

/// A source of wake-ups for a waiter: something happened to the lock file that may mean the
/// lease was released.
///
/// On Linux this is an inotify watch on the *inode* the waiter has open (through
/// `/proc/self/fd/N`, so renames do not matter): the kernel raises `IN_CLOSE_*` when an open
/// file description of it is finally closed — which is exactly when a flock on it is dropped,
/// including at the death of its holder — and `IN_ATTRIB`/`IN_MOVE_SELF` when it is unlinked
/// or renamed. Note the kernel emits the close event a moment *before* it removes the lock
/// (`__fput` calls `fsnotify_close` before `locks_remove_file`), so a waiter retries briefly
/// after each event. Elsewhere (or when inotify is exhausted) there is no source and waiters
/// fall back to bounded back-off.
pub(crate) struct Watch {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fd: Option<OwnedFd>,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    wd: i32,
}

/// Idle inotify instances, kept for the next wait instead of being closed, each with the
/// watch descriptor it still carries.
///
/// Why: closing an inotify instance makes the kernel wait for an SRCU grace period
/// (`fsnotify_destroy_group` flushes the mark reaper, which calls `synchronize_srcu`), which
/// measured 5–20 ms on a loaded 2-core machine (`leasehold bench`, strace -T on `close`).
/// A waiter that closed its watch before returning paid that after every contended
/// acquisition, every takeover and every cancellation. Removing the watch
/// (`inotify_rm_watch`) is cheaper but still measured ~8 µs — as much as the whole kernel
/// handoff — so it is not done on the way out of a wait either: the instance goes back here
/// with its watch, and the next waiter removes that watch before adding its own. Meanwhile
/// the idle watch may queue events nobody reads; inotify merges identical consecutive events,
/// so that queue stays tiny, and the next waiter drains it. At most [`IDLE_MAX`] are kept.
#[cfg(any(target_os = "linux", target_os = "android"))]
static IDLE: std::sync::Mutex<Vec<(OwnedFd, i32)>> = std::sync::Mutex::new(Vec::new());
#[cfg(any(target_os = "linux", target_os = "android"))]
const IDLE_MAX: usize = 4;

impl Watch {
    /// Starts watching the inode open at `lock`; `None` when no event source is available.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn new(lock: BorrowedFd<'_>, path: &Path) -> Option<Watch> {
        use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
        use std::os::fd::AsRawFd;
        let idle = IDLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let fd = match idle {
            Some((fd, stale)) => {
                // Removed before adding: re-adding the same inode would return `stale` again.
                let _ = inotify::remove_watch(&fd, stale);
                fd
            }
            None => inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?,
        };
        let mask = WatchFlags::CLOSE
            | WatchFlags::ATTRIB
            | WatchFlags::MOVE_SELF
            | WatchFlags::DELETE_SELF;
        let magic = format!("/proc/self/fd/{}", lock.as_raw_fd());
        let wd = match inotify::add_watch(&fd, magic.as_str(), mask) {
            Ok(wd) => wd,
            // No /proc: watch by name, refusing to follow a symlink.
            Err(_) => inotify::add_watch(&fd, path, mask | WatchFlags::DONT_FOLLOW).ok()?,
        };
        let watch = Watch { fd: Some(fd), wd };
        // A reused instance may hold events of an earlier watch (at least its IN_IGNORED).
        watch.drain();
        Some(watch)
    }

    /// No event source on this platform.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(crate) fn new(_lock: BorrowedFd<'_>, _path: &Path) -> Option<Watch> {
        None
    }

    /// The descriptor to poll for readability.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.fd {
            Some(fd) => fd.as_fd(),
            None => unreachable!("a watch keeps its descriptor until dropped"),
        }
    }

    /// The descriptor to poll for readability.
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        unreachable!("no watch exists on this platform")
    }

    /// Consumes pending events so the descriptor stops being readable.
    ///
    /// One `read` (it sits on a waiter's wake-up path, where every system call shows in the
    /// handoff latency): it takes every queued event that fits in the buffer — 256 of the
    /// 16-byte events a watch by descriptor produces. Should more remain, the descriptor
    /// stays readable and the next poll returns at once: one harmless extra retry.
    pub(crate) fn drain(&self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = &self.fd {
            let mut buf = [0u8; 4096];
            let _ = rustix::io::read(fd, &mut buf);
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Drop for Watch {
    fn drop(&mut self) {
        let Some(fd) = self.fd.take() else { return };
        let surplus = {
            let mut idle = IDLE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if idle.len() < IDLE_MAX {
                idle.push((fd, self.wd));
                None
            } else {
                Some(fd)
            }
        };
        // Closed (slowly) outside the lock, if the pool was full.
        drop(surplus);
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
/// still hold the descriptor shows pid 0: it is reported held with no pid.
#[cfg(any(target_os = "linux", target_os = "android"))]
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
    let mut pids: Vec<u32> = exact
        .into_iter()
        .filter(|p| *p > 0)
        .map(|p| p as u32)
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
#[cfg(any(target_os = "linux", target_os = "android"))]
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

#[cfg(any(target_os = "linux", target_os = "android"))]
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
#[cfg(not(any(target_os = "linux", target_os = "android")))]
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
        assert_eq!(super::network_fs_magic(0xef53), None, "ext4 is local");
        assert_eq!(super::network_fs_magic(0x0102_1994), None, "tmpfs is local");
    }

    #[test]
    fn a_dropped_watch_is_kept_for_reuse_and_a_reused_one_reports_only_new_events() {
        use std::os::fd::AsFd;
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.lock");
        let file = std::fs::File::create(&path).unwrap();
        let first = super::Watch::new(file.as_fd(), &path).expect("inotify");
        let raw = first.as_fd().as_raw_fd();
        // An event the first watch never consumes.
        drop(std::fs::File::open(&path).unwrap());
        drop(first);
        assert!(
            super::IDLE
                .lock()
                .unwrap()
                .iter()
                .any(|(fd, _)| fd.as_raw_fd() == raw),
            "a dropped watch's instance is kept, not closed (closing waits for SRCU)"
        );
        let second = super::Watch::new(file.as_fd(), &path).expect("inotify");
        assert!(
            !super::is_readable(second.as_fd()),
            "stale events of an earlier watch are drained"
        );
        drop(std::fs::File::open(&path).unwrap());
        assert_eq!(
            super::wait_readable(&[second.as_fd()], Some(std::time::Duration::from_secs(5)))
                .unwrap(),
            1,
            "a reused instance reports the close of the watched file"
        );
    }
}
