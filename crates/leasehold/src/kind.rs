//! Identity and state types that every layer speaks in. They depend on nothing, so that the
//! platform boundary (`sys`), the holder lookup and the error vocabulary can all use them
//! without importing each other.

use std::fmt;

/// Identity of an inode: what a lock is really taken on. Two paths with equal identity are
/// the same lock; a path whose identity changed is a different lock.
///
/// On Windows, where a lease is a named kernel object rather than a locked file, leases carry
/// no `FileId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId {
    /// Device number (`st_dev`).
    pub dev: u64,
    /// Inode number (`st_ino`).
    pub ino: u64,
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
