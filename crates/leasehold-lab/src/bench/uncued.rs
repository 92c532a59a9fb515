//! The uncued back-to-back handoff: what a program doing many short mutations sees.
//!
//! W worker processes (`loop` role, see `worker.rs`) each loop *acquire → hold 100 µs
//! (asleep) → release → acquire again at once* for a fixed wall time, with no cue between
//! them: a releaser races the waiters it just woke, exactly as in real use. (The cued
//! `handoff` scenario cannot show that race: there a releaser contends again only when the
//! next holder cues it.) Every worker records, per acquisition, when it started to acquire,
//! when it had the lease and when it released, in raw `CLOCK_MONOTONIC` nanoseconds; the
//! parent merges all workers' records and orders them by acquisition time. With an
//! exclusive lease that order is the order of holders, and from it:
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
//!
//! **Mixed runs (shared mode).** The same loop with [`MIXED`]: of 4 workers, 2 take
//! the lease shared and 2 exclusively — the workload where a shared lock looks bad: two
//! readers that loop back to back overlap each other without a gap, so with plain
//! `flock(LOCK_SH)` a writer waits until their holds happen to end together (starvation),
//! and a turnstile that holds readers back behind queued writers can starve the readers
//! instead when the writers keep queueing. The definitions above generalise to
//! overlapping holds by asking what an acquisition *conflicts* with (an exclusive one with
//! every hold, a shared one with exclusive holds only):
//!
//! * a **contended wait** is an acquisition that started before the release of the last
//!   conflicting hold acquired before it (for exclusive-only runs: before its previous
//!   holder released, as above), reported per mode (shared, exclusive);
//! * a **handoff** is an acquisition by another worker than the previous one where the two
//!   conflict (not reader after reader), timed from the last conflicting release;
//! * **exclusive share**: the fraction of acquisitions made by the exclusive workers.
//!
//! Each mode's waits are read against the same mode's waits under the kernel floor doing the
//! same mix with plain `flock(LOCK_SH)` / `flock(LOCK_EX)` (targets as above, per mode).
//!
//! **The helper-thread floor.** A cancellable or async waiter cannot itself block in `flock`
//! (nothing but a grant or a signal ends that), so a helper thread does, and hands the grant
//! over with one more thread wake-up. Its handoff is read against the floor of that design,
//! measured in the same loop as the others: `Method::HelperFloor`, the plainest waiter built
//! so (try `LOCK_NB`; a kept helper thread blocks in `flock` and unparks the caller; verify).
//! Its holds sleep, as every method's do, so the caller's CPU is idle when the helper wakes
//! it — a wake that costs several times one between two busy threads. The futex wake between
//! two threads of one process ([`futex_wake`]: a thread parked for about one hold is unparked
//! by another) is printed beside the table, measured before each group of runs, for scale.

use std::path::Path;

use super::crew::Crew;
use super::external::Contender;
use super::report::{Dist, Plan, median, mono_ns};
use super::role::Method;
use crate::exit::Failure;

/// What one method did with W workers (medians over repeats).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Figures {
    /// Fraction of acquisitions whose previous holder was another worker.
    pub owner_change: f64,
    /// Release → acquisition by a different worker (ns); `None` if that never happened.
    pub handoff: Option<Dist>,
    /// The same handoffs by transition, [`Transition`] order (writer → writer, writer →
    /// reader, reader → writer): in mixed runs the median of all of them mixes one-wake-up
    /// hand-overs with slower ones, and this shows which (session 13: writer → reader
    /// hand-overs through the gate took two wake-ups).
    pub handoff_by: [Option<Dist>; 3],
    /// Handoffs per run, by transition.
    pub handoffs_by: [f64; 3],
    /// Start of acquiring → acquired, for acquisitions that had to wait (ns).
    pub wait: Option<Dist>,
    /// The same, for the shared workers' acquisitions only (`None`: none waited, or none is
    /// shared).
    pub shared_wait: Option<Dist>,
    /// The same, for the exclusive workers' acquisitions only.
    pub exclusive_wait: Option<Dist>,
    /// Fraction of acquisitions made by exclusive workers (1 in exclusive-only runs).
    pub exclusive_share: f64,
    /// Acquisitions that had to wait, per run.
    pub waits: f64,
    /// Acquisitions per second.
    pub rate: f64,
    /// Acquisitions counted, per run.
    pub turns: f64,
}

