//! Typed errors. Every variant names the path it is about and, where the user can act, says
//! what to do: a lock library is debugged from its error messages.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::holders::HolderInfo;
use crate::kind::FileKind;

/// Errors of the lease primitive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another holder has the lease (another process, or another lease in this process).
    #[error("{path}: lock is held by another process{holders}")]
    Contended {
        /// The lock file.
        path: PathBuf,
        /// Holder pids where the OS reveals them (looked up when first asked for).
        holders: HolderInfo,
    },
    /// The wait budget's deadline passed before the lease could be had.
    #[error("{path}: lock is held by another process{holders}; gave up after {waited:.1?}")]
    TimedOut {
        /// The lock file.
        path: PathBuf,
        /// Holder pids where the OS reveals them (looked up when first asked for).
        holders: HolderInfo,
        /// How long the waiter waited.
        waited: Duration,
    },
    /// The wait budget's cancellation token fired.
    #[error("{path}: wait for the lock was cancelled")]
    Cancelled {
        /// The lock file.
        path: PathBuf,
    },
    /// The lock path names something that is not a regular file; it is left untouched.
    #[error(
        "{path}: is {kind}, not a regular file; refusing to use it as a lock file (move it away or choose another path)"
    )]
    NotRegularFile {
        /// The lock path.
        path: PathBuf,
        /// What was found there.
        kind: FileKind,
    },
    /// A directory that leases are kept in is something else (a symlink is never followed
    /// inside a managed tree: it could redirect where locks are taken); it is left untouched.
    #[error(
        "{path}: is {kind}, not a directory; refusing to use it (symbolic links are not followed here; move it away)"
    )]
    NotDirectory {
        /// The directory path.
        path: PathBuf,
        /// What was found there.
        kind: FileKind,
    },
    /// A component of the lock path's parent exists but is not a directory.
    #[error("{path}: a parent component is not a directory")]
    ParentNotDirectory {
        /// The lock path.
        path: PathBuf,
    },
    /// The lock file or a parent directory may not be opened or created.
    #[error("{path}: permission denied (check the owner and mode of the file and its directories)")]
    PermissionDenied {
        /// The lock path.
        path: PathBuf,
    },
    /// The lock file does not exist and the caller asked not to create it.
    #[error("{path}: lock file does not exist")]
    NotFound {
        /// The lock path.
        path: PathBuf,
    },
    /// The path is too long (or a component's name is) for the operating system.
    #[error("{path}: path or file name too long for this system")]
    NameTooLong {
        /// The lock path.
        path: PathBuf,
    },
    /// The lock file lives on a network file system, where flock may block forever even with
    /// LOCK_NB, or silently fail to exclude other machines.
    #[error(
        "{path}: lock file is on a network file system ({fs}), where flock can hang or fail to exclude; put it on a local file system, or opt in with LeaseOptions::allow_network_filesystem"
    )]
    NetworkFilesystem {
        /// The lock path.
        path: PathBuf,
        /// The file-system type detected.
        fs: &'static str,
    },
    /// The lock file kept being replaced between open and lock.
    #[error(
        "{path}: the lock file was replaced {attempts} times while locking; something is deleting or renaming it"
    )]
    Unstable {
        /// The lock path.
        path: PathBuf,
        /// How many times it was reopened.
        attempts: u32,
    },
    /// The held inode is no longer the file at the path (the lock file was unlinked,
    /// renamed or replaced); the lease proves nothing any more.
    #[error(
        "{path}: lease lost: the locked file is no longer the file at this path (it was removed or replaced)"
    )]
    LeaseLost {
        /// The lock path.
        path: PathBuf,
    },
    /// The lease was already released.
    #[error("{path}: lease already released")]
    Released {
        /// The lock path.
        path: PathBuf,
    },
    /// The process ran out of file descriptors.
    #[error(
        "{path}: too many open files (descriptor limit {limit}); raise `ulimit -n` or hold fewer leases"
    )]
    TooManyOpenFiles {
        /// The lock path.
        path: PathBuf,
        /// The soft RLIMIT_NOFILE, if known (0 if not).
        limit: u64,
    },
    /// Any other I/O failure.
    #[error("{path}: {op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// True for [`Error::Contended`] and [`Error::TimedOut`]: somebody else has the lease.
    pub fn is_contended(&self) -> bool {
        matches!(self, Error::Contended { .. } | Error::TimedOut { .. })
    }

    /// True when the path itself is unusable (the caller's input is at fault, nothing was
    /// changed): not a regular file, parent not a directory, permission denied, name too long.
    pub fn is_unusable_path(&self) -> bool {
        matches!(
            self,
            Error::NotRegularFile { .. }
                | Error::NotDirectory { .. }
                | Error::ParentNotDirectory { .. }
                | Error::PermissionDenied { .. }
                | Error::NameTooLong { .. }
                | Error::NetworkFilesystem { .. }
        )
    }

    /// The holders recorded in a contention error.
    pub fn holders(&self) -> Option<&HolderInfo> {
        match self {
            Error::Contended { holders, .. } | Error::TimedOut { holders, .. } => Some(holders),
            _ => None,
        }
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
