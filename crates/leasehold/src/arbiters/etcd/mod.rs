//! [`EtcdArbiter`]: the authority's arbiter on an etcd v3 cluster, for processes spread over
//! several machines (where `flock` on a network file system can hang or fail to exclude).
//!
//! # The recipe
//!
//! It is etcd's own mutex (`client/v3/concurrency/mutex.go` and `session.go` in etcd's
//! repository), not the server's `Lock` RPC: etcd 3.4 (Debian 12 ships 3.4.23) can grant a
//! `Lock` after the caller's lease expired (etcd issue 11456, found by Jepsen's analysis of
//! etcd 3.4.3, fixed only in 3.5). Each acquisition:
//!
//! 1. grants a lease of `ttl` and keeps it alive (its own task) at most `ttl / 3` apart,
//!    more often when the holder's grace and the round trip measured at connect need it
//!    ([`keep_alive_period`], [`EtcdArbiter::plan_keep_alives`]);
//! 2. in one transaction creates `PREFIX<lease id in hex>` (value `PID@HOST`, attached to the
//!    lease) if absent, and reads the key under `PREFIX` with the lowest create revision;
//!    only keys attached to a lease count, here and below: a key without one never expires
//!    and is nobody's claim (`first_leased`);
//! 3. owns the lock when that lowest key is its own. Otherwise it watches the *deletion* of
//!    its predecessor (the key just below its own create revision), from the revision after
//!    the read that found it, and again, until no older key is left — no polling; a holder
//!    that dies loses its key when its lease expires, a holder that releases revokes its
//!    lease at once (`wait_deletes` says why the watch starts where it does);
//! 4. is granted with its key's create revision as the fencing token: etcd's revisions only
//!    grow, so every later grant of the lock carries a larger token.
//!
//! # Failing closed before the lease can expire
//!
//! The grant knows the deadline its last acknowledged keep-alive bought: the boot-time clock
//! read *before* sending it, plus the TTL, minus a margin ([`margin`]). The server's expiry
//! is at least that late, because it counts from when it received the request. [`Grant::verify`]
//! fails, and [`Grant::is_lost`] turns true, once that deadline has passed or etcd reported the
//! lease gone — so the authority withdraws its scope and refuses writes *before* a successor
//! can have been granted. A grant once lost stays lost (a late acknowledgement never revives
//! it: someone may have acted on the loss). The clock is CLOCK_BOOTTIME on Linux, which keeps
//! counting while the machine is suspended (the monotonic clock would not, and a suspended
//! holder would wake up believing it still holds a lease that expired meanwhile).
//!
//! # Fencing
//!
//! A paused holder (GC, SIGSTOP, a partition) can resume after its lease expired and before it
//! noticed. [`EtcdArbiter::put_fenced`] therefore writes in one transaction that succeeds only
//! if the writer's lock key still exists with the create revision it was granted — etcd
//! itself refuses the deposed writer, atomically with the write.
//!
//! # TLS
//!
//! `https://` endpoints speak TLS through rustls (ring), trusting the system's roots or, as
//! with OpenSSL, the certificates in `SSL_CERT_FILE` / `SSL_CERT_DIR` instead; the server's
//! certificate must name the URL's host. A list is all `https://` or all plain
//! ([`EtcdArbiter::connect`]).
//!
//! # Runtime
//!
//! The client is our own (`client.rs`: six RPCs over `tonic`, with the messages declared by
//! hand in `proto.rs`, so building needs no `protoc`). It is async; the arbiter owns a small
//! private tokio runtime (one worker thread) on which the client, the keep-alive tasks and the
//! waits run. The blocking face hands a future
//! to it and waits for the answer, so it works from any thread, inside another runtime or not;
//! the async face (feature `tokio`) awaits the same task, and dropping it abandons the wait.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::patterns::authority::{Arbiter, Grant};
use crate::{Budget, Error, Result};

use client::{Client, prefix_end};
use proto::{
    Compare, CompareResult, CompareTarget, EventType, KeyValue, LeaseKeepAliveRequest,
    RangeRequest, RangeResponse, RequestOp, SortOrder, SortTarget, TxnRequest, TxnResponse,
    WatchCreateRequest, compare, request_op, response_op,
};

mod client;
mod proto;

/// The smallest lease TTL accepted. Below it, a keep-alive every TTL/3 leaves too little
/// slack for a loaded machine, and etcd's own minimum (1.5 × its election timeout) is near.
pub const MIN_TTL: Duration = Duration::from_secs(2);
/// The default lease TTL: how long a crashed holder can keep the lock from a successor.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// How long connecting may take before the endpoints count as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one request (grant, transaction, read, revoke) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// How much earlier than the TTL a grant counts itself lost: a tenth of the TTL, at least
/// 200 ms — the time the holder needs to stop writing after it noticed.
pub fn margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(200))
}

/// How often keep-alives go for a lease of `ttl` whose holder starts stopping `grace`
/// before its deadline (0 for a holder that only checks [`Grant::verify`]), at a round trip
/// of `round_trip`; `Err` with the arithmetic when no period can hold.
///
/// From a keep-alive's send, the holder has `budget = ttl − margin − grace` before it
/// starts stopping. The next keep-alive goes `period` after the answer, and its answer is
/// back `period + 2 × round_trip` after the first's send: that must come within the budget.
/// The period is half of what the round trips leave, `(budget − 2 × round_trip) / 2`, so
/// that as much again is slack for a slow answer — and never more than `ttl / 3`. A period
/// shorter than a round trip cannot hold (keep-alives would queue behind their answers):
/// so `budget ≥ 4 × round_trip` is required.
pub fn keep_alive_period(
    ttl: Duration,
    grace: Duration,
    round_trip: Duration,
) -> std::result::Result<Duration, String> {
    let margin = margin(ttl);
    let budget = ttl.saturating_sub(margin).saturating_sub(grace);
    let needed = round_trip.saturating_mul(4);
    if budget < needed || budget.is_zero() {
        return Err(format!(
            "a keep-alive cannot be renewed in time at the round trip measured ({:.3} s): TTL {:.1} s − margin {:.1} s − grace {:.1} s = {:.3} s, less than 4 × the round trip = {:.3} s (two round trips, and as much again as slack); raise --ttl, lower --grace, or use an etcd nearer to this machine",
            round_trip.as_secs_f64(),
            ttl.as_secs_f64(),
            margin.as_secs_f64(),
            grace.as_secs_f64(),
            budget.as_secs_f64(),
            needed.as_secs_f64()
        ));
    }
    Ok(((budget - round_trip * 2) / 2).min(ttl / 3))
}

