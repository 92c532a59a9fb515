//! WASI (`wasm32-wasip1`) implementation of the platform boundary: file-system look-ups, and
//! no lock at all.
//!
//! WASI preview 1 has no `flock`, no `fcntl` record locks and no named kernel objects, so
//! nothing here can exclude another process or another instance; the single-process lease
//! (`lease/single.rs`) arbitrates in this process's claim table only, behind an explicit
//! opt-in. What this module offers is what that lease and the patterns need: opening a file
//! without following a final symlink and without blocking (`rustix`'s `openat`, which
//! wasi-libc maps onto `path_open` relative to the preopened directory), the identity of a
//! file (`fstat`/`fstatat`: WASI's `filestat` has a device and an inode), directory
//! creation, listing and `fsync` (`std::fs`).
//!
//! Paths are resolved the way wasi-libc resolves them: an absolute path against the
//! preopened directory that contains it, a relative one against the emulated working
//! directory (`PWD`, else `/`).

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::kind::{FileId, FileKind, Holders};

/// What stands at a path (or behind a descriptor), never following a final symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stood {
    Missing,
    Regular(FileId),
    Directory(FileId),
    Other(FileKind),
}

fn stood(st: &rustix::fs::Stat) -> Stood {
    let id = FileId {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Stood::Regular(id),
        FileType::Directory => Stood::Directory(id),
        FileType::Symlink => Stood::Other(FileKind::Symlink),
        FileType::CharacterDevice => Stood::Other(FileKind::CharDevice),
        FileType::BlockDevice => Stood::Other(FileKind::BlockDevice),
        _ => Stood::Other(FileKind::Other),
    }
}

/// `fstatat(path, AT_SYMLINK_NOFOLLOW)`; a missing file or parent is `Missing`.
pub(crate) fn stat_nofollow(path: &Path) -> io::Result<Stood> {
    match rustix::fs::statat(rustix::fs::CWD, path, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(stood(&st)),
        Err(Errno::NOENT) => Ok(Stood::Missing),
        Err(e) => Err(e.into()),
    }
}

/// `stat(path)`, following symlinks (a configured directory may be reached through one).
pub(crate) fn stat_follow(path: &Path) -> io::Result<Stood> {
    match rustix::fs::statat(rustix::fs::CWD, path, AtFlags::empty()) {
        Ok(st) => Ok(stood(&st)),
        Err(Errno::NOENT) => Ok(Stood::Missing),
        Err(e) => Err(e.into()),
    }
}

/// What an open descriptor is.
pub(crate) fn fd_stood(fd: BorrowedFd<'_>) -> io::Result<Stood> {
    rustix::fs::fstat(fd)
        .map(|st| stood(&st))
        .map_err(Into::into)
}

/// Opens a lock file read-only (created 0600 with `create`): never following a final
/// symlink (`O_NOFOLLOW`: `ELOOP`), never blocking on a FIFO (`O_NONBLOCK`), never written
/// or truncated. The caller checks what was opened.
pub(crate) fn open_lock_file(path: &Path, create: bool) -> io::Result<OwnedFd> {
    open(path, false, create)
}

/// Opens a data file (a log) as carefully as a lock file; with `write`, read-write and
/// `O_APPEND`, so every write lands at the end of the file.
pub(crate) fn open_data_file(path: &Path, write: bool, create: bool) -> io::Result<File> {
    open(path, write, create).map(File::from)
}

fn open(path: &Path, write: bool, create: bool) -> io::Result<OwnedFd> {
    let mut flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    flags |= match write {
        true => OFlags::RDWR | OFlags::APPEND,
        false => OFlags::RDONLY,
    };
    if create {
        flags |= OFlags::CREATE;
    }
    rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::from_raw_mode(0o600)).map_err(Into::into)
}

/// The modification time of an open descriptor's file.
pub(crate) fn fd_modified(fd: BorrowedFd<'_>) -> io::Result<std::time::SystemTime> {
    let st = rustix::fs::fstat(fd)?;
    let secs = u64::try_from(st.st_mtim.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(st.st_mtim.tv_nsec).unwrap_or(0);
    Ok(std::time::UNIX_EPOCH + Duration::new(secs, nanos.min(999_999_999)))
}

/// Creates one directory (`AlreadyExists` is the caller's to judge).
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    std::fs::create_dir(path)
}

/// Creates a directory and its missing parents (`std::fs::DirBuilder`, which handles the
/// races of concurrent creators).
pub(crate) fn create_dirs(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).create(path)
}

/// `fsync` of a directory: makes its entries (creations, renames) durable.
pub(crate) fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

/// The names in a directory.
pub(crate) fn dir_names(path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.file_name()))
        .collect()
}

/// Removes a file (never a directory; unlink never follows a symlink).
pub(crate) fn unlink(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path)
}

/// Removes an empty directory.
pub(crate) fn remove_dir(path: &Path) -> io::Result<()> {
    std::fs::remove_dir(path)
}

/// Renames `from` to `to` (the entry itself: a symlink is renamed or replaced, never
/// followed).
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)
}

/// Creates the file `path` exclusively, for writing (`O_CREAT|O_EXCL|O_NOFOLLOW`: anything
/// standing there, a symlink included, fails with `AlreadyExists`). WASI has no modes.
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::from_raw_mode(0o600))
        .map(File::from)
        .map_err(Into::into)
}

/// Fills `buf` from `offset` without moving the file position (`pread`; std's positioned
/// reads on WASI are not stable).
pub(crate) fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match rustix::io::pread(file.as_fd(), &mut *buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// What stands at a path, for the holder look-up.
pub(crate) enum Looked {
    Missing,
    Regular(Option<FileId>),
    Other(FileKind),
}

/// Looks at `path` without following a final symlink; a missing parent is `Missing`.
pub(crate) fn lookup(path: &Path) -> io::Result<Looked> {
    Ok(match stat_nofollow(path)? {
        Stood::Missing => Looked::Missing,
        Stood::Regular(id) => Looked::Regular(Some(id)),
        Stood::Directory(_) => Looked::Other(FileKind::Directory),
        Stood::Other(kind) => Looked::Other(kind),
    })
}

/// Nobody can tell on WASI who holds a lease: another instance sharing the directory is
/// invisible (and this process's own leases are known from the claim table, not from here).
pub(crate) fn holders(_id: FileId) -> Holders {
    Holders::Unknown
}

/// Whether a name is a single, local path component (no separator, not `.`/`..`, no NUL).
pub(crate) fn is_plain_name(name: &OsStr) -> bool {
    let Some(s) = name.to_str() else {
        return false;
    };
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0'])
}
