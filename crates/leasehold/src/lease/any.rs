//! [`AnyLease`]: a path lease whose mode is chosen at run time (a `--shared` flag, a
//! binding's `shared` option), so that a caller holding "the lease, in whichever mode" has
//! one value to verify, hand to a child and release — not a `match` of its own over
//! [`Lease`] and [`SharedLease`] at every use.

use std::path::Path;

#[cfg(unix)]
use std::os::fd::BorrowedFd;

use super::held::Lease;
use super::options::LeaseOptions;
use super::shared::{LockMode, SharedLease};
use crate::budget::Budget;
use crate::error::Result;
use crate::kind::FileId;

/// A lease held in the [`LockMode`] its caller chose: exclusive ([`Lease`]) or shared
/// ([`SharedLease`]), with every guarantee of the lease it wraps and nothing more — the
/// mode is fixed for its life (there is no upgrade: see [`SharedLease`]).
///
/// ```
/// use leasehold::{AnyLease, Budget, LeaseOptions, LockMode};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("job.lock");
/// let mode = if std::env::args().any(|a| a == "--shared") { LockMode::Shared } else { LockMode::Exclusive };
/// let lease = LeaseOptions::new().acquire_mode(&path, mode, &Budget::unlimited()).unwrap();
/// assert_eq!(lease.mode(), mode);
/// lease.verify().unwrap();
/// ```
#[derive(Debug)]
#[must_use = "a lease is released when dropped: bind it (`let _lease = ...`) for as long as the lock must be held"]
pub enum AnyLease {
    /// Held exclusively.
    Exclusive(Lease),
    /// Held shared.
    Shared(SharedLease),
}

impl AnyLease {
    /// The mode it is held in.
    pub fn mode(&self) -> LockMode {
        match self {
            AnyLease::Exclusive(_) => LockMode::Exclusive,
            AnyLease::Shared(_) => LockMode::Shared,
        }
    }

    /// The lock file's path, as given.
    pub fn path(&self) -> &Path {
        match self {
            AnyLease::Exclusive(l) => l.path(),
            AnyLease::Shared(l) => l.path(),
        }
    }

    /// Whether it is still held (not released).
    pub fn is_held(&self) -> bool {
        match self {
            AnyLease::Exclusive(l) => l.is_held(),
            AnyLease::Shared(l) => l.is_held(),
        }
    }

    /// The locked file's identity, while held.
    pub fn file_id(&self) -> Option<FileId> {
        match self {
            AnyLease::Exclusive(l) => l.file_id(),
            AnyLease::Shared(l) => l.file_id(),
        }
    }

    /// Whether the path still leads to the file that is locked ([`Lease::verify`]).
    ///
    /// # Errors
    /// As [`Lease::verify`].
    pub fn verify(&self) -> Result<()> {
        match self {
            AnyLease::Exclusive(l) => l.verify(),
            AnyLease::Shared(l) => l.verify(),
        }
    }

    /// Releases it now (by closing its descriptor); dropping does the same.
    pub fn release(&mut self) {
        match self {
            AnyLease::Exclusive(l) => l.release(),
            AnyLease::Shared(l) => l.release(),
        }
    }

    /// Whether child processes started from now on inherit the lock's descriptor
    /// ([`Lease::share_with_children`]).
    ///
    /// # Errors
    /// As [`Lease::share_with_children`].
    #[cfg(unix)]
    pub fn share_with_children(&self, share: bool) -> Result<()> {
        match self {
            AnyLease::Exclusive(l) => l.share_with_children(share),
            AnyLease::Shared(l) => l.share_with_children(share),
        }
    }

    /// The environment variable a child that inherits the lease needs so that its own shared
    /// acquisitions of the file nest in this one ([`SharedLease::child_env`]); `None` for an
    /// exclusive lease, which nests nothing.
    #[cfg(unix)]
    pub fn child_env(&self) -> Option<(&'static str, String)> {
        match self {
            AnyLease::Exclusive(_) => None,
            AnyLease::Shared(l) => l.child_env(),
        }
    }

    /// The lock's descriptor, while held.
    #[cfg(unix)]
    pub fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            AnyLease::Exclusive(l) => l.as_fd(),
            AnyLease::Shared(l) => l.as_fd(),
        }
    }
}

impl From<Lease> for AnyLease {
    fn from(l: Lease) -> AnyLease {
        AnyLease::Exclusive(l)
    }
}

impl From<SharedLease> for AnyLease {
    fn from(l: SharedLease) -> AnyLease {
        AnyLease::Shared(l)
    }
}

impl LeaseOptions {
    /// [`acquire`](Self::acquire) or [`acquire_shared`](Self::acquire_shared), as `mode`
    /// says.
    ///
    /// # Errors
    /// As the acquisition of that mode.
    pub fn acquire_mode(
        &self,
        path: impl AsRef<Path>,
        mode: LockMode,
        budget: &Budget,
    ) -> Result<AnyLease> {
        match mode {
            LockMode::Exclusive => self.acquire(path, budget).map(AnyLease::Exclusive),
            LockMode::Shared => self.acquire_shared(path, budget).map(AnyLease::Shared),
        }
    }

    /// [`acquire_async`](Self::acquire_async) or
    /// [`acquire_shared_async`](Self::acquire_shared_async), as `mode` says: the lease in the
    /// mode a caller chose at run time, waited for within `budget` without blocking the
    /// executor (dropping the future abandons the wait and leaves nothing held).
    ///
    /// ```
    /// # #[cfg(all(feature = "tokio", unix))]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use leasehold::{Budget, LeaseOptions, LockMode};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("job.lock");
    /// let opts = LeaseOptions::new();
    /// let reader = opts.acquire_mode_async(&path, LockMode::Shared, Budget::unlimited()).await.unwrap();
    /// let another = opts.acquire_mode_async(&path, LockMode::Shared, Budget::no_wait()).await.unwrap();
    /// assert_eq!((reader.mode(), another.mode()), (LockMode::Shared, LockMode::Shared));
    /// let writer = opts.acquire_mode_async(&path, LockMode::Exclusive, Budget::no_wait()).await;
    /// assert!(writer.unwrap_err().is_contended());
    /// # }
    /// # #[cfg(not(all(feature = "tokio", unix)))]
    /// # fn main() {}
    /// ```
    ///
    /// # Errors
    /// As the asynchronous acquisition of that mode.
    #[cfg(feature = "tokio")]
    pub async fn acquire_mode_async(
        self,
        path: impl AsRef<Path>,
        mode: LockMode,
        budget: impl Into<Budget>,
    ) -> Result<AnyLease> {
        match mode {
            LockMode::Exclusive => self
                .acquire_async(path, budget)
                .await
                .map(AnyLease::Exclusive),
            LockMode::Shared => self
                .acquire_shared_async(path, budget)
                .await
                .map(AnyLease::Shared),
        }
    }

    /// [`try_acquire`](Self::try_acquire) or [`try_acquire_shared`](Self::try_acquire_shared),
    /// as `mode` says.
    ///
    /// # Errors
    /// As the attempt of that mode.
    pub fn try_acquire_mode(&self, path: impl AsRef<Path>, mode: LockMode) -> Result<AnyLease> {
        match mode {
            LockMode::Exclusive => self.try_acquire(path).map(AnyLease::Exclusive),
            LockMode::Shared => self.try_acquire_shared(path).map(AnyLease::Shared),
        }
    }
}
