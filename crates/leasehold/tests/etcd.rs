//! The etcd arbiter against a real single-node etcd (started by the test on loopback, see
//! `testkit::etcd`, `crates/testkit/src/etcd.rs`). Each test starts its own server, so they are independent.
//!
//! Synchronisation: acquisitions and releases are the handshakes; waits for loss are bounded
//! by the deadline the grant computes, and measured against the TTL. Multi-process scenarios
//! (SIGKILL and SIGSTOP of holders) are in the CLI's `tests/etcd.rs`.

#![cfg(all(feature = "etcd", unix))]

use testkit::etcd as support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::arbiters::etcd::{EtcdArbiter, Fenced, margin};
use leasehold::patterns::authority::{Arbiter, Grant};
use leasehold::{Budget, CancelToken, Classify, Error};
use support::EtcdServer;

const TTL: Duration = Duration::from_secs(2);

fn arbiter(server: &EtcdServer, name: &str) -> EtcdArbiter {
    EtcdArbiter::connect(&server.endpoint, &format!("test/{name}"), TTL).expect("connect")
}

/// Two test servers never share one (a stores test once
/// failed at `acquire(no_wait)` because two tests' servers were one): a server whose port
/// another already has starts again on fresh ports, and is ready only once its own process
/// listens — another server's `/health` on that port is not its.
#[test]
fn a_test_server_whose_port_is_taken_is_never_another_servers() {
    let Some(first) = EtcdServer::start("etcd port collision") else {
        return;
    };
    let port: u16 = first
        .endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port in the endpoint");
    let second = EtcdServer::start_colliding("etcd port collision", port).expect("etcd");
    assert_ne!(second.endpoint, first.endpoint, "one server for two tests");
    let a = arbiter(&first, "shared");
    let b = arbiter(&second, "shared");
    let held = a
        .acquire(&Budget::no_wait())
        .expect("free on the first server");
    let other = b
        .acquire(&Budget::no_wait())
        .expect("free on the second server: its keys are its own");
    drop((held, other));
}

#[test]
fn contention_timeout_and_hand_over_with_growing_tokens() {
    let Some(server) = EtcdServer::start("etcd contention") else {
        return;
    };
    let a = arbiter(&server, "lock");
    let b = arbiter(&server, "lock");
    let first = a.acquire(&Budget::no_wait()).expect("free lock");
    first.verify().expect("held");
    let owner = a.owner().unwrap().expect("an owner");
    assert_eq!(owner.pid, std::process::id());
    assert_eq!(Some(owner.token), first.fencing_token());

    let err = b.acquire(&Budget::no_wait()).unwrap_err();
    assert!(matches!(err, Error::Contended { .. }), "{err:?}");
    let started = Instant::now();
    let err = b
        .acquire(&Budget::timeout(Duration::from_millis(300)))
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The abandoned waiters left no key behind: the owner is still the first, alone.
    assert_eq!(a.owner().unwrap().map(|o| o.token), first.fencing_token());

    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let g = b.acquire(&Budget::timeout(Duration::from_secs(10)));
        tx.send(Instant::now()).unwrap();
        g
    });
    server.queued("test/lock/", 2);
    let token = first.fencing_token().unwrap();
    let released = Instant::now();
    drop(first);
    let granted_at = rx.recv().unwrap();
    let second = waiter.join().unwrap().expect("granted after the release");
    let handover = granted_at.duration_since(released);
    assert!(
        handover < Duration::from_millis(500),
        "hand-over took {handover:?}"
    );
    assert!(second.fencing_token().unwrap() > token, "tokens grow");
}

#[test]
fn cancellation_ends_a_wait_at_once_and_leaves_nothing() {
    let Some(server) = EtcdServer::start("etcd cancellation") else {
        return;
    };
    let a = arbiter(&server, "c");
    let b = arbiter(&server, "c");
    let held = a.acquire(&Budget::no_wait()).unwrap();
    let token = CancelToken::new();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let waiter = thread::spawn(move || b.acquire(&budget));
    server.queued("test/c/", 2);
    let cancelled = Instant::now();
    token.cancel();
    let err = waiter.join().unwrap().unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    assert!(cancelled.elapsed() < Duration::from_secs(1));
    drop(held);
    let again = arbiter(&server, "c");
    drop(
        again
            .acquire(&Budget::no_wait())
            .expect("nothing left behind by the cancelled waiter"),
    );
}

