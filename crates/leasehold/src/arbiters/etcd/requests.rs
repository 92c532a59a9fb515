//! The mutex recipe's requests (see the module docs of `etcd`): grant a lease, create the
//! key, find the oldest claim, watch a predecessor's deletion; and the keep-alive stream
//! that holds a granted lease.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::client::prefix_end;
use super::ctx::{Ctx, status_text};
use super::grant::Held;
use super::liveness::Liveness;
use super::proto::{
    self, Compare, CompareResult, CompareTarget, EventType, KeyValue, LeaseKeepAliveRequest,
    RangeRequest, RequestOp, SortOrder, SortTarget, TxnRequest, TxnResponse, WatchCreateRequest,
    compare, request_op, response_op,
};
use super::timing::{margin, nanos, now};
use crate::{Budget, Error, Result};

/// One acquisition, on the private runtime (see the module docs for the recipe).
pub(super) async fn acquire(ctx: Ctx, budget: Budget) -> Result<Held> {
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
pub(super) async fn take(
    ctx: &Ctx,
    key: &str,
    id: i64,
    budget: &Budget,
    live: &Liveness,
) -> Result<u64> {
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
    let timed_out = || Error::TimedOut {
        path: ctx.prefix.trim_end_matches('/').into(),
        holders: crate::HolderInfo::default(),
        waited: started.elapsed(),
    };
    let deadline = async {
        match budget.remaining() {
            Some(r) => tokio::time::sleep(r).await,
            None => std::future::pending().await,
        }
    };
    let waiting = wait_deletes(ctx, key, mine);
    tokio::pin!(deadline, waiting);
    let outlived = loop {
        // The budget's notice, said once while this wait keeps its key — its place in the
        // queue — as a lock-file wait keeps its file (`Budget::with_notice`).
        let notice = async {
            match budget.wake_in(None) {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            waited = &mut waiting => break waited?,
            () = &mut deadline => return Err(timed_out()),
            () = cancelled(budget) => {
                return Err(Error::Cancelled { path: ctx.prefix.trim_end_matches('/').into() });
            }
            why = live.lost() => return Err(Error::Expired { name: key.to_string(), reason: why }),
            () = notice => budget.notice_due(timed_out),
        }
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

/// A range over every key under `prefix`.
pub(super) fn under(prefix: &str) -> RangeRequest {
    RangeRequest {
        key: prefix.as_bytes().to_vec(),
        range_end: prefix_end(prefix.as_bytes()),
        ..RangeRequest::default()
    }
}

/// A range of the one key `key`.
pub(super) fn only(key: &str) -> RangeRequest {
    RangeRequest {
        key: key.as_bytes().to_vec(),
        ..RangeRequest::default()
    }
}

/// The oldest key under a prefix: the owner.
pub(super) fn first_created(prefix: &str) -> RangeRequest {
    RangeRequest {
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        limit: 1,
        ..under(prefix)
    }
}

/// How many keys one read of a [`scan`] asks for.
pub(super) const PAGE: i64 = 16;

/// Reads the keys `range` selects (under one prefix, sorted by create revision) page by page
/// and shows each to `visit` in that order until it answers `true`; answers the revision of
/// the last read. A page ends before the keys created after (ascending) or before
/// (descending) its last one: keys that share a create revision were created by one
/// transaction, which a lock key never shares (each is created alone).
pub(super) async fn scan(
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
pub(super) async fn first_leased(
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
pub(super) fn read(range: RangeRequest) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(range)),
    }
}

/// A transaction's write of `value` to `key`, attached to `lease` (0: none).
pub(super) fn put(key: &str, value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(proto::PutRequest {
            key: key.as_bytes().to_vec(),
            value,
            lease,
        })),
    }
}

/// The condition "`key` was created at revision `rev`" (0: `key` does not exist).
pub(super) fn created_at(key: &str, rev: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(compare::TargetUnion::CreateRevision(rev)),
    }
}

/// The keys each read of a transaction's answer returned, in order.
pub(super) fn reads(resp: TxnResponse) -> Vec<Vec<KeyValue>> {
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
pub(super) async fn wait_deletes(ctx: &Ctx, key: &str, mine: i64) -> Result<bool> {
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
pub(super) async fn cancelled(budget: &Budget) {
    match budget.cancel_token() {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Keeps lease `id` alive — a keep-alive [`keep_alive_period`] after each answer, each
/// answer awaited up to TTL/3 — moving the grant's deadline forward at each
/// acknowledgement; reconnects the stream when it breaks; marks the grant lost when etcd
/// says the lease is gone. Ends when the grant is lost or released.
pub(super) async fn keep_alive(ctx: Ctx, id: i64, live: Arc<Liveness>) {
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
