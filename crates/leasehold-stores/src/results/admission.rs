//! Admission: taking an ID's operation lease, and what a failed admission means for the
//! caller.

use std::io;

use leasehold::patterns::keyed::{KeyError, KeyLease};
use leasehold::{Budget, Error as LeaseError, LockDir};

use super::error::{Result, ResultError};
use super::{ResultStore, files};

impl ResultStore {
    /// Takes `id`'s lease within `budget`. With `create`, a lock file may be allocated for a
    /// new ID; otherwise only for an ID with a candidate or publication.
    pub(super) fn admit(&self, id: &str, budget: &Budget, create: bool) -> Result<KeyLease> {
        let known = |k: &str| create || self.exists(k);
        self.leases
            .acquire(id, budget, known)
            .map_err(|e| self.admission_error(id, e))
    }

    pub(super) fn admission_error(&self, id: &str, e: KeyError) -> ResultError {
        match e {
            KeyError::EmptyKey { key } => ResultError::InvalidId {
                id: key,
                reason: crate::id::EMPTY_AFTER_TRIM,
            },
            KeyError::Unknown { key, root } => ResultError::Unknown { id: key, root },
            KeyError::Lease(e) if e.is_contended() => ResultError::Busy {
                id: id.to_string(),
                path: self.lock_path(id),
                holders: e.holders().cloned().unwrap_or_default(),
            },
            KeyError::Lease(LeaseError::Cancelled { .. }) => {
                ResultError::Cancelled { id: id.to_string() }
            }
            KeyError::Lease(e) => ResultError::Lock(e),
            other => ResultError::Io {
                op: "admit",
                path: self.lock_path(id),
                source: io::Error::other(other.to_string()),
            },
        }
    }
}

impl ResultStore {
    /// The second step of admission, for an operation on an existing candidate: the
    /// candidate's directory, locked for this operation (waiting within `budget`) until the
    /// returned handle is dropped; `None` when there is no candidate.
    ///
    /// The ID's lease alone is one operation at a time only while every process resolves the
    /// ID to the same lock file. Moving the lock namespace (`.result-locks-v1`) while an
    /// operation runs lets a newcomer take the ID's lease in a fresh namespace; the running
    /// one notices at its next write ([`KeyLease::verify`] walks the chain), but the newcomer
    /// would act meanwhile — a discard removed what an apply was applying, and the apply
    /// then said they were kept. The candidate is what both reach
    /// whatever the namespace, so every operation on it also locks it: the newcomer waits
    /// for the running one to end, and gives up with [`ResultError::Split`] at its deadline.
    /// Without a split this lock is always free (one `openat` and one `flock`).
    pub(super) fn fence(&self, id: &str, budget: &Budget) -> Result<Option<LockDir>> {
        let Some(results) = self.area("results", false)? else {
            return Ok(None);
        };
        let candidate = match files::child(&results, id, None) {
            Ok(Some(dir)) => dir,
            // Nothing there, or not a directory: the operation judges it (and refuses it).
            Ok(None) | Err(_) => return Ok(None),
        };
        match files::lock(&candidate, budget) {
            Ok(()) => Ok(Some(candidate)),
            Err(e) if e.is_contended() => Err(ResultError::Split {
                id: id.to_string(),
                candidate: self.candidate(id),
                holders: e.holders().cloned().unwrap_or_default(),
            }),
            Err(LeaseError::Cancelled { .. }) => Err(ResultError::Cancelled { id: id.to_string() }),
            Err(e) => Err(ResultError::Lock(e)),
        }
    }
}

pub(super) fn verify(lease: &KeyLease) -> io::Result<()> {
    lease.verify().map_err(io::Error::other)
}