/// A handoff's kind, by the modes of the hold released and the hold acquired (readers after
/// readers are no handoff).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    WriterToWriter = 0,
    WriterToReader = 1,
    ReaderToWriter = 2,
}

impl Transition {
    pub(crate) const ALL: [Transition; 3] = [
        Transition::WriterToWriter,
        Transition::WriterToReader,
        Transition::ReaderToWriter,
    ];

    /// The column label in the report.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Transition::WriterToWriter => "writer → writer",
            Transition::WriterToReader => "writer → reader",
            Transition::ReaderToWriter => "reader → writer",
        }
    }

    /// The JSON key.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Transition::WriterToWriter => "writer_to_writer",
            Transition::WriterToReader => "writer_to_reader",
            Transition::ReaderToWriter => "reader_to_writer",
        }
    }

    fn of(prev_shared: bool, shared: bool) -> Option<Transition> {
        match (prev_shared, shared) {
            (false, false) => Some(Transition::WriterToWriter),
            (false, true) => Some(Transition::WriterToReader),
            (true, false) => Some(Transition::ReaderToWriter),
            (true, true) => None,
        }
    }
}

/// Who loops in one run: `workers` processes, of which the first `shared` take the lease
/// shared and the others exclusively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mix {
    pub workers: usize,
    pub shared: usize,
}

/// The mixed run: two readers that can overlap each other continuously, and two
/// writers that can keep queueing (see the module documentation).
#[cfg(unix)] // Windows has no shared leases
pub(crate) const MIXED: Mix = Mix {
    workers: 4,
    shared: 2,
};

impl Mix {
    /// Whether worker `i` takes the lease shared (readers and writers interleave in spawn
    /// order: shared, exclusive, shared, exclusive, ...).
    fn is_shared(self, i: usize) -> bool {
        i.is_multiple_of(2) && i / 2 < self.shared
    }
}

/// What loops in an uncued run: a built-in worker method, or a contender of another language
/// (`external.rs`), which runs in the exclusive-only runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Runner {
    Builtin(Method),
    External(Contender),
}

impl Runner {
    /// What it is, for the report.
    pub(crate) fn label(&self) -> &str {
        match self {
            Runner::Builtin(m) => m.label(),
            Runner::External(c) => &c.label,
        }
    }

    /// What it is in a mixed run, for the report.
    pub(crate) fn mixed_label(&self) -> &str {
        match self {
            Runner::Builtin(m) => m.mixed_label(),
            Runner::External(c) => &c.label,
        }
    }

    /// Its key in the JSON: the `--method` value, or the contender's label.
    pub(crate) fn arg(&self) -> &str {
        match self {
            Runner::Builtin(m) => m.arg(),
            Runner::External(c) => &c.label,
        }
    }

    /// Whether this is a kernel floor.
    pub(crate) fn is_floor(&self) -> bool {
        matches!(self, Runner::Builtin(m) if m.is_floor())
    }

    pub(crate) fn is(&self, method: Method) -> bool {
        matches!(self, Runner::Builtin(m) if *m == method)
    }

    /// Whether it hands over through a helper thread (one more futex wake in its base).
    /// A contender's targets are its own, so it is read against floor + verify alone.
    pub(crate) fn hands_over(&self) -> bool {
        matches!(self, Runner::Builtin(m) if m.hands_over())
    }
}

/// One line of the uncued report: a method with W workers, next to the floors of the run.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub workers: usize,
    /// How many of the workers take the lease shared (0: the exclusive-only table).
    pub shared: usize,
    pub method: Runner,
    pub figures: Figures,
    /// owner changed / the kernel floor's (target ≥ 0.8).
    pub owner_ratio: Option<f64>,
    /// contended wait p99 / the floor's (target ≤ 1.5); in mixed runs the exclusive
    /// workers' waits against the floor's exclusive workers'.
    pub wait_p99_ratio: Option<f64>,
    /// contended wait max / the floor's (target ≤ 1.5); mixed: exclusive workers.
    pub wait_max_ratio: Option<f64>,
    /// Mixed runs: the shared workers' contended wait p99 / the floor's shared workers'
    /// (target ≤ 1.5).
    pub shared_p99_ratio: Option<f64>,
    /// Mixed runs: the shared workers' contended wait max / the floor's (target ≤ 1.5).
    pub shared_max_ratio: Option<f64>,
    /// handoff p50 / its base: floor + verify's handoff p50 (target ≤ 1.3), or for the
    /// methods that hand over through a helper thread the helper-thread floor's (≤ 1.1).
    pub handoff_ratio: Option<f64>,
    /// handoff p50 / the helper-thread floor's, for every line (a contender's face that
    /// wakes its event loop after a helper is read against it).
    pub helper_ratio: Option<f64>,
    /// handoff p50 / the kernel floor's (waiters blocked in `flock` themselves), for every
    /// line: the least any hand-over costs, printed beside the helper-thread floor.
    pub kernel_ratio: Option<f64>,
    /// That base (ns), where there is one.
    pub handoff_base: Option<f64>,
    /// The futex wake measured before this group of runs (see [`futex_wake`]; `None` on
    /// Windows, which has no floors to add it to).
    pub wake: Option<Dist>,
    /// Whether every target is met (`None` for the floors, which define them, where the
    /// platform has no floor (Windows), and for contenders, whose targets are their own).
    pub met: Option<bool>,
}

