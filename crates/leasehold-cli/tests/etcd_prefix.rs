//! `registry --etcd --prefix P` and the lock keys of `run --etcd NAME` share etcd's key space:
//! a registry keeps its lock under `P/lock/` and its document at
//! `P/storages/multi_root_workspace`; `run --etcd NAME` keeps its lock under
//! `leasehold/lock/NAME/`. Through the real binary against a real etcd started by the test:
//! a prefix that would put a registry's keys inside another lock's range (or another lock's
//! inside its own) is refused with exit 2 and one line, and a key without a lease — which
//! never expires — never counts as a lock's holder.
#![cfg(all(unix, feature = "etcd"))]

mod common;

use testkit::etcd as support;

use common::leasehold;
use support::EtcdServer;
use testkit::{assert_one_line_error, run};

#[test]
fn a_registry_prefix_that_overlaps_a_lock_is_refused_and_places_nothing() {
    let Some(server) = EtcdServer::start("etcd registry prefix") else {
        return;
    };
    let e = server.endpoint.as_str();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let d = d.to_str().unwrap();
    for prefix in [
        // Inside `run --etcd job`'s lock range.
        "leasehold/lock/job",
        "leasehold/lock/job/",
        "leasehold/lock",
        // Its lock range would hold every `run --etcd` lock.
        "leasehold",
        // Inside the lock range of the registry at `t/reg` (or holding another's).
        "t/reg/lock",
        "t/reg/lock/inner",
        "lock",
        "",
    ] {
        for verb in [vec!["add", d, d], vec!["list"], vec!["serve"]] {
            let out = run(leasehold()
                .args(["registry", "--etcd", e, "--prefix", prefix])
                .args(&verb));
            assert_eq!(out.code, 2, "--prefix {prefix:?} {verb:?}: {out:?}");
            assert_one_line_error(&out, &format!("prefix {prefix:?}"));
        }
    }
    // Nothing was written anywhere: `run --etcd job` is granted at once.
    let out = run(leasehold().args(["run", "--etcd", e, "--no-wait", "job", "--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
    if let Some(keys) = server.etcdctl(&["get", "--prefix", "--keys-only", ""]) {
        let keys = String::from_utf8_lossy(&keys.stdout);
        assert!(keys.trim().is_empty(), "keys left behind: {keys}");
    }
    // A prefix beside others is fine, one below another registry's prefix too.
    for prefix in ["t/reg", "t/reg/sub", "leasehold/registry"] {
        let out = run(leasehold()
            .args(["registry", "--etcd", e, "--prefix", prefix])
            .args(["add", d, d]));
        assert_eq!(out.code, 0, "--prefix {prefix}: {out:?}");
    }
}

#[test]
fn a_key_without_a_lease_never_holds_a_lock() {
    let Some(server) = EtcdServer::start("etcd lease-less key") else {
        return;
    };
    if support::etcdctl_path().is_none() {
        eprintln!("SKIP: etcd lease-less key: etcdctl is not installed (Debian: etcd-client)");
        return;
    }
    let e = server.endpoint.as_str();
    // What a registry at `--prefix leasehold/lock/job` left before prefixes were checked:
    // its document, attached to no lease, inside the lock's range.
    let planted = server
        .etcdctl(&[
            "put",
            "leasehold/lock/job/storages/multi_root_workspace",
            r#"{"version":1,"workspaces":{}}"#,
        ])
        .unwrap();
    assert!(planted.status.success(), "{planted:?}");
    let out = run(leasehold().args(["status", "--etcd", e, "job"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "free\n"), "{out:?}");
    let out = run(leasehold().args(["status", "--etcd", e, "--json", "job"]));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["held"], serde_json::json!(false), "{out:?}");
    let out = run(leasehold().args(["run", "--etcd", e, "--no-wait", "job", "--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
}

/// A holder record is whatever its writer put in etcd: its control characters (an escape
/// sequence, a bell) are printed escaped, never sent to the terminal as they are.
#[test]
fn a_holder_record_with_control_characters_is_printed_escaped() {
    let Some(server) = EtcdServer::start("etcd holder record escaping") else {
        return;
    };
    if support::etcdctl_path().is_none() {
        eprintln!(
            "SKIP: etcd holder record escaping: etcdctl is not installed (Debian: etcd-client)"
        );
        return;
    }
    let e = server.endpoint.as_str();
    let granted = server.etcdctl(&["lease", "grant", "600"]).unwrap();
    assert!(granted.status.success(), "{granted:?}");
    // "lease 694d77aa9e2f5a0b granted with TTL(600s)"
    let text = String::from_utf8_lossy(&granted.stdout).into_owned();
    let id = text
        .split_whitespace()
        .nth(1)
        .expect("a lease ID")
        .to_string();
    let planted = server
        .etcdctl(&[
            "put",
            &format!("--lease={id}"),
            "leasehold/lock/esc/planted",
            "7@host\u{1b}]0;owned\u{7}\u{1b}[2J",
        ])
        .unwrap();
    assert!(planted.status.success(), "{planted:?}");
    let status = run(leasehold().args(["status", "--etcd", e, "esc"]));
    let busy = run(leasehold().args(["run", "--etcd", e, "--no-wait", "esc", "--", "true"]));
    for out in [&status, &busy] {
        let printed = format!("{}{}", out.stdout, out.stderr);
        assert!(
            !printed.contains('\u{1b}') && !printed.contains('\u{7}'),
            "a control character reached the terminal: {out:?}"
        );
        assert!(printed.contains(r"host\u{1b}]0;owned\u{7}"), "{out:?}");
    }
    assert_ne!(busy.code, 0, "the planted key holds the lock: {busy:?}");
}
