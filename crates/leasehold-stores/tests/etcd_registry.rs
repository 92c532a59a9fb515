//! The registry on etcd (feature `etcd`), against a real throwaway etcd started by the test,
//! and the file-backed store's own fencing check. Real-process scenarios (SIGSTOP of a
//! holder past its TTL) are in the CLI's `tests/etcd.rs`.

#![cfg(unix)]

use std::path::PathBuf;

use leasehold::patterns::authority::Store;
use leasehold_stores::document::JsonDocument;
use leasehold_stores::registry::{RegistryStore, Scope, stamped};

#[test]
fn the_file_store_stamps_its_token_and_refuses_to_write_over_a_higher_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.json");
    let mut store = RegistryStore::new(JsonDocument::new(&path));
    store.open().unwrap();
    let scope = Scope::from([(PathBuf::from("/p"), vec![PathBuf::from("/r")])]);
    store.commit(&scope, Some(5)).unwrap();
    let doc: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(stamped(&doc), Some(5));
    // A later holder (token 9) wrote meanwhile; the deposed one (token 7) must not overwrite.
    let newer = br#"{"version":1,"workspaces":{},"fencing_token":9}"#;
    std::fs::write(&path, newer).unwrap();
    let err = store.commit(&scope, Some(7)).unwrap_err();
    assert!(err.to_string().contains("fencing token"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), newer, "left untouched");
    // The kernel lease hands out no token: nothing is stamped or checked.
    store.commit(&scope, None).unwrap();
}

#[cfg(feature = "etcd")]
use testkit::etcd as support;

#[cfg(feature = "etcd")]
mod on_etcd {
    use super::*;
    use std::time::{Duration, Instant};

    use leasehold::patterns::authority::State;
    use leasehold::{Budget, Classify};
    use leasehold_stores::registry::{Registry, RegistryError};
    use support::EtcdServer;

    const TTL: Duration = Duration::from_secs(2);

    fn registry(server: &EtcdServer) -> Registry {
        Registry::on_etcd(&server.endpoint, "t/registry", TTL, None).expect("connect")
    }

    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let (p, r) = (d.path().join("p"), d.path().join("r"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::create_dir_all(&r).unwrap();
        let (p, r) = (p.canonicalize().unwrap(), r.canonicalize().unwrap());
        (d, p, r)
    }

    /// A prefix that would put the registry's keys inside another lock's range (or another
    /// lock's inside its own) is refused as unusable input before anything is contacted:
    /// the endpoint is a socket that listens but never answers, and the kernel's accept
    /// queue shows that no connection reached it.
    #[test]
    fn a_prefix_that_overlaps_another_locks_keys_is_refused_before_connecting() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let listening = format!("http://{}", listener.local_addr().unwrap());
        let nowhere = "http://127.0.0.1:1";
        for prefix in [
            "leasehold/lock/job",
            "leasehold/lock",
            "leasehold",
            "leasehold/",
            "t/registry/lock",
            "t/registry/lock/x",
            "lock",
            "",
            "/",
        ] {
            let err = Registry::on_etcd(&listening, prefix, TTL, None).err();
            let Some(err @ RegistryError::InvalidPrefix { .. }) = err else {
                panic!("{prefix:?}: {err:?}");
            };
            match listener.accept() {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                other => panic!("{prefix:?}: the endpoint was contacted: {other:?}"),
            }
            assert_eq!(err.class(), leasehold::ErrorClass::Usage, "{prefix:?}");
            let text = err.to_string();
            assert!(text.contains(&format!("{prefix:?}")), "{text}");
            assert!(
                text.contains("leasehold/registry"),
                "says what to use: {text}"
            );
        }
        for prefix in [
            "t/registry",
            "t/registry/sub",
            "leasehold/registry",
            "a/locks",
        ] {
            let err = Registry::on_etcd(nowhere, prefix, TTL, None).err();
            assert!(
                matches!(err, Some(RegistryError::Lease(_))),
                "{prefix:?} is usable (then unreachable): {err:?}"
            );
        }
    }