/// Nanoseconds of a clock that keeps counting through suspend (CLOCK_BOOTTIME on Linux).
fn now() -> u64 {
    #[cfg(target_os = "linux")]
    let id = rustix::time::ClockId::Boottime;
    #[cfg(not(target_os = "linux"))]
    let id = rustix::time::ClockId::Monotonic;
    let t = rustix::time::clock_gettime(id);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Who holds a lock, as the holder recorded it in its key (`PID@HOST`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdHolder {
    /// The holder's process ID on its host.
    pub pid: u32,
    /// The holder's host name.
    pub host: String,
    /// The holder's fencing token (its key's create revision).
    pub token: u64,
}

/// What [`EtcdArbiter::put_fenced`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// etcd checked the token and wrote.
    Written,
    /// etcd refused: the writer's lock key is gone or was granted again; nothing was written
    /// and the grant with that token is lost from now on.
    Refused,
}

/// What every task of one arbiter needs; cheap to clone, and holds no runtime (so a task never
/// drops the runtime it runs on).
#[derive(Clone)]
struct Ctx {
    client: Client,
    handle: Handle,
    endpoints: String,
    prefix: String,
    holder: String,
    ttl: Duration,
    /// The slower of two requests' round trips, measured when connecting.
    round_trip: Duration,
    /// How often keep-alives go (nanoseconds; [`keep_alive_period`]), shared by clones.
    period: Arc<AtomicU64>,
    /// What etcd's answers said of its identity and revisions, and the grants it concerns.
    history: Arc<History>,
}

/// The cluster identity and the revisions etcd's answers carried, per member: a member
/// that answers at a revision lower than one it answered at before, or a cluster ID that
/// changes, means etcd lost its data (wiped, or restored from a backup) — every lease taken
/// before is gone, and fencing tokens handed out from now on may be lower than old ones.
/// Every grant of the arbiter is then lost at once.
#[derive(Default)]
struct History {
    seen: Mutex<Seen>,
    /// The grants to lose when etcd lost its data.
    grants: Mutex<Vec<std::sync::Weak<Liveness>>>,
}

#[derive(Default)]
struct Seen {
    cluster: Option<u64>,
    /// The highest revision each member answered at.
    revisions: HashMap<u64, i64>,
}

impl History {
    /// Takes note of an answer's header; when it shows that etcd lost its data, loses every
    /// grant, and says why.
    fn observe(&self, header: Option<&proto::ResponseHeader>) -> Option<String> {
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
    fn register(&self, live: &Arc<Liveness>) {
        let mut grants = lock(&self.grants);
        grants.retain(|g| g.strong_count() > 0);
        grants.push(Arc::downgrade(live));
    }
}

impl Ctx {
    fn unreachable(&self, what: &str, e: impl std::fmt::Display) -> Error {
        Error::Unreachable {
            endpoints: self.endpoints.clone(),
            reason: format!("{what}: {e}"),
        }
    }

    /// Runs one request within [`REQUEST_TIMEOUT`].
    async fn request<T>(
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

    async fn revoke(&self, id: i64) {
        let _ = self
            .request("revoke lease", self.client.lease_revoke(id))
            .await;
    }

    /// `KV.Range` within [`REQUEST_TIMEOUT`].
    async fn range(&self, what: &str, request: RangeRequest) -> Result<RangeResponse> {
        self.request(what, self.client.range(request)).await
    }

    /// `KV.Txn` within [`REQUEST_TIMEOUT`].
    async fn txn(&self, what: &str, request: TxnRequest) -> Result<TxnResponse> {
        self.request(what, self.client.txn(request)).await
    }
}

/// A status in one line: etcd's message (or the code when it has none) and the chain of
/// causes a transport failure carries ("transport error: connection refused").
fn status_text(status: &tonic::Status) -> String {
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

type Live = Arc<Mutex<HashMap<u64, (String, Arc<Liveness>)>>>;

struct Shared {
    /// `Some` until dropped; shut down in the background, so dropping the arbiter never
    /// blocks (nor panics inside another runtime).
    runtime: Option<Runtime>,
    ctx: Ctx,
    /// The grants this arbiter handed out and has not released: token → (lock key, liveness).
    live: Live,
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
    fn block<T: Send + 'static>(
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

/// How connecting ended.
enum Connecting {
    /// An endpoint answered a request: the client works; the slower of two more requests'
    /// round trips.
    Answered(Client, Duration),
    /// A URL cannot be used (it does not parse): nothing was contacted.
    Unusable(String),
    /// The request failed: refused, reset, or a failed TLS handshake.
    Failed(tonic::Status),
    /// No answer within [`CONNECT_TIMEOUT`].
    Silent,
}

impl Connecting {
    /// Makes the client (on the runtime, whose tasks its balancer uses) and proves with one
    /// real request that an endpoint answers: the channel itself connects lazily.
    async fn attempt(list: &[String], options: client::Options) -> Connecting {
        let client = match Client::new(list, options) {
            Ok(c) => c,
            Err(reason) => return Connecting::Unusable(reason),
        };
        let probe = RangeRequest {
            key: vec![0],
            count_only: true,
            ..RangeRequest::default()
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, client.range(probe.clone())).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Connecting::Failed(e),
            Err(_) => return Connecting::Silent,
        }
        // The round trip, once connected (the first request paid for the connection): the
        // slower of two, which plans the keep-alives ([`keep_alive_period`]).
        let mut round_trip = Duration::ZERO;
        for _ in 0..2 {
            let sent = tokio::time::Instant::now();
            let answered = tokio::time::timeout(CONNECT_TIMEOUT, client.range(probe.clone()))
                .await
                .is_ok_and(|r| r.is_ok());
            if answered {
                round_trip = round_trip.max(sent.elapsed());
            }
        }
        Connecting::Answered(client, round_trip)
    }
}

/// A lock on an etcd v3 cluster, as an [`Arbiter`]: etcd's mutex recipe under a key prefix,
/// held by a lease kept alive at most TTL/3 apart, with the lock key's create revision as fencing
/// token (see the module docs). Cloning shares the connection.
#[derive(Clone)]
pub struct EtcdArbiter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EtcdArbiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdArbiter")
            .field("endpoints", &self.shared.ctx.endpoints)
            .field("prefix", &self.shared.ctx.prefix)
            .field("ttl", &self.shared.ctx.ttl)
            .finish()
    }
}

impl EtcdArbiter {
    /// Connects to `endpoints` (comma-separated `http://host:port` or `https://host:port`
    /// URLs) and arbitrates the lock whose keys live under `prefix` (a `/` is appended when
    /// missing, so that lock `a` never sees the keys of lock `ab`), with leases of `ttl`
    /// (whole seconds, at least [`MIN_TTL`]).
    ///
    /// `https://` endpoints speak TLS (rustls): the server's certificate must chain to a root
    /// of the system's store — or, when `SSL_CERT_FILE` / `SSL_CERT_DIR` are set, to one of
    /// the certificates there *instead* (as with OpenSSL; how a private CA is trusted) — and
    /// must name the URL's host. Either every endpoint is `https://` or none is: a mixed list
    /// would send some requests in the clear, so it is refused.
    ///
    /// Several endpoints are members of one cluster: requests go to the one that answered
    /// last, and to the next in turn while one cannot be connected to (down, refusing), so a
    /// member that is down fails no request another member answers.
    ///
    /// # Errors
    ///
    /// [`Error::BadEndpoints`] for a list mixing `http://` and `https://`, an empty one, or a
    /// URL that does not parse (a URL without a scheme is taken as `http://`);
    /// [`Error::Unreachable`] naming the endpoints when no endpoint answered within
    /// [`CONNECT_TIMEOUT`] (the connection is checked with a request, not assumed), with
    /// what to do when the TLS handshake failed (untrusted certificate, wrong host name).
    pub fn connect(endpoints: &str, prefix: &str, ttl: Duration) -> Result<EtcdArbiter> {
        let list = parse_endpoints(endpoints)?;
        let tls = list.iter().all(|e| e.starts_with("https://"));
        let unreachable = |reason: String| Error::Unreachable {
            endpoints: endpoints.to_string(),
            reason,
        };
        let ttl = Duration::from_secs(ttl.as_secs_f64().ceil() as u64).max(MIN_TTL);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("leasehold-etcd")
            .enable_all()
            .build()
            .map_err(|e| unreachable(format!("cannot start the client's runtime: {e}")))?;
        let options = client::Options {
            connect_timeout: CONNECT_TIMEOUT,
            keep_alive: Duration::from_secs(1),
            keep_alive_timeout: Duration::from_secs(1),
            #[cfg(not(leasehold_etcd_without_tls))]
            tls: None,
        };
        let options = if tls {
            with_tls(options).map_err(|reason| Error::BadEndpoints {
                endpoints: endpoints.to_string(),
                reason: reason.into(),
            })?
        } else {
            options
        };
        // Not `block_on`: connecting must work from inside another runtime too.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime.spawn(async move {
            let _ = tx.send(Connecting::attempt(&list, options).await);
        });
        let (client, round_trip) = match rx.recv() {
            Ok(Connecting::Answered(c, rtt)) => (c, rtt),
            Ok(Connecting::Unusable(reason)) => {
                return Err(Error::BadEndpoints {
                    endpoints: endpoints.to_string(),
                    reason,
                });
            }
            Ok(Connecting::Failed(e)) => return Err(unreachable(connect_failure(&e, tls))),
            Ok(Connecting::Silent) | Err(_) => {
                return Err(unreachable(format!(
                    "unreachable: no answer within {CONNECT_TIMEOUT:?} (is etcd running, and is this its client URL?)"
                )));
            }
        };
        let mut prefix = prefix.to_string();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        let host = rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned();
        let ctx = Ctx {
            client,
            handle: runtime.handle().clone(),
            endpoints: endpoints.to_string(),
            prefix,
            holder: format!("{}@{host}", std::process::id()),
            ttl,
            round_trip,
            // A holder that only checks `verify` (no grace): TTL/3 unless the round trip
            // needs a shorter period; the longest there is when none can hold.
            period: Arc::new(AtomicU64::new(nanos(
                keep_alive_period(ttl, Duration::ZERO, round_trip).unwrap_or(ttl / 3),
            ))),
            history: Arc::default(),
        };
        Ok(EtcdArbiter {
            shared: Arc::new(Shared {
                runtime: Some(runtime),
                ctx,
                live: Live::default(),
            }),
        })
    }

    /// The endpoints, as given.
    pub fn endpoints(&self) -> &str {
        &self.shared.ctx.endpoints
    }

    /// The key prefix of the lock (ending in `/`).
    pub fn prefix(&self) -> &str {
        &self.shared.ctx.prefix
    }

    /// The lease TTL (whole seconds).
    pub fn ttl(&self) -> Duration {
        self.shared.ctx.ttl
    }

    /// The round trip to etcd measured when connecting (the slower of two requests).
    pub fn round_trip(&self) -> Duration {
        self.shared.ctx.round_trip
    }

    /// How often keep-alives go for the grants acquired from now on.
    pub fn keep_alive_every(&self) -> Duration {
        Duration::from_nanos(self.shared.ctx.period.load(Ordering::Relaxed))
    }

    /// Plans the keep-alives of the grants acquired from now on for a holder that starts
    /// stopping `grace` before its grant's deadline (`leasehold run --etcd --grace`), at
    /// the round trip measured when connecting ([`keep_alive_period`]); returns the period.
    ///
    /// # Errors
    ///
    /// [`Error::Unschedulable`] with the arithmetic when the TTL and the grace leave too
    /// little time at that round trip: a grant would be lost, and its holder stopped, with
    /// etcd healthy. Nothing is changed then.
    pub fn plan_keep_alives(&self, grace: Duration) -> Result<Duration> {
        let ctx = &self.shared.ctx;
        let period = keep_alive_period(ctx.ttl, grace, ctx.round_trip).map_err(|reason| {
            Error::Unschedulable {
                endpoints: ctx.endpoints.clone(),
                reason,
            }
        })?;
        ctx.period.store(nanos(period), Ordering::Relaxed);
        Ok(period)
    }

    /// The lock's current owner: the key under the prefix with the lowest create revision
    /// among those attached to a lease (waiters' keys are not holders, and a key without a
    /// lease is nobody's: see the module docs, step 2). Reads only; never disturbs a holder
    /// or a waiter.
    pub fn owner(&self) -> Result<Option<EtcdHolder>> {
        let ctx = self.shared.ctx.clone();
        self.shared.block(async move {
            let (owner, _) =
                first_leased(&ctx, "read lock owner", first_created(&ctx.prefix)).await?;
            Ok(owner.map(|kv| {
                let value = String::from_utf8_lossy(&kv.value);
                let (pid, host) = value.split_once('@').unwrap_or(("0", &value));
                EtcdHolder {
                    pid: pid.parse().unwrap_or(0),
                    host: host.to_string(),
                    token: kv.create_revision as u64,
                }
            }))
        })
    }

    /// How many keys attached to a lease are under the prefix: the holder and its queued
    /// waiters (a key without a lease is neither). Reads only.
    pub fn contenders(&self) -> Result<usize> {
        let ctx = self.shared.ctx.clone();
        self.shared.block(async move {
            let mut count = 0;
            let all = RangeRequest {
                keys_only: true,
                ..first_created(&ctx.prefix)
            };
            scan(&ctx, "count lock keys", all, |kv| {
                count += usize::from(kv.lease != 0);
                false
            })
            .await?;
            Ok(count)
        })
    }

    /// The value of `key`, if it exists.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let (ctx, key) = (self.shared.ctx.clone(), key.to_string());
        self.shared.block(async move {
            let resp = ctx.range("read", only(&key)).await?;
            Ok(resp.kvs.into_iter().next().map(|kv| kv.value))
        })
    }

    /// Writes `value` to `key` only if the grant with fencing token `token` still holds the
    /// lock: one transaction whose condition is that the grant's lock key exists with the
    /// create revision `token`. A token this arbiter did not grant, or released, is refused
    /// without asking etcd. On [`Fenced::Refused`] the grant is marked lost.
    ///
    /// # Errors
    ///
    /// [`Error::Unreachable`] when etcd did not answer; the write may or may not have been
    /// applied then (as with any remote write whose answer was lost).
    pub fn put_fenced(&self, token: u64, key: &str, value: Vec<u8>) -> Result<Fenced> {
        let Some((lock_key, live)) = lock(&self.shared.live).get(&token).cloned() else {
            return Ok(Fenced::Refused);
        };
        let (ctx, key) = (self.shared.ctx.clone(), key.to_string());
        let rev = i64::try_from(token).unwrap_or(i64::MAX);
        self.shared.block(async move {
            let txn = TxnRequest {
                compare: vec![created_at(&lock_key, rev)],
                success: vec![put(&key, value, 0)],
                failure: Vec::new(),
            };
            let resp = ctx.txn("fenced write", txn).await?;
            if resp.succeeded {
                Ok(Fenced::Written)
            } else {
                live.lose("etcd refused the fencing token: the lock key is gone".into());
                Ok(Fenced::Refused)
            }
        })
    }

    /// Every value `key` held since etcd's last compaction, oldest first (a watch replayed
    /// from revision 1): what the torture's checker reads to prove no stale write landed.
    pub fn history(&self, key: &str) -> Result<Vec<Vec<u8>>> {
        let (ctx, key) = (self.shared.ctx.clone(), key.to_string());
        self.shared.block(async move {
            let head = ctx.range("read", only(&key)).await?;
            let Some(last) = head.kvs.first().map(|kv| kv.mod_revision) else {
                return Ok(Vec::new());
            };
            let from_the_start = WatchCreateRequest {
                key: key.clone().into_bytes(),
                range_end: Vec::new(),
                start_revision: 1,
            };
            let mut stream = ctx
                .request("watch", ctx.client.watch(from_the_start))
                .await?;
            let mut out = Vec::new();
            loop {
                let msg = ctx.request("watch", stream.message()).await?;
                let Some(msg) = msg else {
                    return Err(ctx.unreachable("watch", "the stream ended early"));
                };
                if msg.canceled {
                    return Err(ctx.unreachable("watch", msg.cancel_reason));
                }
                for ev in msg.events {
                    if let (Ok(EventType::Put), Some(kv)) = (EventType::try_from(ev.r#type), ev.kv)
                    {
                        out.push(kv.value);
                        if kv.mod_revision >= last {
                            return Ok(out);
                        }
                    }
                }
            }
        })
    }

    fn grant(&self, held: Held) -> EtcdGrant {
        lock(&self.shared.live).insert(held.token, (held.key.clone(), held.live.clone()));
        EtcdGrant {
            shared: self.shared.clone(),
            held,
            released: false,
        }
    }
}

impl Arbiter for EtcdArbiter {
    type Grant = EtcdGrant;

    /// Takes the lock within `budget`: [`Budget::no_wait`] tries once; otherwise it waits for
    /// the deletion of its predecessors (no polling) until the deadline or cancellation, and
    /// an abandoned wait revokes its lease before returning, so it leaves nothing behind.
    fn acquire(&self, budget: &Budget) -> Result<EtcdGrant> {
        let ctx = self.shared.ctx.clone();
        // Started now: the round trips before the wait count against a timeout too.
        let held = self.shared.block(acquire(ctx, budget.started()))?;
        Ok(self.grant(held))
    }
}

#[cfg(feature = "tokio")]
impl crate::patterns::authority::AsyncArbiter for EtcdArbiter {
    fn acquire_async(
        &self,
        budget: impl Into<Budget>,
    ) -> impl Future<Output = Result<EtcdGrant>> + Send {
        let budget = budget.into().started();
        let task = AbortOnDrop(
            self.shared
                .ctx
                .handle
                .spawn(acquire(self.shared.ctx.clone(), budget)),
        );
        let this = self.clone();
        async move {
            let mut task = task;
            match (&mut task.0).await {
                Ok(held) => Ok(this.grant(held?)),
                Err(e) => Err(this.shared.ctx.unreachable("etcd client", e)),
            }
        }
    }
}

/// Aborts the task when dropped: dropping the async acquisition abandons its wait, and the
/// task's [`Held`] (if any) revokes its lease as it is dropped.
#[cfg(feature = "tokio")]
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

#[cfg(feature = "tokio")]
impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A granted lock: the lease, the lock key and its keep-alive. Dropped unreleased (an
/// abandoned async wait), it revokes its lease in the background.
struct Held {
    ctx: Ctx,
    id: i64,
    key: String,
    token: u64,
    live: Arc<Liveness>,
    keeper: AbortHandle,
    armed: bool,
}

impl Held {
    /// Stops the keep-alive and returns the revocation of the lease (which deletes the key)
    /// for the caller to run, or `None` if already done.
    fn disarm(&mut self) -> Option<impl Future<Output = ()> + Send + 'static> {
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

/// One acquisition, on the private runtime (see the module docs for the recipe).
async fn acquire(ctx: Ctx, budget: Budget) -> Result<Held> {
    let ttl_secs = i64::try_from(ctx.ttl.as_secs()).unwrap_or(i64::MAX);
    let sent = now();
    let lease = ctx
        .request("grant lease", ctx.client.lease_grant(ttl_secs))
        .await?;
    if !lease.error.is_empty() {
        return Err(ctx.unreachable("grant lease", lease.error));
    }
    ctx.history.observe(lease.header.as_ref());
    let id = lease.id;
    let key = format!("{}{id:x}", ctx.prefix);
    let live = Arc::new(Liveness::new(
        key.clone(),
        sent + nanos(ctx.ttl) - nanos(margin(ctx.ttl)),
    ));
    ctx.history.register(&live);
    let keeper = ctx
        .handle
        .spawn(keep_alive(ctx.clone(), id, live.clone()))
        .abort_handle();
    let mut held = Held {
        ctx: ctx.clone(),
        id,
        key: key.clone(),
        token: 0,
        live: live.clone(),
        keeper,
        armed: true,
    };
    match take(&ctx, &key, id, &budget, &live).await {
        Ok(token) => {
            held.token = token;
            Ok(held)
        }
        Err(e) => {
            // Give up the waiter's key before returning: nothing is left behind.
            if let Some(revoke) = held.disarm() {
                revoke.await;
            }
            Err(e)
        }
    }
}

/// Creates the lock key and waits until it is the oldest; returns its create revision.
async fn take(ctx: &Ctx, key: &str, id: i64, budget: &Budget, live: &Liveness) -> Result<u64> {
    let prefix = ctx.prefix.as_str();
    let txn = TxnRequest {
        compare: vec![created_at(key, 0)],
        success: vec![
            put(key, ctx.holder.as_bytes().to_vec(), id),
            read(first_created(prefix)),
        ],
        failure: vec![read(only(key)), read(first_created(prefix))],
    };
    let resp = ctx.txn("create lock key", txn).await?;
    let succeeded = resp.succeeded;
    let revision = resp.header.as_ref().map(|h| h.revision);
    let ranges = reads(resp);
    let mine = if succeeded {
        revision
    } else {
        // The key exists already (a retried request): ours only if it is on our lease.
        match ranges.first().and_then(|kvs| kvs.first()) {
            Some(kv) if kv.lease == id => Some(kv.create_revision),
            Some(_) => {
                return Err(ctx.unreachable(
                    "create lock key",
                    format!("{key} exists on another lease (written by something else than a leasehold acquisition); delete it"),
                ));
            }
            None => None,
        }
    };
    let Some(mine) = mine else {
        return Err(ctx.unreachable("create lock key", "etcd's answer lacks a revision"));
    };
    let owner = match ranges.last().and_then(|kvs| kvs.first()) {
        // The oldest key has no lease, so it holds nothing (see `first_leased`): look on.
        Some(kv) if kv.lease == 0 => first_leased(ctx, "read lock owner", first_created(prefix))
            .await?
            .0
            .map(|kv| kv.create_revision),
        oldest => oldest.map(|kv| kv.create_revision),
    };
    if owner.is_none_or(|o| o == mine) {
        return Ok(mine as u64);
    }
    let contended = || Error::Contended {
        path: ctx.prefix.trim_end_matches('/').into(),
        holders: crate::HolderInfo::default(),
        why: budget.not_waited(std::time::Instant::now()),
    };
    if budget.remaining().is_some_and(|r| r.is_zero()) {
        return Err(contended());
    }
    let started = std::time::Instant::now();
    let deadline = async {
        match budget.remaining() {
            Some(r) => tokio::time::sleep(r).await,
            None => std::future::pending().await,
        }
    };
    let outlived = tokio::select! {
        waited = wait_deletes(ctx, key, mine) => waited?,
        () = deadline => {
            return Err(Error::TimedOut {
                path: ctx.prefix.trim_end_matches('/').into(),
                holders: crate::HolderInfo::default(),
                waited: started.elapsed(),
            });
        }
        () = cancelled(budget) => {
            return Err(Error::Cancelled { path: ctx.prefix.trim_end_matches('/').into() });
        }
        why = live.lost() => return Err(Error::Expired { name: key.to_string(), reason: why }),
    };
    // The predecessors are gone; our own key must have outlived the wait, and our grant's
    // deadline not have passed (after which etcd may expire the lease at any moment).
    if let Some(why) = live.check() {
        return Err(Error::Expired {
            name: key.to_string(),
            reason: why,
        });
    }
    if outlived {
        Ok(mine as u64)
    } else {
        Err(Error::Expired {
            name: key.to_string(),
            reason: "the lease expired while waiting for the lock".into(),
        })
    }
}

/// Splits a comma-separated endpoint list and checks it is all `https://` or all plain: the
/// one place the choice between TLS and plain text is made. A URL's scheme is matched
/// case-insensitively and passed on in lower case; a URL without one is `http://`, as with
/// etcdctl.
fn parse_endpoints(endpoints: &str) -> Result<Vec<String>> {
    let bad = |reason: &str| Error::BadEndpoints {
        endpoints: endpoints.to_string(),
        reason: reason.to_string(),
    };
    let list: Vec<String> = endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once("://") {
            Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
            None => format!("http://{e}"),
        })
        .collect();
    if list.is_empty() {
        return Err(bad("no endpoint given"));
    }
    if let Some(odd) = list
        .iter()
        .find(|e| !e.starts_with("http://") && !e.starts_with("https://"))
    {
        return Err(bad(&format!(
            "{odd}: only http:// and https:// URLs are supported"
        )));
    }
    let https = list.iter().filter(|e| e.starts_with("https://")).count();
    if https != 0 && https != list.len() {
        return Err(bad(
            "mixes https:// and http:// endpoints, which would send some requests in the clear; use https:// for all of them",
        ));
    }
    Ok(list)
}

/// TLS for `https://` endpoints: rustls with ring, trusting the system's store, or instead
/// the certificates in SSL_CERT_FILE / SSL_CERT_DIR (rustls-native-certs, as OpenSSL). Without
/// roots of its own tonic's TLS would trust no root at all.
#[cfg(not(leasehold_etcd_without_tls))]
fn with_tls(options: client::Options) -> std::result::Result<client::Options, &'static str> {
    let tls = tonic::transport::ClientTlsConfig::new()
        .with_native_roots()
        .timeout(CONNECT_TIMEOUT);
    Ok(client::Options {
        tls: Some(tls),
        ..options
    })
}

/// A build for linting only (`--cfg leasehold_etcd_without_tls`, see Cargo.toml) has no TLS.
#[cfg(leasehold_etcd_without_tls)]
fn with_tls(_: client::Options) -> std::result::Result<client::Options, &'static str> {
    Err(
        "this leasehold was built without TLS (--cfg leasehold_etcd_without_tls); rebuild it without that flag",
    )
}

