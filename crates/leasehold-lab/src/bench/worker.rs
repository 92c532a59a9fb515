//! The worker side of the multi-process figures: this binary re-executed as
//! `leasehold worker bench ROLE ...` (the hidden entry point shared with the torture, see
//! `crates/leasehold-cli/src/cmd/worker.rs`). `--kernel` and `--async` choose how a worker waits (see [`Wait`]).
//! Workers report to the parent in lines on stdout:
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
//! * `share` (the shared-mode scenario, `shared.rs`): loop shared holds out of phase with the
//!   other readers until the cued end (`--method floor`: plain `flock(LOCK_SH)`).
//! * `crowd`: start `--of` waiters on a lease held elsewhere, print `T <threads before>
//!   <threads while all wait>`; on a line `c <ms>` let them wait that long (async ones on
//!   the runtime, driven meanwhile) and print `C <cpu ns> <wall ns>`, the process's CPU time
//!   in that window; exit when stdin closes (the waiters die with it).
//! * `doc` (the document scenario, `document.rs`): print `R`, read a line, make `--count`
//!   `Document::update_json` updates of the document `--lock`, print `D <ns they took>`.
//! * `peer` (the shared-mount scenario, `shared_mount.rs`): print `W`, take the record lease
//!   (`--record-ttl-ms`) or the kernel's lease on a network or FUSE mount, print
//!   `A <acquired ns>`, read a line, release, print `R <ns stamped just before the release>`.
//! * `loop` (the uncued back-to-back scenario): prepare `--method`, print `R`, read
//!   `go <end ns>`, then until the end loop *acquire → hold 100 µs (asleep) → release →
//!   acquire again at once* (shared with `--shared`, else exclusive), with no cue from
//!   anyone, recording per acquisition when it
//!   started to acquire, when it had the lease and when it released (stamped just before the
//!   release call). Then print one `r <start> <acquired> <released>` line per acquisition and
//!   `D <count>`. Nothing is printed or written inside the loop.
//! * `micro` (not used by the bench itself: for counting one in-process op apart from the
//!   others, see `micro.rs`): set up the in-process figures' files in the directory
//!   `--lock`, call `--op` `--count` times, print nothing.

use std::io::{BufRead, Write};
#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
#[cfg(unix)]
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(unix)]
use std::sync::{Arc, mpsc};
use std::time::Duration;

use clap::Args;
use leasehold::patterns::keyed::KeyedLeases;
use leasehold::{Budget, Lease, SharedLease};
#[cfg(unix)]
use rustix::fs::{CWD, FlockOperation, Mode, OFlags};
#[cfg(unix)]
use rustix::io::Errno;

#[cfg(unix)]
use super::crew::until_asleep;
#[cfg(unix)]
use super::report::errno_fail;
use super::report::{io_fail, mono_ns};
use super::role::{Held, Method, Wait};
#[cfg(unix)]
use super::role::{lock_kernel, open_kernel};
use crate::exit::{Failure, OK, Outcome};

/// The sender byte of cues from the parent (workers are 0..n, n ≤ 4).
#[cfg(unix)]
pub(super) const PARENT: u8 = 255;
/// How long a handoff holder keeps the lease per turn.
pub(super) const HOLD_NS: u64 = 100_000;