#[test]
fn a_deposed_writer_is_refused_by_etcd_itself() {
    let Some(server) = EtcdServer::start("etcd fencing") else {
        return;
    };
    if support::etcdctl_path().is_none() {
        eprintln!("SKIP: etcd fencing: etcdctl is not installed (Debian: etcd-client)");
        return;
    }
    let a = arbiter(&server, "f");
    let old = a.acquire(&Budget::no_wait()).unwrap();
    let old_token = old.fencing_token().unwrap();
    assert_eq!(
        a.put_fenced(old_token, "test/doc", b"a1".to_vec()).unwrap(),
        Fenced::Written
    );
    // The lease vanishes behind the holder's back (what an expiry during a pause does).
    let lease = old.key().rsplit('/').next().unwrap().to_string();
    let out = server.etcdctl(&["lease", "revoke", &lease]).unwrap();
    assert!(out.status.success(), "{out:?}");
    let b = arbiter(&server, "f");
    let new = b.acquire(&Budget::no_wait()).expect("the successor");
    assert_eq!(
        b.put_fenced(new.fencing_token().unwrap(), "test/doc", b"b1".to_vec())
            .unwrap(),
        Fenced::Written
    );
    // The old holder has not noticed yet (its deadline has not passed) — etcd refuses it.
    assert_eq!(
        a.put_fenced(old_token, "test/doc", b"a2".to_vec()).unwrap(),
        Fenced::Refused
    );
    assert!(old.is_lost(), "a refused token marks the grant lost");
    assert!(old.verify().is_err());
    assert_eq!(a.get("test/doc").unwrap().as_deref(), Some(&b"b1"[..]));
    let history = a.history("test/doc").unwrap();
    assert_eq!(history, vec![b"a1".to_vec(), b"b1".to_vec()]);
}

/// etcd reports a watch's events the moment they happen only to a watcher that starts after
/// its current revision. One that starts *at* it — etcd's own mutex.go watches its
/// predecessor from the revision of the read that found it — counts as a slow watcher until a
/// loop that runs every 100 ms catches it up, so a holder that releases soon after its
/// waiter queued hands over up to 100 ms late (most of `bench --etcd`'s hand-over figure). A waiter must watch from the next revision: etcd never counts it slow.
/// (etcd's own gauges are the observation: `watcher_total` says the waiter's watch exists,
/// `slow_watcher_total` whether it is waiting for that loop.)
#[test]
fn a_waiter_watches_its_predecessor_from_the_next_revision_never_as_a_slow_watcher() {
    let Some(server) = EtcdServer::start("etcd predecessor watch") else {
        return;
    };
    let watchers = || server.metric("etcd_debugging_mvcc_watcher_total");
    let mut holder = arbiter(&server, "w").acquire(&Budget::no_wait()).unwrap();
    // Three hand-overs: a slow watcher stays slow for up to 100 ms, so each round would
    // catch one with high probability, and three rounds all but surely.
    for round in 0..3 {
        testkit::until("no watch is left", || watchers() == 0.0);
        let b = arbiter(&server, "w");
        let waiter = thread::spawn(move || b.acquire(&Budget::timeout(Duration::from_secs(10))));
        testkit::until("the waiter watches its predecessor", || watchers() >= 1.0);
        let slow = server.metric("etcd_debugging_mvcc_slow_watcher_total");
        assert_eq!(
            slow, 0.0,
            "round {round}: the waiter's watch is a slow watcher"
        );
        let token = holder.fencing_token();
        drop(holder);
        holder = waiter.join().unwrap().expect("granted after the release");
        assert!(holder.fencing_token() > token);
    }
}

/// When the waiter's predecessor was the only older claim, its deletion grants the waiter at
/// once: no key can become older than the waiter's later (create revisions only grow), so
/// etcd's mutex.go's look after each deletion would only put another round trip on the
/// hand-over's path. etcd's own count of answered transactions is the observation: the
/// holder's release is a lease revocation, and the waiter sends nothing more before it holds.
#[test]
fn the_last_predecessors_deletion_grants_without_another_look() {
    let Some(server) = EtcdServer::start("etcd last predecessor") else {
        return;
    };
    let txns = || {
        server.metric(
            r#"grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"}"#,
        )
    };
    let holder = arbiter(&server, "lp").acquire(&Budget::no_wait()).unwrap();
    let b = arbiter(&server, "lp");
    let waiter = thread::spawn(move || b.acquire(&Budget::timeout(Duration::from_secs(10))));
    testkit::until("the waiter watches its predecessor", || {
        server.metric("etcd_debugging_mvcc_watcher_total") >= 1.0
    });
    let before = txns();
    drop(holder);
    let granted = waiter.join().unwrap().expect("granted after the release");
    granted.verify().unwrap();
    assert_eq!(
        txns(),
        before,
        "a look after the last predecessor's deletion"
    );
}

