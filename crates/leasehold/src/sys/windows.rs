//! Windows implementation of the platform boundary: named kernel semaphores.
//!
//! Windows has no `flock` that survives the rules leasehold needs (a `LockFileEx` lock pins an
//! open handle on the lock file, which blocks directory removal and confuses indexers), so a
//! lease is a *named kernel object* whose existence is the lock: `CreateSemaphoreW` either
//! creates the object (we hold the lease) or opens one that already exists
//! (`ERROR_ALREADY_EXISTS`: someone else holds it, and we close our handle at once). The kernel
//! destroys a named object when its last handle closes — on `CloseHandle`, and on process
//! death, `TerminateProcess` included — so a crashed holder never blocks a successor.
//!
//! This module has `unsafe` code (allowed here and in the Linux test-only `test_signal.rs`; see the
//! crate's `unsafe` policy in `lib.rs`): `windows-sys` exposes the raw Win32 calls, and there
//! is no safe wrapper crate (like `rustix` on POSIX) for named semaphores. Each block states
//! why it is sound.

use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{FromRawHandle, OwnedHandle};

use windows_sys::Win32::Foundation::{ERROR_ACCESS_DENIED, ERROR_ALREADY_EXISTS, GetLastError};
use windows_sys::Win32::System::Threading::CreateSemaphoreW;

/// Outcome of trying to create a lease's named object.
#[derive(Debug)]
pub(crate) enum Created {
    /// We created the object: the lease is ours while this handle stays open.
    Held(OwnedHandle),
    /// The object already exists: somebody holds the lease.
    Exists,
}

/// Creates the named semaphore `name` (for example `Local\leasehold-<hex>`), or reports that
/// it already exists.
///
/// The handle is not inheritable (null security attributes), so a lease is never leaked into
/// child processes. When the object exists, the handle `CreateSemaphoreW` opened to it is
/// closed before returning: keeping it would keep the holder's object alive after the holder
/// released it. `ERROR_ACCESS_DENIED` also means the object exists (created by a holder whose
/// security descriptor does not let us open it), so it is contention too.
pub(crate) fn create_named(name: &str) -> io::Result<Created> {
    let wide: Vec<u16> = std::ffi::OsStr::new(name)
        .encode_wide()
        .chain(std::iter::once(0))
        .collect();
    if wide[..wide.len() - 1].contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "object name contains NUL",
        ));
    }
    // SAFETY: `wide` is a NUL-terminated UTF-16 string that outlives the call; a null
    // security-attributes pointer is documented as "default descriptor, not inheritable";
    // the counts satisfy 0 <= initial <= maximum, maximum > 0.
    let raw = unsafe { CreateSemaphoreW(std::ptr::null(), 0, 1, wide.as_ptr()) };
    // SAFETY: GetLastError only reads this thread's last-error value, set by the call above.
    let last = unsafe { GetLastError() };
    if raw.is_null() {
        if last == ERROR_ACCESS_DENIED {
            return Ok(Created::Exists);
        }
        return Err(io::Error::from_raw_os_error(last as i32));
    }
    // SAFETY: `raw` is a valid, non-null handle that CreateSemaphoreW just returned and that
    // nothing else owns; OwnedHandle closes it exactly once on drop.
    let handle = unsafe { OwnedHandle::from_raw_handle(raw) };
    if last == ERROR_ALREADY_EXISTS {
        drop(handle); // release our reference to the holder's object at once
        return Ok(Created::Exists);
    }
    Ok(Created::Held(handle))
}

// ---------------------------------------------------------------------------------------
// File-system look-ups of the Windows lease (safe `std::fs` calls, kept here so that every
// system call of the primitive is made under `sys/`).
// ---------------------------------------------------------------------------------------

use std::path::{Path, PathBuf};

use crate::kind::{FileId, FileKind, Holders};

/// `ERROR_PATH_NOT_FOUND`: a directory on the way is missing.
const ERROR_PATH_NOT_FOUND: i32 = 3;

/// What stands at a path, never following a final link or junction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stood {
    Missing,
    Regular,
    Directory,
    Other(FileKind),
}

/// Looks at `path` (`symlink_metadata`: links and junctions are reported, not followed).
pub(crate) fn stat_nofollow(path: &Path) -> io::Result<Stood> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            let ft = m.file_type();
            Ok(if ft.is_symlink() {
                Stood::Other(FileKind::Symlink)
            } else if ft.is_dir() {
                Stood::Directory
            } else if ft.is_file() {
                Stood::Regular
            } else {
                Stood::Other(FileKind::Other)
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Stood::Missing),
        Err(e) if e.raw_os_error() == Some(ERROR_PATH_NOT_FOUND) => Ok(Stood::Missing),
        Err(e) => Err(e),
    }
}