/// Arguments of a bench worker process (internal: not part of the contract).
#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// What the worker does (see the module documentation).
    role: String,
    /// The lock file the worker contends for.
    #[arg(long, value_name = "PATH")]
    lock: PathBuf,
    /// A file where holders leave their release timestamp.
    #[arg(long, value_name = "PATH")]
    stamp: Option<PathBuf>,
    /// This handoff worker's index.
    #[arg(long, default_value_t = 0)]
    index: usize,
    /// How many handoff workers there are.
    #[arg(long, default_value_t = 0)]
    of: usize,
    /// The worker waits in kernel `flock(LOCK_EX)` instead of `Lease::acquire`.
    #[arg(long)]
    kernel: bool,
    /// The worker's waiters are `Lease::acquire_async` tasks on a current-thread tokio
    /// runtime instead of threads in `Lease::acquire`.
    #[arg(long = "async")]
    async_wait: bool,
    /// How a `loop` worker takes the lease (see [`Method`]).
    #[arg(long, value_enum, default_value_t = Method::Lease)]
    method: Method,
    /// A `loop` worker takes the lease shared (`SharedLease`, `flock(LOCK_SH)`).
    #[arg(long)]
    shared: bool,
    /// How many updates a `doc` worker makes; how many calls a `micro` worker makes.
    #[arg(long, default_value_t = 0)]
    count: usize,
    /// A `peer` worker's TTL in ms: it takes the lease `LeaseOptions::acquire_mount_lease`
    /// gives with `SharedMount::Record { ttl }` (a record lease, where the mount keeps
    /// kernel locks on each host); 0: the kernel's lease, network file systems allowed.
    #[arg(long, default_value_t = 0)]
    record_ttl_ms: u64,
    /// The op a `micro` worker repeats (see `micro.rs`).
    #[arg(long)]
    op: Option<String>,
}

/// The keyed leases of a [`Method::Keyed`] loop: one key in a namespace under
/// [`root`](Self::root) of the loop's lock path.
struct Keyed {
    leases: KeyedLeases,
}

impl Keyed {
    const KEY: &str = "bench";

    /// The managed root for the loop on `lock`: beside it, named after it.
    fn root(lock: &Path) -> PathBuf {
        lock.with_extension("keyed")
    }

    /// The key's leases, its lock file created (every worker of the loop vouches for it).
    fn prepare(lock: &Path) -> Result<Keyed, Failure> {
        let root = Keyed::root(lock);
        std::fs::create_dir_all(&root).map_err(io_fail("create the keyed root"))?;
        let leases = KeyedLeases::new(root, ".bench-locks-v1");
        let ready = leases.acquire(Keyed::KEY, &Budget::timeout(PREPARE_WAIT), |_| true);
        drop(ready.map_err(|e| Failure::failed(format!("bench: keyed lease: {e}")))?);
        Ok(Keyed { leases })
    }
}

/// How long a keyed loop worker waits for its key while it prepares (another worker may hold
/// it for a moment, preparing too).
const PREPARE_WAIT: Duration = Duration::from_secs(20);

/// One acquisition of a `loop` worker: started to acquire, had the lease, released (ns).
type Turn = (u64, u64, u64);

