//! What every scenario of the bench reports in, and the small helpers they share: the
//! [`Plan`] of a run, [`Row`]s with their [`Unit`] and [`Dist`]ributions, figures
//! [`NotMeasured`] on this platform, medians, the clock, and the failures of the bench's own
//! I/O. A leaf: it imports no scenario.

use crate::exit::Failure;

/// How much work each scenario does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) quick: bool,
    /// Repeats of every figure; each figure is the median over them.
    pub(crate) repeats: usize,
    /// Operations per timed batch of an in-process micro-benchmark.
    pub(crate) batch: usize,
    /// Handoffs recorded per repeat of a handoff run.
    #[cfg_attr(windows, allow(dead_code))] // the cued handoff is POSIX-only
    pub(crate) handoffs: usize,
    /// How long waiters wait while their CPU is measured.
    #[cfg_attr(windows, allow(dead_code))] // no CPU clock on Windows
    pub(crate) cpu_hold_ms: u64,
    /// Repeats of takeover-after-SIGKILL (each spawns two processes).
    pub(crate) takeovers: usize,
    /// Repeats of cancellation and deadline measurements.
    pub(crate) cancels: usize,
    /// Samples of each durable (fsync-bound) store figure: each sample is one durable unit
    /// (a registry mutation, a record and its fsync, or a batch and its sync), timed alone
    /// and interleaved one by one with its floor, so that a stall from other I/O on the
    /// machine spoils one sample, not a whole figure.
    pub(crate) durable_samples: usize,
    /// Distinct IDs (lock files) of the many-IDs keyed-lease figure.
    pub(crate) keyed_ids: usize,
    /// Repeats of the thread-count measurement (each starts two worker processes).
    #[cfg_attr(windows, allow(dead_code))] // thread counts come from /proc
    pub(crate) crowds: usize,
    /// Wall time of one uncued back-to-back run (one method, W workers), in ms.
    pub(crate) uncued_ms: u64,
    /// Runs per method and W of the uncued scenario; each figure is the median over them.
    pub(crate) uncued_repeats: usize,
}

impl Plan {
    pub(crate) fn new(quick: bool) -> Plan {
        if quick {
            // Windows (and Wine, where CI runs it) starts a process in tens to hundreds of
            // milliseconds and creates a file in milliseconds: fewer of both.
            let windows = cfg!(windows);
            Plan {
                quick,
                repeats: 9,
                batch: 200,
                handoffs: 150,
                cpu_hold_ms: 250,
                takeovers: 3,
                cancels: 5,
                durable_samples: 9,
                keyed_ids: if windows { 1_000 } else { 10_000 },
                crowds: 1,
                uncued_ms: 500,
                uncued_repeats: if windows { 1 } else { 3 },
            }
        } else {
            Plan {
                quick,
                repeats: 21,
                batch: 2000,
                handoffs: 2000,
                cpu_hold_ms: 1000,
                takeovers: 15,
                cancels: 30,
                durable_samples: 401,
                keyed_ids: 100_000,
                crowds: 3,
                uncued_ms: 3000,
                uncued_repeats: 3,
            }
        }
    }
}

/// The unit a figure is printed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Nanoseconds (stored as ns, printed as µs).
    Nanos,
    /// Percent of one core.
    Percent,
    /// Operations (mutations, records) per second: higher is better.
    PerSecond,
    /// A plain count (threads).
    #[cfg_attr(windows, allow(dead_code))] // thread counts come from /proc
    Count,
}

/// One line of the table: a figure, its floor and whether its target is met.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// Stable JSON key.
    pub key: &'static str,
    /// Human-readable description.
    pub name: String,
    pub unit: Unit,
    /// Median over repeats (for a distribution: the median of the per-repeat p50).
    pub median: f64,
    /// (p50, p90, p99, max), each the median over repeats, where the figure is a distribution.
    pub dist: Option<Dist>,
    /// The floor's median and what it is.
    pub floor: Option<(f64, &'static str)>,
    /// The floor's distribution, where it has one.
    pub floor_dist: Option<Dist>,
    /// The target, as text, and whether it is met (`None`: no target, reported for reference).
    pub target: Option<(String, bool)>,
    /// How many samples make up the figure.
    pub samples: usize,
}

impl Row {
    /// The figure over its floor. None for CPU shares: a kernel-blocked waiter's share is
    /// ~0, so the quotient says nothing; that target is absolute.
    pub fn ratio(&self) -> Option<f64> {
        if self.unit == Unit::Percent {
            return None;
        }
        let (floor, _) = self.floor?;
        (floor > 0.0).then(|| self.median / floor)
    }
}

/// Percentiles of a distribution.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Dist {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Dist {
    /// Nearest-rank percentiles of `samples` (unsorted).
    pub fn of(samples: &[f64]) -> Dist {
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Dist {
            p50: percentile(&s, 0.50),
            p90: percentile(&s, 0.90),
            p99: percentile(&s, 0.99),
            max: s.last().copied().unwrap_or(0.0),
        }
    }

    /// Per-field median of per-repeat distributions.
    pub fn median_of(dists: &[Dist]) -> Dist {
        let m = |f: fn(&Dist) -> f64| median(&dists.iter().map(f).collect::<Vec<_>>());
        Dist {
            p50: m(|d| d.p50),
            p90: m(|d| d.p90),
            p99: m(|d| d.p99),
            max: m(|d| d.max),
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The median of `v` (0 when empty).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Monotonic nanoseconds comparable across processes on one machine (`platform::mono_ns`:
/// `CLOCK_MONOTONIC`; Windows: `GetSystemTimePreciseAsFileTime`).
pub(crate) use crate::platform::mono_ns;

/// A figure this platform cannot measure, and why: printed as one line
/// `not measured on <platform>: <figure>: <why>` (and listed in the JSON), never dropped.
#[derive(Debug, Clone)]
pub(crate) struct NotMeasured {
    /// The figure's JSON key where other platforms measure it.
    pub key: &'static str,
    pub name: &'static str,
    pub why: &'static str,
}

impl NotMeasured {
    #[cfg_attr(unix, allow(dead_code))] // every figure is measured on Linux
    pub(crate) fn new(key: &'static str, name: &'static str, why: &'static str) -> NotMeasured {
        NotMeasured { key, name, why }
    }
}

/// `bench: WHAT: error` for an I/O failure of the benchmark itself.
pub(crate) fn io_fail(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::failed(format!("bench: {what}: {e}"))
}

/// `bench: WHAT: errno` for a failed system call of the benchmark itself.
#[cfg(unix)]
pub(crate) fn errno_fail(what: &str) -> impl Fn(rustix::io::Errno) -> Failure + '_ {
    move |e| Failure::failed(format!("bench: {what}: {e}"))
}
