//! The etcd arbiter against a real single-node etcd (started by the test on loopback, see
//! `support/etcd.rs`). Each test starts its own server, so they are independent.
//!
//! Synchronisation: acquisitions and releases are the handshakes; waits for loss are bounded
//! by the deadline the grant computes, and measured against the TTL. Multi-process scenarios
//! (SIGKILL and SIGSTOP of holders) are in the CLI's `tests/etcd.rs`.

#![cfg(all(feature = "etcd", unix))]

#[path = "support/etcd.rs"]
mod support;

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
    let token = CancelToken::new().unwrap();
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
