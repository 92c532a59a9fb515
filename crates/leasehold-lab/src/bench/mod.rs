//! `leasehold bench`: measures what a lease costs and how fast waiters react, next to floors
//! measured in the same run by the same binary.
//!
//! Every figure is paired with a *floor*: the cheapest way the kernel offers to do the same
//! thing (the same system calls issued directly, or a waiter blocked in `flock(LOCK_EX)`).
//! Ratios to a floor measured seconds apart on the same machine are what can be compared
//! across machines and file systems; absolute numbers are not.
//!
//! Multi-process figures use real OS processes: the binary re-executes itself as the hidden
//! `leasehold worker bench ROLE` (not part of the public contract; `crates/leasehold-cli/src/cmd/worker.rs`). Parent and workers synchronise
//! through pipes (one line per event), never by sleeping; timestamps crossing a process
//! boundary are `platform::mono_ns` nanoseconds (`CLOCK_MONOTONIC`; Windows: std's
//! `SystemTime`, `GetSystemTimePreciseAsFileTime`).
//!
//! On Windows the same scenarios run where Windows allows them, against what a Windows lease
//! really is (a named semaphore; its `CreateSemaphoreW` + `CloseHandle` cannot be issued bare
//! here — the lab writes no `unsafe`, and the library exposes nothing only for benchmarks —
//! so the floors are the lease's path calls); what cannot be measured there is a
//! [`NotMeasured`] line saying why, never a silently missing row. Where Linux watches a
//! waiter fall asleep in `/proc`, a Windows waiter first sees the lease held and is then
//! given `crew::SETTLE` (50 ms, past its longest poll interval) before the event it waits
//! for. The only waits by the clock are the
//! scenarios' own holds (a 100 µs hold, the ~1 s hold while waiters' CPU is measured,
//! and a deadline whose overshoot is the measured quantity).
//!
//! Scenarios are plain functions returning [`Row`]s, run in order by [`main`]: in-process
//! lease costs (`micro`), handoff between processes (`handoff`), figures of waiting itself:
//! threads, CPU, takeover, cancellation (`waiters`), shared-mode figures: shared acquire
//! cost, and a writer among overlapping shared holders vs `flock -s` readers (`shared`), and the stores' figures: registry mutation vs a raw durable rewrite, session
//! append vs raw write+fdatasync, keyed lease cost at 10 vs 100,000 IDs, and the longest wait of a
//! verb beside a gc of 100,000 lock files (`stores`), a document's updates (`document`), and
//! the record lease on two FUSE mounts of one directory, beside the kernel's lease and the
//! foreign lockers (`shared_mount`, Linux).

mod crew;
mod document;
#[cfg(all(feature = "etcd", unix))]
mod etcd;
mod external;
#[cfg(unix)]
mod handoff;
mod micro;
mod report;
mod role;
#[cfg(unix)]
mod shared;
#[cfg(target_os = "linux")]
mod shared_mount;
mod stores;
mod uncued;
mod waiters;
mod worker;

pub use worker::WorkerArgs;
pub use worker::main as worker;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde_json::{Value, json};

use crate::exit::{Failure, OK, Outcome};
use report::{Dist, NotMeasured, Plan, Row, Unit};

/// Arguments of `leasehold bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A few seconds instead of up to a minute: fewer repeats (for CI smoke runs).
    #[arg(long)]
    quick: bool,
    /// Print the figures as one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Directory to create the temporary lock files in (default: the system temp dir). The
    /// figures are those of this directory's file system.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Instead: leasehold on etcd at ENDPOINTS against `etcdctl lock` (acquire, hand-over,
    /// takeover after SIGKILL). Needs etcdctl on PATH.
    #[arg(long, value_name = "ENDPOINTS", conflicts_with = "etcd_server")]
    etcd: Option<String>,
    /// Like --etcd, on a private etcd this run starts and stops (`etcd` on PATH).
    #[arg(long)]
    etcd_server: bool,
    /// Also measure LABEL, a locker of another language, beside the kernel floor: COMMAND
    /// (run through `sh -c`, once per worker process) speaks the bench workers' protocol
    /// (see `bench/external.rs`). It joins the uncued table and gets an uncontended row.
    /// Repeatable.
    #[arg(long, value_name = "LABEL=COMMAND", value_parser = external::Contender::parse)]
    contender: Vec<external::Contender>,
    /// Run only this scenario (to iterate on one table); the figures of the others are left
    /// out, never estimated.
    #[arg(long, value_enum, value_name = "SCENARIO")]
    only: Option<Scenario>,
}

