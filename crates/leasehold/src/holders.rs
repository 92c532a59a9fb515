//! Who holds a lock: [`HolderInfo`] and the look-ups behind [`holders`](crate::holders).
//!
//! Depends on the identity types and the platform boundary only; it never takes, creates or
//! disturbs a lock.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::kind::{FileId, FileKind, Holders};
use crate::sys;

/// Why a path could not be looked at for holders.
#[derive(Debug)]
pub(crate) enum Unusable {
    /// Something other than a regular file stands at the path (never followed).
    NotRegular(FileKind),
    /// The look itself failed.
    Os(std::io::Error),
}

/// Holders of the lock file at `path`, never following a final symlink. A missing file or a
/// missing parent directory is [`Holders::Free`].
pub(crate) fn at_path(path: &Path) -> Result<Holders, Unusable> {
    match sys::lookup(path) {
        Ok(sys::Looked::Missing) => Ok(Holders::Free),
        Ok(sys::Looked::Regular(id)) => Ok(of_inode(id)),
        Ok(sys::Looked::Other(kind)) => Err(Unusable::NotRegular(kind)),
        Err(e) => Err(Unusable::Os(e)),
    }
}

/// Holders of the lock on the inode `id` (Linux: `/proc/locks`; elsewhere unknown).
pub(crate) fn of_inode(id: Option<FileId>) -> Holders {
    match id {
        Some(id) => sys::holders(id),
        None => Holders::Unknown,
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
    /// Another lease of this process holds it (known from the in-process claim table, on
    /// every platform, whatever the OS reveals).
    this_process: bool,
}

#[derive(Clone, Default)]
enum Source {
    #[default]
    Nothing,
    Inode(FileId),
    Path(PathBuf),
}

impl HolderInfo {
    /// Holders of the lock on this inode, looked up on first use (`None`: the platform's
    /// leases have no inode, and the answer is [`Holders::Unknown`]).
    pub(crate) fn of_inode(id: Option<FileId>) -> HolderInfo {
        HolderInfo {
            source: id.map_or(Source::Nothing, Source::Inode),
            resolved: Arc::default(),
            this_process: false,
        }
    }

    /// Holders of a lock another lease of this process holds: looked up lazily as
    /// [`of_inode`](Self::of_inode), and said to be "this process" in any case.
    pub(crate) fn held_here(id: Option<FileId>) -> HolderInfo {
        HolderInfo {
            this_process: true,
            ..HolderInfo::of_inode(id)
        }
    }

    /// Holders of the lock file at `path` (never following a final symlink), looked up on
    /// first use; an unusable path resolves to [`Holders::Unknown`].
    pub fn of_path(path: impl AsRef<Path>) -> HolderInfo {
        HolderInfo {
            source: Source::Path(path.as_ref().to_path_buf()),
            resolved: Arc::default(),
            this_process: false,
        }
    }

    /// Already-known holders.
    pub fn known(holders: Holders) -> HolderInfo {
        let resolved = OnceLock::new();
        let _ = resolved.set(holders);
        HolderInfo {
            source: Source::Nothing,
            resolved: Arc::new(resolved),
            this_process: false,
        }
    }

    /// The holders, looked up now if they were not yet (and then remembered).
    pub fn get(&self) -> &Holders {
        self.resolved.get_or_init(|| match &self.source {
            Source::Nothing => Holders::Unknown,
            Source::Inode(id) => sys::holders(*id),
            Source::Path(p) => at_path(p).unwrap_or(Holders::Unknown),
        })
    }

    /// The holder pids the OS reveals (looked up now if needed).
    pub fn pids(&self) -> &[u32] {
        self.get().pids()
    }

    /// Who holds it, for a message that reads "held by …": `another process (pid N)`,
    /// `another process` when the OS does not tell, or `this process (another lease of it)`
    /// when the only holder revealed is this very process — in-process contention, which
    /// must not be reported as `another process (pid <our own pid>)`.
    pub fn who(&self) -> String {
        if self.this_process {
            return "this process (another lease of it)".to_string();
        }
        let pids = self.pids();
        if !pids.is_empty() && sys::process_id().is_some_and(|me| pids == [me]) {
            return "this process (another lease of it)".to_string();
        }
        format!("another process{self}")
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
