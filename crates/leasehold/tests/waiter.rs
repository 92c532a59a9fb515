//! The waiter of the primitive (issue 12): waits sit in the kernel's own flock queue, and a
//! waiter that gives up leaves nothing of ours holding the lease, ever.
//!
//! Holders are real processes (util-linux `flock`); every wait here is ended by its budget or
//! by a real release, never by a sleep.
#![cfg(target_os = "linux")]

use std::time::Duration;

use leasehold::{Budget, CancelToken, Holders, Lease};
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
