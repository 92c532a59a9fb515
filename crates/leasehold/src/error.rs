//! Typed errors. Every variant names the path it is about and, where the user can act, says
//! what to do: a lock library is debugged from its error messages.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

#[cfg(unix)]
use crate::sys::FileId;

/// Who holds a lease, as far as the operating system tells.
///
/// Linux reveals flock holders through `/proc/locks`; other systems do not, and then the
/// answer is [`Holders::Unknown`] rather than a guess: a pid shown must be right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holders {
    /// The platform cannot tell whether or by whom the lock is held.
    Unknown,
    /// Nobody holds the lock.
    Free,
    /// The lock is held; `pids` are the holders the OS revealed (it may reveal none, for
    /// example when the locking process has exited and a child inherited the lock).
    Held {
        /// Holder process IDs, ascending.
        pids: Vec<u32>,
    },
}

impl Holders {
    /// The holder pids the OS revealed (empty when unknown, free, or hidden).
    pub fn pids(&self) -> &[u32] {
        match self {
            Holders::Held { pids } => pids,
            _ => &[],
        }
    }

    /// `Some(true)` when held, `Some(false)` when free, `None` when the OS cannot tell.
    pub fn is_held(&self) -> Option<bool> {
        match self {
            Holders::Unknown => None,
            Holders::Free => Some(false),
            Holders::Held { .. } => Some(true),
        }
    }
}

impl fmt::Display for Holders {
    /// Formats as ` (pid N)` / ` (pid N, M)` when pids are known, and as nothing otherwise,
    /// so that it can be appended to any contention message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pids = self.pids();
        if pids.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        write!(f, " (pid {})", list.join(", "))
    }
}

/// The holders of a contended lock, looked up when first asked for.
///
/// Why lazily: reading `/proc/locks` takes the kernel's file-lock semaphore for writing, which
/// after a quiet spell waits for an RCU grace period (about 10 ms measured here) and stalls
/// every `flock` on the machine meanwhile. A contended try or a deadline must return at once,
/// and most callers never print who the holder was; those that do (error messages, the CLI)
/// pay for the lookup then, and it reflects the holder at that moment (a pid shown is right).
#[derive(Clone, Default)]
pub struct HolderInfo {
    source: Source,
    resolved: Arc<OnceLock<Holders>>,
}

#[derive(Clone, Default)]
enum Source {
    #[default]
    Nothing,
    #[cfg(unix)]
    Inode(FileId),
    Path(PathBuf),
}

impl HolderInfo {
    /// Holders of the lock on this inode, looked up on first use.
    #[cfg(unix)]
    pub(crate) fn of_inode(id: FileId) -> HolderInfo {
        HolderInfo {
            source: Source::Inode(id),
            resolved: Arc::default(),
        }
    }

    /// Holders of the lock file at `path` (never following a final symlink), looked up on
    /// first use; an unusable path resolves to [`Holders::Unknown`].
    pub fn of_path(path: impl AsRef<Path>) -> HolderInfo {
        HolderInfo {
            source: Source::Path(path.as_ref().to_path_buf()),
            resolved: Arc::default(),
        }
    }

    /// Already-known holders.
    pub fn known(holders: Holders) -> HolderInfo {
        let resolved = OnceLock::new();
        let _ = resolved.set(holders);
        HolderInfo {
            source: Source::Nothing,
            resolved: Arc::new(resolved),
        }
    }

    /// The holders, looked up now if they were not yet (and then remembered).
    pub fn get(&self) -> &Holders {
        self.resolved.get_or_init(|| match &self.source {
            Source::Nothing => Holders::Unknown,
            #[cfg(unix)]
            Source::Inode(id) => crate::sys::holders(*id),
            Source::Path(p) => crate::lease::holders(p).unwrap_or(Holders::Unknown),
        })
    }

    /// The holder pids the OS reveals (looked up now if needed).
    pub fn pids(&self) -> &[u32] {
        self.get().pids()
    }
}

impl fmt::Display for HolderInfo {
    /// As [`Holders`]' display: ` (pid N)` when known, nothing otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl fmt::Debug for HolderInfo {
    /// Shows what is known without triggering a lookup.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.resolved.get() {
            Some(h) => write!(f, "{h:?}"),
            None => f.write_str("HolderInfo(not looked up)"),
        }
    }
}

/// What was found at a lock path that is not a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A symbolic link (refused even when it points at a valid file).
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A directory.
    Directory,
    /// A regular file (reported where a directory was expected).
    Regular,
    /// Anything else the platform reports.
    Other,
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Symlink => "a symbolic link",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Directory => "a directory",
            FileKind::Regular => "a regular file",
            FileKind::Other => "not a regular file",
        })
    }
}

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
    /// A distributed arbiter (etcd) could not be reached or refused a request; nothing is held.
    #[error("etcd at {endpoints}: {reason}")]
    Unreachable {
        /// The endpoints tried, as given.
        endpoints: String,
        /// What failed, and what to check.
        reason: String,
    },
    /// A distributed lease may have expired (no keep-alive acknowledged in time, or the
    /// server says it is gone): the grant proves nothing any more, and a successor may
    /// already hold the lock.
    #[error("{name}: lease lost: {reason}")]
    Expired {
        /// The lock's name (its key in the arbiter).
        name: String,
        /// Why it is considered lost.
        reason: String,
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

    /// True for [`Error::Expired`]: a distributed lease that may have run out. Another
    /// process may hold the lock now, so callers treat it like contention, not like a
    /// storage failure.
    pub fn is_expired(&self) -> bool {
        matches!(self, Error::Expired { .. })
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
