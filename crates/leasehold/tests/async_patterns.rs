//! Async faces of the patterns (feature `tokio`): keyed leases and the authority, each on a
//! multi-threaded and a current-thread runtime — many waiters, cancel by drop, timeouts, no
//! blocked executor thread, orderly async teardown, and takeover from a SIGKILLed holder.
#![cfg(all(unix, feature = "tokio"))]
#![allow(clippy::await_holding_lock)] // `testkit::quiet()` guards are held across awaits on purpose

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use leasehold::patterns::authority::{
    Authority, AuthorityError, Event, KernelArbiter, State, Store, StoreFailure,
};
use leasehold::patterns::keyed::{KeyError, KeyedLeases};
use leasehold::{Budget, CancelToken, Error, Lease};
use testkit::{Canary, FlockHolder, Recorder};

/// The keyed-lease namespace directory these tests use (the library takes it from its
/// caller; the result store names its own).
const NAMESPACE: &str = ".test-locks-v1";

fn keys(root: &Path) -> KeyedLeases {
    KeyedLeases::new(root, NAMESPACE)
}

fn long() -> Budget {
    Budget::timeout(Duration::from_secs(30))
}

// ---- keyed leases ----

async fn keyed_waiters_take_turns(flavor_key: &str) {
    let root = tempfile::tempdir().unwrap();
    let leases = Arc::new(keys(root.path()));
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (leases, inside, done) = (leases.clone(), inside.clone(), done.clone());
            // Whitespace aliases share the one lease.
            let key = if i % 2 == 0 {
                flavor_key.to_string()
            } else {
                format!(" {flavor_key}\n")
            };
            tokio::spawn(async move {
                let lease = leases
                    .acquire_async(&key, &long(), |_| true)
                    .await
                    .expect("keyed lease");
                assert!(
                    !inside.swap(true, Ordering::SeqCst),
                    "two owners of one key"
                );
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
    assert_eq!(done.load(Ordering::SeqCst), 16);
    drop(
        leases
            .try_acquire(flavor_key, |_| false)
            .expect("free again"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_many_waiters_multi_thread() {
    let _quiet = testkit::quiet();
    keyed_waiters_take_turns("r-mt").await;
}

#[tokio::test(flavor = "current_thread")]
async fn keyed_many_waiters_current_thread() {
    let _quiet = testkit::quiet();
    keyed_waiters_take_turns("r-ct").await;
}

#[tokio::test(flavor = "current_thread")]
async fn keyed_unknown_key_allocates_nothing() {
    let _quiet = testkit::quiet();
    let root = tempfile::tempdir().unwrap();
    let r = keys(root.path())
        .acquire_async("nobody", &long(), |_| false)
        .await;
    assert!(matches!(r, Err(KeyError::Unknown { .. })), "{r:?}");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn keyed_drop_cancels_and_leaves_the_key_free() {
    let _quiet = testkit::quiet();
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path()).max_wait(None);
    let mut held = leases.try_acquire("r1", |_| true).unwrap();
    let budget = Budget::unlimited();
    let wait = leases.acquire_async("r1", &budget, |_| false);
    let res = tokio::time::timeout(Duration::from_millis(30), wait).await;
    assert!(
        res.is_err(),
        "still held, so the wait was abandoned by drop"
    );
    held.release();
    drop(
        leases
            .try_acquire("r1", |_| false)
            .expect("the abandoned waiter holds nothing"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_timeout_cap_and_cancellation() {
    let _quiet = testkit::quiet();
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    let held = leases.try_acquire("r1", |_| true).unwrap();
    let r = leases
        .acquire_async("r1", &Budget::timeout(Duration::from_millis(40)), |_| false)
        .await;
    assert!(
        matches!(r, Err(KeyError::Lease(Error::TimedOut { .. }))),
        "{r:?}"
    );
    // The cap bounds an unlimited budget in async mode too.
    let capped = keys(root.path()).max_wait(Some(Duration::from_millis(40)));
    let r = capped
        .acquire_async("r1", &Budget::unlimited(), |_| false)
        .await;
    assert!(
        matches!(r, Err(KeyError::Lease(Error::TimedOut { .. }))),
        "{r:?}"
    );
    let token = CancelToken::new();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let canceller = tokio::spawn(async move { token.cancel() });
    let r = leases.acquire_async("r1", &budget, |_| false).await;
    canceller.await.unwrap();
    assert!(
        matches!(r, Err(KeyError::Lease(Error::Cancelled { .. }))),
        "{r:?}"
    );
    held.verify().expect("the holder is undisturbed");
}

/// A budget cancelled before the async acquisition starts admits nothing and leaves the key
/// free (see the blocking twin in `keyed.rs` for why the admission re-check itself is only
/// reached by a real race).
#[tokio::test(flavor = "current_thread")]
async fn keyed_cancelled_budget_is_refused_admission_and_leaves_the_key_free() {
    let _quiet = testkit::quiet();
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    drop(leases.try_acquire("r2", |_| true).unwrap());
    let token = CancelToken::new();
    token.cancel();
    let budget = Budget::timeout(Duration::from_secs(5)).with_cancel(token);
    let r = leases.acquire_async("r2", &budget, |_| true).await;
    assert!(
        matches!(r, Err(KeyError::Lease(Error::Cancelled { .. }))),
        "{r:?}"
    );
    drop(leases.try_acquire("r2", |_| true).expect("key left free"));
}

#[tokio::test(flavor = "current_thread")]
async fn keyed_wait_never_blocks_the_executor_thread() {
    let _quiet = testkit::quiet();
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    let _held = leases.try_acquire("r1", |_| true).unwrap();
    let canary = Canary::start();
    let r = leases
        .acquire_async("r1", &Budget::timeout(Duration::from_millis(300)), |_| {
            false
        })
        .await;
    let seen = canary.ticks();
    assert!(
        matches!(r, Err(KeyError::Lease(Error::TimedOut { .. }))),
        "{r:?}"
    );
    assert!(
        seen >= 10,
        "canary ticked only {seen} times during a 300 ms wait"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_sigkilled_holder_hands_over_to_an_async_waiter() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    drop(leases.try_acquire("r1", |_| true).unwrap()); // the lock file exists now
    let holder = FlockHolder::hold(&leases.lock_path("r1"));
    let waiter = {
        let leases = leases.clone();
        tokio::spawn(async move { leases.acquire_async("r1", &long(), |_| false).await })
    };
    holder.kill();
    let lease = waiter.await.unwrap().expect("async waiter takes over");
    lease.verify().unwrap();
}

// ---- the authority ----

type Records = BTreeMap<String, u32>;

/// A store whose "disk" is shared by every authority of a test.
#[derive(Clone, Default)]
struct Mem(Arc<Mutex<Records>>);

impl Store for Mem {
    type Records = Records;
    fn open(&mut self) -> Result<Records, StoreFailure> {
        Ok(self.0.lock().unwrap().clone())
    }
    fn commit(&mut self, r: &Records, _: Option<u64>) -> Result<(), StoreFailure> {
        *self.0.lock().unwrap() = r.clone();
        Ok(())
    }
    fn close(&mut self) {}
}

type Auth = Arc<Authority<KernelArbiter, Mem>>;

struct Fixture {
    _dir: tempfile::TempDir,
    lock: std::path::PathBuf,
    disk: Mem,
    rec: Recorder,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        Fixture {
            lock: dir.path().join("store.lock"),
            _dir: dir,
            disk: Mem::default(),
            rec: Recorder::new(),
        }
    }
    fn stack(&self, label: &str) -> Auth {
        self.observed(self.rec.observer(label))
    }
    fn observed(&self, o: leasehold::patterns::authority::Observer) -> Auth {
        Arc::new(Authority::new(KernelArbiter::new(&self.lock), self.disk.clone()).with_observer(o))
    }
    fn events(&self, label: &str) -> Vec<Event> {
        let all = self.rec.events();
        all.into_iter()
            .filter(|(l, _)| l == label)
            .map(|(_, e)| e)
            .collect()
    }
    /// An authority whose `event`s are also announced on the returned channel.
    fn signalling(
        &self,
        label: &str,
        event: Event,
    ) -> (Auth, tokio::sync::mpsc::UnboundedReceiver<()>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let rec = self.rec.observer(label);
        let auth = self.observed(Arc::new(move |e: &Event| {
            rec(e);
            if *e == event {
                let _ = tx.send(());
            }
        }));
        (auth, rx)
    }
}

fn set(k: &str, v: u32) -> impl FnOnce(&mut Records) + Send + 'static {
    let k = k.to_string();
    move |r: &mut Records| {
        r.insert(k, v);
    }
}

/// While another authority is active, `acquire_async` waits without blocking the executor
/// (the canary keeps ticking), never opens the store, and times out as contended.
async fn authority_wait_does_not_block() {
    let fx = Fixture::new();
    let first = fx.stack("first");
    first.acquire_async(&Budget::no_wait()).await.unwrap();
    let second = fx.stack("second");
    let canary = Canary::start();
    let r = second
        .acquire_async(&Budget::timeout(Duration::from_millis(300)))
        .await;
    let seen = canary.ticks();
    assert!(matches!(r, Err(AuthorityError::Contended { .. })), "{r:?}");
    assert!(
        seen >= 10,
        "canary ticked only {seen} times during a 300 ms wait"
    );
    assert_eq!(second.state(), State::Contended);
    assert!(second.scope().is_empty());
    assert!(!fx.events("second").contains(&Event::StoreOpened));
    first.teardown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authority_wait_does_not_block_multi_thread() {
    let _quiet = testkit::quiet();
    authority_wait_does_not_block().await;
}

#[tokio::test(flavor = "current_thread")]
async fn authority_wait_does_not_block_current_thread() {
    let _quiet = testkit::quiet();
    authority_wait_does_not_block().await;
}

/// A waiting `acquire_async` becomes the authority as soon as the holder tears down, and sees
/// the holder's last durable write.
async fn authority_takes_over_after_teardown() {
    let fx = Fixture::new();
    let first = fx.stack("first");
    first.acquire_async(&Budget::no_wait()).await.unwrap();
    first.mutate_async(set("a", 1)).await.unwrap();
    let (second, mut contended) = fx.signalling("second", Event::LeaseContended);
    let waiter = {
        let second = second.clone();
        tokio::spawn(async move { second.acquire_async(&long()).await })
    };
    contended.recv().await.unwrap(); // the no-wait try failed: it is waiting now
    first.mutate_async(set("a", 2)).await.unwrap();
    first.teardown_async().await;
    waiter.await.unwrap().expect("the waiter takes over");
    assert_eq!(second.state(), State::Active);
    assert_eq!(second.scope().get("a"), Some(&2));
    second.mutate_async(set("b", 3)).await.unwrap();
    second.teardown_async().await;
    drop(Lease::try_acquire(&fx.lock).expect("released at teardown"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authority_takes_over_after_teardown_multi_thread() {
    let _quiet = testkit::quiet();
    authority_takes_over_after_teardown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn authority_takes_over_after_teardown_current_thread() {
    let _quiet = testkit::quiet();
    authority_takes_over_after_teardown().await;
}

/// Dropping a waiting `acquire_async` cancels it: nothing is acquired or opened, and the
/// lease is free for anyone once the holder goes.
#[tokio::test(flavor = "current_thread")]
async fn authority_drop_cancels_the_wait() {
    let _quiet = testkit::quiet();
    let fx = Fixture::new();
    let first = fx.stack("first");
    first.acquire_async(&Budget::no_wait()).await.unwrap();
    let second = fx.stack("second");
    let budget = Budget::unlimited();
    let wait = second.acquire_async(&budget);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), wait)
            .await
            .is_err(),
        "still held, so the wait was abandoned by drop"
    );
    first.teardown_async().await;
    let ev = fx.events("second");
    assert!(!ev.contains(&Event::LeaseAcquired), "{ev:?}");
    assert_eq!(second.state(), State::Contended);
    drop(Lease::try_acquire(&fx.lock).expect("the abandoned waiter holds nothing"));
}

/// `teardown_async` drains a `mutate_async` that is in flight before it closes the store and
/// releases the lease; a mutation after teardown began is refused and writes nothing.
async fn authority_teardown_drains() {
    let fx = Fixture::new();
    let (first, mut disposed) = fx.signalling("first", Event::Disposed);
    first.acquire_async(&Budget::no_wait()).await.unwrap();
    let (inside_tx, mut inside) = tokio::sync::mpsc::unbounded_channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let writer = {
        let first = first.clone();
        tokio::spawn(async move {
            first
                .mutate_async(move |r: &mut Records| {
                    inside_tx.send(()).unwrap();
                    go_rx.recv().unwrap(); // on the blocking pool, not an executor thread
                    r.insert("a".into(), 7);
                })
                .await
        })
    };
    inside.recv().await.unwrap();
    let closer = {
        let first = first.clone();
        tokio::spawn(async move { first.teardown_async().await })
    };
    disposed.recv().await.unwrap();
    let refused = first.mutate_async(set("b", 1)).await;
    assert!(
        matches!(refused, Err(AuthorityError::Contended { .. })),
        "{refused:?}"
    );
    go_tx.send(()).unwrap();
    writer.await.unwrap().unwrap();
    closer.await.unwrap();

    let second = fx.stack("second");
    second.acquire_async(&Budget::no_wait()).await.unwrap();
    assert_eq!(second.scope().get("a"), Some(&7));
    assert_eq!(second.scope().get("b"), None);
    let ev = fx.events("first");
    let at = |e: Event| ev.iter().position(|x| *x == e).unwrap();
    assert!(at(Event::WriteEnd) < at(Event::StoreClosed), "{ev:?}");
    assert!(at(Event::MutationEnd) < at(Event::StoreClosed), "{ev:?}");
    assert!(at(Event::StoreClosed) < at(Event::LeaseReleased), "{ev:?}");
    second.teardown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authority_teardown_drains_multi_thread() {
    let _quiet = testkit::quiet();
    authority_teardown_drains().await;
}

#[tokio::test(flavor = "current_thread")]
async fn authority_teardown_drains_current_thread() {
    let _quiet = testkit::quiet();
    authority_teardown_drains().await;
}

#[tokio::test(flavor = "current_thread")]
async fn authority_refresh_async_takes_over_without_waiting() {
    let _quiet = testkit::quiet();
    let fx = Fixture::new();
    let first = fx.stack("first");
    first.acquire_async(&Budget::no_wait()).await.unwrap();
    first.mutate_async(set("a", 4)).await.unwrap();
    let second = fx.stack("second");
    assert!(second.refresh_async().await.is_err(), "still held");
    first.teardown_async().await;
    second.refresh_async().await.unwrap();
    assert_eq!(second.scope().get("a"), Some(&4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authority_sigkilled_holder_hands_over_to_an_async_acquisition() {
    let fx = Fixture::new();
    *fx.disk.0.lock().unwrap() = Records::from([("k".into(), 9)]);
    let holder = FlockHolder::hold(&fx.lock);
    let (auth, mut contended) = fx.signalling("a", Event::LeaseContended);
    let waiter = {
        let auth = auth.clone();
        tokio::spawn(async move { auth.acquire_async(&long()).await })
    };
    contended.recv().await.unwrap();
    holder.kill();
    waiter
        .await
        .unwrap()
        .expect("takes over from the killed holder");
    assert_eq!(auth.scope().get("k"), Some(&9));
}