/// A group of figures that `--only` can select, in the order a full run measures them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Scenario {
    /// In-process lease costs, each next to the same system calls issued directly.
    Micro,
    /// The cued handoff between processes (POSIX).
    Handoff,
    /// Waiting itself: threads, CPU, takeover, cancellation and deadlines.
    Waiters,
    /// Shared-mode figures (POSIX).
    Shared,
    /// The stores: registry, session log, keyed leases.
    Stores,
    /// A document of the user's own: one writer and 4 contending processes against the raw
    /// durable rewrite, beside the Node and Python ways of doing it by hand.
    Document,
    /// The uncued back-to-back handoff table (and its mixed shared-mode table).
    Uncued,
    /// The record lease on two FUSE mounts of one directory (two hosts to the kernel's
    /// lock), beside the kernel's lease, proper-lockfile and SoftFileLock (Linux; `SKIP:`
    /// where bindfs or FUSE is missing).
    SharedMount,
}

impl Scenario {
    /// Its `--only` value.
    fn arg(self) -> &'static str {
        match self {
            Scenario::Micro => "micro",
            Scenario::Handoff => "handoff",
            Scenario::Waiters => "waiters",
            Scenario::Shared => "shared",
            Scenario::Stores => "stores",
            Scenario::Document => "document",
            Scenario::Uncued => "uncued",
            Scenario::SharedMount => "shared-mount",
        }
    }

    /// Whether a run limited to `only` measures this scenario.
    fn runs(self, only: Option<Scenario>) -> bool {
        only.is_none_or(|o| o == self)
    }
}

/// The platform's name in reports.
const PLATFORM: &str = if cfg!(windows) { "Windows" } else { "Linux" };

/// Runs `leasehold bench`.
pub fn main(args: BenchArgs) -> Outcome {
    if args.etcd.is_some() || args.etcd_server {
        #[cfg(all(feature = "etcd", unix))]
        return etcd::run(args.etcd.clone(), args.quick, args.json);
        #[cfg(windows)]
        return Err(Failure::failed(
            "bench --etcd: not available on Windows: the etcd arbiter is built on POSIX systems only",
        ));
        #[cfg(all(not(feature = "etcd"), unix))]
        return Err(Failure::failed(
            "bench --etcd: this leasehold was built without etcd support; rebuild it with `cargo build --release --features etcd`",
        ));
    }
    let plan = Plan::new(args.quick);
    let base = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir(),
    };
    let tmp = tempfile::Builder::new()
        .prefix("leasehold-bench-")
        .tempdir_in(&base)
        .map_err(|e| {
            Failure::usage(format!(
                "cannot create a temporary directory in {}: {e}",
                base.display()
            ))
        })?;
    let started = Instant::now();
    let (rows, not) = scenarios(tmp.path(), &plan, args.only)?;
    let uncued = match Scenario::Uncued.runs(args.only) {
        true => uncued::run(tmp.path(), &plan, &args.contender)?,
        false => Vec::new(),
    };
    // The contenders' uncontended cycles belong with the in-process costs.
    let cycles = match Scenario::Micro.runs(args.only) {
        true => {
            let floor = rows.iter().find(|r| r.key == "uncontended_floor");
            external::uncontended(tmp.path(), &plan, &args.contender, floor.map(|r| r.median))?
        }
        false => Vec::new(),
    };
    let elapsed = started.elapsed().as_secs_f64();
    let machine = machine(tmp.path());
    let out = if args.json {
        let mut report = json_report(&rows, &not, &uncued, &machine, &plan, elapsed, args.only);
        report["contenders"] = json!({"uncontended": external::json(&cycles)});
        report.to_string() + "\n"
    } else {
        let mut out = table(&rows, &not, &machine, &plan, elapsed, args.only);
        if !uncued.is_empty() {
            out = out + "\n" + &uncued_table(&uncued, &plan);
        }
        if !cycles.is_empty() {
            out.push_str(&external::table(&cycles));
        }
        out
    };
    tmp.close().map_err(|e| {
        Failure::failed(format!(
            "cannot remove the benchmark's temporary files: {e}"
        ))
    })?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| Failure::failed(format!("cannot write the report: {e}")))?;
    Ok(OK)
}

