//! What arbitrates who the writer is: [`Grant`], [`Arbiter`], and the kernel lease as one
//! ([`KernelArbiter`]).

use std::path::{Path, PathBuf};

use crate::{Budget, Lease, LeaseOptions};

/// A held right to be the single writer, as handed out by an [`Arbiter`].
///
/// Every method is required, [`fencing_token`](Self::fencing_token) and
/// [`is_lost`](Self::is_lost) included: each arbiter states what it can say about them, so
/// that a new arbiter cannot inherit "never lost" by omission — for a lease with a TTL that
/// default would fail open. An arbiter that has nothing to say states why (see the kernel
/// [`Lease`]'s implementation).
///
/// ```compile_fail
/// use leasehold::patterns::authority::Grant;
/// struct Mine;
/// impl Grant for Mine { // error: `fencing_token` and `is_lost` not given
///     fn verify(&self) -> leasehold::Result<()> { Ok(()) }
///     fn release(&mut self) {}
/// }
/// ```
pub trait Grant: Send {
    /// Whether the right is still held. Called before every durable write; an error makes
    /// the authority fail closed with `StorageFailed("lease lost")`.
    fn verify(&self) -> crate::Result<()>;
    /// Gives the right up. Idempotent.
    fn release(&mut self);
    /// A number that grows with every grant (an etcd revision, for example), which a store
    /// can write next to its data so that a deposed writer's late write is refused; `None`
    /// where the arbiter has none to give.
    fn fencing_token(&self) -> Option<u64>;
    /// Whether the right is known to be gone, decided without any I/O: a distributed lease
    /// past the deadline its last acknowledged keep-alive bought, or one its server reported
    /// gone. The authority asks this whenever its state or scope is read, so it withdraws
    /// the scope as soon as the lease may have run out, not only at the next write.
    fn is_lost(&self) -> bool;
}

/// Whatever decides which process is the authority.
pub trait Arbiter: Send + Sync {
    /// What a successful acquisition holds.
    type Grant: Grant;
    /// Tries to become the writer within `budget` ([`Budget::no_wait`] tries once).
    /// Contention must be reported as an error for which [`Error::is_contended`](crate::Error::is_contended) is true.
    fn acquire(&self, budget: &Budget) -> crate::Result<Self::Grant>;
}

/// The kernel lease as a grant ([`KernelArbiter`]). It has nothing to say about fencing or
/// expiry, and its answers say so always, for the reasons below.
impl Grant for Lease {
    fn verify(&self) -> crate::Result<()> {
        Lease::verify(self)
    }
    fn release(&mut self) {
        Lease::release(self)
    }
    /// Always `None`: the kernel never grants one lock twice at once, and a holder keeps it
    /// until it releases or its process dies (no TTL), so there is never a deposed holder
    /// still writing that a token would have to fence out.
    fn fencing_token(&self) -> Option<u64> {
        None
    }
    /// Always `false`: a kernel lease never runs out on its own. What can go wrong — the
    /// lock file removed or replaced under the holder — takes a look at the file system,
    /// and [`verify`](Grant::verify) does it ([`Error::LeaseLost`](crate::Error::LeaseLost)) before every write.
    fn is_lost(&self) -> bool {
        false
    }
}

/// The kernel lease on one lock file as an [`Arbiter`]: one lock for the whole store.
#[derive(Debug, Clone)]
pub struct KernelArbiter {
    pub(super) path: PathBuf,
    pub(super) options: LeaseOptions,
}

impl KernelArbiter {
    /// Arbitrates with the lease on `path` (created 0600, parents 0700, when missing).
    pub fn new(path: impl Into<PathBuf>) -> KernelArbiter {
        KernelArbiter {
            path: path.into(),
            options: LeaseOptions::new(),
        }
    }

    /// The same arbiter taking its lease with `options` (for example to accept a shared lock
    /// file, or a network file system).
    #[must_use]
    pub fn with_options(mut self, options: LeaseOptions) -> KernelArbiter {
        self.options = options;
        self
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Arbiter for KernelArbiter {
    type Grant = Lease;
    fn acquire(&self, budget: &Budget) -> crate::Result<Lease> {
        self.options.acquire(&self.path, budget)
    }
}
