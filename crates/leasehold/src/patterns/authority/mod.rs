//! A store-wide single-writer authority that fails closed.
//!
//! Several processes share one store file. Without an authority each reads the file at start
//! and rewrites the whole of it later, so the last writer silently drops the other's change,
//! and a process keeps granting from its stale memory what another has removed. [`Authority`]
//! makes exactly one process the writer of the whole store and makes every other process
//! grant nothing until it becomes the authority itself.
//!
//! The lifecycle is fixed, and each step is where it is for a reason:
//!
//! 1. **acquire the lease** ([`Arbiter`]) — nothing is opened without it, not even read-only:
//!    a snapshot read without the lease may already be stale when it is used;
//! 2. **open the store and load** its records ([`Store::open`]);
//! 3. **publish the scope** — only now does [`Authority::scope`] answer anything but empty;
//! 4. **serve** mutations, verifying the lease before each durable write;
//! 5. **drain** in-flight mutations, **withdraw** the scope, **close** the store;
//! 6. **release the lease last**, so that a successor never opens a snapshot missing this
//!    process's last write.
//!
//! Every transition (acquisition, refresh, teardown) runs on one queue, so an acquisition and
//! a teardown never interleave; teardown marks the authority disposed *before* it queues, so
//! an acquisition already running stops before opening the store and leaves what it took for
//! that teardown to release.
//!
//! The authority is generic over *what* arbitrates ([`Arbiter`], [`Grant`]) — the kernel
//! [`Lease`](crate::Lease) through [`KernelArbiter`], or a distributed lease with a fencing token (the etcd
//! arbiter, feature `etcd`; [`Grant::fencing_token`] is handed to every [`Store::commit`]) —
//! and over the store.

mod arbiter;
#[cfg(feature = "tokio")]
mod asynchronous;
mod machine;
mod store;