/// Why connecting failed, in words a user can act on. A failed TLS handshake (rustls says
/// why: an unknown issuer, a name the certificate does not cover, no root certificates at
/// all) is told apart from an endpoint that does not answer, and says what to do.
fn connect_failure(e: &tonic::Status, tls: bool) -> String {
    // A status carries the transport's reason as its message ("invalid peer certificate:
    // UnknownIssuer") or in its chain of sources; its Display adds a Debug dump of the chain.
    let what = status_text(e);
    let mut chain = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        chain.push(' ');
        chain.push_str(&s.to_string());
        source = s.source();
    }
    // What to match on: the Display too, which for a status includes its source's Debug.
    let lower = format!("{e} {chain}").to_ascii_lowercase();
    if tls && lower.contains("no native certs") {
        return format!(
            "TLS: no trusted root certificates ({what}); install the system's CA certificates (Debian: ca-certificates), or set SSL_CERT_FILE to a PEM file holding the CA that signed etcd's certificate"
        );
    }
    if tls && lower.contains("not valid for name") {
        return format!(
            "TLS handshake failed: {what}; use a URL whose host the certificate names, or have etcd's certificate reissued for this host"
        );
    }
    if tls
        && (lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake"))
    {
        return format!(
            "TLS handshake failed: {what}; if etcd's certificate is signed by a private CA, set SSL_CERT_FILE to that CA's PEM file (or SSL_CERT_DIR to a directory of them)"
        );
    }
    if !tls && (lower.contains("broken pipe") || lower.contains("connection reset")) {
        return format!("unreachable: {what} (if this etcd serves TLS, its URLs are https://)");
    }
    format!("unreachable: {what}")
}

