//! `--etcd ENDPOINTS`: `run`, `status` and `registry` with etcd v3 as the arbiter
//! (docs/cli.md, "etcd"), for processes spread over several machines.
//!
//! `run --etcd E NAME -- COMMAND` takes the lock `leasehold/lock/NAME/` (etcd's mutex recipe,
//! see `leasehold::arbiters::etcd`) and runs COMMAND with `LEASEHOLD_FENCING_TOKEN` set to
//! the grant's token. Neither COMMAND nor anything it starts may outlive the lease, so
//! COMMAND runs in a process group of its own under a supervisor (`etcd/supervisor.rs`, a
//! hidden re-execution of this binary) that owns the whole tree and stops it by itself.
//! The supervisor and COMMAND's process start before the wait and wait for the word, so the
//! grant costs two messages and COMMAND's `exec`, not two process starts;
//! a wait that ends without a grant dismisses them and COMMAND never runs. The terminal, if
//! `run` has it, goes to COMMAND's group while COMMAND runs, and a COMMAND stopped by the
//! terminal (Ctrl-Z, SIGTTIN, SIGTTOU) stops `run`'s job with it (`etcd/terminal.rs`).
//!
//! * **deadline**: every acknowledged keep-alive moves the instant at which the grant counts
//!   itself lost (send time + TTL − margin, margin = max(TTL/10, 0.2 s)); `run` passes each
//!   one to the supervisor. If none comes, the tree gets SIGTERM `--grace` before that
//!   instant and SIGKILL at it — also when `run` itself is stopped (SIGSTOP) or starved,
//!   because the supervisor keeps its own time;
//! * **lease lost** (etcd says it is gone): SIGKILL at once; `run` exits 1, `lease lost`;
//! * **leasehold dies** (even by SIGKILL): the supervisor sees its socket close and stops
//!   the tree — SIGTERM, SIGKILL `--grace` later or at the deadline, whichever is first;
//! * **the supervisor dies** (also with `run`, `pkill -9 leasehold`): on Linux COMMAND's tree
//!   is a PID namespace of its own whose first process dies with the supervisor, and the
//!   kernel kills every process in it (`etcd/namespace.rs`). Where the kernel refuses one,
//!   COMMAND dies of its parent-death signal (armed by the hidden exec verb, which checks its
//!   parent is still the supervisor before it becomes COMMAND), and `run`, a child subreaper
//!   too, kills the group and every orphan it inherits;
//! * **the supervisor stops answering** (SIGSTOP, starved): `run` kills it, and so the tree,
//!   half the margin after the deadline the supervisor acknowledged last, or after `lost`;
//!   where both are stopped no process can act, and the fencing token keeps a late write
//!   out (docs/cli.md);
//! * **job stopped** (Ctrl-Z): `run` is stopped too and sends no keep-alive, so a stop past
//!   the deadline minus the grace is the first case; a hang-up (SIGHUP) of the job is
//!   forwarded with SIGCONT and ends the tree;
//! * **clean exit** (COMMAND ended, or SIGINT/SIGTERM forwarded to its group): what COMMAND
//!   left running gets SIGTERM, then SIGKILL after `--grace`; then the lease is revoked at
//!   once, so a waiter's COMMAND starts within a round trip.
//!
//! Built without the `etcd` feature, every `--etcd` says so in one line and exits 1.

// Without the feature only the stubs and the argument parsers are used.
#![cfg_attr(not(all(feature = "etcd", unix)), allow(dead_code))]

use std::time::Duration;

use crate::exit::Failure;

