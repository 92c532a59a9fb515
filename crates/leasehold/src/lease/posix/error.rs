//! Errno mapping: every failed system call of the primitive becomes the typed error that
//! names the path and says what to do.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::Path;

use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::kind::FileKind;
use crate::sys::{self, Entry};

/// Refuses a `name` (to be looked up in the directory `dir`) that is not one plain file
/// name; the error names `dir`/`name`, built only then.
pub(super) fn plain(name: &str, dir: &Path, op: &'static str) -> Result<()> {
    if sys::is_plain_name(OsStr::new(name)) {
        return Ok(());
    }
    Err(Error::Io {
        op,
        path: dir.join(name),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "must be a single plain file name",
        ),
    })
}

/// Creates `path` and its missing parents with mode 0700.
pub(super) fn create_dirs(path: &Path) -> Result<()> {
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
pub(super) fn dir_error(at: BorrowedFd<'_>, name: &Path, path: &Path, e: Errno) -> Error {
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
pub(super) fn lock_error(path: &Path, e: Errno) -> Error {
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