/// Every scenario but the uncued one (those `only` selects), in order: the rows, and what
/// is not measured here.
#[cfg(unix)]
fn scenarios(
    dir: &std::path::Path,
    plan: &Plan,
    only: Option<Scenario>,
) -> Result<(Vec<Row>, Vec<NotMeasured>), Failure> {
    let mut rows = Vec::new();
    if Scenario::Micro.runs(only) {
        rows.extend(micro::run(dir, plan)?);
    }
    if Scenario::Handoff.runs(only) {
        rows.extend(handoff::handoff(dir, plan)?);
    }
    if Scenario::Waiters.runs(only) {
        rows.extend(waiters::run(dir, plan)?);
    }
    if Scenario::Shared.runs(only) {
        rows.extend(shared::run(dir, plan)?);
    }
    if Scenario::Stores.runs(only) {
        rows.extend(stores::run(dir, plan)?);
    }
    let mut not = Vec::new();
    if Scenario::Document.runs(only) {
        let (more, missing) = document::run(dir, plan)?;
        rows.extend(more);
        not.extend(missing);
    }
    #[cfg(target_os = "linux")]
    if Scenario::SharedMount.runs(only) {
        let (more, missing) = shared_mount::run(dir, plan)?;
        rows.extend(more);
        not.extend(missing);
    }
    Ok((rows, not))
}

/// Every scenario but the uncued one, as Windows allows (those `only` selects): the rows,
/// and what is not measured there (with why).
#[cfg(windows)]
fn scenarios(
    dir: &std::path::Path,
    plan: &Plan,
    only: Option<Scenario>,
) -> Result<(Vec<Row>, Vec<NotMeasured>), Failure> {
    let (mut rows, mut not) = (Vec::new(), Vec::new());
    if Scenario::Micro.runs(only) {
        let (micro, more) = micro::run(dir, plan)?;
        rows.extend(micro);
        not.extend(more);
    }
    if Scenario::Handoff.runs(only) {
        not.push(NotMeasured::new(
            "handoff_2, handoff_4, async_handoff_4",
            "cued handoff between processes",
            "its workers cue each other through FIFOs; the uncued table below measures handoff between processes on Windows",
        ));
    }
    if Scenario::Waiters.runs(only) {
        let (waiting, more) = waiters::run(dir, plan)?;
        rows.extend(waiting);
        not.extend(more);
    }
    if Scenario::Shared.runs(only) {
        not.push(NotMeasured::new(
            "shared_try_acquire, shared_writer_wait",
            "shared-mode figures",
            "Windows leases have no shared mode (Error::SharedUnsupported)",
        ));
    }
    if Scenario::Stores.runs(only) {
        rows.extend(stores::run(dir, plan)?);
        not.push(NotMeasured::new(
            "gc_beside_verbs",
            "a gc of 100,000 lock files beside a verb loop",
            "Windows keyed leases keep no lock files (the lease is a named object): there is nothing for a collection to remove",
        ));
    }
    if Scenario::Document.runs(only) {
        let (more, missing) = document::run(dir, plan)?;
        rows.extend(more);
        not.extend(missing);
    }
    if Scenario::SharedMount.runs(only) {
        not.push(NotMeasured::new(
            "mount_*",
            "shared-mount figures (the record lease on two FUSE mounts of one directory)",
            "the record lease is POSIX-only, and the bed is two bindfs (FUSE) mounts",
        ));
    }
    if Scenario::Uncued.runs(only) {
        not.push(NotMeasured::new(
            "uncued floors",
            "uncued kernel floors (flock)",
            "no kernel wait queue for a named object (Windows waiters poll): the uncued lines have no floor, ratios or targets",
        ));
    }
    Ok((rows, not))
}

