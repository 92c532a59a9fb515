//! [`Budget::on_interrupt`]: an inline wait (unlimited, no token) that a signal interrupts
//! asks the hook on the waiting thread; `Break` ends it with `Cancelled` and nothing held,
//! `Continue` keeps it in line until the grant. A real holder process (util-linux `flock`)
//! holds the lock; the waiter is seen queued in the kernel (`/proc/locks`) before it is
//! signalled, with a handler installed without `SA_RESTART`, as CPython installs SIGINT's.

use std::ops::ControlFlow;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use testkit::{FlockHolder, blocked_on, holds, until};

use crate::error::Error;
use crate::sys::test_signal;
use crate::{Budget, Lease};

/// How long a wait that should have ended may take before the test fails (not a sleep:
/// only a bound that turns a hang into a failure).
const HANG: Duration = Duration::from_secs(20);

/// Starts a thread that waits inline for `path` with `hook`, and returns it once the kernel
/// shows it queued: the thread, its result's channel and how often the hook was asked.
fn waiter(
    path: &std::path::Path,
    answer: ControlFlow<()>,
) -> (
    std::thread::JoinHandle<()>,
    test_signal::Thread,
    mpsc::Receiver<crate::Result<Lease>>,
    Arc<AtomicU32>,
) {
    let asked = Arc::new(AtomicU32::new(0));
    let budget = Budget::unlimited().on_interrupt({
        let asked = asked.clone();
        move || {
            asked.fetch_add(1, Ordering::SeqCst);
            answer
        }
    });
    let (tx, rx) = mpsc::channel();
    let (id_tx, id_rx) = mpsc::channel();
    let waiting = path.to_path_buf();
    let thread = std::thread::spawn(move || {
        id_tx.send(test_signal::this_thread()).unwrap();
        let _ = tx.send(Lease::acquire(&waiting, &budget));
    });
    let id = id_rx.recv().unwrap();
    until("the waiter is queued in the kernel", || {
        blocked_on(std::process::id(), path)
    });
    (thread, id, rx, asked)
}

#[test]
fn a_hook_that_stops_ends_an_interrupted_inline_wait_with_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stop.lock");
    let holder = FlockHolder::hold(&path);
    let (thread, id, rx, asked) = waiter(&path, ControlFlow::Break(()));
    test_signal::interrupt(id);
    let res = rx
        .recv_timeout(HANG)
        .expect("the hook's stop ended the wait");
    thread.join().unwrap();
    assert!(
        matches!(&res, Err(Error::Cancelled { path: p }) if *p == path),
        "{res:?}"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let me = std::process::id();
    assert!(
        !holds(me, &path) && !blocked_on(me, &path),
        "nothing held, nothing in line"
    );
    // Nobody of ours takes the lock once the holder lets go: a next holder gets it at once.
    holder.release();
    let next = Command::new("flock")
        .args(["-n"])
        .arg(&path)
        .arg("true")
        .status()
        .unwrap();
    assert!(next.success(), "flock -n after the stopped wait: {next}");
}

#[test]
fn a_hook_that_goes_on_keeps_the_wait_in_line_until_the_grant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("go-on.lock");
    let holder = FlockHolder::hold(&path);
    let (thread, id, rx, asked) = waiter(&path, ControlFlow::Continue(()));
    test_signal::interrupt(id);
    until("the hook is asked", || asked.load(Ordering::SeqCst) == 1);
    until("the waiter is queued again", || {
        blocked_on(std::process::id(), &path)
    });
    assert!(rx.try_recv().is_err(), "still waiting");
    holder.release();
    let lease = rx
        .recv_timeout(HANG)
        .expect("the grant ended the wait")
        .expect("the lease");
    thread.join().unwrap();
    lease.verify().unwrap();
    // The lock is this lease's: another process is refused it until the lease is dropped.
    // (Asked of the kernel by trying it, not by the owner `/proc/locks` names.)
    let try_lock = || {
        Command::new("flock")
            .arg("-n")
            .arg(&path)
            .arg("true")
            .status()
            .unwrap()
            .success()
    };
    assert!(!try_lock(), "the granted lease does not hold the lock");
    drop(lease);
    assert!(
        try_lock(),
        "the lock stayed held after the lease was dropped"
    );
}
