//! Async faces of the result store (feature `tokio`).

use std::path::PathBuf;
use std::time::Duration;

use super::admission::Held;
use leasehold::Budget;
use leasehold::patterns::offload;

use super::error::{Result, not_published};
use super::{Entry, ResultStore, SweepReport};
use crate::id::SafeId;

impl ResultStore {
    /// [`admit`](Self::admit) for async code: the wait for the ID's keyed lease is
    /// reactor-driven ([`KeyedLeases::acquire_async`]), so it blocks no executor thread and
    /// no thread waits for it; dropping the future abandons it and leaves the ID free. A
    /// record lease's wait (a poll) runs on the blocking pool.
    pub(super) async fn admit_async(
        &self,
        id: &str,
        budget: &Budget,
        create: bool,
    ) -> Result<Held> {
        let known = |k: &str| create || self.exists(k);
        let ttl = self.record_ttl();
        let key = self
            .keyed(ttl)
            .acquire_async(id, budget, known)
            .await
            .map_err(|e| self.admission_error(id, e))?;
        // A record lease's wait is a poll: it runs on the blocking pool.
        let record = match ttl {
            Some(_) => {
                let (store, id, budget) = (self.clone(), id.to_string(), budget.clone());
                offload(move || store.take_record(&id, &budget)).await?
            }
            None => None,
        };
        Ok(Held { key, record })
    }

    /// Admits `id` asynchronously, then runs `body` under its lease on the blocking pool
    /// (the file work and its fsyncs). The lease is released when `body` ends — even if the
    /// caller dropped the future meanwhile: an operation once admitted completes.
    pub(super) async fn admitted_async<T: Send + 'static>(
        &self,
        id: &str,
        budget: &Budget,
        create: bool,
        body: impl FnOnce(&ResultStore, &str, &Held) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let id = SafeId::trimmed(id)?.to_string();
        let lease = self.admit_async(&id, budget, create).await?;
        let store = self.clone();
        offload(move || body(&store, &id, &lease)).await
    }
}

/// Async faces of the result store (feature `tokio`).
///
/// Each operation waits for its ID's lease asynchronously — reactor-driven, so no executor
/// thread blocks and no thread is parked per waiting operation; dropping the future while it
/// waits abandons the operation with nothing changed. Once admitted, the file work (copies,
/// fsyncs, renames, removals) runs on tokio's blocking pool under the lease and completes even
/// if the future is dropped, so a result is never left half-applied by a dropped future. The
/// budget's cancellation token, though, is obeyed at every file as in the blocking
/// operations ([`ResultError::Stopped`](super::ResultError::Stopped)). The admission rules,
/// errors and results are those of the blocking operations. Each future owns its budget
/// (pass it by value, or `&budget` to keep yours), and a timeout covers the whole operation,
/// as in the blocking ones.
#[cfg(feature = "tokio")]
impl ResultStore {
    /// [`stage`](Self::stage) without blocking the executor (the source is walked on the
    /// blocking pool before admission).
    pub async fn stage_async(
        &self,
        id: &str,
        source: impl Into<PathBuf>,
        budget: impl Into<Budget>,
    ) -> Result<Entry> {
        let budget = &budget.into().started();
        let source = source.into();
        let id = SafeId::trimmed(id)?;
        let id = id.as_str();
        let files = {
            let (store, source) = (self.clone(), source.clone());
            offload(move || store.stage_files(&source)).await?
        };
        let cancel = budget.cancel_token().cloned();
        self.admitted_async(id, budget, true, move |store, id, lease| {
            store.stage_admitted(id, &source, files, lease, cancel.as_ref())
        })
        .await
    }

    /// [`paths`](Self::paths) without blocking the executor.
    pub async fn paths_async(&self, id: &str, budget: impl Into<Budget>) -> Result<Vec<String>> {
        let budget = &budget.into().started();
        let waits = budget.clone();
        self.admitted_async(id, budget, false, move |store, id, lease| {
            store.paths_admitted(id, lease, &waits)
        })
        .await
    }

    /// [`finish`](Self::finish) without blocking the executor.
    pub async fn finish_async(&self, id: &str, budget: impl Into<Budget>) -> Result<Vec<String>> {
        let budget = &budget.into().started();
        let id = SafeId::trimmed(id)?;
        let id = id.as_str();
        let lease = self
            .admit_async(id, budget, false)
            .await
            .map_err(|e| not_published(id, e))?;
        let (store, id, waits) = (self.clone(), id.to_string(), budget.clone());
        offload(move || store.finish_admitted(&id, &lease, &waits)).await
    }

    /// [`apply`](Self::apply) without blocking the executor.
    pub async fn apply_async(
        &self,
        id: &str,
        target: impl Into<PathBuf>,
        budget: impl Into<Budget>,
    ) -> Result<Vec<String>> {
        let budget = &budget.into().started();
        let (target, waits) = (target.into(), budget.clone());
        self.admitted_async(id, budget, false, move |store, id, lease| {
            store.apply_admitted(id, &target, lease, &waits)
        })
        .await
    }

    /// [`discard`](Self::discard) without blocking the executor.
    pub async fn discard_async(&self, id: &str, budget: impl Into<Budget>) -> Result<()> {
        let budget = &budget.into().started();
        let waits = budget.clone();
        self.admitted_async(id, budget, false, move |store, id, lease| {
            store.remove_existing(id, lease, "discard", &waits)
        })
        .await
    }

    /// [`abort`](Self::abort) without blocking the executor.
    pub async fn abort_async(&self, id: &str, budget: impl Into<Budget>) -> Result<()> {
        let budget = &budget.into().started();
        let waits = budget.clone();
        self.admitted_async(id, budget, false, move |store, id, lease| {
            store.remove_existing(id, lease, "abort", &waits)
        })
        .await
    }

    /// [`sweep`](Self::sweep) on the blocking pool (it never waits for a lease).
    pub async fn sweep_async(&self, older_than: Duration) -> Result<SweepReport> {
        let store = self.clone();
        offload(move || store.sweep(older_than)).await
    }
}
