//! Async faces of the stores (feature `tokio`), on multi-threaded and current-thread
//! runtimes: result-store operations wait for their ID's lease without blocking an executor
//! thread, are cancelled by drop and by their budget, take over from a SIGKILLed holder; the
//! registry hands over asynchronously; and the session writer appends off the executor. (The
//! `async_registry` example carries its own test: `test = true` in Cargo.toml.)
#![cfg(all(unix, feature = "tokio"))]
#![allow(clippy::await_holding_lock)] // `testkit::quiet()` guards are held across awaits on purpose

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use leasehold::Budget;
use leasehold::patterns::authority::{Event, State};
use leasehold::patterns::keyed::{KeyLease, KeyedLeases};
use leasehold::{Classify, ErrorClass};
use leasehold_stores::document::RealFiles;
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths};
use leasehold_stores::results::{ResultError, ResultStore};
use leasehold_stores::session::{SessionId, SessionStore};
use testkit::{Canary, FlockHolder};

/// The result store's lock namespace, as its on-disk format names it: holding a key here
/// must contend with the store, which proves the store uses this directory.
const RESULT_LOCKS: &str = ".result-locks-v1";

fn long() -> Budget {
    Budget::timeout(Duration::from_secs(30))
}

/// A managed root with result `r1` staged (one file), and its source directory.
fn staged(home: &Path) -> ResultStore {
    let src = home.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a.txt"), "A").unwrap();
    let store = ResultStore::new(home.join("managed"));
    store.stage("r1", &src, &long()).unwrap();
    store
}

/// Holds `r1`'s operation lease in this process (a second open file description, so the
/// store's own attempts are contended exactly as across processes).
fn hold_r1(store: &ResultStore) -> KeyLease {
    KeyedLeases::new(store.root(), RESULT_LOCKS)
        .try_acquire("r1", |_| true)
        .unwrap()
}

/// Returns once a thread of this process waits in the kernel's queue for `lock` (the
/// handshake that says "the operation is waiting now"), looking on the blocking pool so that
/// the executor goes on driving the waiting operation. `false`: this system does not show
/// waiters (only Linux's `/proc/locks` does), and the caller skips.
async fn queued_on(lock: &Path) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let lock = lock.to_path_buf();
    tokio::task::spawn_blocking(move || {
        testkit::until("the operation waits for r1's lease", || {
            testkit::blocked_on(std::process::id(), &lock)
        })
    })
    .await
    .unwrap();
    true
}

#[tokio::test(flavor = "current_thread")]
async fn results_round_trip_async() {
    let _quiet = testkit::quiet();
    let home = tempfile::tempdir().unwrap();
    let src = home.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/b.txt"), "B").unwrap();
    let store = ResultStore::new(home.path().join("managed"));
    let entry = store.stage_async(" r1 ", &src, &long()).await.unwrap();
    assert_eq!(entry.files, ["sub/b.txt"]);
    assert_eq!(
        store.paths_async("r1", &long()).await.unwrap(),
        ["sub/b.txt"]
    );
    assert_eq!(
        store.finish_async("r1", &long()).await.unwrap(),
        ["sub/b.txt"]
    );
    assert_eq!(store.pending().unwrap(), ["r1"]);
    let target = home.path().join("target");
    store.apply_async("r1", &target, &long()).await.unwrap();
    assert_eq!(fs::read_to_string(target.join("sub/b.txt")).unwrap(), "B");
    assert!(store.pending().unwrap().is_empty());
    let gone = store.discard_async("r1", &long()).await.unwrap_err();
    assert!(matches!(gone, ResultError::Unknown { .. }), "{gone}");
    store.stage_async("r2", &src, &long()).await.unwrap();
    store.abort_async("r2", &long()).await.unwrap();
    let report = store.sweep_async(Duration::ZERO).await.unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
}

