//! Shared-mode figures: what a shared lease costs next to the kernel floor, and
//! how long an exclusive waiter takes to get in while four processes hold shared leases in
//! loops that overlap each other continuously — next to what `flock -s` readers (plain
//! `flock(LOCK_SH)`, the kernel floor) do to a `flock -x` waiter (plain `flock(LOCK_EX)`).
//!
//! The readers are worker processes (`leasehold worker bench share`): each, a quarter hold
//! out of phase with the previous one, loops *take shared → hold [`READER_HOLD_NS`] (asleep) →
//! release → take again at once* until the run's end, so the lock is never free. It prints
//! `L` once it first holds. Once all four have, a writer worker (`wait`) is started, prints
//! `W`, waits for the lease and reports how long it waited. With leasehold the writer gets in
//! as soon as the readers present when it started have released (the gate holds newcomers
//! back); with plain flock it gets in only if the readers' gaps happen to coincide, which in
//! practice is when they stop at the end of the run.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use leasehold::{Budget, SharedLease};
use rustix::fs::{CWD, FlockOperation, Mode, OFlags};

use super::crew::Crew;
use super::micro::{Op, measure_batches};
use super::report::{Dist, Plan, Row, Unit, errno_fail, median, mono_ns};
use super::role::{Held, Method, Wait, lock_kernel};
use crate::exit::Failure;

/// How long a looping reader holds its shared lease per turn.
pub(super) const READER_HOLD_NS: u64 = 5_000_000;
/// Readers in the writer scenario.
const READERS: usize = 4;

/// Both figures.
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let mut rows = vec![acquire_cost(dir, plan)?];
    rows.push(writer_under_readers(dir, plan)?);
    Ok(rows)
}

/// The kernel floor of a shared acquisition: open (create), `flock(LOCK_SH|LOCK_NB)`, close.
fn shared_floor(path: &Path) -> Result<(), Failure> {
    let fd: OwnedFd = rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(errno_fail("open"))?;
    rustix::fs::flock(&fd, FlockOperation::NonBlockingLockShared).map_err(errno_fail("flock"))?;
    drop(fd);
    Ok(())
}

/// `SharedLease::try_acquire` + drop, uncontended, next to the floor (interleaved batches).
fn acquire_cost(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    let lease_path = dir.join("shared-cost.lock");
    let floor_path = dir.join("shared-floor.lock");
    let mut ops: Vec<Op<'_>> = vec![
        Box::new(|| {
            drop(SharedLease::try_acquire(&lease_path).map_err(|e| Failure::of(&e))?);
            Ok(())
        }),
        Box::new(|| shared_floor(&floor_path)),
    ];
    let per_op = measure_batches(&mut ops, plan.repeats, plan.batch)?;
    Ok(Row {
        key: "shared_try_acquire",
        name: "SharedLease::try_acquire + drop (safe open, gate, LOCK_SH, verify, close)".into(),
        unit: Unit::Nanos,
        median: median(&per_op[0]),
        dist: None,
        floor: Some((median(&per_op[1]), "open + flock(LOCK_SH) + close")),
        floor_dist: None,
        target: None,
        samples: per_op[0].len(),
    })
}

/// How long writers waited, per way of locking: leasehold (`SharedLease` readers, a `Lease`
/// writer) and the kernel floor (`flock(LOCK_SH)` readers, a `flock(LOCK_EX)` writer).
fn writer_under_readers(dir: &Path, plan: &Plan) -> Result<Row, Failure> {
    let run_ms = if plan.quick { 1000 } else { 3000 };
    let runs = if plan.quick { 1 } else { 3 };
    let writers = if plan.quick { 5 } else { 15 };
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    let mut floor_starved = 0usize;
    for rep in 0..runs {
        let lock = dir.join(format!("shared-writer-{rep}.lock"));
        ours.extend(one_run(&lock, Method::Lease, run_ms, writers)?.0);
        let lock = dir.join(format!("shared-writer-floor-{rep}.lock"));
        let (waits, starved) = one_run(&lock, Method::Floor, run_ms, 1)?;
        floor.extend(waits);
        floor_starved += starved;
    }
    let hold = READER_HOLD_NS as f64;
    let dist = Dist::of(&ours);
    let target = 2.0 * hold;
    Ok(Row {
        key: "writer_among_shared_holders",
        name: format!(
            "exclusive waiter's wait while {READERS} processes overlap shared holds of {} ms (leasehold: gate)",
            READER_HOLD_NS / 1_000_000
        ),
        unit: Unit::Nanos,
        median: dist.p50,
        dist: Some(dist),
        floor: Some((
            median(&floor),
            if floor_starved == floor.len() {
                "flock -s readers vs flock -x: starved until the readers stopped, every run"
            } else {
                "flock -s readers vs flock -x waiter"
            },
        )),
        floor_dist: Some(Dist::of(&floor)),
        target: Some((
            format!("p99 ≤ 2 reader holds ({:.0} ms)", target / 1e6),
            dist.p99 <= target,
        )),
        samples: ours.len(),
    })
}