/// The `loop` role: see the module documentation.
fn back_to_back(
    lock: &Path,
    method: Method,
    shared: bool,
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
) -> Result<Vec<Turn>, Failure> {
    if shared && method == Method::Handle {
        return Err(Failure::usage("bench: a LeaseHandle has no shared mode"));
    }
    let hold = Duration::from_nanos(HOLD_NS);
    let token = leasehold::CancelToken::new();
    let rt = match method {
        Method::Async => Some(runtime()?),
        _ => None,
    };
    let mut handle = match method {
        Method::Handle => Some(leasehold::LeaseHandle::open(lock).map_err(|e| Failure::of(&e))?),
        _ => None,
    };
    if shared && method == Method::Keyed {
        return Err(Failure::usage("bench: keyed leases have no shared mode"));
    }
    let keyed = match method {
        Method::Keyed => Some(Keyed::prepare(lock)?),
        _ => None,
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "R")
        .and_then(|()| out.flush())
        .map_err(io_fail("report"))?;
    let end: u64 = match lines.next() {
        Some(Ok(line)) => line
            .strip_prefix("go ")
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| Failure::failed(format!("bench: bad cue {line:?}")))?,
        _ => return Ok(Vec::new()),
    };
    #[cfg(unix)]
    let helper = match method {
        Method::HelperFloor => Some(FlockHelper::start()?),
        _ => None,
    };
    #[cfg(unix)]
    let kernel_turn = |verify: bool| -> Result<Turn, Failure> {
        let t0 = mono_ns();
        let fd = match &helper {
            Some(helper) => helper.lock(open_kernel(lock)?, shared)?,
            None => lock_kernel(lock, shared)?,
        };
        if verify {
            let held = rustix::fs::fstat(&fd).map_err(errno_fail("fstat"))?;
            let now = rustix::fs::statat(CWD, lock, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .map_err(errno_fail("stat"))?;
            if (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino) {
                return Err(Failure::failed("bench: the lock file was replaced"));
            }
        }
        let t1 = mono_ns();
        std::thread::sleep(hold);
        let t2 = mono_ns();
        drop(fd);
        Ok((t0, t1, t2))
    };
    let lease_err = |e: leasehold::Error| Failure::of(&e);
    let mut turns = Vec::with_capacity(1 << 16);
    while mono_ns() < end {
        let turn = match method {
            #[cfg(unix)]
            Method::Floor => kernel_turn(false)?,
            #[cfg(unix)]
            Method::FloorVerify | Method::HelperFloor => kernel_turn(true)?,
            #[cfg(windows)]
            Method::Floor | Method::FloorVerify | Method::HelperFloor => {
                return Err(Failure::usage(
                    "bench: the flock floors do not exist on Windows",
                ));
            }
            Method::Lease | Method::LeaseBudget | Method::Async => {
                let t0 = mono_ns();
                let budget = match method {
                    // Far beyond the run: the deadline never passes, but the waiter is the
                    // cancellable one.
                    Method::LeaseBudget => {
                        Budget::timeout(Duration::from_secs(600)).with_cancel(token.clone())
                    }
                    _ => Budget::unlimited(),
                };
                let lease = match (&rt, shared) {
                    (Some(rt), false) => rt
                        .block_on(Lease::acquire_async(lock, &budget))
                        .map(|l| Held::Lease(l.into())),
                    (Some(rt), true) => rt
                        .block_on(SharedLease::acquire_async(lock, &budget))
                        .map(|l| Held::Lease(l.into())),
                    (None, false) => Lease::acquire(lock, &budget).map(|l| Held::Lease(l.into())),
                    (None, true) => {
                        SharedLease::acquire(lock, &budget).map(|l| Held::Lease(l.into()))
                    }
                }
                .map_err(lease_err)?;
                let t1 = mono_ns();
                std::thread::sleep(hold);
                let t2 = mono_ns();
                drop(lease);
                (t0, t1, t2)
            }
            Method::Keyed => {
                let Some(keyed) = keyed.as_ref() else {
                    return Err(Failure::failed("bench: no keyed leases"));
                };
                let t0 = mono_ns();
                // Far beyond the run, as for `LeaseBudget` (the store caps it at 30 s).
                let budget = Budget::timeout(Duration::from_secs(600)).with_cancel(token.clone());
                let lease = keyed
                    .leases
                    .acquire(Keyed::KEY, &budget, |_| true)
                    .map_err(|e| Failure::failed(format!("bench: keyed lease: {e}")))?;
                let t1 = mono_ns();
                std::thread::sleep(hold);
                let t2 = mono_ns();
                drop(lease);
                (t0, t1, t2)
            }
            Method::Handle => {
                let Some(handle) = handle.as_mut() else {
                    return Err(Failure::failed("bench: no lease handle"));
                };
                let t0 = mono_ns();
                let held = handle.lock(&Budget::unlimited()).map_err(lease_err)?;
                let t1 = mono_ns();
                std::thread::sleep(hold);
                let t2 = mono_ns();
                held.release();
                (t0, t1, t2)
            }
        };
        turns.push(turn);
    }
    Ok(turns)
}

/// The helper thread of [`Method::HelperFloor`]: it blocks in `flock` for the caller and
/// unparks it, the plainest form of the design a cancellable waiter needs (the library's
/// waiters add the budget, the notifier and the claim table to it).
#[cfg(unix)]
struct FlockHelper {
    jobs: mpsc::Sender<FlockJob>,
}

/// One wait handed to the helper: the descriptor, the mode, whom to unpark, and where to
/// say it is done (`Ok` once locked).
#[cfg(unix)]
struct FlockJob {
    fd: Arc<OwnedFd>,
    op: FlockOperation,
    caller: std::thread::Thread,
    done: Arc<std::sync::Mutex<Option<Result<(), Errno>>>>,
}

