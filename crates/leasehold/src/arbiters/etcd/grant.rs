//! A held etcd lock: the lease, its key and its keep-alive ([`EtcdGrant`]), and the watch a
//! supervisor keeps on its validity ([`GrantWatch`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use super::ctx::{Ctx, Shared};
use super::liveness::Liveness;
use crate::Error;
use crate::Result;
use crate::mutex::lock;
use crate::patterns::authority::Grant;

/// A granted lock: the lease, the lock key and its keep-alive. Dropped unreleased (an
/// abandoned async wait), it revokes its lease in the background.
pub(super) struct Held {
    pub(super) ctx: Ctx,
    pub(super) id: i64,
    pub(super) key: String,
    pub(super) token: u64,
    pub(super) live: Arc<Liveness>,
    pub(super) keeper: AbortHandle,
    pub(super) armed: bool,
}

impl Held {
    /// Stops the keep-alive and returns the revocation of the lease (which deletes the key)
    /// for the caller to run, or `None` if already done.
    pub(super) fn disarm(&mut self) -> Option<impl Future<Output = ()> + Send + 'static> {
        if !self.armed {
            return None;
        }
        self.armed = false;
        self.live.lose("released".into());
        self.keeper.abort();
        let (ctx, id) = (self.ctx.clone(), self.id);
        Some(async move { ctx.revoke(id).await })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(revoke) = self.disarm() {
            self.ctx.handle.spawn(revoke);
        }
    }
}

/// A held etcd lock (see [`EtcdArbiter`](super::EtcdArbiter)). Dropping it releases it.
#[must_use = "an etcd grant is released (its lease revoked) when dropped: bind it for as long as the lock must be held"]
pub struct EtcdGrant {
    pub(super) shared: Arc<Shared>,
    pub(super) held: Held,
    pub(super) released: bool,
}

impl std::fmt::Debug for EtcdGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdGrant")
            .field("key", &self.held.key)
            .field("token", &self.held.token)
            .field("lost", &self.held.live.check())
            .finish()
    }
}

impl EtcdGrant {
    /// The lock key this grant created (`PREFIX<lease id in hex>`).
    pub fn key(&self) -> &str {
        &self.held.key
    }

    /// The fencing token: the lock key's create revision.
    pub fn token(&self) -> u64 {
        self.held.token
    }

    /// A handle that tells when this grant is lost, usable from another thread while the
    /// grant itself stays where it is (for example, to stop a child process in time).
    pub fn watch(&self) -> GrantWatch {
        GrantWatch(self.held.live.clone())
    }
}

/// Tells when an [`EtcdGrant`] is lost (see [`EtcdGrant::watch`]). Cloning shares it.
#[derive(Clone)]
pub struct GrantWatch(Arc<Liveness>);

impl GrantWatch {
    /// Blocks until the grant is lost — its deadline passed, etcd reported the lease gone,
    /// or it was released — and says why; or returns `None` after `timeout` (`None`: no
    /// limit) with the grant still held.
    pub fn wait_lost(&self, timeout: Option<Duration>) -> Option<String> {
        self.0.wait_lost(timeout)
    }

    /// How long the grant has left before it counts itself lost — its deadline: the send time
    /// of the last acknowledged keep-alive plus the TTL, minus [`margin`](super::margin) — or `None` once it
    /// is lost. etcd cannot expire the lease before `margin` after that deadline.
    ///
    /// For a watcher that must act before the lease can expire from *another process*
    /// (`leasehold run --etcd` hands the deadline to the supervisor of its COMMAND, which
    /// must not depend on this process running): read a clock that counts through suspend
    /// (CLOCK_BOOTTIME on Linux) *before* calling this and add the answer — the sum is never
    /// later than the deadline, however long this process is paused in between.
    pub fn remaining(&self) -> Option<Duration> {
        self.0.remaining()
    }

    /// Blocks until a keep-alive is acknowledged (the deadline moves later), the grant is
    /// lost, or `timeout` passes (`None`: no limit); then [`remaining`](Self::remaining) says
    /// where the grant stands. No polling: the keep-alive task wakes the waiter.
    pub fn wait_renewed(&self, timeout: Option<Duration>) {
        self.0.wait_renewed(timeout)
    }
}

impl Grant for EtcdGrant {
    fn verify(&self) -> Result<()> {
        match self.held.live.check() {
            None => Ok(()),
            Some(reason) => Err(Error::Expired {
                name: self.held.live.name.clone(),
                reason,
            }),
        }
    }

    /// Stops the keep-alive and revokes the lease, which deletes the lock key at once: a
    /// waiting successor is granted within a round trip, not after the TTL. Waits for etcd's
    /// answer (at most a few seconds, and never past the moment the lease would expire by
    /// itself: waiting longer gains a successor nothing) unless the grant was already lost;
    /// if etcd does not answer, the lease expires by itself.
    fn release(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        lock(&self.shared.live).remove(&self.held.token);
        // A lost grant's lease has expired or is about to, and etcd may not be answering:
        // revoke it in passing instead of waiting for an answer that may never come.
        let left = self.held.live.remaining();
        if let Some(revoke) = self.held.disarm() {
            match left {
                Some(left) if !left.is_zero() => {
                    let _ = self.shared.block(async move {
                        let _ = tokio::time::timeout(left, revoke).await;
                        Ok(())
                    });
                }
                _ => {
                    self.shared.ctx.handle.spawn(revoke);
                }
            }
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.held.token)
    }

    fn is_lost(&self) -> bool {
        self.held.live.check().is_some()
    }
}

impl Drop for EtcdGrant {
    fn drop(&mut self) {
        self.release();
    }
}