/// What the figures were measured on.
struct Machine {
    cores: usize,
    kernel: String,
    cpu: String,
    fs: String,
}

#[cfg(windows)]
fn machine(_dir: &std::path::Path) -> Machine {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| "unknown".into());
    Machine {
        cores,
        kernel: env("OS"),
        cpu: env("PROCESSOR_IDENTIFIER"),
        fs: "unknown".into(),
    }
}

#[cfg(unix)]
fn machine(dir: &std::path::Path) -> Machine {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let fs = rustix::fs::statfs(dir)
        .map(|st| fs_name(fs_magic(&st)))
        .unwrap_or_else(|_| "unknown".into());
    Machine {
        cores,
        kernel,
        cpu,
        fs,
    }
}

#[cfg(unix)]
#[allow(clippy::unnecessary_cast)] // f_type's integer type differs between platforms
fn fs_magic(st: &rustix::fs::StatFs) -> i64 {
    st.f_type as i64
}

#[cfg(unix)]
fn fs_name(magic: i64) -> String {
    match magic & 0xffff_ffff {
        0xef53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0x794c_7630 => "overlayfs".into(),
        0x2fc1_2fc1 => "zfs".into(),
        0xf2f5_2010 => "f2fs".into(),
        0x6969 => "nfs".into(),
        m => format!("0x{m:x}"),
    }
}

fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Nanos if v >= 10_000_000.0 => format!("{:.1} ms", v / 1e6),
        Unit::Nanos if v >= 100_000.0 => format!("{:.0} µs", v / 1000.0),
        Unit::Nanos => format!("{:.2} µs", v / 1000.0),
        Unit::Percent => format!("{v:.3} %"),
        Unit::PerSecond => format!("{v:.0} /s"),
        Unit::Count => format!("{v:.0}"),
    }
}

fn table(
    rows: &[Row],
    not: &[NotMeasured],
    m: &Machine,
    plan: &Plan,
    elapsed: f64,
    only: Option<Scenario>,
) -> String {
    let mut out = format!(
        "leasehold bench{}{} — {} cores, {PLATFORM} {}, {}, temp dir on {}; {:.1} s\n\n",
        if plan.quick { " --quick" } else { "" },
        only.map_or(String::new(), |s| format!(" --only {}", s.arg())),
        m.cores,
        m.kernel,
        m.cpu,
        m.fs,
        elapsed
    );
    let header = [
        "figure", "median", "p50", "p90", "p99", "floor", "ratio", "target", "met",
    ];
    let mut cells: Vec<[String; 9]> = vec![header.map(String::from)];
    for r in rows {
        let d = |f: fn(&Dist) -> f64| {
            r.dist
                .as_ref()
                .map_or("".into(), |dist| fmt_value(f(dist), r.unit))
        };
        cells.push([
            r.name.clone(),
            fmt_value(r.median, r.unit),
            d(|x| x.p50),
            d(|x| x.p90),
            d(|x| x.p99),
            r.floor.map_or("—".into(), |(f, what)| {
                format!("{} ({what})", fmt_value(f, r.unit))
            }),
            r.ratio().map_or("—".into(), |x| format!("{x:.2}×")),
            r.target.as_ref().map_or("—".into(), |(t, _)| t.clone()),
            r.target
                .as_ref()
                .map_or("".into(), |(_, ok)| if *ok { "yes" } else { "NO" }.into()),
        ]);
    }
    if !rows.is_empty() {
        out.push_str(&aligned(&cells, |i| i == 0 || i >= 7));
    }
    for n in not {
        out.push_str(&format!(
            "not measured on {PLATFORM}: {} ({}): {}\n",
            n.name, n.key, n.why
        ));
    }
    out
}