/// A range over every key under `prefix`.
fn under(prefix: &str) -> RangeRequest {
    RangeRequest {
        key: prefix.as_bytes().to_vec(),
        range_end: prefix_end(prefix.as_bytes()),
        ..RangeRequest::default()
    }
}

/// A range of the one key `key`.
fn only(key: &str) -> RangeRequest {
    RangeRequest {
        key: key.as_bytes().to_vec(),
        ..RangeRequest::default()
    }
}

/// The oldest key under a prefix: the owner.
fn first_created(prefix: &str) -> RangeRequest {
    RangeRequest {
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        limit: 1,
        ..under(prefix)
    }
}

/// How many keys one read of a [`scan`] asks for.
const PAGE: i64 = 16;

/// Reads the keys `range` selects (under one prefix, sorted by create revision) page by page
/// and shows each to `visit` in that order until it answers `true`; answers the revision of
/// the last read. A page ends before the keys created after (ascending) or before
/// (descending) its last one: keys that share a create revision were created by one
/// transaction, which a lock key never shares (each is created alone).
async fn scan(
    ctx: &Ctx,
    what: &str,
    mut range: RangeRequest,
    mut visit: impl FnMut(KeyValue) -> bool + Send,
) -> Result<i64> {
    range.limit = PAGE;
    let descending = range.sort_order == SortOrder::Descend as i32;
    loop {
        let resp = ctx.range(what, range.clone()).await?;
        let rev = resp.header.as_ref().map_or(0, |h| h.revision);
        let more = resp.more;
        let mut last = None;
        for kv in resp.kvs {
            last = Some(kv.create_revision);
            if visit(kv) {
                return Ok(rev);
            }
        }
        match last {
            Some(created) if more && descending && created > 1 => {
                range.max_create_revision = created - 1;
            }
            Some(created) if more && !descending => range.min_create_revision = created + 1,
            _ => return Ok(rev),
        }
    }
}

