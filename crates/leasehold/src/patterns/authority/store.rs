//! What an authority keeps: the [`Store`] it opens, loads and commits to, and how that fails
//! ([`StoreFailure`]).

use crate::{Classify, Error, ErrorClass};

/// Why a store could not be opened or written: which store (its file, or its key where the
/// document lives in etcd), what was being done to it, and the error that stopped it — or
/// the primitive's own refusal of one of its files. Its message names the store and says
/// what to do, as every error here does; the [`Authority`](crate::patterns::authority::Authority) reports it as
/// [`AuthorityError::StorageFailed`](crate::patterns::authority::AuthorityError::StorageFailed) and leaves the document as it is.
///
/// ```
/// use leasehold::patterns::authority::StoreFailure;
///
/// let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
/// let failure = StoreFailure::new("/srv/names.txt", "cannot read", io)
///     .with_advice(" (check the file's owner and mode, then refresh)");
/// assert_eq!(
///     failure.to_string(),
///     "/srv/names.txt: cannot read: permission denied (check the file's owner and mode, then refresh)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreFailure {
    /// An operation on the store failed.
    #[error("{store}: {op}: {source}{advice}")]
    Op {
        /// The store as messages name it: a document's path, or `etcd key K at E`.
        store: String,
        /// What was being done ("cannot read", "does not parse", …), as the message says it.
        op: std::borrow::Cow<'static, str>,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// What the user can do, appended to the message as it stands ("" for nothing
        /// more), for example " (the file is left as it is; repair or move it away, then
        /// refresh)".
        advice: &'static str,
    },
    /// The primitive refused a file or directory of the store (one another user could have
    /// prepared, a symlink where a file should be, …); the error names it and says what to
    /// do.
    #[error(transparent)]
    Refused(#[from] Error),
}

impl StoreFailure {
    /// The failure of `op` on `store` (a path or key as messages name it), because of
    /// `source` (an error, or a message: `&str` and `String` convert).
    pub fn new(
        store: impl Into<String>,
        op: impl Into<std::borrow::Cow<'static, str>>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> StoreFailure {
        StoreFailure::Op {
            store: store.into(),
            op: op.into(),
            source: source.into(),
            advice: "",
        }
    }

    /// The same failure, its message ending with `advice` (what the user can do).
    pub fn with_advice(self, advice: &'static str) -> StoreFailure {
        match self {
            StoreFailure::Op {
                store, op, source, ..
            } => StoreFailure::Op {
                store,
                op,
                source,
                advice,
            },
            refused => refused,
        }
    }
}

impl Classify for StoreFailure {
    /// Always [`ErrorClass::Failure`]: the store, not the caller's input, is at fault.
    fn class(&self) -> ErrorClass {
        ErrorClass::Failure
    }
}

/// A store that an [`Authority`](crate::patterns::authority::Authority) opens, writes and closes — only while it holds the lease.
pub trait Store: Send {
    /// The loaded records; also the published scope. `Default` is the empty scope.
    type Records: Clone + Default + Send + Sync;
    /// Opens the store and loads its records from durable storage. A document that cannot
    /// be read must be reported, never replaced.
    fn open(&mut self) -> Result<Self::Records, StoreFailure>;
    /// Makes `records` durable before returning (an acknowledged write survives a crash).
    /// `fence` is the grant's [`Grant::fencing_token`](crate::patterns::authority::Grant::fencing_token).
    fn commit(&mut self, records: &Self::Records, fence: Option<u64>) -> Result<(), StoreFailure>;
    /// [`commit`](Self::commit), calling `check` once the new version is staged and only
    /// putting it in place remains — for a file, after the temporary file beside it was
    /// written and synced, before it is renamed over the file. An error from `check`
    /// abandons the write (the stored version untouched) and is returned. The authority
    /// passes its grant's [`Grant::verify`](crate::patterns::authority::Grant::verify), so that a directory above the store moved away
    /// after the check before the write fails the write instead of letting it land in what
    /// now stands at the path, beside that path's next holder. The default calls `check`,
    /// then `commit`; a store that writes through a path overrides it.
    fn commit_checked(
        &mut self,
        records: &Self::Records,
        fence: Option<u64>,
        check: &mut dyn FnMut() -> Result<(), StoreFailure>,
    ) -> Result<(), StoreFailure> {
        check()?;
        self.commit(records, fence)
    }
    /// Closes the store; it will be opened again before any further use.
    fn close(&mut self);
}
