//! [`EtcdArbiter`]: the authority's arbiter on an etcd v3 cluster, for processes spread over
//! several machines (where `flock` on a network file system can hang or fail to exclude).
//!
//! # The recipe
//!
//! It is etcd's own mutex (`client/v3/concurrency/mutex.go` and `session.go` in etcd's
//! repository), not the server's `Lock` RPC: etcd 3.4 (Debian 12 ships 3.4.23) can grant a
//! `Lock` after the caller's lease expired (a bug Jepsen's analysis of
//! etcd 3.4.3 found, fixed only in 3.5). Each acquisition:
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
//! is at least that late, because it counts from when it received the request. [`Grant::verify`](crate::patterns::authority::Grant::verify)
//! fails, and [`Grant::is_lost`](crate::patterns::authority::Grant::is_lost) turns true, once that deadline has passed or etcd reported the
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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::mutex::lock;
use crate::patterns::authority::Arbiter;
use crate::{Budget, Error, Result};

use connect::{Connecting, connect_failure, parse_endpoints, with_tls};
use ctx::{Ctx, Live, Shared};
use grant::Held;
use proto::{EventType, RangeRequest, TxnRequest, WatchCreateRequest};
use requests::{acquire, created_at, first_created, first_leased, only, put, scan};
use timing::nanos;

pub use grant::{EtcdGrant, GrantWatch};
pub use timing::{CONNECT_TIMEOUT, DEFAULT_TTL, MIN_TTL, keep_alive_period, margin};

mod client;
mod connect;
mod ctx;
mod grant;
mod liveness;
mod proto;
mod requests;
mod timing;

/// Nanoseconds of the clock a grant's deadline is kept on: one that every process of the
/// machine reads alike and that keeps counting while the machine is suspended
/// (CLOCK_BOOTTIME on Linux; the monotonic clock elsewhere). A process that enforces a
/// grant's deadline for another (`leasehold run --etcd`'s supervisor) reads this clock, so
/// that both count the same time — a laptop's sleep included.
pub fn clock_ns() -> u64 {
    timing::now()
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
        let history = super::ctx::History::default();
        let far = u64::MAX;
        let (a, b) = (
            Arc::new(super::liveness::Liveness::new("a".into(), far)),
            Arc::new(super::liveness::Liveness::new("b".into(), far)),
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
        let c = Arc::new(super::liveness::Liveness::new("c".into(), far));
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
