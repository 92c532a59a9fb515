//! Async faces of the [`Authority`] (feature `tokio`).
//!
//! No executor thread ever blocks on anything but a few uncontended mutex operations:
//!
//! * the **wait for the lease** is the arbiter's own async acquisition ([`AsyncArbiter`]) —
//!   for the kernel lease a reactor-registered inotify watch, no thread per waiter;
//! * every **step of the blocking state machine** (the no-wait attempt, opening and loading
//!   the store, a mutation with its fsync'd write, teardown draining in-flight mutations) runs
//!   on tokio's blocking pool through [`offload`](crate::patterns::offload). The state
//!   machine is the one [`Authority::acquire`] runs, not a copy: the async acquisition hands
//!   it the grant it waited for instead of letting it wait.
//!
//! That is why these methods take `self: &Arc<Self>`: a step on the blocking pool must own a
//! reference to the authority.
//!
//! Cancellation: dropping [`acquire_async`](Authority::acquire_async) while it *waits* for the
//! lease abandons the wait and takes nothing. A step already on the blocking pool is not
//! interrupted — a mutation that was admitted completes (its result is discarded), and a
//! granted acquisition finishes opening the store, leaving the authority active exactly as
//! if the call had returned; [`teardown_async`](Authority::teardown_async) releases it.

use std::future::Future;
use std::sync::Arc;

use super::arbiter::{Arbiter, KernelArbiter};
use super::machine::{Authority, AuthorityError};
use super::store::Store;
use crate::patterns::offload;
use crate::{Budget, Lease};

/// An [`Arbiter`] that can also wait for its grant without blocking an executor thread.
pub trait AsyncArbiter: Arbiter {
    /// [`Arbiter::acquire`] as a future that never blocks an executor thread. Dropping it
    /// must abandon the wait and leave nothing held. The budget becomes the future's own
    /// (a caller passes it by value, or `&budget` to keep its own), and a timeout counts
    /// from the start of the acquisition (see [`Budget`]).
    fn acquire_async(
        &self,
        budget: impl Into<Budget>,
    ) -> impl Future<Output = crate::Result<Self::Grant>> + Send;
}

impl AsyncArbiter for KernelArbiter {
    fn acquire_async(
        &self,
        budget: impl Into<Budget>,
    ) -> impl Future<Output = crate::Result<Lease>> + Send {
        self.options.acquire_async(&self.path, budget.into())
    }
}

impl<A, S> Authority<A, S>
where
    A: AsyncArbiter + 'static,
    S: Store + 'static,
{
    /// [`acquire`](Self::acquire) for async code: becomes the authority, waiting for the
    /// lease within `budget` without blocking an executor thread.
    ///
    /// It first runs the state machine once without waiting (already active, a lease kept
    /// from a failed load, or a free lease all finish there). Only when the lease is held by
    /// someone else and `budget` has time left does it wait, asynchronously, for a grant of
    /// its own — and then hands that grant to the same state machine, which opens, loads and
    /// publishes (or releases the grant at once if a teardown began meanwhile).
    ///
    /// If a blocking [`acquire`](Self::acquire) of this same authority succeeds while this one
    /// waits, the wait cannot be granted (the lease is then held by this authority already);
    /// it ends with `budget` and then reports the authority active. Use one of the two.
    ///
    /// The future owns the budget (pass it by value, or `&budget` to keep yours), so it can
    /// be built inside `tokio::select!` from a temporary one.
    pub async fn acquire_async(
        self: &Arc<Self>,
        budget: impl Into<Budget>,
    ) -> Result<(), AuthorityError> {
        // Started here: the first try and the wait share the caller's timeout.
        let budget = budget.into().started();
        let this = self.clone();
        match offload(move || this.acquire(&Budget::no_wait())).await {
            Err(AuthorityError::Contended { .. }) if !self.is_disposed() && has_time(&budget) => {}
            done => return done,
        }
        let grant = self.arbiter.acquire_async(budget).await;
        let this = self.clone();
        offload(move || this.acquire_with(move || grant)).await
    }

    /// [`refresh`](Self::refresh) for async code: one more try without waiting for the
    /// lease, with the reopen and reload on the blocking pool.
    pub async fn refresh_async(self: &Arc<Self>) -> Result<(), AuthorityError> {
        let this = self.clone();
        offload(move || this.refresh()).await
    }

    /// [`mutate`](Self::mutate) for async code: the mutation and its durable (fsync'd) write
    /// run on the blocking pool, under the same rules (refused unless active, one at a time,
    /// lease verified before the write). Once admitted it completes even if this future is
    /// dropped, and teardown waits for it.
    pub async fn mutate_async<T, F>(self: &Arc<Self>, f: F) -> Result<T, AuthorityError>
    where
        T: Send + 'static,
        F: FnOnce(&mut S::Records) -> T + Send + 'static,
    {
        let this = self.clone();
        offload(move || this.mutate(f)).await
    }

    /// [`teardown`](Self::teardown) for async code: marks the authority disposed, drains
    /// in-flight mutations, withdraws the scope, closes the store and releases the lease last
    /// — on the blocking pool, since draining waits for writes. It completes even if this
    /// future is dropped. Call it before dropping the last `Arc` in async code: the `Drop`
    /// fallback tears down inline, on whatever thread drops it.
    pub async fn teardown_async(self: &Arc<Self>) {
        let this = self.clone();
        offload(move || this.teardown()).await
    }
}

/// Whether a budget allows any waiting at all ([`Budget::no_wait`] does not).
fn has_time(budget: &Budget) -> bool {
    budget.remaining().is_none_or(|left| !left.is_zero())
}