/// The key prefix of `run`'s and `status`'s locks: `leasehold/lock/NAME/` (the stores check
/// registry prefixes against it).
pub const LOCK_PREFIX: &str = leasehold_stores::registry::ETCD_RUN_LOCKS;
/// `registry --prefix` by default.
pub const REGISTRY_PREFIX: &str = "leasehold/registry";
/// `--ttl` by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// `--grace` for a TTL: as given, or a third of the TTL by default. At most half the TTL:
/// keep-alives go at most TTL/3 apart, so in normal operation the deadline is never nearer
/// than about TTL·2/3 − margin, and a longer grace would stop COMMAND while the lease is
/// fine. (At the round trip measured at start the library may refuse a shorter one:
/// `EtcdArbiter::plan_keep_alives`.)
pub fn grace(ttl: Duration, grace: Option<Duration>) -> Result<Duration, Failure> {
    let grace = grace.unwrap_or(ttl / 3);
    if grace > ttl / 2 {
        return Err(Failure::usage(format!(
            "--grace {:.1?} with --ttl {}: the grace must be at most half the TTL ({:.1?}), so that keep-alives (every TTL/3) renew the lease before it begins; raise --ttl or lower --grace",
            grace,
            ttl.as_secs(),
            ttl / 2
        )));
    }
    Ok(grace)
}

/// `--ttl SECS`: a number of seconds, at least 2 (etcd counts whole seconds: rounded up).
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let d = super::parse_secs(s)?;
    if d < Duration::from_secs(2) {
        return Err(format!("'{s}': the lease TTL must be at least 2 seconds"));
    }
    Ok(Duration::from_secs(d.as_secs_f64().ceil() as u64))
}

/// A lock NAME must be a safe name ([A-Za-z0-9._-], 1..128 characters, not starting with
/// '.'): it becomes part of an etcd key, and a `/` in it would put one lock's keys under
/// another's prefix.
pub fn check_name(name: &str) -> Result<(), Failure> {
    let ok = (1..=128).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Failure::usage(format!(
            "{name:?}: not a usable lock name (use 1 to 128 of A-Z a-z 0-9 . _ -, not starting with '.')"
        )))
    }
}

/// What `run --etcd` was asked.
pub struct RunEtcd {
    pub endpoints: String,
    pub ttl: Duration,
    /// How long before the lease's deadline COMMAND's tree gets SIGTERM ([`grace`]).
    pub grace: Duration,
    pub timeout: Option<Duration>,
    pub no_wait: bool,
    pub conflict_exit_code: u8,
    pub name: String,
    pub command: Vec<std::ffi::OsString>,
}

