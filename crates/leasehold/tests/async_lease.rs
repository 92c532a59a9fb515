//! Async acquisition (feature `tokio`): many waiters, cancel by drop, timeouts, no blocked
//! executor thread, and takeover from a SIGKILLed holder process.
#![cfg(all(unix, feature = "tokio"))]
#![allow(clippy::await_holding_lock)] // `testkit::quiet()` guards are held across awaits on purpose

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{Budget, CancelToken, Error, Lease};
use testkit::{Canary, FlockHolder};

async fn many_waiters_take_turns_exclusively() {
    let dir = tempfile::tempdir().unwrap();
    let path = Arc::new(dir.path().join("many.lock"));
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..24)
        .map(|_| {
            let (path, inside, done) = (path.clone(), inside.clone(), done.clone());
            tokio::spawn(async move {
                let budget = Budget::timeout(Duration::from_secs(60));
                let lease = Lease::acquire_async(&*path, &budget).await.expect("lease");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                drop(lease);
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 24);
    testkit::assert_free(path.as_path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_multi_thread() {
    let _quiet = testkit::quiet();
    many_waiters_take_turns_exclusively().await;
}

#[tokio::test(flavor = "current_thread")]
async fn many_waiters_current_thread() {
    let _quiet = testkit::quiet();
    many_waiters_take_turns_exclusively().await;
}

#[tokio::test(flavor = "current_thread")]
async fn dropping_the_future_cancels_and_leaves_nothing_held() {
    let _quiet = testkit::quiet();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drop.lock");
    let mut holder = Lease::try_acquire(&path).unwrap();
    let budget = Budget::unlimited();
    let wait = Lease::acquire_async(&path, &budget);
    let res = tokio::time::timeout(Duration::from_millis(30), wait).await;
    assert!(
        res.is_err(),
        "still contended, so the wait was abandoned by drop"
    );
    holder.release();
    testkit::assert_free(&path);
    drop(Lease::try_acquire(&path).unwrap());
}

#[tokio::test(flavor = "current_thread")]
async fn budget_timeout_and_cancel_token_end_the_wait() {
    let _quiet = testkit::quiet();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.lock");
    let _holder = Lease::try_acquire(&path).unwrap();
    let err = Lease::acquire_async(&path, &Budget::timeout(Duration::from_millis(40)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    let token = CancelToken::new().unwrap();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let canceller = tokio::spawn(async move { token.cancel() });
    let err = Lease::acquire_async(&path, &budget).await.unwrap_err();
    canceller.await.unwrap();
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
}

/// A canary task keeps running while the only executor thread waits for a contended lease: a
/// blocking wait would starve it completely.
#[tokio::test(flavor = "current_thread")]
async fn waiting_never_blocks_the_executor_thread() {
    let _quiet = testkit::quiet();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("canary.lock");
    let _holder = Lease::try_acquire(&path).unwrap();
    let canary = Canary::start();
    let res = Lease::acquire_async(&path, &Budget::timeout(Duration::from_millis(300))).await;
    let seen = canary.ticks();
    assert!(res.unwrap_err().is_contended());
    assert!(
        seen >= 10,
        "canary ticked only {seen} times during a 300 ms wait"
    );
}

/// A real holder process (util-linux `flock`, holding the same kind of lock) is SIGKILLed;
/// the async waiter takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_holder_process_hands_over_to_an_async_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.lock");
    let holder = FlockHolder::hold(&path);
    assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
    let p = path.clone();
    let waiter = tokio::spawn(async move {
        Lease::acquire_async(&p, &Budget::timeout(Duration::from_secs(30))).await
    });
    holder.kill();
    let lease = waiter.await.unwrap().expect("async waiter takes over");
    lease.verify().unwrap();
}
