//! Library tests of the result store (cross-process behaviour is tested through the CLI).

use std::fs;
use std::path::Path;
use std::time::Duration;

use leasehold::Budget;
use leasehold::patterns::keyed::KeyedLeases;
use leasehold::{Classify, ErrorClass};
use leasehold_stores::results::{ResultError, ResultStore};

/// The result store's lock namespace, as its on-disk format names it: holding a key here
/// must contend with the store, which proves the store uses this directory.
const RESULT_LOCKS: &str = ".result-locks-v1";

fn source(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (rel, body) in files {
        let p = dir.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
    dir
}

fn wait() -> Budget {
    Budget::timeout(Duration::from_secs(10))
}

#[test]
fn stage_paths_finish_apply_round_trip() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("managed"); // created by stage
    let store = ResultStore::new(&root);
    let src = source(&[("a.txt", "A"), ("sub/b.txt", "B")]);
    let entry = store.stage(" r1 ", src.path(), &wait()).unwrap();
    assert_eq!(entry.files, ["a.txt", "sub/b.txt"]);
    assert!(root.join("results/r1/entry.json").is_file());
    assert_eq!(store.paths("r1", &wait()).unwrap(), ["a.txt", "sub/b.txt"]);
    assert!(store.pending().unwrap().is_empty());
    store.finish("r1", &wait()).unwrap();
    assert_eq!(store.pending().unwrap(), ["r1"]);
    let target = home.path().join("target");
    store.apply("r1", &target, &wait()).unwrap();
    assert_eq!(fs::read_to_string(target.join("sub/b.txt")).unwrap(), "B");
    assert!(!root.join("results/r1").exists());
    assert!(store.pending().unwrap().is_empty());
    // The lock file stays; the ID is gone.
    assert!(store.lock_path("r1").is_file());
    let e = store.paths("r1", &wait()).unwrap_err();
    assert!(matches!(e, ResultError::Unknown { .. }), "{e}");
}

#[test]
fn staging_an_existing_id_is_result_exists() {
    let home = tempfile::tempdir().unwrap();
    let store = ResultStore::new(home.path());
    let src = source(&[("a", "1")]);
    store.stage("r1", src.path(), &wait()).unwrap();
    let e = store.stage("r1\n", src.path(), &wait()).unwrap_err();
    assert!(e.to_string().contains("result-exists"), "{e}");
    assert_eq!(e.class(), ErrorClass::Usage);
}

#[test]
fn unsafe_ids_are_refused_before_anything_is_touched() {
    let home = tempfile::tempdir().unwrap();
    let store = ResultStore::new(home.path());
    let src = source(&[("a", "1")]);
    for id in ["", "  ", "../x", "a/b", ".hidden", "x\0y", &"z".repeat(129)] {
        let e = store.stage(id, src.path(), &wait()).unwrap_err();
        assert!(matches!(e, ResultError::InvalidId { .. }), "{id:?}: {e}");
        assert_eq!(e.class(), ErrorClass::Usage);
    }
    assert_eq!(fs::read_dir(home.path()).unwrap().count(), 0);
}

#[test]
fn empty_result_is_removed_by_paths() {
    let home = tempfile::tempdir().unwrap();
    let store = ResultStore::new(home.path());
    let src = tempfile::tempdir().unwrap();
    store.stage("r1", src.path(), &wait()).unwrap();
    assert!(store.paths("r1", &wait()).unwrap().is_empty());
    assert!(!home.path().join("results/r1").exists());
}

