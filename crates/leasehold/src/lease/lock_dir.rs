//! [`LockDir`]: a directory that lock files, and the data they guard, are opened relative to.

use std::path::Path;

#[cfg(unix)]
use std::os::fd::BorrowedFd;

use super::os::imp;
use super::platform::{PlatformDataDir, PlatformDir};
use crate::error::{Error, Result};
use crate::kind::FileKind;

/// `Ok(false)` for an entry that was not there ([`PlatformDataDir::rename`] and
/// [`PlatformDataDir::remove`]): what a caller cleaning up asks.
fn existed(done: Result<()>) -> Result<bool> {
    match done {
        Ok(()) => Ok(true),
        Err(Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A directory that lock files (and the data they guard) are opened relative to.
///
/// POSIX: an open directory descriptor (`openat`), so that a directory renamed or swapped
/// after it was opened cannot redirect where locks are taken. A lease held in it stays
/// locked after the directory (or one above it) is renamed, but newcomers resolving the
/// path reach another directory, so its [`Lease::verify`](crate::Lease::verify) then reports the loss: it walks
/// the chain this handle was reached through ([`child`](Self::child) by
/// [`child`](Self::child) up to the path given to [`open`](Self::open)). Windows: the directory's real path, resolved once at
/// [`open`](Self::open) (junctions, symbolic links and 8.3 names resolved), from which lock
/// names derive.
#[derive(Debug, Clone)]
pub struct LockDir(pub(super) imp::Dir);

impl LockDir {
    /// Opens an existing directory. The path is the caller's configuration, so symlinks in it
    /// are followed, as for any path prefix (a home directory moved to another disk and linked
    /// back keeps working); what lies *inside* is opened with [`child`](Self::child), which
    /// never follows one.
    ///
    /// # Errors
    /// [`Error::NotDirectory`] when something else stands there, [`Error::NotFound`],
    /// [`Error::PermissionDenied`], or [`Error::Io`].
    pub fn open(path: impl AsRef<Path>) -> Result<LockDir> {
        imp::Dir::open(path.as_ref()).map(LockDir)
    }

    /// Opens a directory, creating it and missing parents (mode 0700 on POSIX).
    ///
    /// # Errors
    /// As [`open`](Self::open), plus [`Error::ParentNotDirectory`] when a component on the
    /// way is a file.
    pub fn create(path: impl AsRef<Path>) -> Result<LockDir> {
        imp::Dir::create(path.as_ref()).map(LockDir)
    }

    /// Opens the child directory `name`, which must be a real directory (never a symlink or
    /// junction); with `create`, creates it (0700) when missing.
    ///
    /// # Errors
    /// [`Error::NotDirectory`] (naming what stands there), or an I/O error; a `name` that is
    /// not one plain component is refused.
    pub fn child(&self, name: &str, create: bool) -> Result<LockDir> {
        self.0.child(name, create).map(LockDir)
    }

    /// What stands at `name` in this directory (never following a symlink): `Ok(true)` for a
    /// regular file, `Ok(false)` when nothing is there.
    ///
    /// # Errors
    /// [`Error::NotRegularFile`] for anything else.
    pub fn has_lock_file(&self, name: &str) -> Result<bool> {
        self.0.has_lock_file(name)
    }

    /// The path this handle was opened as (for messages; the handle is what is used).
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// The directory descriptor.
    #[cfg(unix)]
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// The directory's real path, as the file system resolved it when it was opened.
    #[cfg(windows)]
    pub fn real_path(&self) -> &Path {
        self.0.real_path()
    }

    /// Opens the data file `name` in this directory as carefully as a lock file (see
    /// `imp::Dir::open_file`): the file and whether it existed before; `Ok(None)` when it
    /// does not exist and `create` is false.
    pub(crate) fn open_file(
        &self,
        name: &str,
        write: bool,
        create: bool,
    ) -> Result<Option<(std::fs::File, bool)>> {
        self.0.open_file(name, write, create)
    }

    /// Makes the directory's entries durable: `fsync` of the directory on POSIX; nothing on
    /// Windows, which cannot `fsync` a directory (NTFS journals the entry itself). Stores call
    /// it after creating a file in the directory, so that the new name survives a crash.
    ///
    /// # Errors
    /// The `fsync`'s I/O error.
    pub fn sync(&self) -> std::io::Result<()> {
        self.0.sync()
    }

    /// Checks that the chain of directories this handle was reached through still stands:
    /// the path given to [`open`](Self::open) names the same directory (symlinks followed,
    /// as there), and every [`child`](Self::child) name on the way names the same child
    /// (never followed). A handle keeps working after a rename, so without this check a
    /// lease held in a renamed directory would no longer exclude newcomers, who resolve the
    /// path to somewhere else. Costs one `fstatat` per level (POSIX; Windows binds names to
    /// the real path resolved at open and answers `Ok`).
    ///
    /// # Errors
    /// [`Error::LeaseLost`] naming the first directory that moved, or an I/O error.
    pub(crate) fn verify(&self) -> Result<()> {
        self.0.verify()
    }

    /// Whether the path this handle was opened as still names the directory it holds open
    /// (POSIX: one `fstatat` per level, as the check a lease in it makes): a caller that
    /// keeps a handle between uses asks this before each use instead of opening the path
    /// again, so that a directory renamed or replaced meanwhile is never written through
    /// the old handle. Windows and WASI: always `false` (there a handle is the path
    /// resolved once at [`open`](Self::open): open it again).
    pub fn still_at_path(&self) -> bool {
        cfg!(unix) && self.verify().is_ok()
    }

    /// The names of this directory's entries (`.` and `..` left out), in no particular
    /// order.
    ///
    /// # Errors
    /// An I/O error naming the directory.
    pub fn names(&self) -> Result<Vec<std::ffi::OsString>> {
        self.0.names()
    }
}

/// Data below a directory handle: what a store does with the files and directories its
/// records live in (the result store's candidates, publications and TARGETs), made relative
/// to this handle one component at a time, so that nothing below the directory it was opened
/// as is ever reached through a symlink — another user who can write there cannot redirect a
/// read, a write or a removal, and a directory swapped after it was opened cannot either.
/// Every `name` is one plain component (no separator, not `.` or `..`); another is refused.
///
/// Why our own rather than cap-std's `Dir`: cap-std confines resolution to a directory but
/// *follows* symlinks that stay inside it, and a link inside a TARGET is another user's
/// redirection even when it points inside; `openat(O_NOFOLLOW)` per component gives the
/// kernel's own no-follow check, with no path-string checks of ours.
///
/// POSIX: `openat`, `mkdirat`, `renameat` and `unlinkat` on the handle's descriptor. Windows
/// and WASI (no stable `openat` in std): the same operations on the real path joined with
/// the name, each checked first without following (`symlink_metadata`), so a component
/// swapped between the check and the use is not excluded there.
impl LockDir {
    /// What stands at `name` (never following a symlink: a link is
    /// [`FileKind::Symlink`]); `Ok(None)`: nothing.
    ///
    /// # Errors
    /// An I/O error naming the path.
    pub fn entry(&self, name: &str) -> Result<Option<FileKind>> {
        self.0.entry(name)
    }

    /// Creates the child directory `name` with `mode` (permission bits; the umask applies;
    /// Windows and WASI have no modes) unless it exists, making its name durable (`fsync` of
    /// this directory) when it was created, then opens it as [`child`](Self::child) does: it
    /// must be a real directory.
    ///
    /// # Errors
    /// [`Error::NotDirectory`] when something else stands there, or an I/O error.
    pub fn create_child(&self, name: &str, mode: u32) -> Result<LockDir> {
        self.0.create_child(name, mode).map(LockDir)
    }

    /// Opens the regular file `name` for reading as carefully as a lock file (never
    /// following a final symlink, never blocking on a FIFO, a device refused before it is
    /// opened, close-on-exec): the file and its permission bits (POSIX; 0o644 where there are
    /// none). `Ok(None)`: no such file.
    ///
    /// # Errors
    /// [`Error::NotRegularFile`] for anything but a regular file, or an I/O error.
    pub fn open_read(&self, name: &str) -> Result<Option<(std::fs::File, u32)>> {
        self.0.open_read(name)
    }

    /// Creates the regular file `name` exclusively, for writing, with `mode` (permission
    /// bits; the umask applies): a name that is taken — by a file, a symlink or anything
    /// else — is `Ok(None)`, and nothing standing there is opened or followed. For
    /// temporaries that are renamed into place ([`durable::replace_at`]).
    ///
    /// [`durable::replace_at`]: crate::patterns::durable::replace_at
    ///
    /// # Errors
    /// An I/O error naming the path.
    pub fn create_new(&self, name: &str, mode: u32) -> Result<Option<std::fs::File>> {
        self.0.create_new(name, mode)
    }

    /// Renames the entry `from` of this directory to `to` in `to_dir` (the entries
    /// themselves: a symlink at either name is renamed or replaced, never followed; on
    /// Windows one standing at `to` is refused). `Ok(false)`: `from` did not exist.
    ///
    /// # Errors
    /// An I/O error naming `from`'s path (`to_dir` on another file system, a directory
    /// replacing a file, …).
    pub fn rename(&self, from: &str, to_dir: &LockDir, to: &str) -> Result<bool> {
        existed(self.0.rename(from, &to_dir.0, to))
    }

    /// Removes the entry `name` that is not a directory (a symlink: the link itself).
    /// `Ok(false)`: nothing was there.
    ///
    /// # Errors
    /// An I/O error naming the path (a directory there, no permission, …).
    pub fn remove_file(&self, name: &str) -> Result<bool> {
        existed(self.0.remove(name, false))
    }

    /// Removes the empty directory `name` (never what a symlink points to). `Ok(false)`:
    /// nothing was there.
    ///
    /// # Errors
    /// An I/O error naming the path (not empty, not a directory, …).
    pub fn remove_dir(&self, name: &str) -> Result<bool> {
        existed(self.0.remove(name, true))
    }
}
