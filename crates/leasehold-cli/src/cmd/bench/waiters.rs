//! Figures of waiting itself: threads used by 100 async waiters, CPU burnt while waiting,
//! takeover after SIGKILL of the holder, and cancellation / deadline latency.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leasehold::{Budget, CancelToken, Lease};
use rustix::fs::FlockOperation;

use super::crew::{Crew, until_asleep};
use super::worker::{Wait, open_kernel};
use super::{Dist, Plan, Row, Unit, errno_fail, median, mono_ns};
use crate::exit::Failure;

/// All figures of waiting.
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let mut rows = vec![waiter_threads(dir, plan)?];
    rows.push(waiting_cpu(dir, plan)?);
    rows.push(takeover(dir, plan)?);
    rows.extend(cancellation(dir, plan)?);
    Ok(rows)
}

/// Threads of one process while 100 waiters wait on one lease held by another process:
/// `acquire_async` tasks on a current-thread runtime (and, to show the count does not grow
/// with the waiters, just one such task) next to 100 sync waiters, which need a thread each.
fn waiter_threads(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    const WAITERS: usize = 100;
    let lock = dir.join("crowd.lock");
    let held = Lease::try_acquire(&lock).map_err(|e| Failure::of(&e))?;
    let (mut one, mut many, mut sync) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..plan.crowds {
        for (wait, n) in [
            (Wait::Async, 1),
            (Wait::Async, WAITERS),
            (Wait::Lease, WAITERS),
        ] {
            let mut crew = Crew::new();
            let idx = crew.spawn("crowd", &lock, None, (0, n), wait)?;
            let during = crew.expect(idx, "T")?.get(1).copied().unwrap_or(0) as f64;
            // The worker exits while its waiters still wait; the lease stays ours.
            crew.finish(idx);
            match (wait, n) {
                (Wait::Async, 1) => one.push(during),
                (Wait::Async, _) => many.push(during),
                _ => sync.push(during),
            }
        }
    }
    drop(held);
    let (one, many, sync) = (median(&one), median(&many), median(&sync));
    Ok(Row {
        key: "async_waiter_threads",
        name: format!(
            "threads of a process while {WAITERS} async waiters wait (with 1 waiter: {one:.0})"
        ),
        unit: Unit::Count,
        median: many,
        dist: None,
        floor: Some((sync, "100 sync waiters, a thread each")),
        floor_dist: None,
        target: Some(("independent of the number of waiters".into(), many <= one)),
        samples: plan.crowds,
    })
}

/// CPU used by waiters during a ~1 s wait, leasehold and kernel-blocked side by side.
fn waiting_cpu(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    const WAITERS: usize = 2;
    let lib_lock = dir.join("cpu-lease.lock");
    let ker_lock = dir.join("cpu-kernel.lock");
    let mut lease = Lease::try_acquire(&lib_lock).map_err(|e| Failure::of(&e))?;
    let ker_fd = open_kernel(&ker_lock)?;
    rustix::fs::flock(&ker_fd, FlockOperation::NonBlockingLockExclusive)
        .map_err(errno_fail("flock"))?;
    let mut crew = Crew::new();
    for i in 0..2 * WAITERS {
        let kernel = i >= WAITERS;
        let (lock, wait) = if kernel {
            (&ker_lock, Wait::Kernel)
        } else {
            (&lib_lock, Wait::Lease)
        };
        let idx = crew.spawn("wait", lock, None, (0, 0), wait)?;
        crew.expect(idx, "W")?;
        until_asleep(&format!("/proc/{}/stat", crew.pid(idx)))?;
    }
    // The scenario itself: the lease stays held for the whole measured wait.
    std::thread::sleep(Duration::from_millis(plan.cpu_hold_ms));
    lease.release();
    drop(ker_fd);
    let (mut lib, mut ker) = (Vec::new(), Vec::new());
    for _ in 0..2 * WAITERS {
        let (idx, line) = crew.recv()?;
        let nums: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let [_, cpu, wall] = nums[..] else {
            return Err(Failure::failed(format!(
                "bench: malformed worker line {line:?}"
            )));
        };
        let pct = 100.0 * cpu as f64 / wall.max(1) as f64;
        if idx >= WAITERS {
            ker.push(pct)
        } else {
            lib.push(pct)
        }
    }
    for i in 0..2 * WAITERS {
        crew.finish(i);
    }
    let (l, k) = (median(&lib), median(&ker));
    Ok(Row {
        key: "waiting_cpu",
        name: format!(
            "CPU while waiting {} ms, per waiter (% of one core)",
            plan.cpu_hold_ms
        ),
        unit: Unit::Percent,
        median: l,
        dist: None,
        floor: Some((k, "waiter in flock(LOCK_EX)")),
        floor_dist: None,
        target: Some(("≤ 1 % of a core".into(), l <= 1.0)),
        samples: lib.len(),
    })
}