    #[test]
    fn one_writer_at_a_time_and_the_successor_sees_the_last_write() {
        let Some(server) = EtcdServer::start("etcd registry") else {
            return;
        };
        let (_d, p, r) = dirs();
        let a = registry(&server);
        a.acquire(&Budget::no_wait()).unwrap();
        a.add(&p, &r).unwrap();
        let b = registry(&server);
        let err = b.acquire(&Budget::no_wait()).unwrap_err();
        assert!(matches!(err, RegistryError::Contended { .. }), "{err:?}");
        assert!(b.scope().is_empty());
        a.teardown();
        b.refresh().unwrap();
        assert_eq!(b.scope().get(&p), Some(&vec![r.clone()]));
        let out = server.etcdctl(&[
            "get",
            "--print-value-only",
            "t/registry/storages/multi_root_workspace",
        ]);
        if let Some(out) = out {
            let doc: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&out.stdout).unwrap();
            assert!(stamped(&doc).is_some(), "stamped with its token: {doc:?}");
        }
    }

    #[test]
    fn a_lost_lease_withdraws_the_scope_before_the_ttl_and_refresh_recovers() {
        let Some(server) = EtcdServer::start("etcd registry lost lease") else {
            return;
        };
        let (_d, p, r) = dirs();
        let a = registry(&server);
        a.acquire(&Budget::no_wait()).unwrap();
        a.add(&p, &r).unwrap();
        server.pause();
        let paused = Instant::now();
        // No mutation needed: reading the state is enough to see the loss.
        while a.state() == State::Active {
            assert!(
                paused.elapsed() < TTL,
                "still active {:?} after etcd stopped",
                paused.elapsed()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(paused.elapsed() < TTL, "{:?}", paused.elapsed());
        assert_eq!(a.state(), State::Contended);
        assert!(a.scope().is_empty(), "fail closed");
        assert!(!a.grants(&p, &r));
        let err = a.remove(&p, &r).unwrap_err();
        assert!(matches!(err, RegistryError::Contended { .. }), "{err:?}");
        server.resume();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = a.refresh() {
            assert!(
                Instant::now() < deadline,
                "no recovery after etcd resumed: {e}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            a.scope().get(&p),
            Some(&vec![r]),
            "the write before the pause"
        );
    }
}

/// A wiped etcd (killed, its data directory removed, started again on the same ports) counts
/// its revisions, and so its fencing tokens, from 1 again. A holder that acquired before
/// loses its grant (its etcd answers below a revision it answered at before, and its lease is
/// gone); a file store that recorded the old holder's higher token refuses the new holder's
/// write under its lower one, naming the document, both tokens and what to do — the
/// document is left as it is.
#[cfg(feature = "etcd")]
#[test]
fn after_etcd_is_wiped_a_file_store_refuses_the_lower_token_of_the_new_cluster() {
    use leasehold::Budget;
    use leasehold::arbiters::etcd::EtcdArbiter;
    use leasehold::patterns::authority::{Authority, State};
    use std::time::Duration;

    let Some(mut server) = support::EtcdServer::start("etcd wiped") else {
        return;
    };
    // Revisions the wiped etcd will not have reached when the new holder locks.
    for n in 0..10 {
        if server
            .etcdctl(&["put", "leasehold-test/before", &n.to_string()])
            .is_none()
        {
            eprintln!("SKIP: etcd wiped: etcdctl is not installed");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("doc.json");
    let endpoint = server.endpoint.clone();
    let authority = |label: &str| {
        let arbiter = EtcdArbiter::connect(&endpoint, "t/wiped/lock", Duration::from_secs(2))
            .unwrap_or_else(|e| panic!("{label}: connect: {e}"));
        Authority::new(arbiter, RegistryStore::new(JsonDocument::new(&path)))
    };
    let entry = (PathBuf::from("/p"), vec![PathBuf::from("/r")]);
    let old = authority("old holder");
    old.acquire(&Budget::no_wait()).unwrap();
    old.mutate(|s| s.insert(entry.0.clone(), entry.1.clone()))
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let doc: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&before).unwrap();
    let high = stamped(&doc).expect("stamped with the old holder's token");
    assert!(high > 10, "token {high} after 10 writes");

    server.wipe();
    testkit::until("the old holder counts its lease as lost", || {
        old.state() != State::Active
    });
    old.mutate(|s| s.remove(&entry.0))
        .expect_err("the old holder writes nothing after the wipe");

    let new = authority("new holder");
    new.acquire(&Budget::timeout(Duration::from_secs(10)))
        .unwrap();
    let err = new
        .mutate(|s| s.clear())
        .expect_err("the lower token is refused");
    let text = err.to_string();
    let low = (1..high)
        .find(|t| text.contains(&format!("fencing token {t}")))
        .unwrap_or_else(|| panic!("names the new holder's lower token: {text}"));
    assert!(low < high);
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(&format!("fencing token {high}")), "{text}");
    assert!(
        text.contains("etcd"),
        "says the cluster may have lost its data: {text}"
    );
    assert!(
        text.contains("\"fencing_token\""),
        "says what to do: {text}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "left as it is");
    new.teardown();
    old.teardown();
}
