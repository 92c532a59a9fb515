//! Figures that need waiters: handoff between processes (sync and async waiters), threads
//! used by 100 async waiters, CPU burnt while waiting, takeover after SIGKILL, and
//! cancellation / deadline latency.
//!
//! Workers are this binary re-executed with the hidden `--worker ROLE`; `--kernel` and
//! `--async` choose how they wait (see [`Wait`]). They report to the parent in lines on
//! stdout:
//!
//! * `handoff`: on each `g` cue in its turn FIFO, answer `a` to whoever cued it, acquire
//!   (leasehold: `Lease::acquire` with an unlimited budget, or an `acquire_async` task on the
//!   worker's current-thread runtime; kernel: blocking `flock(LOCK_EX)`), read the previous
//!   holder's release stamp, cue the previous holder and
//!   wait for its answer, print `A <release→acquire ns> <1 if it was already waiting at the
//!   release>`, hold 100 µs (asleep), write its own release stamp, release (close). An `s`
//!   cue ends it.
//! * `hold`: take the lease, print `H`, hold until stdin closes (or SIGKILL).
//! * `wait`: print `W`, wait for the lease, print `A <acquired at ns> <cpu ns> <wall ns>` where
//!   cpu is the process CPU time spent in the wait, then release and exit.
//! * `crowd`: start `--of` waiters on a lease held elsewhere, print `T <threads before>
//!   <threads while all wait>`, then wait until stdin closes (the waiters die with it).
//!
//! A `handoff` worker contends again only when the worker that took the lease after it cues it,
//! and that holder starts its hold only once the cue is answered, so every release has the
//! other N−1 workers waiting: each handoff measured is a real handoff to a waiter, never a
//! holder re-taking its own lease. Cues go worker to worker, not through the parent.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use leasehold::{Budget, CancelToken, Lease};
use rustix::fs::{CWD, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use super::{BenchArgs, Dist, Plan, Row, Unit, median, mono_ns};
use crate::exit::{Failure, OK, Outcome};

/// The sender byte of cues from the parent (workers are 0..n, n ≤ 4).
const PARENT: u8 = 255;
/// How long a handoff holder keeps the lease per turn.
const HOLD_NS: u64 = 100_000;
/// Upper bound on any single wait for a worker's line: a wedged benchmark fails, never hangs.
const LINE_LIMIT: Duration = Duration::from_secs(20);

fn io_fail(what: &str) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure::failed(format!("bench: {what}: {e}"))
}

fn errno_fail(what: &str) -> impl Fn(Errno) -> Failure + '_ {
    move |e| Failure::failed(format!("bench: {what}: {e}"))
}

// ---------------------------------------------------------------------------------------
// Workers (child side)
// ---------------------------------------------------------------------------------------

/// A lease held either by the library or by a bare descriptor locked with `flock`.
enum Held {
    Lease(#[allow(dead_code)] Lease),
    Kernel(#[allow(dead_code)] OwnedFd),
}

fn open_kernel(path: &Path) -> Result<OwnedFd, Failure> {
    rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(errno_fail("open lock file"))
}

/// How a worker waits for the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// A blocking `flock(LOCK_EX)` on a freshly opened file: the floor (not cancellable).
    Kernel,
    /// `Lease::acquire` with an unlimited budget, on a thread of its own.
    Lease,
    /// A `Lease::acquire_async` task on the worker's one current-thread tokio runtime.
    Async,
}

impl Wait {
    fn of(args: &BenchArgs) -> Wait {
        if args.kernel {
            Wait::Kernel
        } else if args.async_wait {
            Wait::Async
        } else {
            Wait::Lease
        }
    }

    /// The worker flag selecting this way of waiting.
    fn flag(self) -> Option<&'static str> {
        match self {
            Wait::Kernel => Some("--kernel"),
            Wait::Lease => None,
            Wait::Async => Some("--async"),
        }
    }
}

/// A current-thread tokio runtime: the one an async worker drives all its waiters on. It
/// starts no thread of its own (the reactor and timers run on the calling thread).
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io_fail("start a tokio runtime"))
}

