//! [`MountLease`]: the lease a lock path's mount calls for — the kernel's ([`AnyLease`]), or
//! a [`RecordLease`] where the mount keeps kernel locks on each host and the caller chose
//! one ([`SharedMount::Record`]) — as one value to verify, hand to a child and release.
//! Above both the primitive and the record lease: it only chooses between them.

use std::path::Path;

#[cfg(unix)]
use std::os::fd::BorrowedFd;

use crate::budget::Budget;
use crate::error::Result;
#[cfg(unix)]
use crate::lease::SharedMount;
use crate::lease::{AnyLease, LeaseOptions, LockMode};
#[cfg(unix)]
use crate::mount::MountLocks;
#[cfg(unix)]
use crate::record::RecordLease;

/// A lease taken by [`LeaseOptions::acquire_mount_lease`]: the kernel's lease in the mode
/// asked for, or — for an exclusive lease on a mount whose kernel locks stay on each host,
/// with [`SharedMount::Record`](crate::SharedMount::Record) chosen — a [`RecordLease`],
/// which excludes processes on every host sharing the directory and carries a fencing
/// token. Released on drop.
///
/// ```
/// use leasehold::{Budget, LeaseOptions, LockMode, SharedMount};
/// use std::time::Duration;
/// let dir = tempfile::tempdir().unwrap();
/// let options = LeaseOptions::new().on_shared_mount(SharedMount::Record { ttl: Duration::from_secs(10) });
/// let lease = options.acquire_mount_lease(dir.path().join("job.lock"), LockMode::Exclusive, &Budget::unlimited()).unwrap();
/// lease.verify().unwrap(); // before each write
/// // On a local disk the kernel's lease, which has no token; on an NFS home mounted with
/// // local_lock=all a record lease, whose token grows with every grant.
/// assert_eq!(lease.fencing_token(), None);
/// ```
#[derive(Debug)]
#[must_use = "a lease is released when dropped: bind it (`let _lease = ...`) for as long as the lock must be held"]
#[non_exhaustive]
pub enum MountLease {
    /// The kernel's lease: the mount's locks reach every process that shares it (or the
    /// caller opted in to them).
    Kernel(AnyLease),
    /// A record lease: the mount keeps kernel locks on each host (POSIX).
    #[cfg(unix)]
    Record(RecordLease),
}

impl MountLease {
    /// The mode it is held in (a record lease is exclusive).
    pub fn mode(&self) -> LockMode {
        match self {
            MountLease::Kernel(l) => l.mode(),
            #[cfg(unix)]
            MountLease::Record(_) => LockMode::Exclusive,
        }
    }

    /// The lock path, as given.
    pub fn path(&self) -> &Path {
        match self {
            MountLease::Kernel(l) => l.path(),
            #[cfg(unix)]
            MountLease::Record(l) => l.path(),
        }
    }

    /// The fencing token of a record lease's grant (it grows with every grant); `None` for
    /// the kernel's lease, which has none. Its shape is [`RecordLease::fencing_token`]'s:
    /// `T·2^20 + k`, the server token and the hand-overs on one host since.
    pub fn fencing_token(&self) -> Option<u64> {
        match self {
            MountLease::Kernel(_) => None,
            #[cfg(unix)]
            MountLease::Record(l) => Some(l.fencing_token()),
        }
    }

    /// Whether it is still held: not released (and, for a record lease, not found lost).
    pub fn is_held(&self) -> bool {
        match self {
            MountLease::Kernel(l) => l.is_held(),
            #[cfg(unix)]
            MountLease::Record(l) => l.is_held(),
        }
    }

    /// Answers, before a write, whether the lease still stands: for the kernel's, that the
    /// path still leads to the locked file ([`AnyLease::verify`]); for a record lease, that
    /// its validity has not run out, renewing first once a third of it is spent
    /// ([`RecordLease::verify`]).
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when it was lost; as the lease's own
    /// `verify` otherwise.
    pub fn verify(&self) -> Result<()> {
        match self {
            MountLease::Kernel(l) => l.verify(),
            #[cfg(unix)]
            MountLease::Record(l) => l.verify(),
        }
    }

    /// [`verify`](Self::verify) before a durable write: for a record lease,
    /// [`RecordLease::verify_for_write`], which also refuses ([`Error::LeaseLost`](crate::Error::LeaseLost))
    /// when less than its write margin of validity is left; for the kernel's lease, as
    /// [`verify`](Self::verify). The one rule every store applies before its rename.
    ///
    /// # Errors
    /// As [`verify`](Self::verify).
    pub fn verify_for_write(&self) -> Result<()> {
        match self {
            MountLease::Kernel(l) => l.verify(),
            #[cfg(unix)]
            MountLease::Record(l) => l.verify_for_write(),
        }
    }