#[cfg(not(all(feature = "etcd", unix)))]
fn unsupported() -> Failure {
    Failure::failed(
        "--etcd: this leasehold was built without etcd support; rebuild it with `cargo build --release --features etcd`",
    )
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn run(_: RunEtcd) -> crate::exit::Outcome {
    Err(unsupported())
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn status(_: &str, _: &str, _: bool) -> crate::exit::Outcome {
    Err(unsupported())
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn registry(
    _: &str,
    _: &str,
    _: Duration,
) -> Result<leasehold_stores::registry::Registry, Failure> {
    Err(unsupported())
}

#[cfg(not(all(feature = "etcd", unix)))]
pub fn exec(_: ExecArgs) -> crate::exit::Outcome {
    Err(unsupported())
}

/// The hidden verb `run --etcd` starts COMMAND through.
#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// The pid of the parent that must stay alive for COMMAND to live: the supervisor, or
    /// ns-init (1) in COMMAND's PID namespace.
    parent: i32,
    /// COMMAND and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<std::ffi::OsString>,
}

#[cfg(all(feature = "etcd", unix))]
pub use imp::{exec, registry, run, status};

#[cfg(all(feature = "etcd", unix))]
mod fds;

#[cfg(all(feature = "etcd", unix))]
pub mod supervisor;

#[cfg(all(feature = "etcd", unix))]
pub mod namespace;

#[cfg(all(feature = "etcd", unix))]
mod terminal;

#[cfg(all(feature = "etcd", unix))]
mod imp {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    use leasehold::Error;
    use leasehold::arbiters::etcd::{EtcdArbiter, EtcdGrant};
    use leasehold::patterns::authority::{Arbiter, Grant};
    use leasehold_stores::registry::Registry;
    use rustix::process::{Pid, Signal};

    use super::supervisor::{self, Why};
    use super::{ExecArgs, LOCK_PREFIX, RunEtcd, check_name};
    use crate::exit::{Failure, OK, Outcome};
    use crate::signals::Interrupts;
    use crate::wait::Wait;

    fn connect(endpoints: &str, name: &str, ttl: Duration) -> Result<EtcdArbiter, Failure> {
        EtcdArbiter::connect(endpoints, &format!("{LOCK_PREFIX}/{name}"), ttl)
            .map_err(|e| Failure::of(&e))
    }

    /// " (pid N on HOST)", as far as the holder told.
    fn holder(arbiter: &EtcdArbiter) -> String {
        match arbiter.owner() {
            Ok(Some(h)) => format!(" (pid {} on {})", h.pid, h.host),
            _ => String::new(),
        }
    }

    /// Acquires within `wait`, saying once after a second whom it waits for. The notice is
    /// said by this thread while the wait goes on in the arbiter's runtime, which the
    /// holder's look-up needs (the budget's `say` runs on that runtime and must not block on
    /// it); the line is out before this returns.
    fn acquire_saying(arbiter: &EtcdArbiter, wait: &Wait, name: &str) -> Result<EtcdGrant, Error> {
        enum Said {
            Notice,
            Done,
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let notice = tx.clone();
        let budget = wait.budget_saying(move |e| {
            if e.is_contended() {
                let _ = notice.send(Said::Notice);
            }
        });
        std::thread::scope(|s| {
            let acquiring = s.spawn(move || {
                let got = arbiter.acquire(&budget);
                let _ = tx.send(Said::Done);
                got
            });
            if let Ok(Said::Notice) = rx.recv() {
                let who = holder(arbiter);
                crate::out::error_line(&format!("waiting for {name} held by another process{who}"));
            }
            acquiring
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    pub fn run(args: RunEtcd) -> Outcome {
        check_name(&args.name)?;
        let Some((_, _)) = args.command.split_first() else {
            return Err(Failure::usage("run: COMMAND is required after --"));
        };
        let interrupts = Interrupts::install()?;
        // Orphans of a supervisor that is killed become ours, and are killed below.
        supervisor::become_subreaper()?;
        // Before the wait, so that it is ready when the grant comes; every
        // return without a grant dismisses it (drop), and COMMAND never starts.
        let standby = Standby::start(&args)?;
        let arbiter = connect(&args.endpoints, &args.name, args.ttl)?;
        // Keep-alives planned for the grace at the round trip just measured; refused (exit
        // 2, with the arithmetic) when COMMAND would be stopped with etcd healthy.
        arbiter
            .plan_keep_alives(args.grace)
            .map_err(|e| Failure::of(&e))?;
        // Waits within the user's budget, saying once after a second whom it waits for (the
        // CLI's one notice-then-wait, `wait.rs`).
        let wait = Wait::of(args.no_wait, args.timeout, interrupts.token());
        let grant = match acquire_saying(&arbiter, &wait, &args.name) {
            Ok(g) => g,
            Err(Error::Cancelled { .. }) => return Ok(interrupts.exit_code()),
            Err(e) if e.is_contended() => {
                // How long it waited, before the holder is looked up (that takes a moment).
                let tail = wait.gave_up();
                return Err(Failure::with_status(
                    args.conflict_exit_code,
                    format!(
                        "{}: lock is held by another process{}{tail}",
                        args.name,
                        holder(&arbiter)
                    ),
                ));
            }
            Err(e) => return Err(Failure::of(&e)),
        };
        supervised(&args, grant, standby, &interrupts)
    }

    /// COMMAND's supervisor (`supervisor.rs`), started before the wait: it prepares and
    /// starts COMMAND's process, which waits for the word that the lease is granted.
    /// Dropped without [`go`](Self::go) (no grant), it closes the socket: the supervisor
    /// and COMMAND's process exit without running COMMAND, and this waits for that.
    struct Standby {
        child: std::process::Child,
        sock: UnixStream,
        /// The socket COMMAND's process waits on for the word.
        word: UnixStream,
        /// The user's stdin, if open: COMMAND's, passed with the word.
        stdin: Option<std::os::fd::BorrowedFd<'static>>,
        /// The supervisor's reports (`pid N`, `exit STATUS WHY`), read through one buffer.
        reports: std::io::Lines<BufReader<UnixStream>>,
    }

    impl Standby {
        fn start(args: &RunEtcd) -> Result<Standby, Failure> {
            let (ours, theirs) = UnixStream::pair()
                .map_err(|e| Failure::failed(format!("cannot create a socket pair: {e}")))?;
            let exe = std::env::current_exe()
                .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
            let mut child = Command::new(exe)
                .args(leasehold_lab::platform::WORKER_ARGS)
                .arg("etcd-supervisor")
                .arg("--grace")
                .arg(supervisor::nanos(args.grace).to_string())
                .arg("--caller-group")
                .arg(rustix::process::getpgrp().as_raw_nonzero().to_string())
                .arg("--")
                .args(&args.command)
                .stdin(Stdio::from(OwnedFd::from(theirs)))
                // Out of the caller's group: a SIGKILL of that group (a CI runner ending a
                // job) must leave the supervisor alive to stop COMMAND's tree.
                .process_group(0)
                .spawn()
                .map_err(|e| Failure::failed(format!("cannot start COMMAND's supervisor: {e}")))?;
            let stdin = rustix::stdio::stdin();
            let stdin = rustix::io::fcntl_getfd(stdin).is_ok().then_some(stdin);
            let handed = UnixStream::pair().and_then(|(word, theirs)| {
                supervisor::send_handles(&ours, theirs.as_fd(), stdin)?;
                Ok((word, ours.try_clone()?))
            });
            let (word, reader) = match handed {
                Ok(handles) => handles,
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Failure::failed(format!(
                        "cannot hand COMMAND's socket and stdin to its supervisor: {e}"
                    )));
                }
            };
            Ok(Standby {
                child,
                sock: ours,
                word,
                stdin,
                reports: BufReader::new(reader).lines(),
            })
        }

        /// The supervisor's first report: COMMAND's process group, waiting for the word.
        /// `None` if the supervisor ended first.
        fn ready(&mut self) -> Option<Pid> {
            for line in self.reports.by_ref() {
                let Ok(line) = line else { break };
                if let Some(pid) = line.strip_prefix("pid ") {
                    return pid.parse::<i32>().ok().and_then(Pid::from_raw);
                }
            }
            None
        }

        /// The word: the supervisor learns the grant — `deadline` is the first one
        /// ([`supervisor::now`]'s nanoseconds), `terminal` whether COMMAND's group has the
        /// terminal, to be given back — and then COMMAND's process gets `token` and the
        /// user's stdin, and becomes COMMAND. In that order: COMMAND never runs unless its
        /// supervisor knows the deadline.
        fn go(&self, token: u64, deadline: u64, terminal: bool) -> std::io::Result<()> {
            let line = format!("go {deadline} {}\n", u8::from(terminal));
            (&self.sock).write_all(line.as_bytes())?;
            supervisor::send_go(&self.word, token, self.stdin)
        }
    }

    impl Drop for Standby {
        fn drop(&mut self) {
            let _ = self.sock.shutdown(std::net::Shutdown::Both);
            let _ = self.child.wait();
        }
    }

    /// Runs COMMAND under its supervisor (`supervisor.rs`) while this process keeps the lease
    /// alive and tells the supervisor every deadline a keep-alive bought; releases the lease
    /// once the supervisor reports COMMAND's whole tree gone.
    fn supervised(
        args: &RunEtcd,
        mut grant: EtcdGrant,
        mut standby: Standby,
        interrupts: &Interrupts,
    ) -> Outcome {
        let watch = grant.watch();
        let lost = |why: String| {
            Failure::failed(format!(
                "{}: lease lost: {why}; COMMAND was stopped",
                args.name
            ))
        };
        let Some(group) = standby.ready() else {
            // The supervisor ended before COMMAND's process was ready: by itself, after
            // saying why on stderr, or killed (then what it started is ours, and goes).
            grant.release();
            let status = standby.child.wait();
            supervisor::kill_all(None);
            return match status {
                Ok(s) if s.code().is_some() => Ok(s.code().map_or(1, |c| c as u8)),
                Ok(s) => Err(Failure::failed(format!(
                    "{}: COMMAND's supervisor ended ({s}) before COMMAND started",
                    args.name
                ))),
                Err(e) => Err(Failure::failed(format!(
                    "waiting for COMMAND's supervisor: {e}"
                ))),
            };
        };
        // From now on termination signals go to the supervisor, which passes them on to
        // COMMAND's group (it queues what comes before COMMAND runs).
        crate::signals::forward_signals(standby.child.id());
        // A hung-up job is not stopped again: its tree is ending (job control below).
        let hung_up = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, hung_up.clone())
            .map_err(|e| Failure::failed(format!("cannot install signal handler: {e}")))?;
        if interrupts.signal().is_some() {
            // Interrupted in the instant the lock arrived: COMMAND must not start.
            grant.release();
            return Ok(interrupts.exit_code());
        }
        // The clock first, then what is left: the sum is never later than the deadline.
        let t0 = supervisor::now();
        let Some(left) = watch.remaining() else {
            return Err(lost("it expired before COMMAND could start".into()));
        };
        let terminal = super::terminal::hand_to(group);
        let first = t0.saturating_add(supervisor::nanos(left));
        // If the supervisor is gone, its reports end at once (EOF): handled below.
        let _ = standby.go(grant.token(), first, terminal);
        // The latest deadline the supervisor acknowledged (`ok NS`): the one it enforces.
        let acked = Arc::new(AtomicU64::new(first));
        // Set when this process killed a supervisor that did not answer in time.
        let unanswered = Arc::new(AtomicBool::new(false));
        let (finished, done) = std::sync::mpsc::channel::<()>();
        let renewer = {
            let (watch, acked, unanswered) = (watch.clone(), acked.clone(), unanswered.clone());
            let sock = standby
                .sock
                .try_clone()
                .map_err(|e| Failure::failed(format!("cannot clone a socket: {e}")))?;
            let supervisor = Pid::from_raw(standby.child.id() as i32);
            let watchdog = Watchdog {
                period: args.ttl / 6,
                slack: supervisor::nanos(leasehold::arbiters::etcd::margin(args.ttl) / 2),
            };
            std::thread::spawn(move || {
                let mut lost_at = None;
                // When this thread means to wake, and before when it does not give up.
                let (mut planned, mut not_before) = (supervisor::now(), 0);
                loop {
                    let t = supervisor::now();
                    if t > planned.saturating_add(watchdog.slack) {
                        // This process was not running (stopped, starved), not the
                        // supervisor: its answers may be waiting unread; it gets its time.
                        not_before = t.saturating_add(watchdog.slack);
                    }
                    let by = watchdog
                        .answer_by(acked.load(Ordering::SeqCst), lost_at)
                        .max(not_before);
                    if t >= by {
                        // The supervisor neither took a later deadline nor reported the tree
                        // gone (stopped, or starved): it and the tree go now.
                        unanswered.store(true, Ordering::SeqCst);
                        if let Some(pid) = supervisor {
                            let _ = rustix::process::kill_process(pid, Signal::KILL);
                        }
                        return;
                    }
                    let nap = Duration::from_nanos(by - t).min(watchdog.period);
                    planned = t.saturating_add(supervisor::nanos(nap));
                    if lost_at.is_none() {
                        watch.wait_renewed(Some(nap));
                    } else if !matches!(
                        done.recv_timeout(nap),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    ) {
                        return;
                    }
                    if !matches!(done.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)) {
                        return;
                    }
                    if lost_at.is_some() {
                        continue;
                    }
                    let t0 = supervisor::now();
                    let line = match watch.remaining() {
                        Some(left) => {
                            format!("deadline {}\n", t0.saturating_add(supervisor::nanos(left)))
                        }
                        None => {
                            lost_at = Some(t0);
                            "lost\n".to_string()
                        }
                    };
                    // A failed write: the supervisor is gone, which the reports' EOF tells.
                    let _ = (&sock).write_all(line.as_bytes());
                }
            })
        };
        // SIGCONT, for job control: a byte each time this process is continued.
        let continued = continued()?;
        // The supervisor's report (sent once COMMAND's whole tree is gone), or EOF when it
        // died without one; its acknowledgements and COMMAND's stops meanwhile.
        let mut report = None;
        for line in standby.reports.by_ref() {
            let Ok(line) = line else { break };
            let words: Vec<&str> = line.split(' ').collect();
            if let ["ok", ns] = words.as_slice()
                && let Ok(ns) = ns.parse::<u64>()
            {
                acked.fetch_max(ns, Ordering::SeqCst);
            } else if let ["stopped", sig] = words.as_slice()
                && let Ok(sig) = sig.parse::<i32>()
            {
                // Stopped at the terminal: this job stops too, and continues COMMAND when
                // it is continued (`terminal.rs`); the supervisor gives back a terminal
                // given to COMMAND meanwhile.
                if super::terminal::follow_stop(sig, group, &continued, &hung_up) {
                    let _ = (&standby.sock).write_all(b"terminal\n");
                }
            } else if let ["exit", status, why] = words.as_slice()
                && let (Ok(status), Some(why)) = (status.parse::<u8>(), Why::parse(why))
            {
                report = Some((status, why));
                break; // the release must not wait for the supervisor's own exit
            }
        }
        if report.is_none()
            && standby
                .child
                .wait()
                .is_ok_and(|status| status.code().is_none())
        {
            // The supervisor was killed, perhaps with COMMAND started (even before it said
            // so): whatever is left of the tree goes — in a PID namespace the kernel kills
            // it with ns-init; otherwise COMMAND dies of its parent-death signal and its
            // orphans are ours (and so are all our descendants on Linux).
            supervisor::kill_all(Some(group));
        }
        drop(finished);
        let why_lost = watch.wait_lost(Some(Duration::ZERO));
        grant.release(); // wakes the renewer, which then sees the run finished
        let _ = renewer.join();
        let status = standby.child.wait();
        drop(standby);
        match report {
            Some((status, Why::Command)) => Ok(status),
            Some((_, _)) => Err(lost(why_lost.unwrap_or_else(|| {
                format!(
                    "no keep-alive was acknowledged in time (COMMAND was sent SIGTERM {:.1} s before the deadline, --grace)",
                    args.grace.as_secs_f64()
                )
            }))),
            None if unanswered.load(Ordering::SeqCst) => Err(Failure::failed(format!(
                "{}: {}COMMAND's supervisor did not answer in time (stopped?), so run killed it and COMMAND's whole tree",
                args.name,
                why_lost.map_or_else(String::new, |why| format!("lease lost: {why}; "))
            ))),
            None => {
                let status = status.map_err(|e| {
                    Failure::failed(format!("waiting for COMMAND's supervisor: {e}"))
                })?;
                match status.code() {
                    // It ended by itself, after saying why on stderr.
                    Some(code) => Ok(code as u8),
                    None => Err(Failure::failed(format!(
                        "{}: COMMAND's supervisor ended ({status}); COMMAND and every process it started were killed",
                        args.name
                    ))),
                }
            }
        }
    }

    /// A socket that receives a byte each time this process gets SIGCONT (from now on).
    fn continued() -> Result<UnixStream, Failure> {
        let fail = |e: std::io::Error| Failure::failed(format!("cannot watch for SIGCONT: {e}"));
        let (ours, theirs) = UnixStream::pair().map_err(fail)?;
        theirs.set_nonblocking(true).map_err(fail)?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGCONT, theirs)
            .map_err(fail)?;
        Ok(ours)
    }

    /// When `run` gives up on its supervisor (it watches the supervisor as the supervisor
    /// watches it): a live supervisor acknowledges every later deadline at once, and by the
    /// deadline it holds it has stopped the tree and said so — so if it has not answered
    /// by that deadline plus half the margin (`margin` before etcd can expire the lease),
    /// it is stopped or starved, and `run` kills it and the tree. After `lost` (etcd says
    /// the lease is gone: a successor may start now) the same half margin counts from
    /// the instant `run` said it.
    struct Watchdog {
        /// How often `run` sends the deadline at least (TTL/6).
        period: Duration,
        /// Half the margin, in nanoseconds.
        slack: u64,
    }

    impl Watchdog {
        fn answer_by(&self, acked: u64, lost_at: Option<u64>) -> u64 {
            acked
                .min(lost_at.unwrap_or(u64::MAX))
                .saturating_add(self.slack)
        }
    }

    pub fn status(endpoints: &str, name: &str, json: bool) -> Outcome {
        check_name(name)?;
        let arbiter = connect(endpoints, name, leasehold::arbiters::etcd::MIN_TTL)?;
        let owner = arbiter.owner().map_err(|e| Failure::of(&e))?;
        if json {
            let holders: Vec<_> = owner
                .iter()
                .map(|h| serde_json::json!({"pid": h.pid, "host": h.host}))
                .collect();
            let doc =
                serde_json::json!({"name": name, "held": owner.is_some(), "holders": holders});
            crate::out::print_line(doc)?;
        } else {
            match owner {
                Some(h) => crate::out::print_line(format!("held by {}@{}", h.pid, h.host))?,
                None => crate::out::print_line("free")?,
            }
        }
        Ok(OK)
    }

    pub fn registry(endpoints: &str, prefix: &str, ttl: Duration) -> Result<Registry, Failure> {
        Registry::on_etcd(endpoints, prefix, ttl, None).map_err(|e| match e {
            leasehold_stores::registry::RegistryError::Lease(l) => Failure::of(&l),
            other => Failure::of(&other),
        })
    }

    /// The hidden verb, COMMAND's process: arm the parent-death signal, make sure the parent
    /// is still the process (supervisor or ns-init) that started us (it may have died before the signal was
    /// armed), wait on stdin (a socket from the supervisor) for the grant's token and the
    /// user's stdin, and become COMMAND. Without the word (EOF: no grant) it exits, silent.
    pub fn exec(args: ExecArgs) -> Outcome {
        #[cfg(target_os = "linux")]
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(|e| Failure::failed(format!("cannot set the parent-death signal: {e}")))?;
        let parent = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get());
        if parent != args.parent {
            return Err(Failure::failed(
                "the supervisor that started COMMAND is gone; not running it",
            ));
        }
        let Some((program, rest)) = args.command.split_first() else {
            return Err(Failure::usage("COMMAND is required after --"));
        };
        let word = rustix::stdio::stdin()
            .try_clone_to_owned()
            .map(UnixStream::from)
            .map_err(|e| Failure::failed(format!("COMMAND's process: stdin: {e}")))?;
        let (token, stdin) = match supervisor::receive_go(&word) {
            Ok(Some(go)) => go,
            Ok(None) | Err(_) => return Ok(0),
        };
        drop(word);
        let e = Command::new(program)
            .args(rest)
            .env("LEASEHOLD_FENCING_TOKEN", token)
            .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
            .exec();
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        Err(Failure::with_status(
            code,
            format!("cannot run {}: {e}", program.to_string_lossy()),
        ))
    }
}