/// Waits for the lease as `wait` says (`rt`: the worker's runtime, for [`Wait::Async`]);
/// returns it and the `CLOCK_MONOTONIC` time it was acquired at. None probes first: a failed
/// `try_acquire` would read `/proc/locks` to name the holder (see BENCHMARKS.md).
fn acquire(
    path: &Path,
    wait: Wait,
    rt: Option<&tokio::runtime::Runtime>,
) -> Result<(Held, u64), Failure> {
    match (wait, rt) {
        (Wait::Kernel, _) => {
            let fd = open_kernel(path)?;
            loop {
                match rustix::fs::flock(&fd, FlockOperation::LockExclusive) {
                    Ok(()) => return Ok((Held::Kernel(fd), mono_ns())),
                    Err(Errno::INTR) => continue,
                    Err(e) => return Err(errno_fail("flock")(e)),
                }
            }
        }
        (Wait::Async, Some(rt)) => {
            let path = path.to_path_buf();
            // A spawned task, as in an async service; it stamps the acquisition itself so
            // the task's join is not counted.
            let task = rt.spawn(async move {
                let lease = Lease::acquire_async(&path, &Budget::unlimited()).await;
                (lease, mono_ns())
            });
            let joined = rt.block_on(task);
            match joined {
                Ok((Ok(lease), at)) => Ok((Held::Lease(lease), at)),
                Ok((Err(e), _)) => Err(Failure::of(&e)),
                Err(e) => Err(Failure::failed(format!("bench: async waiter task: {e}"))),
            }
        }
        _ => Lease::acquire(path, &Budget::unlimited())
            .map(|l| (Held::Lease(l), mono_ns()))
            .map_err(|e| Failure::of(&e)),
    }
}