/// Knowing an ID is not authority: an operation admitted for an ID that vanished while it
/// waited reinspects the record under the lease and does nothing.
#[cfg(unix)]
#[test]
fn apply_reinspects_after_admission() {
    if !cfg!(target_os = "linux") {
        eprintln!(
            "SKIP: apply_reinspects_after_admission: sees the waiter queued through /proc/locks (Linux only)"
        );
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let src = source(&[("a.txt", "A")]);
    let store = ResultStore::new(home.path());
    store.stage("r1", src.path(), &wait()).unwrap();
    // The ID's owner: another process, holding r1's lock file in the store's namespace.
    let lock = store.lock_path("r1");
    assert_eq!(
        lock.parent(),
        Some(home.path().join(RESULT_LOCKS).as_path())
    );
    let held = testkit::FlockHolder::hold(&lock);
    let target = home.path().join("target");
    let waiter = {
        let (root, target) = (home.path().to_path_buf(), target.clone());
        std::thread::spawn(move || ResultStore::new(root).apply("r1", &target, &wait()))
    };
    // The waiter passed admission's "known" check and waits in the kernel's queue for r1's
    // lock: the owner removes the result and releases.
    testkit::until("the apply waits for r1's lease", || {
        testkit::blocked_on(std::process::id(), &lock)
    });
    fs::remove_dir_all(home.path().join("results/r1")).unwrap();
    held.release();
    let e = waiter.join().unwrap().unwrap_err();
    assert!(matches!(e, ResultError::Unknown { .. }), "{e}");
    assert!(!target.exists(), "apply wrote from a vanished record");
}

#[test]
fn apply_failing_part_way_reports_what_was_and_was_not_done() {
    let home = tempfile::tempdir().unwrap();
    let store = ResultStore::new(home.path().join("root"));
    let src = source(&[("a.txt", "A"), ("b/c.txt", "C")]);
    store.stage("r1", src.path(), &wait()).unwrap();
    let target = home.path().join("target");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("b"), "a file where a directory is needed").unwrap();
    let e = store.apply("r1", &target, &wait()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ResultError::Partial { .. }), "{msg}");
    assert!(msg.contains("wrote 1 file(s)"), "{msg}");
    // Never published: what is kept is said as it is.
    assert!(
        msg.contains("candidate kept (it has no publication)"),
        "{msg}"
    );
    assert!(home.path().join("root/results/r1/entry.json").is_file());
}

#[test]
fn sweep_removes_only_results_older_than_the_limit() {
    let home = tempfile::tempdir().unwrap();
    let store = ResultStore::new(home.path());
    let src = source(&[("a", "1")]);
    store.stage("old", src.path(), &wait()).unwrap();
    store.finish("old", &wait()).unwrap();
    let report = store.sweep(Duration::from_secs(3600)).unwrap();
    assert!(report.removed.is_empty() && report.skipped.is_empty());
    let report = store.sweep(Duration::ZERO).unwrap();
    assert_eq!(report.removed, ["old"]);
    assert!(store.pending().unwrap().is_empty());
    assert!(!home.path().join("results/old").exists());
}

#[test]
fn finish_that_cannot_be_admitted_publishes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let store = ResultStore::new(home.path());
    let src = source(&[("a", "1")]);
    store.stage("r1", src.path(), &wait()).unwrap();
    let _held = KeyedLeases::new(home.path(), RESULT_LOCKS)
        .try_acquire("r1", |_| false)
        .unwrap();
    let e = store.finish("r1", &Budget::no_wait()).unwrap_err();
    assert!(e.to_string().contains("durability unavailable"), "{e}");
    assert_eq!(e.class(), ErrorClass::Contended);
    assert!(!home.path().join("published").exists());
    assert_eq!(store.sweep(Duration::ZERO).unwrap().skipped, ["r1"]);
}

#[test]
fn records_with_unsafe_paths_are_refused() {
    let home = tempfile::tempdir().unwrap();
    let store = ResultStore::new(home.path());
    let src = source(&[("a", "1")]);
    store.stage("r1", src.path(), &wait()).unwrap();
    let entry = home.path().join("results/r1/entry.json");
    fs::write(
        &entry,
        r#"{"id":"r1","created_ms":0,"files":["../../escape"]}"#,
    )
    .unwrap();
    let e = store
        .apply("r1", &home.path().join("t"), &wait())
        .unwrap_err();
    assert!(matches!(e, ResultError::Corrupt { .. }), "{e}");
    assert!(!Path::new(&home.path().join("escape")).exists());
}
