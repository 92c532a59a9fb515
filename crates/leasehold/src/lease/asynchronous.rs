//! Async acquisition (feature `tokio`): wait for a lease without blocking an executor thread
//! and without a thread per waiter.
//!
//! The waiter registers the same event source the blocking waiter sleeps on — the inotify
//! watch on the lock file's inode (Linux), plus the cancellation token's pipe — with tokio's
//! reactor, and retries `LOCK_NB` when it fires; a slow timer is the safety net for releases
//! that raise no event. Each try is a non-blocking system call, so no executor thread is ever
//! parked. Dropping the future cancels the wait; because the lock is only ever taken inside a
//! single `poll` that then returns the [`Lease`], an abandoned waiter can never end up holding
//! it.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Instant;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::{Attempt, Held, Lease, LeaseOptions, LockDir, Opened, Pacing, Step, Target, Waiter};
use crate::budget::Budget;
use crate::error::Result;
use crate::sys;

impl LeaseOptions {
    /// Takes the lease on `path`, waiting within `budget` without blocking the executor.
    /// Dropping the future abandons the wait and leaves nothing held.
    pub async fn acquire_async(&self, path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        self.acquire_target_async(Target::Path(path.as_ref().to_path_buf()), budget)
            .await
    }

    /// Takes the lease on `name` inside `dir`, waiting within `budget` without blocking the
    /// executor (see [`LeaseOptions::acquire_at`]).
    pub async fn acquire_at_async(
        &self,
        dir: &LockDir,
        name: &str,
        budget: &Budget,
    ) -> Result<Lease> {
        let target = self.target_at(dir, name)?;
        self.acquire_target_async(target, budget).await
    }

    async fn acquire_target_async(&self, target: Target, budget: &Budget) -> Result<Lease> {
        let held = Waiter {
            opts: *self,
            target: &target,
            budget,
            started: Instant::now(),
        }
        .run_async()
        .await?;
        Ok(Lease {
            held: Some(held),
            target,
        })
    }
}

impl Lease {
    /// [`Lease::acquire`] for async code: the wait never blocks an executor thread, costs no
    /// thread of its own, and is cancelled by dropping the future.
    pub async fn acquire_async(path: impl AsRef<Path>, budget: &Budget) -> Result<Lease> {
        LeaseOptions::default().acquire_async(path, budget).await
    }
}

/// Registers a borrowed descriptor with the reactor. A duplicate is registered, because one
/// descriptor (a shared cancellation pipe) cannot be registered twice with epoll.
///
/// The safe constructor is deprecated only because an arbitrary `AsRawFd` could report a
/// different descriptor over time; an `OwnedFd` owned by the `AsyncFd` cannot, so the use is
/// sound, and it keeps this crate free of `unsafe`.
#[allow(deprecated)]
fn register(fd: BorrowedFd<'_>) -> Option<AsyncFd<OwnedFd>> {
    let owned = fd.try_clone_to_owned().ok()?;
    AsyncFd::with_interest(owned, Interest::READABLE).ok()
}

async fn readable(fd: Option<&AsyncFd<OwnedFd>>) {
    match fd {
        Some(fd) => match fd.readable().await {
            Ok(mut guard) => guard.clear_ready(),
            Err(_) => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

impl Waiter<'_> {
    async fn run_async(&self) -> Result<Held> {
        let mut reuse = None;
        let mut reopens = 0;
        loop {
            match self.step(&mut reuse)? {
                Step::Done(held) => return Ok(held),
                Step::Wait(opened, watch) => {
                    if let Some(held) = self.wait_async(opened, watch.as_ref()).await? {
                        return Ok(held);
                    }
                }
                Step::Reopen => {}
            }
            self.count_reopen(&mut reopens)?;
        }
    }

    async fn wait_async(
        &self,
        mut opened: Opened,
        watch: Option<&sys::Watch>,
    ) -> Result<Option<Held>> {
        let events = watch.and_then(|w| register(w.as_fd()));
        let cancel = self.budget.cancel_token().and_then(|c| register(c.fd()));
        let mut pace = Pacing::new(events.is_some());
        loop {
            self.check_budget(&opened)?;
            let woke = tokio::select! {
                _ = readable(events.as_ref()) => true,
                _ = readable(cancel.as_ref()) => false,
                _ = tokio::time::sleep(pace.nap(self.budget)) => false,
            };
            for (i, pause) in pace.tries(woke).iter().enumerate() {
                if self.budget.flagged() {
                    break;
                }
                if !pause.is_zero() {
                    // Sub-millisecond pauses: let other tasks run instead of sleeping.
                    tokio::task::yield_now().await;
                }
                match self.attempt(opened)? {
                    Attempt::Acquired(held) => return Ok(Some(held)),
                    Attempt::Replaced => return Ok(None),
                    Attempt::Busy(o) => opened = o,
                }
                // As in the blocking waiter: consume events only once the first try failed.
                if let Some(w) = watch.filter(|_| i == 0 && woke) {
                    w.drain();
                }
            }
            if !self.still_at_path(&opened) {
                return Ok(None);
            }
        }
    }
}
