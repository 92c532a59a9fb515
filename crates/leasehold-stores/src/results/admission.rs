//! Admission: taking an ID's operation lease, and what a failed admission means for the
//! caller.

use std::io;

use std::path::PathBuf;
use std::time::Duration;

use leasehold::patterns::keyed::{KeyError, KeyLease, KeyedLeases, lock_name};
use leasehold::{
    Budget, Error as LeaseError, LockDir, LockMode, MountLease, MountLocks, SharedMount,
};

use super::error::{Result, ResultError};
use super::{RECORD_NAMESPACE, ResultStore, files};
use crate::fence::Fence;

/// What an admitted operation holds: the ID's keyed lease (the kernel's), and — on a mount
/// whose kernel locks stay on each host, with the record lease chosen — the ID's record
/// lease, whose token was claimed in its fence (see the module documentation of
/// `results`). Released when dropped.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) key: KeyLease,
    pub(super) record: Option<Recorded>,
}

/// An ID's record lease and the fence its token was claimed in.
#[derive(Debug)]
pub(super) struct Recorded {
    lease: MountLease,
    fence: Fence,
    token: u64,
}

impl Held {
    /// Before every write: the keyed lease's chain ([`KeyLease::verify`]); under a record
    /// lease, then the library's rule ([`MountLease::verify_for_write`]), the token against
    /// the fence and the margin once more ([`Fence::last_checks`]).
    fn verify(&self) -> leasehold::Result<()> {
        self.key.verify()?;
        if let Some(r) = &self.record {
            r.lease.verify_for_write()?;
            r.fence.last_checks(r.token, &r.lease)?;
        }
        Ok(())
    }
}

impl ResultStore {
    /// Takes `id`'s lease within `budget`. With `create`, a lock file may be allocated for a
    /// new ID; otherwise only for an ID with a candidate or publication.
    pub(super) fn admit(&self, id: &str, budget: &Budget, create: bool) -> Result<Held> {
        self.take(id, budget, |k: &str| create || self.exists(k))
    }

    /// [`admit`](Self::admit)'s steps: the keyed lease (`known` as for
    /// [`KeyedLeases::acquire`]), then the record lease where one is called for.
    pub(super) fn take(
        &self,
        id: &str,
        budget: &Budget,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<Held> {
        let budget = &budget.started();
        let ttl = self.record_ttl();
        let key = self
            .keyed(ttl)
            .acquire(id, budget, known)
            .map_err(|e| self.admission_error(id, e))?;
        let record = match ttl {
            Some(_) => self.take_record(id, budget)?,
            None => None,
        };
        Ok(Held { key, record })
    }

    /// The keyed leases to take an ID's lease with: under a record lease (`ttl`), the kernel
    /// lock is only this host's queue, so it is taken on the host-only mount it is on.
    pub(super) fn keyed(&self, ttl: Option<Duration>) -> &KeyedLeases {
        match ttl {
            Some(_) => &self.host_leases,
            None => &self.leases,
        }
    }

    /// The record lease's TTL where the store's IDs take one: the options choose it and the
    /// managed root's mount keeps kernel locks on each host. A mount that cannot be
    /// classified takes none (the kernel's lease then refuses a network mount).
    pub(super) fn record_ttl(&self) -> Option<Duration> {
        let SharedMount::Record { ttl } = self.options.shared_mount() else {
            return None;
        };
        matches!(MountLocks::of(&self.root), Ok(MountLocks::HostOnly { .. })).then_some(ttl)
    }

    /// The record lease's lock path of `id`: `ROOT/.result-records-v1/<sha256(id)>.lock`,
    /// outside the keyed namespace that [`gc`](Self::gc) collects.
    pub(super) fn record_path(&self, id: &str) -> PathBuf {
        self.root.join(RECORD_NAMESPACE).join(lock_name(id))
    }

    /// `id`'s record lease, waiting within `budget`, its token claimed in the fence beside
    /// it before anything of the ID is read. `None`: the mount's lease turned out to be the
    /// kernel's (no token), which the keyed lease already is.
    pub(super) fn take_record(&self, id: &str, budget: &Budget) -> Result<Option<Recorded>> {
        let root = self.root_dir(true)?.ok_or_else(|| self.unknown(id))?;
        files::child(&root, RECORD_NAMESPACE, Some(files::PRIVATE_DIR)).map_err(|e| {
            ResultError::Unusable {
                path: root.path().join(RECORD_NAMESPACE),
                reason: e.to_string(),
            }
        })?;
        let path = self.record_path(id);
        let lease = self
            .options
            .acquire_mount_lease(&path, LockMode::Exclusive, budget)
            .map_err(|e| self.admission_error(id, KeyError::Lease(e)))?;
        let Some(token) = lease.fencing_token() else {
            return Ok(None);
        };
        let fence = Fence::of(&path);
        fence.claim(token).map_err(ResultError::Lock)?;
        Ok(Some(Recorded {
            lease,
            fence,
            token,
        }))
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

pub(super) fn verify(lease: &Held) -> io::Result<()> {
    lease.verify().map_err(io::Error::other)
}