/// The targets of the uncued runs, as text for the report.
pub(crate) const TARGETS: &str = "owner changed ≥ 0.8× floor; contended wait p99 and max ≤ 1.5× floor; handoff p50 ≤ 1.3× floor + verify (deadline + CancelToken, async and keyed: ≤ 1.1× the helper-thread floor)";

/// The hand-over targets of the helper-thread faces, as text for the report's summary.
pub(crate) const HELPER_TARGETS: &str = "deadline + CancelToken, async and keyed ≤ 1.1× the helper-thread floor; Node's face, which wakes its event loop after the helper, ≤ 1.5×";

/// The same targets for the mixed runs ("the same fairness targets as exclusive
/// waits apply"), as text for the report.
pub(crate) const MIXED_TARGETS: &str = "owner changed ≥ 0.8× floor; contended wait p99 and max ≤ 1.5× the floor's, per mode (shared workers vs the floor's shared workers, exclusive vs exclusive); handoff p50 ≤ 1.3× floor + verify (deadline + CancelToken: ≤ 1.1× the helper-thread floor)";

/// Runs every method, and every contender, with 2 and 4 exclusive workers, then the methods
/// with a shared form with the [`MIXED`] workers.
pub(super) fn run(dir: &Path, plan: &Plan, contenders: &[Contender]) -> Result<Vec<Line>, Failure> {
    let mut lines = Vec::new();
    let exclusive: Vec<Runner> = (Method::ALL.iter().map(|m| Runner::Builtin(*m)))
        .chain(contenders.iter().cloned().map(Runner::External))
        .collect();
    for workers in [2usize, 4] {
        let mix = Mix { workers, shared: 0 };
        lines.extend(run_mix(dir, plan, mix, &exclusive)?);
    }
    // Windows has no shared leases (and no floors to read them against): exclusive only.
    #[cfg(unix)]
    {
        let mixed = Method::MIXED.map(Runner::Builtin);
        lines.extend(run_mix(dir, plan, MIXED, &mixed)?);
    }
    Ok(lines)
}