#[cfg(unix)]
impl FlockHelper {
    fn start() -> Result<FlockHelper, Failure> {
        let (jobs, rx) = mpsc::channel::<FlockJob>();
        std::thread::Builder::new()
            .name("bench-flock-helper".into())
            .spawn(move || {
                for job in rx {
                    let locked = loop {
                        match rustix::fs::flock(&*job.fd, job.op) {
                            Err(Errno::INTR) => continue,
                            other => break other,
                        }
                    };
                    // Its copy goes before the caller runs: the caller's close releases.
                    drop(job.fd);
                    *crate::sync::lock(&job.done) = Some(locked);
                    job.caller.unpark();
                }
            })
            .map_err(io_fail("start the flock helper"))?;
        Ok(FlockHelper { jobs })
    }

    /// `fd` locked: at once if `LOCK_NB` gets it, else by the helper while this thread parks.
    fn lock(&self, fd: OwnedFd, shared: bool) -> Result<OwnedFd, Failure> {
        let (op, try_op) = match shared {
            true => (
                FlockOperation::LockShared,
                FlockOperation::NonBlockingLockShared,
            ),
            false => (
                FlockOperation::LockExclusive,
                FlockOperation::NonBlockingLockExclusive,
            ),
        };
        match rustix::fs::flock(&fd, try_op) {
            Ok(()) => return Ok(fd),
            Err(Errno::WOULDBLOCK | Errno::INTR) => {}
            Err(e) => return Err(errno_fail("flock")(e)),
        }
        let fd = Arc::new(fd);
        let done = Arc::new(std::sync::Mutex::new(None));
        let job = FlockJob {
            fd: fd.clone(),
            op,
            caller: std::thread::current(),
            done: done.clone(),
        };
        self.jobs
            .send(job)
            .map_err(|_| Failure::failed("bench: the flock helper is gone"))?;
        loop {
            if let Some(locked) = crate::sync::lock(&done).take() {
                locked.map_err(errno_fail("flock"))?;
                break;
            }
            std::thread::park();
        }
        Arc::try_unwrap(fd)
            .map_err(|_| Failure::failed("bench: the flock helper kept the descriptor"))
    }
}

/// How this worker waits, as its flags say.
fn wait_of(args: &WorkerArgs) -> Wait {
    if args.kernel {
        Wait::Kernel
    } else if args.async_wait {
        Wait::Async
    } else {
        Wait::Lease
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
        #[cfg(windows)]
        (Wait::Kernel, _) => Err(Failure::usage(
            "bench: no kernel-blocking wait for a named object on Windows",
        )),
        #[cfg(unix)]
        (Wait::Kernel, _) => {
            let fd = lock_kernel(path, false)?;
            Ok((Held::Kernel(fd), mono_ns()))
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
                Ok((Ok(lease), at)) => Ok((Held::Lease(lease.into()), at)),
                Ok((Err(e), _)) => Err(Failure::of(&e)),
                Err(e) => Err(Failure::failed(format!("bench: async waiter task: {e}"))),
            }
        }
        _ => Lease::acquire(path, &Budget::unlimited())
            .map(|l| (Held::Lease(l.into()), mono_ns()))
            .map_err(|e| Failure::of(&e)),
    }
}

