//! Figures of waiting itself: threads used by 100 async waiters, CPU burnt while waiting,
//! takeover after SIGKILL of the holder, and cancellation / deadline latency.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[cfg(unix)]
use leasehold::Lease;
use leasehold::{Budget, CancelToken};
#[cfg(unix)]
use rustix::fs::FlockOperation;

use super::crew::{Crew, this_thread, until_process_waits, until_thread_waits};
#[cfg(windows)]
use super::report::NotMeasured;
use super::report::{Dist, Plan, Row, Unit, mono_ns};
#[cfg(unix)]
use super::report::{errno_fail, median};
use super::role::Wait;
#[cfg(unix)]
use super::role::open_kernel;
use crate::exit::Failure;
use crate::platform::KILL;

/// All figures of waiting.
#[cfg(unix)]
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let mut rows = waiter_threads(dir, plan)?;
    rows.push(waiting_cpu(dir, plan)?);
    rows.push(takeover(dir, plan)?);
    rows.extend(cancellation(dir, plan)?);
    Ok(rows)
}

/// The figures of waiting that Windows lets us measure, and why the others are not.
#[cfg(windows)]
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<(Vec<Row>, Vec<NotMeasured>), Failure> {
    let mut rows = vec![takeover(dir, plan)?];
    rows.extend(cancellation(dir, plan)?);
    let not = vec![
        NotMeasured::new(
            "async_waiter_threads",
            "threads of a process while 100 async waiters wait",
            "thread counts come from /proc (Linux)",
        ),
        NotMeasured::new(
            "crowd_waiting_cpu",
            "CPU of a process while 100 async waiters wait",
            "no process CPU clock without unsafe Win32 calls (GetProcessTimes)",
        ),
        NotMeasured::new(
            "waiting_cpu",
            "CPU while waiting",
            "no process CPU clock without unsafe Win32 calls (GetProcessTimes); Windows waiters poll (1 → 16 ms back-off)",
        ),
    ];
    Ok((rows, not))
}

