//! [`Dir`]: an opened directory that lock files are opened relative to (`openat`), the POSIX
//! inside of `LockDir`; its data operations are in `data.rs`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rustix::io::Errno;

use super::error::{create_dirs, dir_error, path_error, plain};
use crate::error::{Error, Result};
use crate::kind::FileId;
use crate::lease::platform::PlatformDir;
use crate::sys::{self, Entry};

/// An opened directory that lock files are opened relative to (`openat`).
#[derive(Debug, Clone)]
pub(crate) struct Dir {
    pub(super) fd: Arc<OwnedFd>,
    pub(super) path: PathBuf,
    /// The directory's identity when it was opened.
    pub(super) id: FileId,
    /// How it was reached, so that [`Dir::verify`] can walk the chain again.
    pub(super) parent: Option<Arc<Dir>>,
    /// The handle's directory was found fit under both rules of [`check_dir`](super::check_dir) (shared by
    /// clones): it is not judged again, as [`FIT_DIRS`](super::FIT_DIRS) are not.
    pub(super) fit: Arc<AtomicBool>,
}

impl PlatformDir for Dir {
    fn open(path: &Path) -> Result<Dir> {
        let fd = sys::open_dir_at(sys::cwd(), path, true)
            .map_err(|e| dir_error(sys::cwd(), path, path, e))?;
        let id = sys::fd_id(fd.as_fd()).map_err(|e| path_error(path, "stat directory", e))?;
        Ok(Dir {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
            id,
            parent: None,
            fit: Arc::default(),
        })
    }

    /// Checks that every directory from the path the chain was opened as down to this one
    /// still is the directory that was opened: the configured path (symlinks followed, as at
    /// [`Dir::open`]) names the root's inode, and each child name (never followed) names its
    /// child's inode. A directory renamed or replaced anywhere on the way means newcomers
    /// resolve elsewhere, so a lease held in it no longer excludes them.
    fn verify(&self) -> Result<()> {
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
    fn names(&self) -> Result<Vec<std::ffi::OsString>> {
        sys::dir_names(self.fd.as_fd()).map_err(|e| path_error(&self.path, "list directory", e))
    }

    fn create(path: &Path) -> Result<Dir> {
        create_dirs(path)?;
        Dir::open(path)
    }

    fn child(&self, name: &str, create: bool) -> Result<Dir> {
        let path = self.path.join(name);
        plain(name, &self.path, "open directory")?;
        if create {
            match sys::mkdir_at(self.fd.as_fd(), Path::new(name), 0o700) {
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
            fit: Arc::default(),
        })
    }

    fn has_lock_file(&self, name: &str) -> Result<bool> {
        let path = self.path.join(name);
        plain(name, &self.path, "inspect lock file")?;
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
    fn open_file(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool)>> {
        Ok(self
            .open_checked(name, write, create)?
            .map(|(file, existed, _)| (file, existed)))
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the directory's entries durable (`fsync` of the directory).
    fn sync(&self) -> std::io::Result<()> {
        sys::sync_dir_fd(self.fd.as_fd())
    }
}

impl Dir {
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// [`open_file`](PlatformDir::open_file), and the file's permission bits from the same
    /// `fstat` that checked it is a regular file.
    pub(super) fn open_checked(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool, u32)>> {
        // The path is built only for an error: a store opens its files on every update.
        let path = || self.path.join(name);
        plain(name, &self.path, "open file")?;
        let existed = match sys::entry_at(self.fd.as_fd(), Path::new(name)) {
            Ok(Entry::Other(kind)) => return Err(Error::NotRegularFile { path: path(), kind }),
            Ok(Entry::Missing) if !create => return Ok(None),
            Ok(Entry::Missing) => false,
            Ok(Entry::Regular(_)) => true,
            Err(e) => return Err(path_error(&path(), "inspect file", e)),
        };
        let fd = match sys::open_data_file(self.fd.as_fd(), Path::new(name), write, create) {
            Ok(fd) => fd,
            Err(Errno::NOENT) if !create => return Ok(None),
            Err(e) => return Err(path_error(&path(), "open file", e)),
        };
        match sys::fd_entry_mode(fd.as_fd()) {
            Ok((Entry::Regular(_), mode)) => Ok(Some((std::fs::File::from(fd), existed, mode))),
            Ok((Entry::Other(kind), _)) => Err(Error::NotRegularFile { path: path(), kind }),
            Ok((Entry::Missing, _)) => Err(path_error(&path(), "stat file", Errno::NOENT)),
            Err(e) => Err(path_error(&path(), "stat file", e)),
        }
    }
}