/// From SIGKILL of the holder to the waiter's acquisition.
fn takeover(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    let (mut lib, mut ker) = (Vec::new(), Vec::new());
    for rep in 0..plan.takeovers {
        for kernel in [rep % 2 == 1, rep % 2 == 0] {
            let lock = dir.join(format!("takeover-{rep}-{kernel}.lock"));
            let mut crew = Crew::new();
            let holder = crew.spawn("hold", &lock, None, (0, 0), Wait::Lease)?;
            crew.expect(holder, "H")?;
            let wait = if kernel { Wait::Kernel } else { Wait::Lease };
            let waiter = crew.spawn("wait", &lock, None, (0, 0), wait)?;
            crew.expect(waiter, "W")?;
            until_asleep(&format!("/proc/{}/stat", crew.pid(waiter)))?;
            let killed = mono_ns();
            crew.kill(holder);
            let acquired = crew.expect(waiter, "A")?[0];
            let t = acquired.saturating_sub(killed) as f64;
            if kernel {
                ker.push(t)
            } else {
                lib.push(t)
            }
            crew.finish(waiter);
        }
    }
    let (l, k) = (Dist::of(&lib), Dist::of(&ker));
    Ok(Row {
        key: "takeover_after_sigkill",
        name: "takeover after SIGKILL of the holder (kill → acquire)".into(),
        unit: Unit::Nanos,
        median: l.p50,
        dist: Some(l),
        floor: Some((k.p50, "waiter in flock(LOCK_EX)")),
        floor_dist: Some(k),
        target: Some(("p50 ≤ 1 ms".into(), l.p50 <= 1e6)),
        samples: lib.len(),
    })
}

/// Cancel → return, and deadline → return, for a thread waiting in `Lease::acquire` on a lease
/// held by another process; floors: a thread in `poll` woken by a pipe write, or by its timeout.
fn cancellation(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let lock = dir.join("cancel.lock");
    let mut crew = Crew::new();
    let holder = crew.spawn("hold", &lock, None, (0, 0), Wait::Lease)?;
    crew.expect(holder, "H")?;
    let (mut cancel, mut cancel_floor, mut late, mut late_floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..plan.cancels {
        // Cancel a leasehold waiter.
        let token = CancelToken::new().map_err(|e| Failure::of(&e))?;
        let budget = Budget::unlimited().with_cancel(token.clone());
        let (tx, rx) = mpsc::channel();
        let path = lock.clone();
        let t = std::thread::spawn(move || {
            let _ = tx.send(rustix::thread::gettid().as_raw_nonzero().get());
            let res = Lease::acquire(&path, &budget);
            (Instant::now(), res.is_err())
        });
        let tid = rx
            .recv()
            .map_err(|_| Failure::failed("bench: waiter thread died"))?;
        until_asleep(&format!("/proc/self/task/{tid}/stat"))?;
        let start = Instant::now();
        token.cancel();
        let (end, cancelled) = t
            .join()
            .map_err(|_| Failure::failed("bench: waiter thread panicked"))?;
        if !cancelled {
            return Err(Failure::failed("bench: a cancelled waiter took the lease"));
        }
        cancel.push(end.duration_since(start).as_nanos() as f64);
        cancel_floor.push(poll_wake(None)?);

        // Let a deadline pass.
        let deadline = Instant::now() + Duration::from_millis(10);
        let path = lock.clone();
        let end = std::thread::spawn(move || {
            let _ = Lease::acquire(&path, &Budget::until(deadline));
            Instant::now()
        })
        .join()
        .map_err(|_| Failure::failed("bench: waiter thread panicked"))?;
        late.push(end.saturating_duration_since(deadline).as_nanos() as f64);
        late_floor.push(poll_wake(Some(Duration::from_millis(10)))?);
    }
    crew.finish(holder);
    let row = |key, name: &str, lib: &[f64], floor: &[f64], what| {
        let (l, k) = (Dist::of(lib), Dist::of(floor));
        Row {
            key,
            name: name.into(),
            unit: Unit::Nanos,
            median: l.p50,
            dist: Some(l),
            floor: Some((k.p50, what)),
            floor_dist: Some(k),
            target: Some(("p99 ≤ 1 ms".into(), l.p99 <= 1e6)),
            samples: lib.len(),
        }
    };
    Ok(vec![
        row(
            "cancel_latency",
            "cancellation: cancel() → acquire returns",
            &cancel,
            &cancel_floor,
            "poll woken by a pipe",
        ),
        row(
            "deadline_latency",
            "deadline: deadline passed → acquire returns",
            &late,
            &late_floor,
            "poll timeout overshoot",
        ),
    ])
}

/// Floor for cancellation (`timeout: None`: a thread blocked in `poll` on a pipe, woken by a
/// write; returns write → return) and for deadlines (`Some`: a thread in `poll` with that
/// timeout; returns how late it came back).
fn poll_wake(timeout: Option<Duration>) -> Result<f64, Failure> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let (r, w) = rustix::pipe::pipe().map_err(errno_fail("pipe"))?;
    let (tx, rx) = mpsc::channel();
    let deadline = timeout.map(|d| Instant::now() + d);
    let t = std::thread::spawn(move || {
        let _ = tx.send(rustix::thread::gettid().as_raw_nonzero().get());
        let ts = deadline.map(|d: Instant| {
            let d = d.saturating_duration_since(Instant::now());
            Timespec {
                tv_sec: d.as_secs() as _,
                tv_nsec: d.subsec_nanos() as _,
            }
        });
        let mut fds = [PollFd::new(&r, PollFlags::IN)];
        let _ = rustix::event::poll(&mut fds, ts.as_ref());
        Instant::now()
    });
    let tid = rx
        .recv()
        .map_err(|_| Failure::failed("bench: poll thread died"))?;
    let start = match deadline {
        Some(d) => d,
        None => {
            until_asleep(&format!("/proc/self/task/{tid}/stat"))?;
            let start = Instant::now();
            rustix::io::write(&w, b"x").map_err(errno_fail("write pipe"))?;
            start
        }
    };
    let end = t
        .join()
        .map_err(|_| Failure::failed("bench: poll thread panicked"))?;
    Ok(end.saturating_duration_since(start).as_nanos() as f64)
}