/// The first key attached to a lease among those `range` selects, in its order, with the
/// revision of the read that found it.
///
/// Every holder's and waiter's key is attached to its lease, so that it goes when its
/// process stops renewing. A key under a lock's prefix without a lease never expires and is
/// no process's claim — a document that a registry whose prefix lay inside the lock's range
/// wrote there, or a stray `etcdctl put` — and counted as the oldest holder
/// it would keep the lock from everyone for ever; counted as a predecessor it would keep a
/// waiter watching for a deletion that never comes. It is skipped.
async fn first_leased(
    ctx: &Ctx,
    what: &str,
    range: RangeRequest,
) -> Result<(Option<KeyValue>, i64)> {
    let mut found = None;
    let rev = scan(ctx, what, range, |kv| {
        let leased = kv.lease != 0;
        if leased {
            found = Some(kv);
        }
        leased
    })
    .await?;
    Ok((found, rev))
}

/// A transaction's read.
fn read(range: RangeRequest) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(range)),
    }
}

/// A transaction's write of `value` to `key`, attached to `lease` (0: none).
fn put(key: &str, value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(proto::PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
        })),
    }
}

/// The condition "`key` was created at revision `rev`" (0: `key` does not exist).
fn created_at(key: &str, rev: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(compare::TargetUnion::CreateRevision(rev)),
    }
}