/// A key under a lock's prefix that is attached to no lease never expires: it is not a
/// process's claim (every holder's and waiter's key has a lease) but debris — a registry
/// document written there by a prefix inside the lock's range, or a stray
/// `etcdctl put`. Counted as the oldest holder it would refuse the lock for ever; counted as
/// a predecessor it would leave a waiter watching it for ever.
#[test]
fn a_key_without_a_lease_is_neither_holder_nor_waiter() {
    let Some(server) = EtcdServer::start("etcd lease-less keys") else {
        return;
    };
    // Lease-less keys are planted the way a misplaced registry writes its document: a
    // fenced write (no lease) by the holder of another lock.
    let planter = arbiter(&server, "planter");
    let pen = planter.acquire(&Budget::no_wait()).unwrap();
    let plant = |key: &str| {
        let token = pen.fencing_token().unwrap();
        let written = planter.put_fenced(token, key, br#"{"version":1}"#.to_vec());
        assert_eq!(written.unwrap(), Fenced::Written);
    };
    // More than one page of them (the arbiter reads 16 keys at a time) at each place.
    let debris = 20;
    plant("test/l/storages/multi_root_workspace");
    for i in 0..debris {
        plant(&format!("test/l/before-{i}"));
    }
    let a = arbiter(&server, "l");
    assert_eq!(a.owner().unwrap(), None, "a lease-less key holds nothing");
    assert_eq!(a.contenders().unwrap(), 0);
    let first = a
        .acquire(&Budget::no_wait())
        .expect("a lease-less key does not contend");
    assert_eq!(a.owner().unwrap().map(|o| o.token), first.fencing_token());
    // Between the holder's key and the waiter's: the waiter's predecessor must be the
    // holder, not this key (whose deletion never comes).
    for i in 0..debris {
        plant(&format!("test/l/between-{i}"));
    }
    let b = arbiter(&server, "l");
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let g = b.acquire(&Budget::timeout(Duration::from_secs(10)));
        tx.send(Instant::now()).unwrap();
        g
    });
    server.queued("test/l/", 2 * debris + 3);
    assert_eq!(a.contenders().unwrap(), 2, "the holder and its waiter");
    let released = Instant::now();
    drop(first);
    let granted_at = rx.recv().unwrap();
    let second = waiter.join().unwrap().expect("granted after the release");
    let handover = granted_at.duration_since(released);
    assert!(
        handover < Duration::from_millis(500),
        "hand-over took {handover:?}"
    );
    assert_eq!(a.owner().unwrap().map(|o| o.token), second.fencing_token());
}

#[test]
fn a_paused_etcd_makes_the_grant_fail_closed_before_the_ttl_and_a_new_grant_follows() {
    let Some(server) = EtcdServer::start("etcd paused") else {
        return;
    };
    let a = arbiter(&server, "p");
    let grant = a.acquire(&Budget::no_wait()).unwrap();
    // Let one keep-alive round trip pass, so the deadline comes from a keep-alive.
    assert!(grant.watch().wait_lost(Some(TTL / 2)).is_none());
    server.pause();
    let paused = Instant::now();
    let why = grant.watch().wait_lost(Some(TTL * 2)).expect("lost");
    let after = paused.elapsed();
    assert!(
        after < TTL - margin(TTL) / 2,
        "failed closed after {after:?}: {why}"
    );
    assert!(grant.is_lost());
    server.resume();
    assert!(grant.verify().is_err(), "a lost grant stays lost");
    drop(grant);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match a.acquire(&Budget::timeout(Duration::from_secs(5))) {
            Ok(g) => {
                g.verify().unwrap();
                break;
            }
            Err(e) if Instant::now() < deadline => eprintln!("retrying after resume: {e}"),
            Err(e) => panic!("no grant after etcd resumed: {e}"),
        }
    }
}