/// Looks at `path` following links (a configured directory may be reached through one).
pub(crate) fn stat_follow(path: &Path) -> io::Result<Stood> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(Stood::Directory),
        Ok(m) if m.is_file() => Ok(Stood::Regular),
        Ok(_) => Ok(Stood::Other(FileKind::Other)),
        Err(e) => Err(e),
    }
}

/// The real path of an existing directory (junctions, links and 8.3 names resolved).
pub(crate) fn real_path(path: &Path) -> io::Result<PathBuf> {
    std::fs::canonicalize(path)
}

/// Creates one directory (`AlreadyExists` is the caller's to judge).
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    std::fs::create_dir(path)
}

/// Creates a directory and its missing parents.
pub(crate) fn create_dirs(path: &Path) -> io::Result<()> {
    std::fs::create_dir_all(path)
}

/// The names in a directory.
pub(crate) fn dir_names(path: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    std::fs::read_dir(path)?
        .map(|e| e.map(|e| e.file_name()))
        .collect()
}

/// Creates the file `path` exclusively, for writing (`CREATE_NEW`: a file, link or junction
/// already standing there fails with `AlreadyExists`, and nothing is followed or opened).
pub(crate) fn create_new(path: &Path) -> io::Result<std::fs::File> {
    std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
}

/// Renames `from` to `to`, replacing a file there (the entry itself: a link is renamed or
/// replaced, never followed).
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)
}

/// Removes a file, or a link or junction itself (a directory link is removed as a
/// directory entry, never what it points to).
pub(crate) fn remove_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => {
            std::fs::remove_dir(path).map_err(|_| e)
        }
        other => other,
    }
}

/// Removes an empty directory.
pub(crate) fn remove_dir(path: &Path) -> io::Result<()> {
    std::fs::remove_dir(path)
}

/// Opens a data file (a log) for reading, or for reading and writing; `create` creates a
/// missing one. Never follows a final link: `FILE_FLAG_OPEN_REPARSE_POINT` opens a link
/// itself, which the caller's type check then refuses.
///
/// A writer gets `FILE_WRITE_DATA` (plain write access, not append-only): truncating a torn
/// tail or a failed append needs it, and the log positions each write at its end itself.
/// Every handle shares read, write and delete, so readers, searches and directory removal
/// are never blocked by the writer.
pub(crate) fn open_data_file(path: &Path, write: bool, create: bool) -> io::Result<std::fs::File> {
    use std::os::windows::fs::OpenOptionsExt;
    /// `FILE_FLAG_OPEN_REPARSE_POINT`.
    const OPEN_REPARSE_POINT: u32 = 0x0020_0000;
    let mut o = std::fs::OpenOptions::new();
    o.read(true).custom_flags(OPEN_REPARSE_POINT);
    if write {
        o.write(true);
    }
    if create {
        o.create(true);
    }
    let file = o.open(path)?;
    let ft = file.metadata()?.file_type();
    if ft.is_symlink() || !ft.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a link, junction or directory)",
        ));
    }
    Ok(file)
}

/// Fills `buf` from `offset` (`ReadFile` with an offset; unlike `pread` it moves the
/// handle's file position, which the append log does not use: its writes are positioned too).
pub(crate) fn read_exact_at(
    file: &std::fs::File,
    mut buf: &mut [u8],
    mut offset: u64,
) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What stands at a path, for the holder look-up.
pub(crate) enum Looked {
    #[allow(dead_code)] // absence proves nothing on Windows (see `lookup`)
    Missing,
    Regular(Option<FileId>),
    Other(FileKind),
}

/// Looks at `path` without following a final link. A missing file says nothing here (leases
/// create no lock files on Windows), so it is looked at as an unknown lock, not a free one.
pub(crate) fn lookup(path: &Path) -> io::Result<Looked> {
    Ok(match stat_nofollow(path)? {
        Stood::Missing => Looked::Regular(None),
        Stood::Regular => Looked::Regular(None),
        Stood::Directory => Looked::Other(FileKind::Directory),
        Stood::Other(k) => Looked::Other(k),
    })
}

/// Windows cannot tell who holds a named object.
pub(crate) fn holders(_id: FileId) -> Holders {
    Holders::Unknown
}

/// Whether a name is one plain path component: not empty, `.` or `..`, no separator
/// (`\` or `/`), no drive colon and no NUL.
pub(crate) fn is_plain_name(name: &std::ffi::OsStr) -> bool {
    let Some(s) = name.to_str() else {
        return false;
    };
    !s.is_empty() && s != "." && s != ".." && !s.contains(['\\', '/', ':', '\0'])
}