/// Runs `methods` (the kernel floor first, floor + verify second) with `mix`, and reads each
/// against the floors of the same run.
fn run_mix(dir: &Path, plan: &Plan, mix: Mix, methods: &[Runner]) -> Result<Vec<Line>, Failure> {
    #[cfg(unix)]
    let wake = Some(futex_wake(plan.handoffs)?);
    #[cfg(windows)]
    let wake: Option<Dist> = None; // no floors to add it to
    let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); methods.len()];
    for rep in 0..plan.uncued_repeats {
        for k in 0..methods.len() {
            let i = (k + rep) % methods.len();
            let tag = format!("{}-{}-{rep}-{i}", mix.workers, mix.shared);
            runs[i].push(one_run(dir, mix, &methods[i], plan.uncued_ms, &tag)?);
        }
    }
    let figures: Vec<Figures> = runs.iter().map(|r| median_figures(r)).collect();
    // The kernel floors, where the platform has them (Windows has no kernel wait).
    let of = |m: Method| methods.iter().position(|x| x.is(m)).map(|i| figures[i]);
    let (floor, verify) = (of(Method::Floor), of(Method::FloorVerify));
    let helper = of(Method::HelperFloor)
        .and_then(|h| h.handoff)
        .map(|h| h.p50);
    let ratio = |a: f64, b: f64| (b > 0.0).then(|| a / b);
    let ratios = |w: Option<Dist>, fw: Option<Dist>| match (w, fw) {
        (Some(w), Some(fw)) => (ratio(w.p99, fw.p99), ratio(w.max, fw.max)),
        _ => (None, None),
    };
    let mut lines = Vec::new();
    for (method, f) in methods.iter().zip(&figures) {
        let owner_ratio = floor.and_then(|fl| ratio(f.owner_change, fl.owner_change));
        let (wait_p99_ratio, wait_max_ratio) =
            ratios(f.exclusive_wait, floor.and_then(|fl| fl.exclusive_wait));
        let (shared_p99_ratio, shared_max_ratio) = match mix.shared {
            0 => (None, None),
            _ => ratios(f.shared_wait, floor.and_then(|fl| fl.shared_wait)),
        };
        // Floor + verify is itself read against the kernel floor.
        let base = if method.is(Method::FloorVerify) {
            floor
        } else {
            verify
        };
        let handoff_base = match method.hands_over() {
            true => helper,
            false => base.and_then(|b| b.handoff).map(|b| b.p50),
        };
        let handoff_ratio = match (f.handoff, handoff_base) {
            (Some(h), Some(b)) => ratio(h.p50, b),
            _ => None,
        };
        let helper_ratio = match (f.handoff, helper) {
            (Some(h), Some(b)) => ratio(h.p50, b),
            _ => None,
        };
        let kernel_ratio = match (f.handoff, floor.and_then(|fl| fl.handoff)) {
            (Some(h), Some(b)) => ratio(h.p50, b.p50),
            _ => None,
        };
        // A helper-thread face pays the helper floor's wake-up and calls on the hand-over's
        // path, and 5 more calls before it blocks (BENCHMARKS.md,
        // "Cancellable, async and keyed hand-over").
        let handoff_target = if method.hands_over() { 1.1 } else { 1.3 };
        let within = |r: Option<f64>| r.is_some_and(|r| r <= 1.5);
        let external = matches!(method, Runner::External(_));
        let met = match method.is_floor() || floor.is_none() || external {
            true => None,
            false => Some(
                owner_ratio.is_some_and(|r| r >= 0.8)
                    && within(wait_p99_ratio)
                    && within(wait_max_ratio)
                    && (mix.shared == 0 || (within(shared_p99_ratio) && within(shared_max_ratio)))
                    && handoff_ratio.is_some_and(|r| r <= handoff_target),
            ),
        };
        lines.push(Line {
            workers: mix.workers,
            shared: mix.shared,
            method: method.clone(),
            figures: *f,
            owner_ratio,
            wait_p99_ratio,
            wait_max_ratio,
            shared_p99_ratio,
            shared_max_ratio,
            handoff_ratio,
            helper_ratio,
            kernel_ratio,
            handoff_base,
            wake,
            met,
        });
    }
    Ok(lines)
}

/// One futex wake between two threads of this process, `samples` times: a thread parks
/// (`std::thread::park`, a futex wait on Linux); once `/proc` shows it asleep and about one
/// hold (100 µs) has passed, this thread stamps the clock and unparks it; the woken thread
/// stamps the clock as soon as it runs. The distribution of the differences is the price of
/// the one wake-up a helper-thread hand-over adds to the kernel's own.
#[cfg(unix)]
pub(super) fn futex_wake(samples: usize) -> Result<Dist, Failure> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    // The stamp of the unpark (0: none yet); the woken thread takes it.
    let sent = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let parked = {
        let sent = sent.clone();
        std::thread::Builder::new()
            .name("bench-futex-wake".into())
            .spawn(move || {
                let mut lat = Vec::with_capacity(samples);
                let _ = tx.send(super::crew::this_thread());
                while lat.len() < samples {
                    match sent.swap(0, Ordering::SeqCst) {
                        0 => std::thread::park(),
                        t => lat.push(mono_ns().saturating_sub(t) as f64),
                    }
                }
                lat
            })
            .map_err(super::report::io_fail("start a thread"))?
    };
    let tid = rx
        .recv()
        .map_err(|_| Failure::failed("bench: the parked thread died"))?;
    let hold = std::time::Duration::from_nanos(super::worker::HOLD_NS);
    for _ in 0..samples {
        super::crew::until_thread_waits(tid)?;
        std::thread::sleep(hold);
        sent.store(mono_ns(), Ordering::SeqCst);
        parked.thread().unpark();
    }
    let lat = parked
        .join()
        .map_err(|_| Failure::failed("bench: the parked thread panicked"))?;
    Ok(Dist::of(&lat))
}

