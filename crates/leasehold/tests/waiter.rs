//! The waiter of the primitive: waits sit in the kernel's own flock queue, and a
//! waiter that gives up leaves nothing of ours holding the lease, ever.
//!
//! Holders are real processes (util-linux `flock`); every wait here is ended by its budget or
//! by a real release, never by a sleep.
#![cfg(target_os = "linux")]

use std::time::Duration;

use leasehold::{Budget, CancelToken, Error, Holders, Lease};
use testkit::FlockHolder;

fn threads_of_this_process() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// A waiter that timed out or was cancelled leaves a helper blocked in the kernel's queue;
/// when the holder goes, the helper gets the lock nobody wants and must drop it at once: a
/// third process then gets it, and while it holds it, it is the only holder.
#[test]
fn an_abandoned_kernel_wait_never_ends_up_holding_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("abandon.lock");
    let holder = FlockHolder::hold(&path);
    let err = Lease::acquire(&path, &Budget::timeout(Duration::from_millis(50))).unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    let token = CancelToken::new();
    token.cancel();
    let budget = Budget::timeout(Duration::from_secs(30)).with_cancel(token);
    assert!(Lease::acquire(&path, &budget).is_err());
    holder.kill(); // the kernel drops its lock; our abandoned helper is granted it
    let next = FlockHolder::hold(&path); // blocks until it has the lock: ours was dropped
    let _quiet = testkit::quiet();
    // The portable build cannot name holders; there the blocking hold above is the proof.
    match leasehold::holders(&path).unwrap() {
        Holders::Unknown if cfg!(leasehold_portable) => {}
        Holders::Held { pids } => assert!(
            !pids.contains(&std::process::id()),
            "an abandoned waiter of this process holds the lease: {pids:?}"
        ),
        other => panic!("the second holder holds it: {other:?}"),
    }
    drop(next);
}

/// Every timed-out wait on one held inode adopts the helper the previous one abandoned, so a
/// process that keeps timing out never accumulates blocked threads.
#[test]
fn repeated_timed_out_waits_share_one_kernel_wait() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("adopt.lock");
    let holder = FlockHolder::hold(&path);
    let short = || Budget::timeout(Duration::from_millis(5));
    assert!(Lease::acquire(&path, &short()).is_err());
    let after_first = threads_of_this_process();
    for _ in 0..20 {
        assert!(Lease::acquire(&path, &short()).unwrap_err().is_contended());
    }
    // Other tests of this binary may start helpers of their own meanwhile; 20 abandoned
    // waits without adoption would add 20.
    assert!(
        threads_of_this_process() <= after_first + 3,
        "threads grew from {after_first} to {}",
        threads_of_this_process()
    );
    drop(holder);
}

/// A waiter with a deadline waits in the kernel queue too and gets the lease when the holder
/// releases — also when the holder's process dies.
#[test]
fn a_cancellable_waiter_is_granted_when_the_holder_dies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grant.lock");
    let holder = FlockHolder::hold(&path);
    let token = CancelToken::new();
    let p = path.clone();
    let waiter = std::thread::spawn(move || {
        Lease::acquire(
            &p,
            &Budget::timeout(Duration::from_secs(30)).with_cancel(token),
        )
    });
    holder.kill();
    let lease = waiter
        .join()
        .unwrap()
        .expect("granted after the holder died");
    lease.verify().unwrap();
}

/// Whether thread `tid` (its `/proc` directory) is asleep in the kernel (`S` in its
/// `/proc` stat), twice in a row with a yield between.
fn asleep(tid: &std::path::Path) -> bool {
    let look = || {
        std::fs::read_to_string(tid.join("stat"))
            .is_ok_and(|s| s.rsplit(") ").next().is_some_and(|r| r.starts_with('S')))
    };
    look() && {
        std::thread::yield_now();
        look()
    }
}

/// A cancellation from another thread wakes a waiter asleep behind a holder process (its
/// helper queued in the kernel, itself parked) and ends the wait; the grant the kernel may
/// then give the abandoned helper is let go.
#[test]
fn a_cancellation_from_another_thread_ends_a_kernel_wait_and_its_grant_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cancel.lock");
    let holder = FlockHolder::hold(&path);
    let token = CancelToken::new();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.clone();
    let waiter = std::thread::spawn(move || {
        tx.send(std::fs::read_link("/proc/thread-self").unwrap())
            .unwrap();
        Lease::acquire(&p, &budget)
    });
    let me = std::path::Path::new("/proc").join(rx.recv().unwrap());
    let pid = std::process::id();
    testkit::until("the helper is queued in the kernel", || {
        testkit::blocked_on(pid, &path)
    });
    testkit::until("the waiter is parked", || asleep(&me));
    token.cancel();
    let res = waiter.join().unwrap();
    assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
    assert!(
        testkit::blocked_on(pid, &path),
        "the abandoned helper is still queued"
    );
    testkit::assert_abandoned_grant_let_go(&path, holder);
}

/// The same for a wait abandoned by its deadline.
#[test]
fn a_timed_out_wait_lets_its_later_grant_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deadline.lock");
    let holder = FlockHolder::hold(&path);
    let err = Lease::acquire(&path, &Budget::timeout(Duration::from_millis(20))).unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    assert!(
        testkit::blocked_on(std::process::id(), &path),
        "the helper stays queued"
    );
    testkit::assert_abandoned_grant_let_go(&path, holder);
}