/// Columns padded to their widest cell: left-aligned where `left(i)`, else right-aligned.
fn aligned<R: AsRef<[String]>>(cells: &[R], left: impl Fn(usize) -> bool) -> String {
    let mut out = String::new();
    let n = cells.first().map_or(0, |c| c.as_ref().len());
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            cells
                .iter()
                .map(|c| c.as_ref().get(i).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for c in cells {
        let line: Vec<String> = c
            .as_ref()
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (s, w))| {
                let pad = w - s.chars().count();
                if left(i) {
                    format!("{s}{}", " ".repeat(pad))
                } else {
                    format!("{}{s}", " ".repeat(pad))
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// The uncued back-to-back scenario: one line per method and W, with its ratios.
fn uncued_table(lines: &[uncued::Line], plan: &Plan) -> String {
    let mut out = format!(
        "uncued back-to-back handoff: W workers each loop acquire → hold 100 µs → release → acquire at once, no cue; {:.1} s × {} runs, medians\ntargets: {}\n\n",
        plan.uncued_ms as f64 / 1000.0,
        plan.uncued_repeats,
        uncued::TARGETS,
    );
    // The futex-wake floor of each group of runs (measured before it).
    let mut groups: Vec<(usize, usize)> = lines.iter().map(|l| (l.workers, l.shared)).collect();
    groups.dedup();
    for (workers, shared) in groups {
        let Some(w) = lines
            .iter()
            .find(|l| (l.workers, l.shared) == (workers, shared))
            .and_then(|l| l.wake)
        else {
            continue;
        };
        out.push_str(&format!(
            "futex wake between two threads (unpark → running), before the runs with W = {workers}{}: p50 {}, p90 {}, p99 {}\n",
            match shared {
                0 => String::new(),
                n => format!(" ({n} shared)"),
            },
            fmt_value(w.p50, Unit::Nanos),
            fmt_value(w.p90, Unit::Nanos),
            fmt_value(w.p99, Unit::Nanos),
        ));
    }
    out.push('\n');
    let header = [
        "W",
        "method",
        "owner changed",
        "handoff p50",
        "p99",
        "contended wait p99",
        "max",
        "acq/s",
        "owner ×floor",
        "wait p99 ×floor",
        "max ×floor",
        "handoff base",
        "handoff ×base",
        "×helper floor",
        "×kernel floor",
        "met",
    ];
    let mut cells: Vec<[String; 16]> = vec![header.map(String::from)];
    let ns = |v: Option<f64>| v.map_or("—".into(), |v| fmt_value(v, Unit::Nanos));
    let x = |r: Option<f64>| r.map_or("—".into(), |r| format!("{r:.2}×"));
    // No verdict: a floor's row, or (Windows) a method without a floor to be read against.
    let met = |m: Option<bool>, floor: bool| -> String {
        match m {
            Some(ok) => if ok { "yes" } else { "NO" }.into(),
            None if floor => "(floor)".into(),
            None => "—".into(),
        }
    };
    for l in lines.iter().filter(|l| l.shared == 0) {
        let f = &l.figures;
        cells.push([
            l.workers.to_string(),
            l.method.label().into(),
            format!("{:.1} %", 100.0 * f.owner_change),
            ns(f.handoff.map(|d| d.p50)),
            ns(f.handoff.map(|d| d.p99)),
            ns(f.wait.map(|d| d.p99)),
            ns(f.wait.map(|d| d.max)),
            format!("{:.0}", f.rate),
            x(l.owner_ratio),
            x(l.wait_p99_ratio),
            x(l.wait_max_ratio),
            ns(l.handoff_base),
            x(l.handoff_ratio),
            x(l.helper_ratio),
            x(l.kernel_ratio),
            met(l.met, l.method.is_floor()),
        ]);
    }
    out.push_str(&aligned(&cells, |i| i == 1 || i == 15));
    out.push_str(&helper_summary(lines));
    let mixed: Vec<&uncued::Line> = lines.iter().filter(|l| l.shared > 0).collect();
    let Some(first) = mixed.first().copied() else {
        return out;
    };
    out.push_str(&format!(
        "\nshared mode, the same loop: {} workers, {} of them shared (SharedLease / flock(LOCK_SH)), the others exclusive; {:.1} s × {} runs, medians\ntargets: {}\n\n",
        first.workers,
        first.shared,
        plan.uncued_ms as f64 / 1000.0,
        plan.uncued_repeats,
        uncued::MIXED_TARGETS,
    ));
    let header = [
        "method",
        "owner changed",
        "exclusive share",
        "handoff p50",
        "shared wait p99",
        "max",
        "exclusive wait p99",
        "max",
        "acq/s",
        "owner ×floor",
        "shared p99 ×floor",
        "max ×floor",
        "excl p99 ×floor",
        "max ×floor",
        "handoff base",
        "handoff ×base",
        "met",
    ];
    let mut cells: Vec<[String; 17]> = vec![header.map(String::from)];
    for l in &mixed {
        let f = &l.figures;
        cells.push([
            l.method.mixed_label().into(),
            format!("{:.1} %", 100.0 * f.owner_change),
            format!("{:.1} %", 100.0 * f.exclusive_share),
            ns(f.handoff.map(|d| d.p50)),
            ns(f.shared_wait.map(|d| d.p99)),
            ns(f.shared_wait.map(|d| d.max)),
            ns(f.exclusive_wait.map(|d| d.p99)),
            ns(f.exclusive_wait.map(|d| d.max)),
            format!("{:.0}", f.rate),
            x(l.owner_ratio),
            x(l.shared_p99_ratio),
            x(l.shared_max_ratio),
            x(l.wait_p99_ratio),
            x(l.wait_max_ratio),
            ns(l.handoff_base),
            x(l.handoff_ratio),
            met(l.met, l.method.is_floor()),
        ]);
    }
    out.push_str(&aligned(&cells, |i| i == 0 || i == 16));
    // Which hand-overs the median mixes: one wake-up each, or more.
    out.push_str("\nthe same runs: handoff p50 by transition (hand-overs per run)\n\n");
    let mut cells: Vec<[String; 4]> = vec![[
        "method".into(),
        uncued::Transition::WriterToWriter.label().into(),
        uncued::Transition::WriterToReader.label().into(),
        uncued::Transition::ReaderToWriter.label().into(),
    ]];
    for l in &mixed {
        let f = &l.figures;
        let by = |t: uncued::Transition| {
            format!(
                "{} ({:.0})",
                ns(f.handoff_by[t as usize].map(|d| d.p50)),
                f.handoffs_by[t as usize]
            )
        };
        cells.push([
            l.method.mixed_label().into(),
            by(uncued::Transition::WriterToWriter),
            by(uncued::Transition::WriterToReader),
            by(uncued::Transition::ReaderToWriter),
        ]);
    }
    out.push_str(&aligned(&cells, |i| i == 0));
    out
}

/// The hand-overs that go through a helper thread (the cancellable, async and keyed faces,
/// and every contender: Node's wakes its event loop after the helper), each W's p50 read
/// against the helper-thread floor and the kernel floor of the same runs, one line per
/// method, so that the ratios the targets name can be read (and pasted) at a glance.
fn helper_summary(lines: &[uncued::Line]) -> String {
    let exclusive: Vec<&uncued::Line> = lines.iter().filter(|l| l.shared == 0).collect();
    let mut ws: Vec<usize> = exclusive.iter().map(|l| l.workers).collect();
    ws.dedup();
    let mut methods: Vec<&uncued::Runner> = Vec::new();
    for l in &exclusive {
        let shown = l.method.hands_over()
            || matches!(l.method, uncued::Runner::External(_))
            || l.method.is(role::Method::HelperFloor)
            || l.method.is(role::Method::Floor);
        if shown && !methods.contains(&&l.method) {
            methods.push(&l.method);
        }
    }
    if methods.is_empty() || ws.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nhand-over through a helper thread, p50 against the floors of the same runs (targets: {})\n\n",
        uncued::HELPER_TARGETS
    );
    let mut header = vec!["method".to_string()];
    for w in &ws {
        header.push(format!("W = {w}: handoff p50"));
        header.push("×helper floor".into());
        header.push("×kernel floor".into());
    }
    header.push("met".into());
    let mut cells = vec![header];
    let x = |r: Option<f64>| r.map_or("—".into(), |r| format!("{r:.2}×"));
    for m in methods {
        let mut row = vec![m.label().to_string()];
        let mut verdicts = Vec::new();
        for w in &ws {
            let l = exclusive.iter().find(|l| l.workers == *w && &l.method == m);
            let h = l.and_then(|l| l.figures.handoff).map(|d| d.p50);
            row.push(h.map_or("—".into(), |v| fmt_value(v, Unit::Nanos)));
            row.push(x(l.and_then(|l| l.helper_ratio)));
            row.push(x(l.and_then(|l| l.kernel_ratio)));
            if m.hands_over() {
                verdicts.push(l.and_then(|l| l.helper_ratio).is_some_and(|r| r <= 1.1));
            }
        }
        row.push(match (m.is_floor(), verdicts.is_empty()) {
            (true, _) => "(floor)".into(),
            (false, true) => "—".into(),
            (false, false) => if verdicts.iter().all(|v| *v) {
                "yes"
            } else {
                "NO"
            }
            .into(),
        });
        cells.push(row);
    }
    let last = cells[0].len() - 1;
    out.push_str(&aligned(&cells, |i| i == 0 || i == last));
    out
}

fn json_report(
    rows: &[Row],
    not: &[NotMeasured],
    uncued: &[uncued::Line],
    m: &Machine,
    plan: &Plan,
    elapsed: f64,
    only: Option<Scenario>,
) -> Value {
    let dist = |d: &Option<Dist>| {
        d.map_or(
            Value::Null,
            |d| json!({"p50": d.p50, "p90": d.p90, "p99": d.p99, "max": d.max}),
        )
    };
    let figures: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "key": r.key,
                "name": r.name,
                "unit": match r.unit {
                    Unit::Nanos => "ns",
                    Unit::Percent => "percent",
                    Unit::PerSecond => "per_s",
                    Unit::Count => "count",
                },
                "median": r.median,
                "dist": dist(&r.dist),
                "floor": r.floor.map(|(f, _)| f),
                "floor_name": r.floor.map(|(_, n)| n),
                "floor_dist": dist(&r.floor_dist),
                "ratio": r.ratio(),
                "target": r.target.as_ref().map(|(t, _)| t.clone()),
                "met": r.target.as_ref().map(|(_, ok)| *ok),
                "samples": r.samples,
            })
        })
        .collect();
    let uncued: Vec<Value> = uncued
        .iter()
        .map(|l| {
            let f = &l.figures;
            json!({
                "workers": l.workers,
                "shared_workers": l.shared,
                "method": l.method.arg(),
                "name": if l.shared > 0 { l.method.mixed_label() } else { l.method.label() },
                "owner_change": f.owner_change,
                "exclusive_share": f.exclusive_share,
                "handoff": dist(&f.handoff),
                "handoff_by_transition": uncued::Transition::ALL
                    .iter()
                    .map(|t| {
                        (
                            t.key().to_string(),
                            json!({
                                "handoff": dist(&f.handoff_by[*t as usize]),
                                "handoffs_per_run": f.handoffs_by[*t as usize],
                            }),
                        )
                    })
                    .collect::<serde_json::Map<String, Value>>(),
                "contended_wait": dist(&f.wait),
                "shared_contended_wait": dist(&f.shared_wait),
                "exclusive_contended_wait": dist(&f.exclusive_wait),
                "contended_waits": f.waits,
                "acquisitions": f.turns,
                "acquisitions_per_s": f.rate,
                "ratios": {
                    "owner_change_vs_floor": l.owner_ratio,
                    "wait_p99_vs_floor": l.wait_p99_ratio,
                    "wait_max_vs_floor": l.wait_max_ratio,
                    "shared_wait_p99_vs_floor": l.shared_p99_ratio,
                    "shared_wait_max_vs_floor": l.shared_max_ratio,
                    "handoff_p50_vs_base": l.handoff_ratio,
                    "handoff_p50_vs_helper_floor": l.helper_ratio,
                    "handoff_p50_vs_kernel_floor": l.kernel_ratio,
                },
                "handoff_base": l.handoff_base,
                "futex_wake": dist(&l.wake),
                "met": l.met,
            })
        })
        .collect();
    let not_measured: Vec<Value> = not
        .iter()
        .map(|n| json!({"key": n.key, "name": n.name, "why": n.why}))
        .collect();
    json!({
        "platform": PLATFORM,
        "not_measured": not_measured,
        "quick": plan.quick,
        "only": only.map(Scenario::arg),
        "repeats": plan.repeats,
        "elapsed_s": elapsed,
        "machine": {"cores": m.cores, "kernel": m.kernel, "cpu": m.cpu, "fs": m.fs},
        "figures": figures,
        "uncued": {
            "seconds": plan.uncued_ms as f64 / 1000.0,
            "runs": plan.uncued_repeats,
            "targets": uncued::TARGETS,
            "mixed_targets": uncued::MIXED_TARGETS,
            "lines": uncued,
        },
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::external::Contender;
    use super::role::Method;
    use super::uncued::{Figures, Line, Runner};
    use super::*;

    /// A line of the exclusive-only table with hand-over p50 `p50` (ns), read against the
    /// floors' p50s as the uncued run reads it.
    fn line(workers: usize, method: Runner, p50: f64, helper: f64, kernel: f64) -> Line {
        let d = Dist {
            p50,
            p90: p50,
            p99: p50,
            max: p50,
        };
        Line {
            workers,
            shared: 0,
            figures: Figures {
                owner_change: 0.5,
                handoff: Some(d),
                handoff_by: [Some(d), None, None],
                handoffs_by: [1.0, 0.0, 0.0],
                wait: Some(d),
                shared_wait: None,
                exclusive_wait: Some(d),
                exclusive_share: 1.0,
                waits: 1.0,
                rate: 1.0,
                turns: 1.0,
            },
            owner_ratio: None,
            wait_p99_ratio: None,
            wait_max_ratio: None,
            shared_p99_ratio: None,
            shared_max_ratio: None,
            handoff_ratio: None,
            helper_ratio: Some(p50 / helper),
            kernel_ratio: Some(p50 / kernel),
            handoff_base: None,
            wake: None,
            met: None,
            method,
        }
    }

    #[test]
    fn the_helper_summary_reads_each_helper_thread_face_against_both_floors() {
        let node = Runner::External(Contender::parse("node=node worker.js").unwrap());
        let mut lines = Vec::new();
        for (w, helper, kernel) in [(2, 20_000.0, 5_000.0), (4, 40_000.0, 10_000.0)] {
            lines.push(line(
                w,
                Runner::Builtin(Method::Floor),
                kernel,
                helper,
                kernel,
            ));
            lines.push(line(
                w,
                Runner::Builtin(Method::FloorVerify),
                1.0,
                helper,
                kernel,
            ));
            lines.push(line(
                w,
                Runner::Builtin(Method::HelperFloor),
                helper,
                helper,
                kernel,
            ));
            lines.push(line(w, Runner::Builtin(Method::Lease), 1.0, helper, kernel));
            // Within 1.1× at W = 2, not at W = 4.
            let budget = if w == 2 { 21_000.0 } else { 48_000.0 };
            lines.push(line(
                w,
                Runner::Builtin(Method::LeaseBudget),
                budget,
                helper,
                kernel,
            ));
            lines.push(line(
                w,
                Runner::Builtin(Method::Keyed),
                helper,
                helper,
                kernel,
            ));
            lines.push(line(w, node.clone(), 1.5 * helper, helper, kernel));
        }
        let text = helper_summary(&lines);
        let row = |label: &str| {
            text.lines()
                .find(|l| l.starts_with(label))
                .unwrap_or_else(|| panic!("no row {label:?} in\n{text}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(text.contains("≤ 1.1× the helper-thread floor") && text.contains("≤ 1.5×"));
        assert!(row("kernel floor").ends_with("(floor)"), "{text}");
        assert!(row("helper-thread floor").contains("1.00× 4.00×"), "{text}");
        assert!(
            row("Lease::acquire, deadline")
                .contains("21.00 µs 1.05× 4.20× 48.00 µs 1.20× 4.80× NO"),
            "{text}"
        );
        assert!(row("KeyedLeases").ends_with("yes"), "{text}");
        assert!(
            row("node").contains("1.50× 6.00×") && row("node").ends_with("—"),
            "{text}"
        );
        // Faces that block in the kernel themselves are not in it.
        assert!(!text.contains("floor + inode verify") && !text.contains("unlimited budget"));
    }
}