/// One run of `mix.workers` processes looping with `method` for `ms` milliseconds.
fn one_run(dir: &Path, mix: Mix, method: &Runner, ms: u64, tag: &str) -> Result<Figures, Failure> {
    let workers = mix.workers;
    let lock = dir.join(format!("uncued-{tag}.lock"));
    let mut crew = Crew::new();
    for i in 0..workers {
        match method {
            Runner::Builtin(m) => {
                let mut args = vec![format!("--index={i}"), format!("--method={}", m.arg())];
                if mix.is_shared(i) {
                    args.push("--shared".into());
                }
                crew.spawn_args("loop", &lock, None, &args)?;
            }
            Runner::External(c) => {
                c.spawn_loop(&mut crew, &lock)?;
            }
        }
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
    let mut turns: Vec<Record> = Vec::new();
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
                turns.push((t0, t1, t2, from, mix.is_shared(from)));
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

/// One acquisition in the merged records: `(started, acquired, released, worker, shared)`.
type Record = (u64, u64, u64, usize, bool);

/// The figures of one run's merged records, counting acquisitions in `[from, end)` (the
/// definitions, for exclusive and mixed runs, are in the module documentation).
fn figures_of(mut turns: Vec<Record>, from: u64, end: u64) -> Figures {
    turns.sort_by_key(|t| t.1);
    let (mut changes, mut counted, mut exclusive) = (0usize, 0usize, 0usize);
    let (mut handoffs, mut waits) = (Vec::new(), Vec::new());
    let mut handoffs_by: [Vec<f64>; 3] = Default::default();
    let (mut shared_waits, mut exclusive_waits) = (Vec::new(), Vec::new());
    // The latest release among the holds acquired so far: of any hold, of exclusive holds.
    // (With exclusive holds only, both are the previous holder's release.)
    let (mut last_any, mut last_exclusive) = (None::<u64>, None::<u64>);
    let mut prev: Option<(usize, bool)> = None;
    for &(started, acquired, released, who, shared) in &turns {
        let conflicting = if shared { last_exclusive } else { last_any };
        if let Some((prev_who, prev_shared)) = prev {
            // It started before the last conflicting hold was released: it had to wait.
            // Counted when the wait overlaps the measured window, so that a waiter starved
            // from the start until the others stopped at the end of the run is counted,
            // with its whole wait.
            let waited = conflicting.is_some_and(|c| started < c);
            if waited && started < end && acquired >= from {
                let wait = acquired.saturating_sub(started) as f64;
                waits.push(wait);
                match shared {
                    true => shared_waits.push(wait),
                    false => exclusive_waits.push(wait),
                }
            }
            if (from..end).contains(&acquired) {
                counted += 1;
                exclusive += usize::from(!shared);
                if who != prev_who {
                    changes += 1;
                    // Reader after reader is no handoff: they may overlap.
                    if let (Some(c), Some(t)) = (conflicting, Transition::of(prev_shared, shared)) {
                        let h = acquired.saturating_sub(c) as f64;
                        handoffs.push(h);
                        handoffs_by[t as usize].push(h);
                    }
                }
            }
        }
        last_any = Some(last_any.map_or(released, |l| l.max(released)));
        if !shared {
            last_exclusive = Some(last_exclusive.map_or(released, |l| l.max(released)));
        }
        prev = Some((who, shared));
    }
    let secs = end.saturating_sub(from) as f64 / 1e9;
    let dist = |v: &[f64]| (!v.is_empty()).then(|| Dist::of(v));
    let share = |n: usize| match counted {
        0 => 0.0,
        _ => n as f64 / counted as f64,
    };
    Figures {
        owner_change: share(changes),
        handoff: dist(&handoffs),
        handoff_by: handoffs_by.each_ref().map(|v| dist(v)),
        handoffs_by: handoffs_by.each_ref().map(|v| v.len() as f64),
        wait: dist(&waits),
        shared_wait: dist(&shared_waits),
        exclusive_wait: dist(&exclusive_waits),
        exclusive_share: share(exclusive),
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
        handoff_by: Transition::ALL.map(|t| {
            let v: Vec<Dist> = runs
                .iter()
                .filter_map(|f| f.handoff_by[t as usize])
                .collect();
            (!v.is_empty()).then(|| Dist::median_of(&v))
        }),
        handoffs_by: Transition::ALL.map(|t| {
            median(
                &runs
                    .iter()
                    .map(|f| f.handoffs_by[t as usize])
                    .collect::<Vec<_>>(),
            )
        }),
        wait: d(|f| f.wait),
        shared_wait: d(|f| f.shared_wait),
        exclusive_wait: d(|f| f.exclusive_wait),
        exclusive_share: m(|f| f.exclusive_share),
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
            (5, 10, 20, 0, false),
            (20, 21, 30, 0, false),
            (15, 32, 40, 1, false),
            (31, 45, 50, 0, false),
        ];
        let f = figures_of(turns, 0, 1_000_000_000);
        // Three acquisitions after the first: one by the same worker, two changes.
        assert!((f.owner_change - 2.0 / 3.0).abs() < 1e-9, "{f:?}");
        let h = f.handoff.unwrap();
        assert_eq!((h.p50, h.max), (2.0, 5.0)); // 30 → 32 and 40 → 45
        assert_eq!(f.handoffs_by, [2.0, 0.0, 0.0], "writers only");
        let w = f.wait.unwrap();
        // Worker 1 waited 15 → 32; worker 0 waited 31 → 45; the re-take at 21 did not wait.
        assert_eq!((f.waits, w.max), (2.0, 17.0));
    }

    #[test]
    fn a_waiter_starved_through_the_whole_window_is_counted() {
        // Worker 1 asks at 1 (before the window [100, 1000)) and only gets the lease at
        // 1200, after worker 0 stopped; worker 0 re-took it all along.
        let mut turns: Vec<_> = (0..10)
            .map(|i| (i * 100, i * 100 + 1, i * 100 + 90, 0, false))
            .collect();
        turns.push((1, 1200, 1300, 1, false));
        let f = figures_of(turns, 100, 1000);
        assert_eq!(f.owner_change, 0.0);
        assert_eq!(f.wait.map(|w| w.max), Some(1199.0), "{f:?}");
    }

    #[test]
    fn mixed_runs_count_waits_per_mode_and_no_handoff_between_overlapping_readers() {
        // Readers 0 and 2 overlap ([10, 30] and [16, 40]: reader 2 did not wait); writer 1,
        // asking at 12, gets in at 41 after both; then reader 0 (asked at 31) and reader 2
        // (asked at 41) wait for the writer and overlap again; writer 3 (asked at 45) gets
        // in at 62 after both readers.
        let turns = vec![
            (0, 10, 30, 0, true),
            (15, 16, 40, 2, true),
            (12, 41, 50, 1, false),
            (31, 51, 60, 0, true),
            (41, 52, 61, 2, true),
            (45, 62, 70, 3, false),
        ];
        let f = figures_of(turns, 0, 1_000_000_000);
        assert_eq!(f.owner_change, 1.0, "{f:?}");
        assert!((f.exclusive_share - 2.0 / 5.0).abs() < 1e-9, "{f:?}");
        // Reader 0 waited 31 → 51 and reader 2 41 → 52 (for the writer's release at 50).
        let sw = f.shared_wait.unwrap();
        assert_eq!((sw.p50, sw.max), (11.0, 20.0));
        // Writer 1 waited 12 → 41 and writer 3 45 → 62 (for the last reader's release).
        let ew = f.exclusive_wait.unwrap();
        assert_eq!((ew.p50, ew.max), (17.0, 29.0));
        assert_eq!(f.waits, 4.0);
        // Handoffs: 40 → 41 (writer 1), 50 → 51 (reader 0), 61 → 62 (writer 3); none from
        // reader to reader.
        let h = f.handoff.unwrap();
        assert_eq!((h.p50, h.max), (1.0, 1.0));
        // One of each transition: writer 1 after reader 2, reader 0 after writer 1, writer 3
        // after reader 2.
        assert_eq!(f.handoffs_by, [0.0, 1.0, 2.0]);
        assert!(f.handoff_by[Transition::WriterToWriter as usize].is_none());
    }

    #[cfg(unix)]
    #[test]
    fn the_mixed_run_interleaves_readers_and_writers() {
        let shared: Vec<bool> = (0..4).map(|i| MIXED.is_shared(i)).collect();
        assert_eq!(shared, [true, false, true, false]);
        let none = Mix {
            workers: 4,
            shared: 0,
        };
        assert!((0..4).all(|i| !none.is_shared(i)));
    }
}