    /// The exclusive kernel lease it holds on the lock path — the kernel's own, or the one a
    /// record lease holds as its host's queue — for a pattern that verifies a [`Lease`](crate::Lease)
    /// before each write (an [`AppendLog`](crate::patterns::append::AppendLog)); the caller
    /// adds [`verify_for_write`](Self::verify_for_write), which a record lease needs. `None`
    /// for a shared kernel lease.
    pub fn exclusive_kernel(&self) -> Option<&crate::Lease> {
        match self {
            MountLease::Kernel(AnyLease::Exclusive(l)) => Some(l),
            MountLease::Kernel(_) => None,
            #[cfg(unix)]
            MountLease::Record(l) => Some(l.kernel()),
        }
    }

    /// [`RecordLease::validity_for_write`] for a record lease — the margin rule without
    /// I/O, the last check before a store's rename; nothing to check for the kernel's lease
    /// (its [`verify_for_write`](Self::verify_for_write) has no time in it).
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when a record lease has too little
    /// validity left.
    pub fn validity_for_write(&self) -> Result<()> {
        match self {
            MountLease::Kernel(_) => Ok(()),
            #[cfg(unix)]
            MountLease::Record(l) => l.validity_for_write(),
        }
    }

    /// Releases it now; dropping does the same. A record lease gives its baton back (a
    /// failure to do so is ignored: a waiter then takes it over once the TTL has passed).
    pub fn release(&mut self) {
        match self {
            MountLease::Kernel(l) => l.release(),
            #[cfg(unix)]
            MountLease::Record(l) => l.release_in_place(),
        }
    }

    /// Whether child processes started from now on inherit the descriptor of the kernel
    /// lock ([`Lease::share_with_children`](crate::Lease::share_with_children)). A record
    /// lease's kernel lock is its host's queue: a child that inherits it keeps this host's
    /// other waiters out while it lives, but only this process renews the record.
    ///
    /// # Errors
    /// As [`Lease::share_with_children`](crate::Lease::share_with_children).
    #[cfg(unix)]
    pub fn share_with_children(&self, share: bool) -> Result<()> {
        match self {
            MountLease::Kernel(l) => l.share_with_children(share),
            MountLease::Record(l) => l.kernel().share_with_children(share),
        }
    }

    /// As [`AnyLease::child_env`]; `None` for a record lease (exclusive).
    #[cfg(unix)]
    pub fn child_env(&self) -> Option<(&'static str, String)> {
        match self {
            MountLease::Kernel(l) => l.child_env(),
            MountLease::Record(_) => None,
        }
    }

    /// The kernel lock's descriptor, while held.
    #[cfg(unix)]
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            MountLease::Kernel(l) => l.as_fd(),
            MountLease::Record(l) => l.kernel().as_fd(),
        }
    }
}

impl LeaseOptions {
    /// Takes the lease `path`'s mount calls for, in `mode`, waiting within `budget`: an
    /// exclusive lease on a mount whose kernel locks stay on each host
    /// ([`MountLocks::HostOnly`](crate::MountLocks::HostOnly)) is a [`RecordLease`] when
    /// [`on_shared_mount`](Self::on_shared_mount) chose [`SharedMount::Record`]; anything
    /// else is [`acquire_mode`](Self::acquire_mode)'s kernel lease, under the same rules
    /// (a network mount refused unless
    /// [`allow_network_filesystem`](Self::allow_network_filesystem)).
    ///
    /// # Errors
    /// As [`acquire_mode`](Self::acquire_mode) or [`RecordLease::acquire`], and
    /// [`Error::Io`](crate::Error::Io) when the mount cannot be classified.
    pub fn acquire_mount_lease(
        &self,
        path: impl AsRef<Path>,
        mode: LockMode,
        budget: &Budget,
    ) -> Result<MountLease> {
        let path = path.as_ref();
        #[cfg(unix)]
        if let Some(ttl) = self.record_ttl(path, mode)? {
            return RecordLease::acquire_with(self, path, ttl, budget).map(MountLease::Record);
        }
        self.acquire_mode(path, mode, budget)
            .map(MountLease::Kernel)
    }

    /// [`acquire_mount_lease`](Self::acquire_mount_lease) if the lease is free right now.
    ///
    /// # Errors
    /// As [`acquire_mount_lease`](Self::acquire_mount_lease).
    pub fn try_acquire_mount_lease(
        &self,
        path: impl AsRef<Path>,
        mode: LockMode,
    ) -> Result<MountLease> {
        self.acquire_mount_lease(path, mode, &Budget::no_wait())
    }

    /// The record lease's TTL where one is to be taken: an exclusive lease, a record lease
    /// chosen, and a mount that keeps kernel locks on each host.
    #[cfg(unix)]
    fn record_ttl(&self, path: &Path, mode: LockMode) -> Result<Option<std::time::Duration>> {
        let SharedMount::Record { ttl } = self.shared_mount() else {
            return Ok(None);
        };
        if mode != LockMode::Exclusive {
            return Ok(None);
        }
        Ok(matches!(MountLocks::of(path)?, MountLocks::HostOnly { .. }).then_some(ttl))
    }
}