/// One run: four readers loop with `method` for `run_ms`; `writers` writers, one after the
/// other, each wait for the lease while they do. Returns each writer's wait (ns) and how many
/// got in only once the readers had stopped.
fn one_run(
    lock: &Path,
    method: Method,
    run_ms: u64,
    writers: usize,
) -> Result<(Vec<f64>, usize), Failure> {
    let mut crew = Crew::new();
    for i in 0..READERS {
        let args = [format!("--index={i}"), format!("--method={}", method.arg())];
        crew.spawn_args("share", lock, None, &args)?;
    }
    for _ in 0..READERS {
        expect_line(&crew, "R")?;
    }
    let end = mono_ns() + run_ms * 1_000_000;
    for i in 0..READERS {
        crew.send(i, &format!("go {end}"))?;
    }
    for _ in 0..READERS {
        expect_line(&crew, "L")?;
    }
    let wait = match method {
        Method::Floor => Wait::Kernel,
        _ => Wait::Lease,
    };
    let (mut waits, mut starved, mut done) = (Vec::new(), 0, 0);
    for w in 0..writers {
        // Leave the readers' last turns out: a writer must start while they loop.
        if mono_ns() + 4 * READER_HOLD_NS >= end {
            break;
        }
        let idx = crew.spawn("wait", lock, None, (READERS + w, 0), wait)?;
        // A starved writer gets in only after the readers stopped: their `D` lines may come
        // first.
        let (acquired, wall) = loop {
            let (from, line) = crew.recv()?;
            let mut it = line.split_whitespace();
            match (from == idx, it.next()) {
                (true, Some("W")) => {}
                (true, Some("A")) => {
                    let n: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
                    let [acquired, _cpu, wall] = n[..] else {
                        return Err(Failure::failed(format!("bench: malformed line {line:?}")));
                    };
                    break (acquired, wall);
                }
                (false, Some("D")) => done += 1,
                _ => {
                    return Err(Failure::failed(format!(
                        "bench: unexpected worker line {line:?}"
                    )));
                }
            }
        };
        waits.push(wall as f64);
        if acquired >= end {
            starved += 1;
        }
        crew.finish(idx);
    }
    for _ in done..READERS {
        expect_line(&crew, "D")?;
    }
    for i in 0..READERS {
        crew.finish(i);
    }
    Ok((waits, starved))
}

fn expect_line(crew: &Crew, tag: &str) -> Result<(), Failure> {
    let (_, line) = crew.recv()?;
    match line.split_whitespace().next() {
        Some(t) if t == tag => Ok(()),
        _ => Err(Failure::failed(format!(
            "bench: unexpected worker line {line:?} (wanted {tag})"
        ))),
    }
}

/// The `share` worker role: see the module documentation. `index` sets the phase.
pub(super) fn share_loop(
    lock: &Path,
    method: Method,
    index: usize,
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
) -> Result<u64, Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, s: &str| {
        writeln!(out, "{s}")
            .and_then(|()| out.flush())
            .map_err(super::report::io_fail("report"))
    };
    say(&mut out, "R")?;
    let end: u64 = match lines.next() {
        Some(Ok(line)) => line
            .strip_prefix("go ")
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| Failure::failed(format!("bench: bad cue {line:?}")))?,
        _ => return Ok(0),
    };
    let hold = Duration::from_nanos(READER_HOLD_NS);
    std::thread::sleep(hold / READERS as u32 * index as u32);
    let mut turns = 0u64;
    while mono_ns() < end {
        let held = match method {
            Method::Floor => Held::Kernel(lock_kernel(lock, true)?),
            _ => Held::Lease(
                SharedLease::acquire(lock, &Budget::unlimited())
                    .map_err(|e| Failure::of(&e))?
                    .into(),
            ),
        };
        if turns == 0 {
            say(&mut out, "L")?;
        }
        turns += 1;
        std::thread::sleep(hold);
        drop(held);
    }
    say(&mut out, &format!("D {turns}"))?;
    Ok(turns)
}