#[test]
fn an_unreachable_endpoint_fails_within_the_connect_timeout_naming_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let err = EtcdArbiter::connect(&endpoint, "x", TTL).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains(&endpoint), "{err}");
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn dropping_an_async_wait_abandons_it_and_leaves_nothing() {
    use leasehold::patterns::authority::AsyncArbiter;
    let Some(server) = EtcdServer::start("etcd async") else {
        return;
    };
    let a = arbiter(&server, "as");
    let b = arbiter(&server, "as");
    let held = a.acquire_async(&Budget::no_wait()).await.unwrap();
    let unlimited = Budget::unlimited();
    let wait = b.acquire_async(&unlimited);
    let r = tokio::time::timeout(Duration::from_millis(300), wait).await;
    assert!(r.is_err(), "still waiting");
    let token = held.fencing_token();
    drop(held);
    let c = arbiter(&server, "as");
    let next = c
        .acquire_async(&Budget::timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(next.fencing_token() > token);
    // The dropped waiter's key is gone: the owner is the new grant.
    assert_eq!(c.owner().unwrap().map(|o| o.token), next.fencing_token());
}

/// An endpoint list names a cluster's members: one that refuses connections (down, or not
/// started yet) must not fail a request another member answers, whichever place it has in
/// the list. (A balancer that spreads requests over the members failed about every other
/// request here, each with the dead member's `connection refused`.)
#[test]
fn a_member_that_refuses_connections_is_passed_over() {
    let Some(server) = EtcdServer::start("etcd dead member") else {
        return;
    };
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://127.0.0.1:{dead}");
    for list in [
        format!("{dead},{}", server.endpoint),
        format!("{},{dead}", server.endpoint),
    ] {
        let a = EtcdArbiter::connect(&list, "test/members", TTL)
            .unwrap_or_else(|e| panic!("{list}: {e}"));
        for _ in 0..5 {
            let g = a
                .acquire(&Budget::no_wait())
                .unwrap_or_else(|e| panic!("{list}: {e}"));
            assert_eq!(a.owner().unwrap().map(|o| o.token), g.fencing_token());
            assert_eq!(a.contenders().unwrap(), 1);
            drop(g);
        }
    }
}

#[test]
fn a_list_mixing_http_and_https_is_refused_as_unusable_input() {
    for endpoints in [
        "https://127.0.0.1:1,http://127.0.0.1:2",
        "http://127.0.0.1:1, HTTPS://127.0.0.1:2",
        " , ",
    ] {
        let err = EtcdArbiter::connect(endpoints, "test/mixed", TTL).unwrap_err();
        assert!(matches!(err, Error::BadEndpoints { .. }), "{err:?}");
        assert_eq!(err.class(), leasehold::ErrorClass::Usage, "{err}");
        assert!(err.to_string().contains(endpoints), "{err}");
    }
}

/// Set (to the endpoint) in the child that [`https_endpoints_use_tls_and_trust_ssl_cert_file`]
/// starts with `SSL_CERT_FILE`: the environment is the process's, so trusting a CA is a
/// property of a process, and setting it in this one would take `unsafe` (edition 2024).
#[cfg(not(leasehold_etcd_without_tls))]
const TLS_CHILD: &str = "LEASEHOLD_TEST_TLS_ENDPOINT";

#[cfg(not(leasehold_etcd_without_tls))]
#[test]
fn https_endpoints_use_tls_and_trust_ssl_cert_file() {
    if let Ok(endpoint) = std::env::var(TLS_CHILD) {
        // The child: its SSL_CERT_FILE names the CA that signed etcd's certificate.
        let a = EtcdArbiter::connect(&endpoint, "test/tls", TTL).expect("connect over TLS");
        let b = EtcdArbiter::connect(&endpoint, "test/tls", TTL).expect("connect over TLS");
        let grant = a.acquire(&Budget::no_wait()).expect("free lock");
        let token = grant.fencing_token().expect("a token");
        let err = b.acquire(&Budget::no_wait()).unwrap_err();
        assert!(matches!(err, Error::Contended { .. }), "{err:?}");
        assert_eq!(
            a.put_fenced(token, "test/tls-doc", b"v1".to_vec()).unwrap(),
            Fenced::Written
        );
        assert_eq!(a.get("test/tls-doc").unwrap(), Some(b"v1".to_vec()));
        drop(grant);
        let next = b.acquire(&Budget::timeout(Duration::from_secs(5))).unwrap();
        assert!(next.fencing_token().unwrap() > token);
        println!("tls child ok");
        return;
    }
    let Some(server) = EtcdServer::start_tls("etcd TLS arbiter", &["127.0.0.1"]) else {
        return;
    };
    // This process does not trust the throwaway CA (it is in no system store): refused,
    // within the connect timeout, saying what to do.
    let started = Instant::now();
    let err = EtcdArbiter::connect(&server.endpoint, "test/tls", TTL).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&server.endpoint), "{text}");
    assert!(text.contains("TLS handshake failed"), "{text}");
    assert!(text.contains("SSL_CERT_FILE"), "{text}");

    let ca = server.ca_file().expect("a TLS server has a CA");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "https_endpoints_use_tls_and_trust_ssl_cert_file",
            "--nocapture",
        ])
        .env(TLS_CHILD, &server.endpoint)
        .env("SSL_CERT_FILE", ca)
        .env_remove("SSL_CERT_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("tls child ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
