//! What a [`Budget`] means to an acquisition: a timeout is measured from
//! the start of each acquisition that uses it, a deadline (`until`, or a timeout `started`
//! once) is shared by every step, and a contention error says truly why it did not wait —
//! never "acquire with a Budget that has a timeout" to a budget that had one.
//!
//! The holder is another lease of this process (the in-process claim queue excludes on every
//! platform); every wait here is ended by its budget, never by a sleep.

use std::time::{Duration, Instant};

use leasehold::{Budget, Error, Lease, NotWaited};

const T: Duration = Duration::from_millis(100);

/// The user's report: a `Budget::timeout` kept and used again failed after 111 µs with
/// "not waited for". Each acquisition gets the whole timeout, however old the budget.
#[test]
fn a_timeout_budget_gives_every_acquisition_its_whole_duration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kept.lock");
    let _holder = Lease::try_acquire(&path).unwrap();
    let budget = Budget::timeout(T);
    for attempt in 0..3 {
        let began = Instant::now();
        let err = Lease::acquire(&path, &budget).unwrap_err();
        assert!(
            matches!(&err, Error::TimedOut { waited, .. } if *waited >= T),
            "attempt {attempt}: {err:?}"
        );
        assert!(began.elapsed() >= T, "attempt {attempt} waited less");
    }
}

/// A budget started once is one deadline for several steps; a step that begins after it has
/// passed makes a single try, and its error names the timeout that ran out and by how much.
#[test]
fn a_started_budget_is_shared_and_a_late_step_is_told_it_ran_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steps.lock");
    let _holder = Lease::try_acquire(&path).unwrap();
    let steps = Budget::timeout(T).started();
    let first = Lease::acquire(&path, &steps).unwrap_err();
    assert!(matches!(first, Error::TimedOut { .. }), "{first:?}");
    // A spent budget does not wait again: the error is the single try's (`Contended`, not
    // waited for), never the wait's `TimedOut`.
    let second = Lease::acquire(&path, &steps).unwrap_err();
    match &second {
        Error::Contended {
            why: NotWaited::Expired { late, timeout },
            ..
        } => {
            assert_eq!(*timeout, Some(T));
            assert!(!late.is_zero());
        }
        other => panic!("expected a spent budget, got {other:?}"),
    }
    let message = second.to_string();
    assert!(
        message.contains("not waited for: the 100.0ms budget had already run out")
            && message.contains("before this acquisition began"),
        "{message}"
    );
    assert!(
        !message.contains("acquire with a Budget that has a timeout"),
        "{message}"
    );
    // A deadline that passed before the acquisition began says so, in its own terms.
    let until = Budget::until(Instant::now());
    let err = Lease::acquire(&path, &until).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Contended {
                why: NotWaited::Expired { timeout: None, .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("the Budget::until deadline had passed")
    );
}

/// A single try is told it was one, however it was asked for, and how to wait instead.
#[test]
fn a_single_try_is_told_it_was_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("once.lock");
    let _holder = Lease::try_acquire(&path).unwrap();
    let tries = [
        Lease::try_acquire(&path).unwrap_err(),
        Lease::acquire(&path, &Budget::no_wait()).unwrap_err(),
        Lease::acquire(&path, &Budget::timeout(Duration::ZERO)).unwrap_err(),
        Lease::acquire(&path, &Budget::no_wait().started()).unwrap_err(),
    ];
    for err in tries {
        assert!(
            matches!(
                err,
                Error::Contended {
                    why: NotWaited::SingleTry,
                    ..
                }
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.ends_with(
                "not waited for (a single try; to wait, acquire with a Budget::timeout)"
            ),
            "{message}"
        );
    }
}

/// A blocking wait parked behind another lease of this very process is in no `flock` that a
/// signal could interrupt, so it asks its [`Budget::on_interrupt`] hook every 20 ms instead,
/// and stops when told: the Python package's Ctrl-C there took effect only when the other
/// lease was released (3.0 s measured). Nothing is held afterwards.
#[cfg(not(target_os = "wasi"))]
#[test]
fn a_wait_parked_behind_a_lease_of_this_process_asks_its_interrupt_hook() {
    use std::ops::ControlFlow;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("parked.lock");
    let held = Lease::try_acquire(&path).unwrap();
    let (stop, asked) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let budget = Budget::unlimited().on_interrupt({
        let (stop, asked) = (stop.clone(), asked.clone());
        move || {
            asked.fetch_add(1, Ordering::SeqCst);
            match stop.load(Ordering::SeqCst) {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            }
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let waiting = path.clone();
    std::thread::spawn(move || {
        let _ = tx.send(Lease::acquire(&waiting, &budget));
    });
    let end = Instant::now() + Duration::from_secs(20);
    while asked.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < end, "the parked wait never asked its hook");
        std::thread::yield_now();
    }
    stop.store(true, Ordering::SeqCst);
    let res = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the wait ended while the other lease was still held");
    assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
    drop(held);
    let _free = Lease::try_acquire(&path).expect("nothing of the stopped wait holds the lock");
}