/// Threads of one process while 100 waiters wait on one lease held by another process:
/// `acquire_async` tasks on a current-thread runtime (and, to show the count does not grow
/// with the waiters, just one such task) next to 100 sync waiters, which need a thread each;
/// and the CPU that process uses while the 100 wait (`cpu_hold_ms`): what the waiters' own
/// timers cost.
#[cfg(unix)]
fn waiter_threads(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    const WAITERS: usize = 100;
    let lock = dir.join("crowd.lock");
    let held = Lease::try_acquire(&lock).map_err(|e| Failure::of(&e))?;
    let (mut one, mut many, mut sync) = (Vec::new(), Vec::new(), Vec::new());
    let (mut many_cpu, mut sync_cpu) = (Vec::new(), Vec::new());
    for _ in 0..plan.crowds {
        for (wait, n) in [
            (Wait::Async, 1),
            (Wait::Async, WAITERS),
            (Wait::Lease, WAITERS),
        ] {
            let mut crew = Crew::new();
            let idx = crew.spawn("crowd", &lock, None, (0, n), wait)?;
            let during = crew.expect(idx, "T")?.get(1).copied().unwrap_or(0) as f64;
            if n == WAITERS {
                // The scenario itself: the waiters wait this long while their CPU is read.
                crew.send(idx, &format!("c {}", plan.cpu_hold_ms))?;
                let [cpu, wall] = crew.expect(idx, "C")?[..] else {
                    return Err(Failure::failed("bench: malformed crowd CPU line"));
                };
                let pct = 100.0 * cpu as f64 / wall.max(1) as f64;
                match wait {
                    Wait::Async => many_cpu.push(pct),
                    _ => sync_cpu.push(pct),
                }
            }
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
    let (many_cpu, sync_cpu) = (median(&many_cpu), median(&sync_cpu));
    let cpu = Row {
        key: "crowd_waiting_cpu",
        name: format!(
            "CPU of a process while {WAITERS} async waiters wait {} ms (% of one core)",
            plan.cpu_hold_ms
        ),
        unit: Unit::Percent,
        median: many_cpu,
        dist: None,
        floor: Some((sync_cpu, "100 sync waiters")),
        floor_dist: None,
        target: Some(("≤ 1 % of a core".into(), many_cpu <= 1.0)),
        samples: plan.crowds,
    };
    let threads = Row {
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
    };
    Ok(vec![threads, cpu])
}

/// CPU used by waiters during a ~1 s wait, leasehold and kernel-blocked side by side.
#[cfg(unix)]
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
        until_process_waits(crew.pid(idx))?;
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

/// From the kill of the holder (SIGKILL; Windows: TerminateProcess) to the waiter's
/// acquisition; next to a waiter in `flock(LOCK_EX)` where there is one (not on Windows).
fn takeover(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    let (mut lib, mut ker) = (Vec::new(), Vec::new());
    let kinds: &[bool] = if cfg!(unix) { &[false, true] } else { &[false] };
    for rep in 0..plan.takeovers {
        for k in 0..kinds.len() {
            let kernel = kinds[(k + rep) % kinds.len()];
            let lock = dir.join(format!("takeover-{rep}-{kernel}.lock"));
            let mut crew = Crew::new();
            let holder = crew.spawn("hold", &lock, None, (0, 0), Wait::Lease)?;
            crew.expect(holder, "H")?;
            let wait = if kernel { Wait::Kernel } else { Wait::Lease };
            let waiter = crew.spawn("wait", &lock, None, (0, 0), wait)?;
            crew.expect(waiter, "W")?;
            until_process_waits(crew.pid(waiter))?;
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
    let (l, k) = (Dist::of(&lib), (!ker.is_empty()).then(|| Dist::of(&ker)));
    Ok(Row {
        key: "takeover_after_sigkill",
        name: format!("takeover after {KILL} of the holder (kill → acquire)"),
        unit: Unit::Nanos,
        median: l.p50,
        dist: Some(l),
        floor: k.map(|k| (k.p50, "waiter in flock(LOCK_EX)")),
        floor_dist: k,
        target: Some(("p50 ≤ 1 ms".into(), l.p50 <= 1e6)),
        samples: lib.len(),
    })
}

/// Cancel → return, and deadline → return, for a thread waiting in `Lease::acquire` on a lease
/// held by another process; floors: a parked thread woken by `unpark`, or by its timeout.
fn cancellation(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let lock = dir.join("cancel.lock");
    let mut crew = Crew::new();
    let holder = crew.spawn("hold", &lock, None, (0, 0), Wait::Lease)?;
    crew.expect(holder, "H")?;
    let (mut cancel, mut cancel_floor, mut late, mut late_floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..plan.cancels {
        // Cancel a leasehold waiter.
        let token = CancelToken::new();
        let budget = Budget::unlimited().with_cancel(token.clone());
        let (tx, rx) = mpsc::channel();
        let path = lock.clone();
        let t = std::thread::spawn(move || {
            // Windows: the thread sees the lease held before it says it waits.
            #[cfg(windows)]
            let _ = leasehold::Lease::try_acquire(&path);
            let _ = tx.send(this_thread());
            let res = leasehold::Lease::acquire(&path, &budget);
            (Instant::now(), res.is_err())
        });
        let tid = rx
            .recv()
            .map_err(|_| Failure::failed("bench: waiter thread died"))?;
        until_thread_waits(tid)?;
        let start = Instant::now();
        token.cancel();
        let (end, cancelled) = t
            .join()
            .map_err(|_| Failure::failed("bench: waiter thread panicked"))?;
        if !cancelled {
            return Err(Failure::failed("bench: a cancelled waiter took the lease"));
        }
        cancel.push(end.duration_since(start).as_nanos() as f64);
        cancel_floor.push(park_wake(None)?);

        // Let a deadline pass.
        let deadline = Instant::now() + Duration::from_millis(10);
        let path = lock.clone();
        let end = std::thread::spawn(move || {
            let _ = leasehold::Lease::acquire(&path, &Budget::until(deadline));
            Instant::now()
        })
        .join()
        .map_err(|_| Failure::failed("bench: waiter thread panicked"))?;
        late.push(end.saturating_duration_since(deadline).as_nanos() as f64);
        late_floor.push(park_wake(Some(Duration::from_millis(10)))?);
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
            "parked thread woken by unpark",
        ),
        row(
            "deadline_latency",
            "deadline: deadline passed → acquire returns",
            &late,
            &late_floor,
            "park_timeout overshoot",
        ),
    ])
}

/// The floor for cancellation (`timeout: None`: a parked thread woken by `unpark`, as a
/// cancelled waiter is; returns unpark → return) and for deadlines (`Some`: a thread in
/// `park_timeout`; returns how late it came back).
fn park_wake(timeout: Option<Duration>) -> Result<f64, Failure> {
    let deadline = timeout.map(|d| Instant::now() + d);
    let woken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = woken.clone();
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(this_thread());
        match deadline {
            Some(d) => std::thread::park_timeout(d.saturating_duration_since(Instant::now())),
            None => {
                while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::park();
                }
            }
        }
        Instant::now()
    });
    let tid = rx
        .recv()
        .map_err(|_| Failure::failed("bench: parked thread died"))?;
    let start = match deadline {
        Some(d) => d,
        None => {
            until_thread_waits(tid)?;
            let start = Instant::now();
            woken.store(true, std::sync::atomic::Ordering::SeqCst);
            t.thread().unpark();
            start
        }
    };
    let end = t
        .join()
        .map_err(|_| Failure::failed("bench: parked thread panicked"))?;
    Ok(end.saturating_duration_since(start).as_nanos() as f64)
}
