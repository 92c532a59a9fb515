//! What every task of one arbiter shares: the client, the requests' time limit, what etcd's
//! answers said of its identity (so a wiped cluster loses every grant), and the private
//! runtime the blocking face waits on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use super::client::Client;
use super::liveness::Liveness;
use super::proto::{self, RangeRequest, RangeResponse, TxnRequest, TxnResponse};
use super::timing::REQUEST_TIMEOUT;
use crate::mutex::lock;
use crate::{Error, Result};

/// What every task of one arbiter needs; cheap to clone, and holds no runtime (so a task never
/// drops the runtime it runs on).
#[derive(Clone)]
pub(super) struct Ctx {
    pub(super) client: Client,
    pub(super) handle: Handle,
    pub(super) endpoints: String,
    pub(super) prefix: String,
    pub(super) holder: String,
    pub(super) ttl: Duration,
    /// The slower of two requests' round trips, measured when connecting.
    pub(super) round_trip: Duration,
    /// How often keep-alives go (nanoseconds; [`keep_alive_period`]), shared by clones.
    pub(super) period: Arc<AtomicU64>,
    /// What etcd's answers said of its identity and revisions, and the grants it concerns.
    pub(super) history: Arc<History>,
}

/// The cluster identity and the revisions etcd's answers carried, per member: a member
/// that answers at a revision lower than one it answered at before, or a cluster ID that
/// changes, means etcd lost its data (wiped, or restored from a backup) — every lease taken
/// before is gone, and fencing tokens handed out from now on may be lower than old ones.
/// Every grant of the arbiter is then lost at once.
#[derive(Default)]
pub(super) struct History {
    pub(super) seen: Mutex<Seen>,
    /// The grants to lose when etcd lost its data.
    pub(super) grants: Mutex<Vec<std::sync::Weak<Liveness>>>,
}

#[derive(Default)]
pub(super) struct Seen {
    pub(super) cluster: Option<u64>,
    /// The highest revision each member answered at.
    pub(super) revisions: HashMap<u64, i64>,
}

impl History {
    /// Takes note of an answer's header; when it shows that etcd lost its data, loses every
    /// grant, and says why.
    pub(super) fn observe(&self, header: Option<&proto::ResponseHeader>) -> Option<String> {
        let h = header?;
        let why = {
            let mut seen = lock(&self.seen);
            let cluster = *seen.cluster.get_or_insert(h.cluster_id);
            let before = seen.revisions.entry(h.member_id).or_insert(h.revision);
            let why = if cluster != h.cluster_id {
                Some(format!(
                    "etcd's cluster ID changed from {cluster:x} to {:x}",
                    h.cluster_id
                ))
            } else if h.revision < *before {
                Some(format!(
                    "etcd member {:x} answered at revision {}, below revision {} it answered at before",
                    h.member_id, h.revision, *before
                ))
            } else {
                None
            };
            // After a loss, the etcd that answers now is the one to compare with.
            *before = if why.is_some() {
                h.revision
            } else {
                (*before).max(h.revision)
            };
            if cluster != h.cluster_id {
                seen.revisions.clear();
                seen.revisions.insert(h.member_id, h.revision);
            }
            seen.cluster = Some(h.cluster_id);
            why?
        };
        let why = format!(
            "{why}: etcd lost its data (wiped, or restored from a backup), and every lease taken before is gone"
        );
        for live in lock(&self.grants).drain(..) {
            if let Some(live) = live.upgrade() {
                live.lose(why.clone());
            }
        }
        Some(why)
    }

    /// A new grant, lost with the others if etcd loses its data.
    pub(super) fn register(&self, live: &Arc<Liveness>) {
        let mut grants = lock(&self.grants);
        grants.retain(|g| g.strong_count() > 0);
        grants.push(Arc::downgrade(live));
    }
}

impl Ctx {
    pub(super) fn unreachable(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Unreachable {
            endpoints: self.endpoints.clone(),
            reason: format!("{what}: {e}"),
        }
    }

    /// Runs one request within [`REQUEST_TIMEOUT`].
    pub(super) async fn request<T>(
        &self,
        what: &str,
        fut: impl Future<Output = std::result::Result<T, tonic::Status>>,
    ) -> Result<T> {
        match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unreachable(what, status_text(&e))),
            Err(_) => Err(self.unreachable(
                what,
                format!("no answer within {REQUEST_TIMEOUT:?} (is etcd running and reachable?)"),
            )),
        }
    }

    pub(super) async fn revoke(&self, id: i64) {
        let _ = self
            .request("revoke lease", self.client.lease_revoke(id))
            .await;
    }

    /// `KV.Range` within [`REQUEST_TIMEOUT`].
    pub(super) async fn range(&self, what: &str, request: RangeRequest) -> Result<RangeResponse> {
        self.request(what, self.client.range(request)).await
    }

    /// `KV.Txn` within [`REQUEST_TIMEOUT`].
    pub(super) async fn txn(&self, what: &str, request: TxnRequest) -> Result<TxnResponse> {
        self.request(what, self.client.txn(request)).await
    }
}

/// A status in one line: etcd's message (or the code when it has none) and the chain of
/// causes a transport failure carries ("transport error: connection refused").
pub(super) fn status_text(status: &tonic::Status) -> String {
    let mut text = if status.message().is_empty() {
        format!("{:?}", status.code())
    } else {
        status.message().to_string()
    };
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text.replace('\n', " ")
}

pub(super) type Live = Arc<Mutex<HashMap<u64, (String, Arc<Liveness>)>>>;

pub(super) struct Shared {
    /// `Some` until dropped; shut down in the background, so dropping the arbiter never
    /// blocks (nor panics inside another runtime).
    pub(super) runtime: Option<Runtime>,
    pub(super) ctx: Ctx,
    /// The grants this arbiter handed out and has not released: token → (lock key, liveness).
    pub(super) live: Live,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Shared {
    /// Runs `fut` on the private runtime and waits for its answer (the blocking face).
    pub(super) fn block<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.ctx.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(self.ctx.unreachable("etcd client", "its runtime stopped")))
    }
}