/// The keys each read of a transaction's answer returned, in order.
fn reads(resp: TxnResponse) -> Vec<Vec<KeyValue>> {
    resp.responses
        .into_iter()
        .filter_map(|r| match r.response {
            Some(response_op::Response::ResponseRange(g)) => Some(g.kvs),
            _ => None,
        })
        .collect()
}

/// Waits until no key under the prefix older than `mine` (the create revision of `key`, the
/// waiter's own) is left, watching the deletion of the youngest of them each time (mutex.go's
/// `waitDeletes`); then answers whether `key` still exists as created at `mine` (a lease that
/// expired during the wait took it away). When the predecessor deleted was the only older
/// key with a lease, that deletion ends the wait without another look (mutex.go looks again;
/// here that round trip would be on the hand-over's path for nothing).
///
/// Each look is one read-only transaction (predecessor and own key together: one round trip,
/// where reading them apart costs a second one on the hand-over's path), and each watch
/// starts at the revision after that read. etcd sends a watch's events as they happen only to
/// a watcher that starts after its current revision; one that starts at or before it (as
/// mutex.go's does, from the read's own revision) is caught up by a loop that runs every
/// 100 ms, which delayed a hand-over by up to that much. Nothing is missed:
/// the predecessor existed at the read's revision, so its deletion comes after it.
async fn wait_deletes(ctx: &Ctx, key: &str, mine: i64) -> Result<bool> {
    loop {
        let older = RangeRequest {
            sort_order: SortOrder::Descend as i32,
            sort_target: SortTarget::Create as i32,
            max_create_revision: mine - 1,
            limit: PAGE,
            keys_only: true,
            ..under(&ctx.prefix)
        };
        let look = TxnRequest {
            compare: Vec::new(),
            success: vec![read(older.clone()), read(only(key))],
            failure: Vec::new(),
        };
        let resp = ctx.txn("read predecessors", look).await?;
        let mut rev = resp.header.as_ref().map_or(0, |h| h.revision);
        // Only the page's flag tells whether older keys did not fit in it.
        let more = resp.responses.first().is_some_and(
            |r| matches!(&r.response, Some(response_op::Response::ResponseRange(g)) if g.more),
        );
        let mut found = reads(resp).into_iter();
        let page = found.next().unwrap_or_default();
        let own = found.next().and_then(|kvs| kvs.into_iter().next());
        if own.as_ref().is_none_or(|kv| kv.create_revision != mine) {
            return Ok(false);
        }
        let oldest_seen = page.last().map(|kv| kv.create_revision);
        // Whether the page holds every older key and only one of them has a lease: then its
        // deletion leaves no older claim, and the wait is over without another look. No
        // claim older than ours can appear later: create revisions only grow, and a claim
        // is created with its lease (nothing of ours attaches a lease to an existing key).
        let last = !more && page.iter().filter(|kv| kv.lease != 0).count() == 1;
        // The youngest older key with a lease (a key without one is nobody's claim, see
        // `first_leased`); past a page of lease-less keys, the rest are read page by page.
        let mut predecessor = page.into_iter().find(|kv| kv.lease != 0);
        if predecessor.is_none()
            && more
            && let Some(oldest) = oldest_seen.filter(|&c| c > 1)
        {
            let rest = RangeRequest {
                max_create_revision: oldest - 1,
                ..older
            };
            (predecessor, rev) = first_leased(ctx, "read predecessors", rest).await?;
        }
        let Some(predecessor) = predecessor else {
            return Ok(true);
        };
        let watch = WatchCreateRequest {
            key: predecessor.key,
            range_end: Vec::new(),
            start_revision: rev + 1,
        };
        let mut stream = ctx
            .request("watch predecessor", ctx.client.watch(watch))
            .await?;
        'watch: loop {
            let msg = stream
                .message()
                .await
                .map_err(|e| ctx.unreachable("watch predecessor", status_text(&e)))?;
            let Some(msg) = msg else {
                return Err(ctx.unreachable("watch predecessor", "the stream ended"));
            };
            if msg.canceled {
                return Err(ctx.unreachable("watch predecessor", msg.cancel_reason));
            }
            if msg
                .events
                .iter()
                .any(|e| e.r#type == EventType::Delete as i32)
            {
                if last {
                    // Our key was there at the look, and our lease cannot have expired yet
                    // unless the grant's deadline passed, which the caller checks next.
                    return Ok(true);
                }
                break 'watch;
            }
        }
    }
}

