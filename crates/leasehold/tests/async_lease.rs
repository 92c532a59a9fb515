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
    let token = CancelToken::new();
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

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `fut` once with the counting waker `wakes`.
fn poll_once<F: std::future::Future>(
    fut: std::pin::Pin<&mut F>,
    wakes: &Arc<Wakes>,
) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::from(wakes.clone());
    fut.poll(&mut std::task::Context::from_waker(&waker))
}

/// A cancellation from another thread wakes the task of an async wait queued behind a holder
/// process: the wait's waker is woken (nothing else can: this test never lets the runtime
/// run its timers), and the next poll ends the wait. The grant the kernel then gives the
/// abandoned helper is let go.
#[tokio::test(flavor = "current_thread")]
async fn a_cancellation_from_another_thread_wakes_a_pending_async_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cancel-async.lock");
    let holder = FlockHolder::hold(&path);
    let token = CancelToken::new();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let mut wait = std::pin::pin!(Lease::acquire_async(&path, &budget));
    let wakes = Arc::new(Wakes::default());
    assert!(poll_once(wait.as_mut(), &wakes).is_pending());
    let pid = std::process::id();
    testkit::until("the helper is queued in the kernel", || {
        testkit::blocked_on(pid, &path)
    });
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0, "nothing woke it yet");
    std::thread::spawn(move || token.cancel()).join().unwrap();
    assert!(
        wakes.0.load(Ordering::SeqCst) >= 1,
        "the cancellation woke the task"
    );
    match poll_once(wait.as_mut(), &wakes) {
        std::task::Poll::Ready(Err(Error::Cancelled { .. })) => {}
        other => panic!("expected the cancellation, got {other:?}"),
    }
    testkit::assert_abandoned_grant_let_go(&path, holder);
}

/// Dropping an async wait queued behind a holder process abandons it: the grant the kernel
/// then gives its helper is let go.
#[tokio::test(flavor = "current_thread")]
async fn dropping_a_pending_async_wait_lets_its_later_grant_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drop-async.lock");
    let holder = FlockHolder::hold(&path);
    let budget = Budget::unlimited();
    let wakes = Arc::new(Wakes::default());
    {
        let mut wait = std::pin::pin!(Lease::acquire_async(&path, &budget));
        assert!(poll_once(wait.as_mut(), &wakes).is_pending());
        testkit::until("the helper is queued in the kernel", || {
            testkit::blocked_on(std::process::id(), &path)
        });
    } // dropped here
    testkit::assert_abandoned_grant_let_go(&path, holder);
}
