//! The error of keyed admission and collection.

use std::path::PathBuf;

use crate::{Classify, Error, ErrorClass};

/// Errors of keyed admission.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty (or only whitespace) after trimming.
    #[error("key {key:?} is empty after trimming whitespace; give a non-empty ID")]
    EmptyKey {
        /// The key as given.
        key: String,
    },
    /// Nothing is known about the key: no lock file and no record. Nothing was created.
    #[error(
        "unknown key {key:?} under {root}: no record and no lock file exists (nothing was created)"
    )]
    Unknown {
        /// The trimmed key.
        key: String,
        /// The managed root.
        root: PathBuf,
    },
    /// The lease could not be had or the lock path is unusable (see [`Error`]).
    #[error(transparent)]
    Lease(#[from] Error),
    /// A collection could not list the keys that have records; nothing more was removed.
    #[error("cannot list the records under {root}: {source}; lock files were kept")]
    Records {
        /// The managed root.
        root: PathBuf,
        /// Why the listing failed.
        source: std::io::Error,
    },
}

impl Classify for KeyError {
    /// How a caller should treat this error: an empty or unknown key is
    /// [`ErrorClass::Usage`] (nothing was created); a lease error has its own class.
    fn class(&self) -> ErrorClass {
        match self {
            KeyError::EmptyKey { .. } | KeyError::Unknown { .. } => ErrorClass::Usage,
            KeyError::Lease(e) => e.class(),
            KeyError::Records { .. } => ErrorClass::Failure,
        }
    }
}