/// Resolves when the budget's cancellation token fires (never without one).
async fn cancelled(budget: &Budget) {
    match budget.cancel_token() {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Keeps lease `id` alive — a keep-alive [`keep_alive_period`] after each answer, each
/// answer awaited up to TTL/3 — moving the grant's deadline forward at each
/// acknowledgement; reconnects the stream when it breaks; marks the grant lost when etcd
/// says the lease is gone. Ends when the grant is lost or released.
async fn keep_alive(ctx: Ctx, id: i64, live: Arc<Liveness>) {
    let period = Duration::from_nanos(ctx.period.load(Ordering::Relaxed));
    let answer_within = ctx.ttl / 3;
    let bought = |sent: u64, ttl_secs: i64| {
        let ttl = Duration::from_secs(ttl_secs.max(0) as u64).min(ctx.ttl);
        (sent + nanos(ttl)).saturating_sub(nanos(margin(ctx.ttl)))
    };
    let gone = "etcd reports the lease expired or revoked";
    loop {
        if live.check().is_some() {
            return;
        }
        // Opening the stream sends the first keep-alive; its answer is the first renewal.
        let sent = now();
        let opened = tokio::time::timeout(answer_within, async {
            let mut stream = ctx.client.lease_keep_alive(id).await?;
            let first = stream.message().await?;
            Ok::<_, tonic::Status>((stream, first))
        })
        .await;
        if let Ok(Ok((_, Some(resp)))) = &opened
            && let Some(why) = ctx.history.observe(resp.header.as_ref())
        {
            live.lose(why);
            return;
        }
        let mut stream = match opened {
            Ok(Ok((_, Some(resp)))) if resp.ttl <= 0 => {
                live.lose(gone.into());
                return;
            }
            Ok(Ok((stream, Some(resp)))) => {
                live.extend(bought(sent, resp.ttl));
                stream
            }
            _ => {
                // Not reachable now; try again soon (the deadline decides when to give up).
                tokio::time::sleep(period / 4).await;
                continue;
            }
        };
        loop {
            let next = tokio::time::Instant::now() + period;
            tokio::time::sleep_until(next).await;
            if live.check().is_some() {
                return;
            }
            let sent = now();
            if stream.send(LeaseKeepAliveRequest { id }).await.is_err() {
                break;
            }
            let answer = tokio::time::timeout(answer_within, stream.message()).await;
            if let Ok(Ok(Some(resp))) = &answer
                && let Some(why) = ctx.history.observe(resp.header.as_ref())
            {
                live.lose(why);
                return;
            }
            match answer {
                Ok(Ok(Some(resp))) if resp.ttl <= 0 => {
                    live.lose(gone.into());
                    return;
                }
                Ok(Ok(Some(resp))) => live.extend(bought(sent, resp.ttl)),
                _ => break,
            }
        }
    }
}

/// Whether a grant still holds: the deadline its keep-alives bought, and a reason once lost.
struct Liveness {
    name: String,
    state: Mutex<LiveState>,
    changed: Condvar,
    notify: Notify,
}

struct LiveState {
    deadline: u64,
    lost: Option<String>,
}

impl Liveness {
    fn new(name: String, deadline: u64) -> Liveness {
        Liveness {
            name,
            state: Mutex::new(LiveState {
                deadline,
                lost: None,
            }),
            changed: Condvar::new(),
            notify: Notify::new(),
        }
    }

    /// Why the grant is lost, if it is (a passed deadline makes it lost for good).
    fn check(&self) -> Option<String> {
        let mut st = lock(&self.state);
        Self::check_locked(&mut st)
    }

    fn check_locked(st: &mut LiveState) -> Option<String> {
        if st.lost.is_none() && now() >= st.deadline {
            st.lost =
                Some("no keep-alive was acknowledged in time; the lease may have expired".into());
        }
        st.lost.clone()
    }

    fn extend(&self, until: u64) {
        let mut st = lock(&self.state);
        if Self::check_locked(&mut st).is_none() && until > st.deadline {
            st.deadline = until;
        }
        drop(st);
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    fn lose(&self, why: String) {
        let mut st = lock(&self.state);
        if st.lost.is_none() {
            st.lost = Some(why);
        }
        drop(st);
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    /// Blocks until the grant is lost (returning why) or `timeout` passes (`None`).
    fn wait_lost(&self, timeout: Option<Duration>) -> Option<String> {
        let end = timeout.map(|t| now().saturating_add(nanos(t)));
        let mut st = lock(&self.state);
        loop {
            if let Some(why) = Self::check_locked(&mut st) {
                return Some(why);
            }
            let t = now();
            if end.is_some_and(|e| t >= e) {
                return None;
            }
            let until = end.map_or(st.deadline, |e| e.min(st.deadline));
            let nap = Duration::from_nanos(until.saturating_sub(t).max(1_000_000));
            st = self
                .changed
                .wait_timeout(st, nap)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Blocks until the deadline moves (a keep-alive was acknowledged), the grant is lost, or
    /// `timeout` passes.
    fn wait_renewed(&self, timeout: Option<Duration>) {
        let end = timeout.map(|t| now().saturating_add(nanos(t)));
        let mut st = lock(&self.state);
        let seen = st.deadline;
        loop {
            if Self::check_locked(&mut st).is_some() || st.deadline != seen {
                return;
            }
            let t = now();
            if end.is_some_and(|e| t >= e) {
                return;
            }
            let until = end.map_or(st.deadline, |e| e.min(st.deadline));
            let nap = Duration::from_nanos(until.saturating_sub(t).max(1_000_000));
            st = self
                .changed
                .wait_timeout(st, nap)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Time left before the deadline, `None` once lost.
    fn remaining(&self) -> Option<Duration> {
        let mut st = lock(&self.state);
        match Self::check_locked(&mut st) {
            Some(_) => None,
            None => Some(Duration::from_nanos(st.deadline.saturating_sub(now()))),
        }
    }

    /// Resolves when the grant is lost, with why.
    async fn lost(&self) -> String {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let mut st = lock(&self.state);
                if let Some(why) = Self::check_locked(&mut st) {
                    return why;
                }
                st.deadline
            };
            let nap = Duration::from_nanos(deadline.saturating_sub(now()).max(1_000_000));
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(nap) => {}
            }
        }
    }
}

/// A held etcd lock (see [`EtcdArbiter`]). Dropping it releases it.
#[must_use = "an etcd grant is released (its lease revoked) when dropped: bind it for as long as the lock must be held"]
pub struct EtcdGrant {
    shared: Arc<Shared>,
    held: Held,
    released: bool,
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
    /// of the last acknowledged keep-alive plus the TTL, minus [`margin`] — or `None` once it
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

use crate::mutex::lock;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::keep_alive_period;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A near etcd and a short grace: TTL/3, as ever.
    #[test]
    fn a_short_round_trip_keeps_the_period_at_a_third_of_the_ttl() {
        assert_eq!(
            keep_alive_period(Duration::from_secs(10), ms(1000), ms(1)),
            Ok(Duration::from_secs(10) / 3)
        );
        assert_eq!(
            keep_alive_period(Duration::from_secs(2), Duration::ZERO, ms(1)),
            Ok(Duration::from_secs(2) / 3)
        );
    }

    /// The combinations that stopped a healthy COMMAND with the period fixed at TTL/3:
    /// the next answer now comes within the budget, with as much again as slack.
    #[test]
    fn a_long_round_trip_shortens_the_period_so_that_the_next_answer_comes_in_time() {
        for (ttl, grace, rtt) in [(10, ms(5000), ms(500)), (2, ms(800), ms(200))] {
            let ttl = Duration::from_secs(ttl);
            let period = keep_alive_period(ttl, grace, rtt).expect("schedulable");
            let budget = ttl - super::margin(ttl) - grace;
            assert!(period >= rtt, "{period:?}");
            assert!(period + rtt * 2 <= budget, "{period:?} {budget:?}");
            assert!(budget - (period + rtt * 2) >= period, "slack {period:?}");
        }
    }

    fn header(cluster_id: u64, member_id: u64, revision: i64) -> super::proto::ResponseHeader {
        super::proto::ResponseHeader {
            cluster_id,
            member_id,
            revision,
            raft_term: 1,
        }
    }

    /// A member answering below a revision it answered at before, or another cluster ID:
    /// etcd lost its data, and every registered grant is lost; revisions that differ between
    /// members, or go up, are not; after a loss the etcd that answers is the new baseline.
    #[test]
    fn a_revision_that_goes_back_or_a_new_cluster_loses_every_grant() {
        use std::sync::Arc;
        let history = super::History::default();
        let far = u64::MAX;
        let (a, b) = (
            Arc::new(super::Liveness::new("a".into(), far)),
            Arc::new(super::Liveness::new("b".into(), far)),
        );
        history.register(&a);
        history.register(&b);
        assert_eq!(history.observe(None), None);
        assert_eq!(history.observe(Some(&header(7, 1, 10))), None);
        assert_eq!(history.observe(Some(&header(7, 1, 12))), None);
        // Another member lagging behind the first is not a loss.
        assert_eq!(history.observe(Some(&header(7, 2, 11))), None);
        assert!(a.check().is_none() && b.check().is_none());
        let why = history.observe(Some(&header(7, 1, 3))).expect("a loss");
        assert!(why.contains("revision 3, below revision 12"), "{why}");
        assert!(a.check().is_some_and(|w| w.contains("etcd lost its data")));
        assert!(b.check().is_some());
        // The restored etcd is the baseline now: its next revisions are fine.
        assert_eq!(history.observe(Some(&header(7, 1, 4))), None);
        let c = Arc::new(super::Liveness::new("c".into(), far));
        history.register(&c);
        let why = history
            .observe(Some(&header(8, 1, 5)))
            .expect("a new cluster");
        assert!(why.contains("cluster ID changed from 7 to 8"), "{why}");
        assert!(c.check().is_some());
    }

    /// Refused, with the arithmetic, where no period holds.
    #[test]
    fn a_combination_that_cannot_hold_is_refused_with_the_arithmetic() {
        let err = keep_alive_period(Duration::from_secs(2), ms(800), ms(300)).unwrap_err();
        assert!(
            err.contains("TTL 2.0 s − margin 0.2 s − grace 0.8 s = 1.000 s"),
            "{err}"
        );
        assert!(err.contains("4 × the round trip = 1.200 s"), "{err}");
        assert!(keep_alive_period(Duration::from_secs(2), ms(1800), ms(0)).is_err());
        assert!(keep_alive_period(Duration::from_secs(2), ms(5000), ms(0)).is_err());
    }
}