/// This process's thread count (`Threads:` in `/proc/self/status`).
#[cfg(unix)]
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
#[cfg(unix)]
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
pub fn main(args: &WorkerArgs) -> Outcome {
    let role = args.role.as_str();
    let lock = args.lock.as_path();
    let mut out = std::io::stdout().lock();
    let mut lines = std::io::stdin().lock().lines();
    let wait = wait_of(args);
    let rt = match wait {
        Wait::Async => Some(runtime()?),
        _ => None,
    };
    match role {
        #[cfg(unix)]
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
            // Windows offers no view of whether a process waits (Linux: /proc): the
            // waiter first sees the lease held, so that "W" means it has begun to wait.
            #[cfg(windows)]
            if Lease::try_acquire(lock).is_ok() {
                return Err(Failure::failed("bench: the waiter found the lease free"));
            }
            writeln!(out, "W")
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
            // CPU time is 0 where the platform has no process CPU clock (Windows: only the
            // POSIX waiting-CPU figure reads it).
            let cpu = || crate::platform::process_cpu_ns().unwrap_or(0);
            let (c0, t0) = (cpu(), mono_ns());
            let (held, acquired) = acquire(lock, wait, rt.as_ref())?;
            let c1 = cpu();
            writeln!(
                out,
                "A {acquired} {} {}",
                c1.saturating_sub(c0),
                acquired - t0
            )
            .and_then(|()| out.flush())
            .map_err(io_fail("report"))?;
            drop(held);
        }
        "doc" => {
            // `--lock` is the document; its lease is the sibling lock file.
            let doc = leasehold_stores::document::Document::open(
                lock,
                leasehold_stores::document::DocumentOptions::new().json(true),
            );
            writeln!(out, "R")
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
            let _go = lines.next();
            let wait = Budget::timeout(Duration::from_secs(60));
            let t0 = mono_ns();
            for _ in 0..args.count {
                doc.update_json(&wait, super::stores::bump)
                    .map_err(|e| Failure::failed(format!("bench: document: {e}")))?;
            }
            writeln!(out, "D {}", mono_ns() - t0)
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
        }
        "peer" => peer(lock, args.record_ttl_ms, &mut lines, &mut out)?,
        "loop" => {
            let turns = back_to_back(lock, args.method, args.shared, &mut lines)?;
            use std::fmt::Write as _;
            let mut text = String::with_capacity(turns.len() * 40);
            for (t0, t1, t2) in &turns {
                let _ = writeln!(text, "r {t0} {t1} {t2}");
            }
            let _ = writeln!(text, "D {}", turns.len());
            out.write_all(text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
        }
        #[cfg(unix)]
        "verbs" => verbs(lock, &mut lines, &mut out)?,
        #[cfg(unix)]
        "micro" => {
            let op = args
                .op
                .as_deref()
                .ok_or_else(|| Failure::usage("bench worker micro needs --op"))?;
            super::micro::repeat(lock, op, args.count)?;
        }
        #[cfg(unix)]
        "share" => {
            super::shared::share_loop(lock, args.method, args.index, &mut lines)?;
        }
        #[cfg(unix)]
        "crowd" => {
            // Threads before any waiter exists (the runtime, if any, already built), and
            // while `--of` waiters all wait.
            let before = threads()?;
            start_waiters(lock, args.of.max(1), wait, rt.as_ref())?;
            let during = threads()?;
            writeln!(out, "T {before} {during}")
                .and_then(|()| out.flush())
                .map_err(io_fail("report"))?;
            let cpu = || crate::platform::process_cpu_ns().unwrap_or(0);
            for line in lines.by_ref() {
                let line = line.map_err(io_fail("read a cue"))?;
                let Some(ms) = line.strip_prefix("c ").and_then(|m| m.parse().ok()) else {
                    continue;
                };
                let window = Duration::from_millis(ms);
                let (c0, t0) = (cpu(), mono_ns());
                match rt.as_ref() {
                    Some(rt) => rt.block_on(async { tokio::time::sleep(window).await }),
                    None => std::thread::sleep(window),
                }
                let (c1, t1) = (cpu(), mono_ns());
                writeln!(out, "C {} {}", c1.saturating_sub(c0), t1.saturating_sub(t0))
                    .and_then(|()| out.flush())
                    .map_err(io_fail("report"))?;
            }
        }
        other => {
            return Err(Failure::usage(format!(
                "unknown bench worker role '{other}'"
            )));
        }
    }
    Ok(OK)
}

/// The `peer` role (the shared-mount figures, `shared_mount.rs`): print `W`, take the lease
/// (waiting without limit) — with `ttl_ms` > 0 the record lease, which it must be (the mount
/// keeps kernel locks on each host), else the kernel's lease with network file systems
/// allowed — print `A <acquired ns>`, read a line, stamp, release, print `R <stamp ns>`.
fn peer(
    lock: &Path,
    ttl_ms: u64,
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    use leasehold::{LeaseOptions, LockMode, SharedMount};
    let mut say = |line: String| {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(io_fail("report"))
    };
    say("W".into())?;
    let options = match ttl_ms {
        0 => LeaseOptions::new().allow_network_filesystem(true),
        ms => LeaseOptions::new().on_shared_mount(SharedMount::Record {
            ttl: Duration::from_millis(ms),
        }),
    };
    let mut lease = options
        .acquire_mount_lease(lock, LockMode::Exclusive, &Budget::unlimited())
        .map_err(|e| Failure::of(&e))?;
    let acquired = mono_ns();
    if ttl_ms > 0 && lease.fencing_token().is_none() {
        return Err(Failure::failed(format!(
            "bench: {} got the kernel's lease, not a record lease: its mount's locks reach every host",
            lock.display()
        )));
    }
    say(format!("A {acquired}"))?;
    let _ = lines.next();
    let released = mono_ns();
    lease.release();
    say(format!("R {released}"))
}

