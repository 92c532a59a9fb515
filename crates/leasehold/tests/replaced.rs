//! A waiter does not poll — neither the lock nor its path. It waits on the
//! inode it opened; a lock file replaced meanwhile is followed when that inode's holder lets
//! go (the kernel wakes the waiter, whose grant's inode check finds the replacement), never
//! earlier: a waiter queued behind a holder must not take the lease beside it. (Waiters
//! looked at the path every 100 ms, and followed a replacement within that, beside the
//! holder they waited for.)
//!
//! Holders are real processes (util-linux `flock`). A waiter is known to wait when the kernel
//! shows it blocked on the lock file's inode (`/proc/locks`, reached through a second link
//! to the inode, which the replacement leaves in place); the waiter's deadline running out
//! with the holder still holding is the behaviour under test, never a sleep.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::time::Duration;

use leasehold::{Budget, CancelToken, Lease};
use testkit::{FlockHolder, blocked_on, until};

/// Puts a new, free lock file at `lock` (by rename, as a backup restore would).
fn replace(lock: &Path) {
    let fresh = lock.with_extension("fresh");
    std::fs::write(&fresh, b"").unwrap();
    std::fs::rename(&fresh, lock).unwrap();
}

/// The name of the thread [`waiting`] starts (at most 15 bytes: it is its `comm`).
const WAITER: &str = "replaced-waiter";

/// Starts `acquire` on a thread of this process and returns once the kernel shows this
/// process blocked on the inode `link` names.
fn waiting<T: Send + 'static>(
    link: &Path,
    acquire: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let waiter = std::thread::Builder::new()
        .name(WAITER.into())
        .spawn(acquire)
        .unwrap();
    until("the waiter waits in the kernel", || {
        assert!(!waiter.is_finished(), "the waiter ended before it waited");
        blocked_on(std::process::id(), link)
    });
    waiter
}

/// Whether the [`WAITER`] thread is asleep in the kernel (state `S` in its `stat`).
fn waiter_asleep() -> bool {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .any(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            comm.trim_end() == WAITER
                && stat
                    .rsplit_once(')')
                    .is_some_and(|(_, rest)| rest.trim_start().starts_with('S'))
        })
}

#[test]
fn a_waiter_follows_a_replaced_lock_file_only_once_its_holder_lets_go() {
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: a_waiter_follows_a_replaced_lock_file_only_once_its_holder_lets_go: needs /proc/locks to see a waiter blocked (off in the portable build)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("r.lock");
    let link = tmp.path().join("r.link");

    // While the replaced file's holder holds it, the waiter stays in line behind it: its
    // deadline runs out although the file at the path is free.
    let holder = FlockHolder::hold(&lock);
    std::fs::hard_link(&lock, &link).unwrap();
    let path = lock.clone();
    let w = waiting(&link, move || {
        Lease::acquire(&path, &Budget::timeout(Duration::from_millis(1500)))
    });
    replace(&lock);
    let got = w.join().unwrap();
    assert!(
        got.as_ref().is_err_and(|e| e.is_contended()),
        "took the lease beside the holder it waited for: {got:?}"
    );

    // Once that holder lets go, the waiter follows the path and holds the file there.
    drop(holder);
    std::fs::remove_file(&link).unwrap();
    let holder = FlockHolder::hold(&lock);
    std::fs::hard_link(&lock, &link).unwrap();
    let path = lock.clone();
    let token = CancelToken::new();
    let budget = Budget::timeout(Duration::from_secs(30)).with_cancel(token);
    let w = waiting(&link, move || Lease::acquire(&path, &budget));
    replace(&lock);
    holder.kill();
    let lease = w
        .join()
        .unwrap()
        .expect("the lease, on the file now at the path");
    lease.verify().expect("it is the file at the path");
    drop(lease);

    // Where the file it follows to is held too, it waits again, asleep: the wake-up of its
    // grant on the replaced file is spent, not left to wake it again and again.
    std::fs::remove_file(&link).unwrap();
    let first = FlockHolder::hold(&lock);
    std::fs::hard_link(&lock, &link).unwrap();
    let path = lock.clone();
    let token = CancelToken::new();
    let budget = Budget::timeout(Duration::from_secs(30)).with_cancel(token);
    let w = waiting(&link, move || Lease::acquire(&path, &budget));
    replace(&lock);
    let second = FlockHolder::hold(&lock);
    first.kill();
    until("the waiter waits for the file now at the path", || {
        blocked_on(std::process::id(), &lock)
    });
    until("the waiting thread sleeps", waiter_asleep);
    second.kill();
    let lease = w
        .join()
        .unwrap()
        .expect("the lease, once the second holder went");
    lease.verify().expect("it is the file at the path");
}

/// A lock file unlinked under its holder (by hand, or by a program that knows nothing of
/// leases) is left by its waiters within about a second: they follow the path, as a newcomer
/// would, instead of staying queued on a file nobody can name until its holder lets go.
#[test]
fn a_waiter_leaves_a_lock_file_unlinked_under_its_holder() {
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: a_waiter_leaves_a_lock_file_unlinked_under_its_holder: needs /proc/locks to see a waiter blocked (off in the portable build)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("u.lock");
    let holder = FlockHolder::hold(&lock);
    let path = lock.clone();
    // A deadline far beyond the check: the wait ends by following the path, or fails.
    let budget = Budget::timeout(Duration::from_secs(20)).with_cancel(CancelToken::new());
    let w = waiting(&lock, move || Lease::acquire(&path, &budget));
    std::fs::remove_file(&lock).unwrap();
    let lease = w.join().unwrap().expect(
        "the lease on the file now at the path, while the old holder keeps the unlinked one",
    );
    lease.verify().expect("it is the file at the path");
    drop(lease);
    holder.kill();
}
