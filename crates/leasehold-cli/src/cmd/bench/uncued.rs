//! The uncued back-to-back handoff: what a program doing many short mutations sees.
//!
//! W worker processes (`loop` role, see `worker.rs`) each loop *acquire → hold 100 µs
//! (asleep) → release → acquire again at once* for a fixed wall time, with no cue between
//! them: a releaser races the waiters it just woke, exactly as in real use. (The cued
//! `handoff` scenario cannot show that race: there a releaser contends again only when the
//! next holder cues it.) Every worker records, per acquisition, when it started to acquire,
//! when it had the lease and when it released, in raw `CLOCK_MONOTONIC` nanoseconds; the
//! parent merges all workers' records and orders them by acquisition time. The lease is
//! exclusive, so that order is the order of holders, and from it:
//!
//! * **owner changed**: the fraction of acquisitions whose previous holder was another
//!   worker (with W workers a fair lock changes owner most of the time; a lock that lets
//!   its releaser barge changes owner rarely);
//! * **handoff**: release by one worker → acquisition by a *different* worker;
//! * **contended wait**: start of acquiring → acquired, for acquisitions that started
//!   while the lease was held (p99 and max: starvation shows in the tail). A wait counts
//!   when it overlaps the measured window, so a waiter starved from the start until the
//!   others stop at the end of the run is counted, with its whole wait (then a lower bound:
//!   the run's end cut it short);
//! * **acquisitions/s** over the measured window.
//!
//! Each method runs W = 2 and 4 workers for `Plan::uncued_ms`, `Plan::uncued_repeats`
//! times (methods rotate so none always runs first); every figure is the median over the
//! repeats. The first tenth of each run is not counted (processes still starting).

use std::path::Path;

use super::crew::Crew;
use super::worker::Method;
use super::{Dist, Plan, median, mono_ns};
use crate::exit::Failure;

/// What one method did with W workers (medians over repeats).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figures {
    /// Fraction of acquisitions whose previous holder was another worker.
    pub owner_change: f64,
    /// Release → acquisition by a different worker (ns); `None` if that never happened.
    pub handoff: Option<Dist>,
    /// Start of acquiring → acquired, for acquisitions that had to wait (ns).
    pub wait: Option<Dist>,
    /// Acquisitions that had to wait, per run.
    pub waits: f64,
    /// Acquisitions per second.
    pub rate: f64,
    /// Acquisitions counted, per run.
    pub turns: f64,
}

/// One line of the uncued report: a method with W workers, next to the floors of the run.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub workers: usize,
    pub method: Method,
    pub figures: Figures,
    /// owner changed / the kernel floor's (target ≥ 0.8).
    pub owner_ratio: Option<f64>,
    /// contended wait p99 / the floor's (target ≤ 1.5).
    pub wait_p99_ratio: Option<f64>,
    /// contended wait max / the floor's (target ≤ 1.5).
    pub wait_max_ratio: Option<f64>,
    /// handoff p50 / floor + verify's (target ≤ 1.3).
    pub handoff_ratio: Option<f64>,
    /// Whether every target is met (`None` for the floors, which define them, and where the
    /// platform has no floor: Windows).
    pub met: Option<bool>,
}

/// The targets of issue 12, as text for the report.
pub(crate) const TARGETS: &str = "owner changed ≥ 0.8× floor; contended wait p99 and max ≤ 1.5× floor; handoff p50 ≤ 1.3× floor + verify";

/// Runs every method with 2 and 4 workers.
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<Vec<Line>, Failure> {
    let mut lines = Vec::new();
    for workers in [2usize, 4] {
        let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); Method::ALL.len()];
        for rep in 0..plan.uncued_repeats {
            for k in 0..Method::ALL.len() {
                let i = (k + rep) % Method::ALL.len();
                let method = Method::ALL[i];
                let tag = format!("{workers}-{rep}-{}", method.arg());
                runs[i].push(one_run(dir, workers, method, plan.uncued_ms, &tag)?);
            }
        }
        let figures: Vec<Figures> = runs.iter().map(|r| median_figures(r)).collect();
        // The kernel floors, where the platform has them (Windows has no kernel wait).
        let of = |m: Method| Method::ALL.iter().position(|x| *x == m).map(|i| figures[i]);
        let (floor, verify) = (of(Method::Floor), of(Method::FloorVerify));
        for (method, f) in Method::ALL.iter().zip(&figures) {
            let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
            let owner_ratio = floor.and_then(|fl| ratio(f.owner_change, fl.owner_change));
            let (wait_p99_ratio, wait_max_ratio) = match (f.wait, floor.and_then(|fl| fl.wait)) {
                (Some(w), Some(fw)) => (ratio(w.p99, fw.p99), ratio(w.max, fw.max)),
                _ => (None, None),
            };
            // Floor + verify is itself read against the kernel floor.
            let base = if *method == Method::FloorVerify {
                floor
            } else {
                verify
            };
            let handoff_ratio = match (f.handoff, base.and_then(|b| b.handoff)) {
                (Some(h), Some(b)) => ratio(h.p50, b.p50),
                _ => None,
            };
            let met = (!method.is_floor() && floor.is_some()).then(|| {
                owner_ratio.is_some_and(|r| r >= 0.8)
                    && wait_p99_ratio.is_some_and(|r| r <= 1.5)
                    && wait_max_ratio.is_some_and(|r| r <= 1.5)
                    && handoff_ratio.is_some_and(|r| r <= 1.3)
            });
            lines.push(Line {
                workers,
                method: *method,
                figures: *f,
                owner_ratio,
                wait_p99_ratio,
                wait_max_ratio,
                handoff_ratio,
                met,
            });
        }
    }
    Ok(lines)
}