/// While `r1` is busy, an async result operation waits without blocking the executor (a
/// canary keeps ticking), then gives up as busy with nothing changed.
async fn result_wait_does_not_block() {
    let home = tempfile::tempdir().unwrap();
    let store = staged(home.path());
    let _held = hold_r1(&store);
    let canary = Canary::start();
    let r = store
        .discard_async("r1", &Budget::timeout(Duration::from_millis(300)))
        .await;
    let seen = canary.ticks();
    let err = r.unwrap_err();
    assert_eq!(err.class(), ErrorClass::Contended, "{err}");
    assert!(
        seen >= 10,
        "canary ticked only {seen} times during a 300 ms wait"
    );
    assert!(
        store.root().join("results/r1/entry.json").is_file(),
        "nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_wait_does_not_block_multi_thread() {
    let _quiet = testkit::quiet();
    result_wait_does_not_block().await;
}

#[tokio::test(flavor = "current_thread")]
async fn result_wait_does_not_block_current_thread() {
    let _quiet = testkit::quiet();
    result_wait_does_not_block().await;
}

/// A waiting async operation is admitted once the holder (another process) lets go, and does
/// its work.
async fn result_waiter_proceeds_after_release() {
    let home = tempfile::tempdir().unwrap();
    let store = staged(home.path());
    let held = FlockHolder::hold(&store.lock_path("r1"));
    let op = {
        let store = store.clone();
        tokio::spawn(async move { store.discard_async("r1", &long()).await })
    };
    if !queued_on(&store.lock_path("r1")).await {
        eprintln!(
            "SKIP: result_waiter_proceeds_after_release: sees the waiter queued through /proc/locks (Linux only)"
        );
        return;
    }
    assert!(
        store.root().join("results/r1").exists(),
        "nothing done while busy"
    );
    held.release();
    op.await.unwrap().expect("admitted after the release");
    assert!(!store.root().join("results/r1").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_waiter_proceeds_after_release_multi_thread() {
    // Not quiet: the holder is a process it spawns.
    result_waiter_proceeds_after_release().await;
}

#[tokio::test(flavor = "current_thread")]
async fn result_waiter_proceeds_after_release_current_thread() {
    // Not quiet: the holder is a process it spawns.
    result_waiter_proceeds_after_release().await;
}

/// Dropping a waiting operation cancels it: nothing changes, and the ID is left free.
#[tokio::test(flavor = "current_thread")]
async fn result_drop_cancels_with_nothing_changed() {
    let _quiet = testkit::quiet();
    let home = tempfile::tempdir().unwrap();
    let store = staged(home.path()).max_wait(None);
    let mut held = hold_r1(&store);
    let budget = Budget::unlimited();
    let op = store.discard_async("r1", &budget);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), op)
            .await
            .is_err(),
        "still busy, so the operation was abandoned by drop"
    );
    held.release();
    assert!(store.root().join("results/r1/entry.json").is_file());
    drop(hold_r1(&store)); // the abandoned waiter holds nothing
    assert_eq!(store.paths("r1", &long()).unwrap(), ["a.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_sigkilled_holder_hands_over_to_an_async_operation() {
    let home = tempfile::tempdir().unwrap();
    let store = staged(home.path());
    let holder = FlockHolder::hold(&store.lock_path("r1"));
    let target = home.path().join("target");
    let op = {
        let (store, target) = (store.clone(), target.clone());
        tokio::spawn(async move { store.apply_async("r1", &target, &long()).await })
    };
    if !queued_on(&store.lock_path("r1")).await {
        eprintln!(
            "SKIP: result_sigkilled_holder_hands_over_to_an_async_operation: sees the waiter queued through /proc/locks (Linux only)"
        );
        return;
    }
    holder.kill();
    assert_eq!(op.await.unwrap().expect("takes over"), ["a.txt"]);
    assert_eq!(fs::read_to_string(target.join("a.txt")).unwrap(), "A");
}

// ---- registry ----

/// A second registry waits asynchronously while the first serves,
/// and takes over at the first's async teardown with its last write.
async fn registry_hands_over_async() {
    let home = tempfile::tempdir().unwrap();
    let paths = RegistryPaths::in_home(home.path(), None);
    let (workspace, extra) = (home.path().join("ws"), home.path().join("extra"));
    fs::create_dir_all(&workspace).unwrap();
    fs::create_dir_all(&extra).unwrap();
    let first = Registry::new(paths.clone());
    first.acquire_async(&Budget::no_wait()).await.unwrap();
    let (tx, mut contended) = tokio::sync::mpsc::unbounded_channel();
    let second = Arc::new(Registry::with_files(
        paths,
        Arc::new(RealFiles),
        Some(Arc::new(move |e: &Event| {
            if *e == Event::LeaseContended {
                let _ = tx.send(());
            }
        })),
    ));
    let waiter = {
        let second = second.clone();
        tokio::spawn(async move { second.acquire_async(&long()).await })
    };
    contended.recv().await.unwrap();
    first.add_async(&workspace, &extra).await.unwrap();
    first.teardown_async().await;
    waiter.await.unwrap().expect("takes over");
    assert_eq!(second.state(), State::Active);
    assert!(second.grants(&workspace, &extra.join("f")));
    let refused = first.add_async(&workspace, &extra).await.unwrap_err();
    assert!(
        matches!(refused, RegistryError::Contended { .. }),
        "{refused}"
    );
    second.remove_async(&workspace, &extra).await.unwrap();
    assert!(!second.grants(&workspace, &extra.join("f")));
    second.refresh_async().await.unwrap();
    second.teardown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_hands_over_async_multi_thread() {
    let _quiet = testkit::quiet();
    registry_hands_over_async().await;
}

#[tokio::test(flavor = "current_thread")]
async fn registry_hands_over_async_current_thread() {
    let _quiet = testkit::quiet();
    registry_hands_over_async().await;
}

// ---- session ----

#[tokio::test(flavor = "current_thread")]
async fn session_writer_async_appends_and_stays_single_writer() {
    let _quiet = testkit::quiet();
    let tmp = tempfile::tempdir().unwrap();
    let store = SessionStore::new(tmp.path().join("sessions"));
    let id = SessionId::new("s1").unwrap();
    let writer = store.open_writer_async(&id).await.unwrap();
    assert!(
        !writer.holds_lease().await,
        "nothing taken before the first write"
    );
    writer.append_json(" {\"a\": 1} ").await.unwrap();
    let appends: Vec<_> = (0..8)
        .map(|i| {
            let w = writer.clone();
            tokio::spawn(async move { w.append_value(serde_json::json!({ "n": i })).await })
        })
        .collect();
    for a in appends {
        a.await.unwrap().unwrap();
    }
    assert!(writer.holds_lease().await);
    let other = store.open_writer_async(&id).await.unwrap_err();
    assert!(other.is_contended(), "{other}");
    writer.release().await;
    let records: Vec<_> = store.reader(&id).unwrap().map(Result::unwrap).collect();
    assert_eq!(records.len(), 9);
    assert_eq!(records[0], b"{\"a\": 1}");
    let next = store.open_writer_async(&id).await.unwrap();
    assert!(next.holds_lease().await, "free again after release");
}
