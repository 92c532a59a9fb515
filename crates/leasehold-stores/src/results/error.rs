//! The result store's typed errors, and how a caller should treat each.

use std::io;
use std::path::PathBuf;

use leasehold::{Classify, Error as LeaseError, ErrorClass, HolderInfo};

use crate::id::{IdError, SafeId};

/// Errors of the result store. Each names the ID or path and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResultError {
    /// The ID is empty after trimming or not safe as a path component ([`SafeId`]).
    #[error("invalid result ID {id:?}: {reason}; use {}", SafeId::RULE)]
    InvalidId {
        /// The ID as given.
        id: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// No candidate, publication or lock exists for the ID; nothing was created.
    #[error("unknown-result: no result {id:?} in {root}; nothing was created")]
    Unknown {
        /// The trimmed ID.
        id: String,
        /// The managed root.
        root: PathBuf,
    },
    /// `stage` of an ID that already has a candidate or publication.
    #[error(
        "result-exists: result {id:?} already exists in {root}; discard it or choose another ID"
    )]
    Exists {
        /// The trimmed ID.
        id: String,
        /// The managed root.
        root: PathBuf,
    },
    /// Another process holds the ID's operation lease; nothing was changed.
    #[error(
        "result {id:?} is busy: its operation lease {path} is held by another process{holders}; nothing was changed"
    )]
    Busy {
        /// The trimmed ID.
        id: String,
        /// The lock file.
        path: PathBuf,
        /// Holders the OS revealed.
        holders: HolderInfo,
    },
    /// Another operation holds the ID's candidate although this one was granted the ID's
    /// lease: the lock namespace was moved or replaced while that operation ran, so the two
    /// were granted leases on two different lock files. Nothing was changed.
    #[error(
        "result {id:?} is busy: another operation{holders} works on its candidate {candidate}, admitted before the lock namespace was moved or replaced; nothing was changed (retry once it has ended)"
    )]
    Split {
        /// The trimmed ID.
        id: String,
        /// The candidate directory.
        candidate: PathBuf,
        /// Holders the OS revealed.
        holders: HolderInfo,
    },
    /// The wait for the ID's lease was cancelled; nothing was changed.
    #[error("result {id:?}: waiting for its operation lease was cancelled; nothing was changed")]
    Cancelled {
        /// The trimmed ID.
        id: String,
    },
    /// `finish` could not be admitted: nothing was published.
    #[error(
        "durability unavailable: result {id:?} was not published: {source}; retry finish with the same ID"
    )]
    NotPublished {
        /// The trimmed ID.
        id: String,
        /// Why admission failed.
        source: Box<ResultError>,
    },
    /// The source directory of `stage` is unusable; nothing was staged.
    #[error("{path}: {reason}; nothing was staged")]
    Source {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A record does not parse or names an unsafe path; it is left as it is.
    #[error("result {id:?}: {path} is unreadable: {reason}; inspect or discard the result")]
    Corrupt {
        /// The trimmed ID.
        id: String,
        /// The record.
        path: PathBuf,
        /// The parse failure.
        reason: String,
    },
    /// A directory the store must use (the managed root, one of its areas, a TARGET) is
    /// unusable: not a directory, a symlink below the root, or not accessible.
    #[error("{path}: unusable: {reason}; nothing was changed")]
    Unusable {
        /// The directory.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An operation failed after it had changed something.
    #[error("result {id:?}: {op} failed part-way: {source}; done: {done}; not done: {not_done}")]
    Partial {
        /// The trimmed ID.
        id: String,
        /// The operation.
        op: &'static str,
        /// What was done.
        done: String,
        /// What was not done.
        not_done: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The operation's cancellation token fired after it was admitted (in the CLI: SIGINT
    /// or SIGTERM), and it stopped at the next file boundary, leaving the store consistent:
    /// `done` and `not_done` say exactly where.
    #[error("result {id:?}: {op} stopped by a cancellation; done: {done}; not done: {not_done}")]
    Stopped {
        /// The trimmed ID.
        id: String,
        /// The operation.
        op: &'static str,
        /// What was done.
        done: String,
        /// What was not done, and how to finish it.
        not_done: String,
    },
    /// An I/O failure before anything was changed.
    #[error("{path}: {op}: {source}; nothing was changed")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The lock path is unusable, or the lease was lost or could not be taken.
    #[error(transparent)]
    Lock(LeaseError),
}

impl Classify for ResultError {
    /// How the caller should treat this error: a bad ID, source or lock path is
    /// [`ErrorClass::Usage`], a busy ID [`ErrorClass::Contended`], a cancelled wait
    /// [`ErrorClass::Cancelled`] (nothing was changed in each of these), an operation
    /// stopped by its cancellation token [`ErrorClass::Cancelled`] too (it says what it
    /// did), anything else [`ErrorClass::Failure`].
    fn class(&self) -> ErrorClass {
        match self {
            ResultError::InvalidId { .. }
            | ResultError::Unknown { .. }
            | ResultError::Exists { .. }
            | ResultError::Source { .. }
            | ResultError::Unusable { .. } => ErrorClass::Usage,
            ResultError::Busy { .. } | ResultError::Split { .. } => ErrorClass::Contended,
            ResultError::Cancelled { .. } | ResultError::Stopped { .. } => ErrorClass::Cancelled,
            ResultError::NotPublished { source, .. } => source.class(),
            ResultError::Lock(e) => e.class(),
            ResultError::Corrupt { .. } | ResultError::Partial { .. } | ResultError::Io { .. } => {
                ErrorClass::Failure
            }
        }
    }
}

impl From<IdError> for ResultError {
    fn from(IdError { id, reason }: IdError) -> ResultError {
        ResultError::InvalidId { id, reason }
    }
}

pub(super) type Result<T, E = ResultError> = std::result::Result<T, E>;

/// `finish`'s admission failures: unusable input stays as it is; anything else means the
/// result was not published and the caller may retry with the same ID.
pub(super) fn not_published(id: &str, e: ResultError) -> ResultError {
    match e.class() {
        ErrorClass::Usage => e,
        _ => ResultError::NotPublished {
            id: id.to_string(),
            source: Box::new(e),
        },
    }
}