/// One run of `workers` processes looping with `method` for `ms` milliseconds.
fn one_run(
    dir: &Path,
    workers: usize,
    method: Method,
    ms: u64,
    tag: &str,
) -> Result<Figures, Failure> {
    let lock = dir.join(format!("uncued-{tag}.lock"));
    let mut crew = Crew::new();
    for i in 0..workers {
        let args = [format!("--index={i}"), format!("--method={}", method.arg())];
        crew.spawn_args("loop", &lock, None, &args)?;
    }
    // Everyone is ready (runtime built, handle open) before anyone starts.
    for _ in 0..workers {
        let (_, line) = crew.recv()?;
        if line != "R" {
            return Err(Failure::failed(format!(
                "bench: unexpected worker line {line:?} (wanted R)"
            )));
        }
    }
    let start = mono_ns();
    let end = start + ms * 1_000_000;
    for i in 0..workers {
        crew.send(i, &format!("go {end}"))?;
    }
    let mut turns: Vec<(u64, u64, u64, usize)> = Vec::new();
    let mut done = 0;
    while done < workers {
        let (from, line) = crew.recv()?;
        let mut it = line.split_whitespace();
        match it.next() {
            Some("r") => {
                let n: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
                let [t0, t1, t2] = n[..] else {
                    return Err(Failure::failed(format!(
                        "bench: malformed worker line {line:?}"
                    )));
                };
                turns.push((t0, t1, t2, from));
            }
            Some("D") => done += 1,
            _ => {
                return Err(Failure::failed(format!(
                    "bench: unexpected worker line {line:?}"
                )));
            }
        }
    }
    for i in 0..workers {
        crew.finish(i);
    }
    let counted_from = start + ms * 100_000; // the first tenth is not counted
    Ok(figures_of(turns, counted_from, end))
}

/// The figures of one run's merged records `(started, acquired, released, worker)`, counting
/// acquisitions in `[from, end)`.
fn figures_of(mut turns: Vec<(u64, u64, u64, usize)>, from: u64, end: u64) -> Figures {
    turns.sort_by_key(|t| t.1);
    let (mut changes, mut counted) = (0usize, 0usize);
    let (mut handoffs, mut waits) = (Vec::new(), Vec::new());
    for pair in turns.windows(2) {
        let ((_, _, released, prev), (started, acquired, _, who)) = (pair[0], pair[1]);
        // It started before the previous holder released: it had to wait. Counted when the
        // wait overlaps the measured window, so that a waiter starved from the start until
        // the others stopped at the end of the run is counted, with its whole wait.
        if started < released && started < end && acquired >= from {
            waits.push(acquired.saturating_sub(started) as f64);
        }
        if !(from..end).contains(&acquired) {
            continue;
        }
        counted += 1;
        if who != prev {
            changes += 1;
            handoffs.push(acquired.saturating_sub(released) as f64);
        }
    }
    let secs = end.saturating_sub(from) as f64 / 1e9;
    let dist = |v: &[f64]| (!v.is_empty()).then(|| Dist::of(v));
    Figures {
        owner_change: if counted > 0 {
            changes as f64 / counted as f64
        } else {
            0.0
        },
        handoff: dist(&handoffs),
        wait: dist(&waits),
        waits: waits.len() as f64,
        rate: counted as f64 / secs.max(1e-9),
        turns: counted as f64,
    }
}

/// Per-field medians over repeats (distributions: over the repeats that had any samples).
fn median_figures(runs: &[Figures]) -> Figures {
    let m = |f: fn(&Figures) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    let d = |f: fn(&Figures) -> Option<Dist>| {
        let v: Vec<Dist> = runs.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| Dist::median_of(&v))
    };
    Figures {
        owner_change: m(|f| f.owner_change),
        handoff: d(|f| f.handoff),
        wait: d(|f| f.wait),
        waits: m(|f| f.waits),
        rate: m(|f| f.rate),
        turns: m(|f| f.turns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_changes_handoffs_and_waits_come_from_the_merged_order() {
        // Worker 0 holds [10, 20], re-takes at once [21, 30] (worker 1 waited since 15),
        // worker 1 holds [32, 40]; worker 0, asking again at 31, gets it at 45.
        let turns = vec![
            (5, 10, 20, 0),
            (20, 21, 30, 0),
            (15, 32, 40, 1),
            (31, 45, 50, 0),
        ];
        let f = figures_of(turns, 0, 1_000_000_000);
        // Three acquisitions after the first: one by the same worker, two changes.
        assert!((f.owner_change - 2.0 / 3.0).abs() < 1e-9, "{f:?}");
        let h = f.handoff.unwrap();
        assert_eq!((h.p50, h.max), (2.0, 5.0)); // 30 → 32 and 40 → 45
        let w = f.wait.unwrap();
        // Worker 1 waited 15 → 32; worker 0 waited 31 → 45; the re-take at 21 did not wait.
        assert_eq!((f.waits, w.max), (2.0, 17.0));
    }

    #[test]
    fn a_waiter_starved_through_the_whole_window_is_counted() {
        // Worker 1 asks at 1 (before the window [100, 1000)) and only gets the lease at
        // 1200, after worker 0 stopped; worker 0 re-took it all along.
        let mut turns: Vec<_> = (0..10)
            .map(|i| (i * 100, i * 100 + 1, i * 100 + 90, 0))
            .collect();
        turns.push((1, 1200, 1300, 1));
        let f = figures_of(turns, 100, 1000);
        assert_eq!(f.owner_change, 0.0);
        assert_eq!(f.wait.map(|w| w.max), Some(1199.0), "{f:?}");
    }
}