/// The `verbs` role (the gc figure, `stores.rs`): `ResultStore::paths` of the live result in
/// the managed root `root`, timed call by call. `base N`: N calls, answered `B <longest ns>`.
/// `loop`: answered `L`, then calls until the next line, `stop <from> <to>`, answered
/// `G <calls> <longest ns>` for the calls that overlapped `from..to` (monotonic ns).
#[cfg(unix)]
fn verbs(
    root: &Path,
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    out: &mut impl Write,
) -> Result<(), Failure> {
    use leasehold_stores::results::ResultStore;
    let store = ResultStore::new(root);
    let call = || -> Result<(u64, u64), Failure> {
        let t0 = mono_ns();
        store
            .paths(
                super::stores::GC_LIVE,
                &Budget::timeout(Duration::from_secs(30)),
            )
            .map_err(|e| Failure::failed(format!("bench: paths: {e}")))?;
        Ok((t0, mono_ns()))
    };
    let mut say = |line: String| {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(io_fail("report"))
    };
    say("R".into())?;
    while let Some(Ok(line)) = lines.next() {
        let mut words = line.split_whitespace();
        match (
            words.next(),
            words.next().and_then(|n| n.parse::<usize>().ok()),
        ) {
            (Some("base"), Some(n)) => {
                let mut longest = 0;
                for _ in 0..n {
                    let (t0, t1) = call()?;
                    longest = longest.max(t1 - t0);
                }
                say(format!("B {longest}"))?;
            }
            (Some("loop"), _) => {
                say("L".into())?;
                let mut calls = Vec::with_capacity(1 << 16);
                // The parent's next line ends the loop: looked for between calls (the
                // buffer is empty, every earlier line having been answered).
                let stdin = std::io::stdin();
                let mut ready = [rustix::event::PollFd::new(
                    &stdin,
                    rustix::event::PollFlags::IN,
                )];
                let zero = rustix::event::Timespec::default();
                while rustix::event::poll(&mut ready, Some(&zero)).map_err(errno_fail("poll"))? == 0
                {
                    calls.push(call()?);
                }
                let Some(Ok(stop)) = lines.next() else {
                    return Ok(());
                };
                let window: Vec<u64> = stop
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|n| n.parse().ok())
                    .collect();
                let [from, to] = window[..] else {
                    return Err(Failure::failed(format!("bench: bad cue {stop:?}")));
                };
                let during: Vec<u64> = calls
                    .iter()
                    .filter(|(t0, t1)| *t1 >= from && *t0 <= to)
                    .map(|(t0, t1)| t1 - t0)
                    .collect();
                let longest = during.iter().copied().max().unwrap_or(0);
                say(format!("G {} {longest}", during.len()))?;
            }
            _ => return Err(Failure::failed(format!("bench: bad cue {line:?}"))),
        }
    }
    Ok(())
}

/// The release stamp: when the last holder released (0: nobody yet), and which worker it was.
#[cfg(unix)]
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
#[cfg(unix)]
pub(super) fn turn_path(stamp: &Path, i: usize) -> PathBuf {
    let mut p = stamp.as_os_str().to_owned();
    p.push(format!(".turn{i}"));
    PathBuf::from(p)
}

#[cfg(unix)]
pub(super) fn open_turn(stamp: &Path, i: usize) -> Result<OwnedFd, Failure> {
    rustix::fs::openat(
        CWD,
        turn_path(stamp, i),
        OFlags::RDWR | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_fail("open turn FIFO"))
}