/// This process's thread count (`Threads:` in `/proc/self/status`).
fn threads() -> Result<u64, Failure> {
    std::fs::read_to_string("/proc/self/status")
        .map_err(io_fail("read /proc/self/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| Failure::failed("bench: no thread count in /proc/self/status"))
}

/// Starts `n` waiters for the lease on `lock` (held by another process) in this process and
/// returns once every one of them is waiting. Async waiters are tasks on `rt`: on one thread,
/// a task that has started has also been polled until it parked in its wait. Sync waiters
/// are threads, each seen asleep in the kernel. What the waiters hold if they ever acquire
/// is dropped with the process (or the runtime).
fn start_waiters(
    lock: &Path,
    n: usize,
    wait: Wait,
    rt: Option<&tokio::runtime::Runtime>,
) -> Result<(), Failure> {
    if let (Wait::Async, Some(rt)) = (wait, rt) {
        let started = Arc::new(AtomicUsize::new(0));
        rt.block_on(async {
            for _ in 0..n {
                let (path, started) = (lock.to_path_buf(), started.clone());
                tokio::spawn(async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    Lease::acquire_async(&path, &Budget::unlimited()).await
                });
            }
            while started.load(Ordering::SeqCst) < n {
                tokio::task::yield_now().await;
            }
        });
        return Ok(());
    }
    let (tx, rx) = mpsc::channel();
    for _ in 0..n {
        let (path, tx) = (lock.to_path_buf(), tx.clone());
        std::thread::spawn(move || {
            let _ = tx.send(rustix::thread::gettid().as_raw_nonzero().get());
            Lease::acquire(&path, &Budget::unlimited())
        });
    }
    for _ in 0..n {
        let tid = rx
            .recv()
            .map_err(|_| Failure::failed("bench: a waiter thread died"))?;
        until_asleep(&format!("/proc/self/task/{tid}/stat"))?;
    }
    Ok(())
}

/// Runs one worker role until its parent ends it.
pub(super) fn worker(role: &str, args: &BenchArgs) -> Outcome {
    let lock = args
        .lock
        .as_deref()
        .ok_or_else(|| Failure::usage("bench worker needs --lock"))?;
    let mut out = std::io::stdout().lock();
    let mut lines = std::io::stdin().lock().lines();
    let wait = Wait::of(args);
    let rt = match wait {
        Wait::Async => Some(runtime()?),
        _ => None,
    };
    match role {
        "handoff" => {
            let stamp_path = args
                .stamp
                .as_deref()
                .ok_or_else(|| Failure::usage("bench worker needs --stamp"))?;
            let (me, n) = (args.index, args.of);
            let stamp = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(stamp_path)
                .map_err(io_fail("open stamp file"))?;
            let turns = (0..n)
                .map(|i| open_turn(stamp_path, i))
                .collect::<Result<Vec<_>, _>>()?;
            let mine = turns
                .get(me)
                .ok_or_else(|| Failure::usage("bench worker index out of range"))?;
            // Cues are two bytes, [what, from], so each read takes exactly one.
            let next = |fd: &OwnedFd| -> [u8; 2] {
                let mut cue = [0u8; 2];
                loop {
                    match rustix::io::read(fd, &mut cue) {
                        Ok(2) => return cue,
                        Err(Errno::INTR) => continue,
                        _ => return [b's', PARENT],
                    }
                }
            };
            let mut stopping = false;
            while !stopping {
                let [what, from] = next(mine);
                if what != b'g' {
                    break;
                }
                // Tell the holder that cued us that we are on our way to wait for the lease.
                if let Some(holder) = turns.get(usize::from(from)) {
                    rustix::io::write(holder, &[b'a', me as u8])
                        .map_err(errno_fail("cue a worker"))?;
                }
                let asked = mono_ns();
                let (held, acquired) = acquire(lock, wait, rt.as_ref())?;
                let mut buf = [0u8; 16];
                rustix::io::pread(&stamp, &mut buf, 0).map_err(errno_fail("read stamp"))?;
                let (released, prev) = split_stamp(&buf);
                // The previous holder may contend again now that someone else has the lease;
                // the hold starts once it answers, so it is waiting when this one releases
                // (on a busy machine it might otherwise not even be scheduled within 100 µs).
                if let Some(fd) = prev.filter(|p| *p != me).and_then(|p| turns.get(p)) {
                    rustix::io::write(fd, &[b'g', me as u8]).map_err(errno_fail("cue a worker"))?;
                    stopping = next(mine)[0] != b'a';
                }
                let latency = if released == 0 {
                    0
                } else {
                    acquired.saturating_sub(released)
                };
                // A handoff: this worker was already waiting when the lease was released.
                let waited = released > asked;
                writeln!(out, "A {latency} {}", u8::from(waited))
                    .and_then(|()| out.flush())
                    .map_err(io_fail("report"))?;
                // The hold sleeps rather than spins: on a 2-core machine a spinning holder
                // keeps the very waiters it is to hand over to from reaching their wait.
                std::thread::sleep(Duration::from_nanos(HOLD_NS));
                let mut buf = [0u8; 16];
                buf[..8].copy_from_slice(&mono_ns().to_le_bytes());
                buf[8..].copy_from_slice(&(me as u64 + 1).to_le_bytes());
                rustix::io::pwrite(&stamp, &buf, 0).map_err(errno_fail("write stamp"))?;
                drop(held);
            }
        }
        "hold" => {
            let _held = acquire(lock, wait, rt.as_ref())?;
            writeln!(out, "H")
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
            for _ in lines.by_ref() {}
        }
        "wait" => {
            writeln!(out, "W")
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
            let cpu = || rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
            let cpu_ns =
                |t: rustix::time::Timespec| t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
            let (c0, t0) = (cpu_ns(cpu()), mono_ns());
            let (held, acquired) = acquire(lock, wait, rt.as_ref())?;
            let c1 = cpu_ns(cpu());
            writeln!(out, "A {acquired} {} {}", c1 - c0, acquired - t0)
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
            drop(held);
        }
        "crowd" => {
            // Threads before any waiter exists (the runtime, if any, already built), and
            // while `--of` waiters all wait.
            let before = threads()?;
            start_waiters(lock, args.of.max(1), wait, rt.as_ref())?;
            let during = threads()?;
            writeln!(out, "T {before} {during}")
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
            for _ in lines.by_ref() {}
        }
        other => {
            return Err(Failure::usage(format!(
                "unknown bench worker role '{other}'"
            )));
        }
    }
    Ok(OK)
}

/// The release stamp: when the last holder released (0: nobody yet), and which worker it was.
fn split_stamp(buf: &[u8; 16]) -> (u64, Option<usize>) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&buf[..8]);
    b.copy_from_slice(&buf[8..]);
    let who = u64::from_le_bytes(b);
    (u64::from_le_bytes(a), (who > 0).then(|| who as usize - 1))
}

/// Handoff worker `i`'s turn FIFO, carrying two-byte cues `[what, from]`: `g` lets it contend
/// once more (and it answers `a` to the sender), `s` stops it. Opened read-write by everyone,
/// so neither opening nor writing ever blocks or raises SIGPIPE.
fn turn_path(stamp: &Path, i: usize) -> PathBuf {
    let mut p = stamp.as_os_str().to_owned();
    p.push(format!(".turn{i}"));
    PathBuf::from(p)
}

fn open_turn(stamp: &Path, i: usize) -> Result<OwnedFd, Failure> {
    rustix::fs::openat(
        CWD,
        turn_path(stamp, i),
        OFlags::RDWR | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_fail("open turn FIFO"))
}

