//! Handoff between worker processes: the lease passed from one holder to a waiting one,
//! sync and async waiters next to waiters blocked in the kernel's `flock(LOCK_EX)`.
//!
//! The cued scenario: a `handoff` worker contends again only when the worker that took the
//! lease after it cues it, and that holder starts its hold only once the cue is answered,
//! so every release has the other N−1 workers waiting: each handoff measured is a real
//! handoff to a waiter, never a holder re-taking its own lease. Cues go worker to worker,
//! not through the parent. (Being cued, it cannot show a releaser re-taking the lease
//! before a woken waiter gets there.)

use std::path::Path;

use rustix::fs::{CWD, Mode};

use super::crew::Crew;
use super::report::{Dist, Plan, Row, Unit, errno_fail, io_fail};
use super::role::Wait;
use super::worker::{PARENT, open_turn, turn_path};
use crate::exit::Failure;

/// One handoff run: `n` workers pass the lease around until `count` handoffs to a waiting
/// worker were seen. Returns release→acquire latencies (ns).
fn handoff_run(
    dir: &Path,
    n: usize,
    wait: Wait,
    count: usize,
    tag: &str,
) -> Result<Vec<f64>, Failure> {
    let lock = dir.join(format!("handoff-{tag}.lock"));
    let stamp = dir.join(format!("handoff-{tag}.stamp"));
    std::fs::write(&stamp, [0u8; 16]).map_err(io_fail("create stamp file"))?;
    let mut turns = Vec::with_capacity(n);
    for i in 0..n {
        rustix::fs::mknodat(
            CWD,
            turn_path(&stamp, i),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .map_err(errno_fail("create turn FIFO"))?;
        turns.push(open_turn(&stamp, i)?);
    }
    let mut crew = Crew::new();
    for i in 0..n {
        crew.spawn("handoff", &lock, Some(&stamp), (i, n), wait)?;
    }
    for t in &turns {
        rustix::io::write(t, &[b'g', PARENT]).map_err(errno_fail("cue a worker"))?;
    }
    let warmup = n * 4;
    let mut samples = Vec::with_capacity(count);
    let mut seen = 0usize;
    while samples.len() < count {
        let (_, line) = crew.recv()?;
        let nums: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let [latency, waited, ..] = nums[..] else {
            return Err(Failure::failed(format!(
                "bench: malformed worker line {line:?}"
            )));
        };
        seen += 1;
        // A turn taken without waiting (its cue came after the release) is no handoff.
        if seen > warmup && waited == 1 && latency > 0 {
            samples.push(latency as f64);
        }
        if seen > warmup + count * 4 {
            return Err(Failure::failed(
                "bench: too few handoffs went to a waiting process",
            ));
        }
    }
    for t in &turns {
        rustix::io::write(t, &[b's', PARENT]).map_err(errno_fail("stop a worker"))?;
    }
    for i in 0..n {
        crew.finish(i);
    }
    Ok(samples)
}

pub(super) fn handoff(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let mut rows = Vec::new();
    for n in [2usize, 4] {
        // With 4 processes, async waiters join: their figure is read against the sync one.
        let kinds: &[Wait] = if n == 4 {
            &[Wait::Kernel, Wait::Lease, Wait::Async]
        } else {
            &[Wait::Kernel, Wait::Lease]
        };
        let mut dists = vec![Vec::new(); kinds.len()];
        let mut counts = vec![0usize; kinds.len()];
        for rep in 0..plan.repeats.min(5) {
            // Rotate which goes first, so none always runs on a warmer machine.
            for k in 0..kinds.len() {
                let i = (k + rep) % kinds.len();
                let wait = kinds[i];
                let s = handoff_run(dir, n, wait, plan.handoffs, &format!("{n}-{rep}-{wait:?}"))?;
                counts[i] += s.len();
                dists[i].push(Dist::of(&s));
            }
        }
        let d: Vec<Dist> = dists.iter().map(|v| Dist::median_of(v)).collect();
        let (k, l) = (d[0], d[1]);
        let ratio = if k.p50 > 0.0 {
            l.p50 / k.p50
        } else {
            f64::INFINITY
        };
        // The lease's waiter makes one call on the hand-over's path that the floor's does
        // not, the inode check's `newfstatat` (BENCHMARKS.md,
        // "Cued hand-over at 4 processes").
        let (target, met) = if n == 4 {
            ("p50 ≤ 1.5× floor, p99 ≤ 2 ms", ratio <= 1.5 && l.p99 <= 2e6)
        } else {
            ("p50 ≤ 1.5× floor", ratio <= 1.5)
        };
        rows.push(Row {
            key: if n == 2 { "handoff_2" } else { "handoff_4" },
            name: format!("handoff, {n} processes, 100 µs holds (release → next acquire)"),
            unit: Unit::Nanos,
            median: l.p50,
            dist: Some(l),
            floor: Some((k.p50, "waiters in flock(LOCK_EX)")),
            floor_dist: Some(k),
            target: Some((target.into(), met)),
            samples: counts[1],
        });
        // An async waiter's grant reaches it through a helper thread: one more wake-up of a
        // sleeping thread than the sync waiter's (BENCHMARKS.md, "Async cued hand-over").
        if let Some(a) = d.get(2) {
            let met = l.p50 > 0.0 && a.p50 <= 2.0 * l.p50;
            rows.push(Row {
                key: "async_handoff_4",
                name: format!(
                    "async handoff, {n} processes (acquire_async tasks, current-thread runtime)"
                ),
                unit: Unit::Nanos,
                median: a.p50,
                dist: Some(*a),
                floor: Some((l.p50, "sync Lease::acquire waiters")),
                floor_dist: Some(l),
                target: Some(("p50 ≤ 2× sync".into(), met)),
                samples: counts[2],
            });
        }
    }
    Ok(rows)
}