pub use arbiter::{Arbiter, Grant, KernelArbiter};
#[cfg(feature = "tokio")]
pub use asynchronous::AsyncArbiter;
pub use machine::{Authority, AuthorityError, Event, Observer, State};
pub use store::{Store, StoreFailure};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mutex::lock;
    use crate::{Budget, Classify, Error, ErrorClass, Lease, LeaseOptions};
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    #[cfg(not(target_os = "wasi"))]
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};
    #[cfg(not(target_os = "wasi"))]
    use std::thread;

    type Records = BTreeMap<String, u32>;

    /// Records the events of the fixture's stacks, each under a label, in order (the
    /// integration tests use `testkit::Recorder`, which cannot be linked into unit tests).
    #[derive(Clone, Default)]
    struct Recorder {
        events: Arc<Mutex<Vec<(String, Event)>>>,
    }

    impl Recorder {
        fn new() -> Recorder {
            Recorder::default()
        }

        fn observer(&self, label: &str) -> Observer {
            let events = self.events.clone();
            let label = label.to_string();
            Arc::new(move |e: &Event| lock(&events).push((label.clone(), e.clone())))
        }

        fn events(&self) -> Vec<(String, Event)> {
            lock(&self.events).clone()
        }
    }

    /// The "disk" both stacks share; `None` is a document that does not parse.
    #[derive(Clone, Default)]
    struct Disk(Arc<Mutex<Option<Records>>>);

    struct MemStore {
        disk: Disk,
    }

    impl Store for MemStore {
        type Records = Records;
        fn open(&mut self) -> Result<Records, StoreFailure> {
            lock(&self.disk.0)
                .clone()
                .ok_or_else(|| StoreFailure::new("memory", "open", "document does not parse"))
        }
        fn commit(&mut self, r: &Records, _: Option<u64>) -> Result<(), StoreFailure> {
            *lock(&self.disk.0) = Some(r.clone());
            Ok(())
        }
        fn close(&mut self) {}
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        lock: PathBuf,
        disk: Disk,
        rec: Recorder,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = crate::test_dir();
            let lock = dir.path().join("store.lock");
            let disk = Disk(Arc::new(Mutex::new(Some(Records::new()))));
            Fixture {
                _dir: dir,
                lock,
                disk,
                rec: Recorder::new(),
            }
        }
        fn stack(&self, label: &str) -> Authority<KernelArbiter, MemStore> {
            self.stack_observed(self.rec.observer(label))
        }
        fn stack_observed(&self, o: Observer) -> Authority<KernelArbiter, MemStore> {
            let store = MemStore {
                disk: self.disk.clone(),
            };
            // The only process here (WASI needs the opt-in; native targets lock as ever).
            let opts = LeaseOptions::new().single_process(true);
            Authority::new(KernelArbiter::new(&self.lock).with_options(opts), store)
                .with_observer(o)
        }
        fn events(&self, label: &str) -> Vec<Event> {
            let all = self.rec.events();
            all.into_iter()
                .filter(|(l, _)| l == label)
                .map(|(_, e)| e)
                .collect()
        }
    }

    fn set(k: &str, v: u32) -> impl FnOnce(&mut Records) {
        let k = k.to_string();
        move |r: &mut Records| {
            r.insert(k, v);
        }
    }

    #[cfg_attr(target_os = "wasi", allow(dead_code))] // its users need threads
    fn pos(events: &[(String, Event)], label: &str, e: &Event) -> usize {
        events
            .iter()
            .position(|(l, x)| l == label && x == e)
            .unwrap_or_else(|| panic!("{label}: {e:?} not in {events:?}"))
    }

    #[test]
    fn second_stack_is_contended_fails_closed_and_takes_over_by_refresh() {
        let fx = Fixture::new();
        let first = fx.stack("first");
        first.acquire(&Budget::no_wait()).unwrap();
        first.mutate(set("a", 1)).unwrap();

        let second = fx.stack("second");
        let err = second.acquire(&Budget::no_wait()).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        assert_eq!(err.class(), ErrorClass::Contended);
        assert_eq!(second.state(), State::Contended);
        assert!(second.scope().is_empty());
        let err = second.mutate(set("b", 2)).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        assert!(
            !fx.events("second").contains(&Event::StoreOpened),
            "a contended stack must never open the store"
        );
        assert!(second.refresh().is_err(), "still held");

        first.mutate(set("a", 3)).unwrap();
        first.teardown();
        assert!(first.scope().is_empty());
        second.refresh().unwrap();
        assert_eq!(second.state(), State::Active);
        assert_eq!(second.scope().get("a"), Some(&3), "the first's last write");
        assert_eq!(
            second.scope().get("b"),
            None,
            "the rejected mutation wrote nothing"
        );
    }

    #[cfg(not(target_os = "wasi"))] // threads race here: wasm32-wasip1 has one
    #[test]
    fn teardown_drains_then_closes_then_releases_and_a_successor_follows() {
        let fx = Fixture::new();
        let (disposed_tx, disposed_rx) = mpsc::channel();
        let disposed_tx = Mutex::new(disposed_tx);
        let rec = fx.rec.observer("first");
        let observer: Observer = Arc::new(move |e: &Event| {
            rec(e);
            if *e == Event::Disposed {
                let _ = lock(&disposed_tx).send(());
            }
        });
        let first = Arc::new(fx.stack_observed(observer));
        first.acquire(&Budget::no_wait()).unwrap();

        let (inside_tx, inside_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let writer = {
            let first = first.clone();
            thread::spawn(move || {
                first.mutate(move |r: &mut Records| {
                    inside_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    r.insert("a".into(), 7);
                })
            })
        };
        inside_rx.recv().unwrap(); // the mutation is running
        let closer = {
            let first = first.clone();
            thread::spawn(move || first.teardown())
        };
        disposed_rx.recv().unwrap(); // teardown has begun
        let err = first.mutate(set("b", 1)).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        go_tx.send(()).unwrap();
        writer.join().unwrap().unwrap();
        closer.join().unwrap();

        let second = fx.stack("second");
        second.acquire(&Budget::no_wait()).unwrap();
        assert_eq!(second.scope().get("a"), Some(&7));
        assert_eq!(second.scope().get("b"), None);

        let ev = fx.rec.events();
        let write_end = pos(&ev, "first", &Event::WriteEnd);
        let mutation_end = pos(&ev, "first", &Event::MutationEnd);
        let close = pos(&ev, "first", &Event::StoreClosed);
        let release = pos(&ev, "first", &Event::LeaseReleased);
        assert!(pos(&ev, "first", &Event::Disposed) < write_end, "{ev:?}");
        assert!(write_end < close, "the write ends before close: {ev:?}");
        assert!(
            mutation_end < close,
            "no close while a mutation runs: {ev:?}"
        );
        assert!(close < release, "close before release: {ev:?}");
        assert!(
            release < pos(&ev, "second", &Event::LeaseAcquired),
            "{ev:?}"
        );
    }

    #[cfg(not(target_os = "wasi"))] // threads race here: wasm32-wasip1 has one
    #[test]
    fn acquisition_overlapping_teardown_is_finished_by_it() {
        let fx = Fixture::new();
        let (acquired_tx, acquired_rx) = mpsc::channel();
        let (disposed_tx, disposed_rx) = mpsc::channel();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let (acquired_tx, disposed_tx, gate_rx) = (
            Mutex::new(acquired_tx),
            Mutex::new(disposed_tx),
            Mutex::new(gate_rx),
        );
        let rec = fx.rec.observer("first");
        let observer: Observer = Arc::new(move |e: &Event| {
            rec(e);
            match e {
                Event::LeaseAcquired => {
                    lock(&acquired_tx).send(()).unwrap();
                    lock(&gate_rx).recv().unwrap(); // park the acquisition here
                }
                Event::Disposed => lock(&disposed_tx).send(()).unwrap(),
                _ => {}
            }
        });
        let first = Arc::new(fx.stack_observed(observer));
        let acquirer = {
            let first = first.clone();
            thread::spawn(move || first.acquire(&Budget::no_wait()))
        };
        acquired_rx.recv().unwrap(); // the acquisition holds the lease, store not yet open
        let closer = {
            let first = first.clone();
            thread::spawn(move || first.teardown())
        };
        disposed_rx.recv().unwrap(); // teardown began and queues behind the acquisition
        gate_tx.send(()).unwrap();
        let got = acquirer.join().unwrap();
        closer.join().unwrap();
        assert!(
            matches!(got, Err(AuthorityError::Contended { .. })),
            "{got:?}"
        );
        assert_eq!(first.state(), State::Contended);
        assert!(first.scope().is_empty());
        let ev = fx.events("first");
        assert!(!ev.contains(&Event::StoreOpened), "{ev:?}");
        assert!(ev.contains(&Event::LeaseReleased), "{ev:?}");
        drop(Lease::try_acquire(&fx.lock).expect("nothing leaked: a successor gets the lease"));
    }

    #[test]
    #[cfg(unix)] // removing the lock file loses the lease only where the file is the lock
    fn lost_lease_fails_closed_before_writing() {
        let fx = Fixture::new();
        let a = fx.stack("a");
        a.acquire(&Budget::no_wait()).unwrap();
        a.mutate(set("k", 1)).unwrap();
        std::fs::remove_file(&fx.lock).unwrap();
        let err = a.mutate(set("k", 2)).unwrap_err();
        assert!(
            matches!(&err, AuthorityError::StorageFailed { reason } if reason == "lease lost"),
            "{err:?}"
        );
        assert_eq!(
            a.state(),
            State::StorageFailed {
                reason: "lease lost".into()
            }
        );
        assert!(a.scope().is_empty());
        assert_eq!(lock(&fx.disk.0).as_ref().unwrap().get("k"), Some(&1));
        // A refresh takes a fresh lease on the new lock file and reopens.
        a.refresh().unwrap();
        assert_eq!(a.scope().get("k"), Some(&1));
    }

    #[test]
    fn unloadable_store_keeps_the_lease_and_refresh_recovers() {
        let fx = Fixture::new();
        *lock(&fx.disk.0) = None;
        let a = fx.stack("a");
        let err = a.acquire(&Budget::no_wait()).unwrap_err();
        assert!(
            matches!(err, AuthorityError::StorageFailed { .. }),
            "{err:?}"
        );
        assert!(a.scope().is_empty());
        assert!(matches!(
            a.mutate(set("k", 1)),
            Err(AuthorityError::StorageFailed { .. })
        ));
        assert!(lock(&fx.disk.0).is_none(), "never overwritten");
        let b = fx.stack("b");
        assert!(matches!(
            b.acquire(&Budget::no_wait()),
            Err(AuthorityError::Contended { .. })
        ));
        *lock(&fx.disk.0) = Some(Records::from([("k".into(), 9)]));
        a.refresh().unwrap();
        assert_eq!(a.scope().get("k"), Some(&9));
    }

    /// A grant that a test (or the store) can declare lost, as a distributed lease is once
    /// its deadline passes or its store refused its token.
    struct Fragile(Arc<AtomicBool>);

    impl Grant for Fragile {
        fn verify(&self) -> crate::Result<()> {
            if self.0.load(Ordering::SeqCst) {
                Err(Error::Expired {
                    name: "test".into(),
                    reason: "lost".into(),
                })
            } else {
                Ok(())
            }
        }
        fn release(&mut self) {}
        fn fencing_token(&self) -> Option<u64> {
            Some(7)
        }
        fn is_lost(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    struct FragileArbiter(Arc<AtomicBool>);

    impl Arbiter for FragileArbiter {
        type Grant = Fragile;
        fn acquire(&self, _: &Budget) -> crate::Result<Fragile> {
            self.0.store(false, Ordering::SeqCst);
            Ok(Fragile(self.0.clone()))
        }
    }

    /// Refuses every write under a token, declaring the grant lost (what the etcd store does
    /// when etcd's fencing check fails).
    struct FencingStore(Arc<AtomicBool>, Disk);

    impl Store for FencingStore {
        type Records = Records;
        fn open(&mut self) -> Result<Records, StoreFailure> {
            Ok(lock(&self.1.0).clone().unwrap_or_default())
        }
        fn commit(&mut self, _: &Records, fence: Option<u64>) -> Result<(), StoreFailure> {
            assert_eq!(fence, Some(7), "the grant's token reaches the store");
            self.0.store(true, Ordering::SeqCst);
            Err(StoreFailure::new(
                "memory",
                "commit",
                "fencing token refused",
            ))
        }
        fn close(&mut self) {}
    }

    #[test]
    fn a_grant_known_lost_withdraws_the_scope_at_once_and_refresh_takes_a_new_one() {
        let lost = Arc::new(AtomicBool::new(false));
        let disk = Disk(Arc::new(Mutex::new(Some(Records::from([("k".into(), 1)])))));
        let a = Authority::new(FragileArbiter(lost.clone()), MemStore { disk });
        a.acquire(&Budget::no_wait()).unwrap();
        assert_eq!(a.scope().get("k"), Some(&1));
        lost.store(true, Ordering::SeqCst);
        // No write needed: reading the scope or the state already fails closed.
        assert!(a.scope().is_empty());
        assert_eq!(a.state(), State::Contended);
        assert!(matches!(
            a.mutate(set("k", 2)),
            Err(AuthorityError::Contended { .. })
        ));
        a.refresh().unwrap();
        assert_eq!(a.scope().get("k"), Some(&1));
    }

    #[test]
    fn a_write_refused_for_its_token_is_contention_not_a_storage_failure() {
        let lost = Arc::new(AtomicBool::new(false));
        let disk = Disk(Arc::new(Mutex::new(Some(Records::new()))));
        let a = Authority::new(
            FragileArbiter(lost.clone()),
            FencingStore(lost, disk.clone()),
        );
        a.acquire(&Budget::no_wait()).unwrap();
        let err = a.mutate(set("k", 1)).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        assert_eq!(a.state(), State::Contended);
        assert!(a.scope().is_empty());
        assert_eq!(lock(&disk.0).as_ref().unwrap().get("k"), None);
    }

    #[cfg(not(target_os = "wasi"))] // threads race here: wasm32-wasip1 has one
    #[test]
    fn concurrent_mutations_lose_no_update() {
        let fx = Fixture::new();
        let a = Arc::new(fx.stack("a"));
        a.acquire(&Budget::no_wait()).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let a = a.clone();
                thread::spawn(move || {
                    let key = format!("k{}", i % 2);
                    for _ in 0..50 {
                        a.mutate(|r: &mut Records| *r.entry(key.clone()).or_default() += 1)
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let disk = lock(&fx.disk.0).clone().unwrap();
        assert_eq!(disk.get("k0"), Some(&200));
        assert_eq!(disk.get("k1"), Some(&200));
    }
}