// ---------------------------------------------------------------------------------------
// Crew (parent side)
// ---------------------------------------------------------------------------------------

/// Worker processes and one channel carrying every line they print, tagged by worker.
struct Crew {
    children: Vec<(Child, Option<ChildStdin>)>,
    tx: mpsc::Sender<(usize, String)>,
    rx: mpsc::Receiver<(usize, String)>,
}

impl Crew {
    fn new() -> Crew {
        let (tx, rx) = mpsc::channel();
        Crew {
            children: Vec::new(),
            tx,
            rx,
        }
    }

    /// Starts a worker (`index` of `of`, for handoff workers and crowds); returns its index.
    fn spawn(
        &mut self,
        role: &str,
        lock: &Path,
        stamp: Option<&Path>,
        (index, of): (usize, usize),
        wait: Wait,
    ) -> Result<usize, Failure> {
        let exe = std::env::current_exe().map_err(io_fail("locate the leasehold binary"))?;
        let mut cmd = Command::new(exe);
        cmd.args(["bench", "--worker", role, "--lock"]).arg(lock);
        if let Some(s) = stamp {
            cmd.arg("--stamp").arg(s);
        }
        cmd.arg(format!("--index={index}"));
        cmd.arg(format!("--of={of}"));
        cmd.args(wait.flag());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io_fail("start a worker process"))?;
        let idx = self.children.len();
        let stdin = child.stdin.take();
        if let Some(stdout) = child.stdout.take() {
            let tx = self.tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((idx, line)).is_err() {
                        break;
                    }
                }
            });
        }
        self.children.push((child, stdin));
        Ok(idx)
    }

    fn pid(&self, idx: usize) -> u32 {
        self.children[idx].0.id()
    }

    /// The next line from any worker.
    fn recv(&self) -> Result<(usize, String), Failure> {
        self.rx
            .recv_timeout(LINE_LIMIT)
            .map_err(|_| Failure::failed("bench: a worker process stopped answering"))
    }

    /// The next line from worker `idx`, which must start with `tag`; returns its numbers.
    fn expect(&self, idx: usize, tag: &str) -> Result<Vec<u64>, Failure> {
        let (from, line) = self.recv()?;
        let mut it = line.split_whitespace();
        if from != idx || it.next() != Some(tag) {
            return Err(Failure::failed(format!(
                "bench: unexpected worker line {line:?} (wanted {tag} from worker {idx})"
            )));
        }
        it.map(|n| n.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| Failure::failed(format!("bench: malformed worker line {line:?}")))
    }

    /// SIGKILLs worker `idx` and reaps it.
    fn kill(&mut self, idx: usize) {
        let child = &mut self.children[idx].0;
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Closes worker `idx`'s stdin (its cue to finish) and reaps it.
    fn finish(&mut self, idx: usize) {
        self.children[idx].1 = None;
        let _ = self.children[idx].0.wait();
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        for (child, stdin) in &mut self.children {
            *stdin = None;
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Whether a thread or process (`/proc/.../stat` path) is asleep in the kernel. Used to know a
/// waiter has really started waiting before the event it waits for is triggered.
fn asleep(stat_path: &str) -> bool {
    std::fs::read_to_string(stat_path)
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "S"))
        })
        .unwrap_or(false)
}

/// Spins (yielding) until `stat_path` shows a sleeping task; fails after a generous bound.
fn until_asleep(stat_path: &str) -> Result<(), Failure> {
    let end = Instant::now() + LINE_LIMIT;
    // Twice in a row with a yield between, so a task merely descheduled for a moment in
    // its setup is not mistaken for one blocked in its wait.
    let mut streak = 0;
    while streak < 2 {
        if Instant::now() > end {
            return Err(Failure::failed("bench: a waiter never started waiting"));
        }
        std::thread::yield_now();
        streak = if asleep(stat_path) { streak + 1 } else { 0 };
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

/// All multi-process and waiting figures.
pub(super) fn run(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
    let mut rows = Vec::new();
    rows.extend(handoff(dir, plan)?);
    rows.push(waiter_threads(dir, plan)?);
    rows.push(waiting_cpu(dir, plan)?);
    rows.push(takeover(dir, plan)?);
    rows.extend(cancellation(dir, plan)?);
    Ok(rows)
}

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

fn handoff(dir: &Path, plan: &Plan) -> Result<Vec<Row>, Failure> {
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
