//! The supervisor of `run --etcd`'s COMMAND: a process of its
//! own between `leasehold run` and COMMAND that binds COMMAND's whole process tree to the
//! lease, and does not depend on `run` being scheduled to do so.
//!
//! ```text
//! leasehold run --etcd      (caller's process group G; keeps the lease alive)
//!   └─ supervisor           (`leasehold worker etcd-supervisor`; its own group; subreaper)
//!        └─ ns-init         (Linux: PID 1 of COMMAND's PID namespace, `namespace.rs`;
//!             │               leads process group C; parent-death signal: SIGKILL)
//!             └─ COMMAND    (in group C; parent-death signal: SIGKILL)
//!                  └─ …     (its descendants: in C unless they left it; in the namespace)
//! ```
//!
//! Where the kernel refuses a PID namespace (and elsewhere than Linux) there is no ns-init:
//! COMMAND is the supervisor's child and leads group C itself, and the supervisor says so in
//! one line at start.
//!
//! Both processes below `run` start *before* the wait, so the grant is not kept waiting: each is a
//! re-execution of this binary (a few milliseconds), and started after the grant they made
//! the hand-over 1.5–1.9× `etcdctl lock`'s. So the supervisor starts with `run`, starts
//! COMMAND's process — the exec helper (`_exec-with-parent-death-signal`), which arms the
//! parent-death signal and then waits — and both wait for the word. The grant then costs two
//! messages and one `exec`; a wait that ends without a grant closes the socket and both exit
//! without running COMMAND (as they do when `run` dies while waiting).
//!
//! `run` talks to the supervisor over a Unix socket pair that is the supervisor's stdin
//! (the user's stdin reaches COMMAND as a descriptor passed over it, `SCM_RIGHTS`):
//!
//! * `run` → supervisor: `go TOKEN NS TTY` once the lease is granted — the fencing token,
//!   the first deadline and whether `run` made group C the terminal's foreground group
//!   (`1`/`0`); then `deadline NS` each time a keep-alive is acknowledged (and every TTL/6 at
//!   least) — the instant, on a clock both processes read alike ([`now`]), at which the
//!   grant counts itself lost, which is [`margin`] before etcd can expire the lease; `lost`
//!   when etcd says the lease is gone; `terminal` when `run`, continued, made group C the
//!   terminal's foreground group (job control, below). EOF: `run` died, or (before `go`)
//!   gave up waiting.
//! * supervisor → `run`: `pid N` once COMMAND's process (group C) waits for the word; `ok
//!   NS` after `go` and after each `deadline`: the deadline it now enforces; `stopped SIG`
//!   each time COMMAND is stopped (by signal number SIG); `exit STATUS WHY` at the end, WHY
//!   one of [`Why`]'s names.
//! * `run` → exec helper: one line, the token, with the user's stdin attached; the
//!   helper then becomes COMMAND with `LEASEHOLD_FENCING_TOKEN` set. EOF: no grant, exit.
//!
//! The two watch each other. The supervisor stops the tree when `run` gives no later
//! deadline in time (below). `run` kills the supervisor — and so, through ns-init, the whole
//! tree; without a namespace COMMAND dies of its parent-death signal and `run`, a subreaper,
//! kills the orphans — when it has not reported the tree gone by half the margin after the
//! deadline it acknowledged last, or after `lost` (a stopped or starved supervisor). Where
//! both are stopped, no process can act: the fencing token is what keeps a late write out.
//!
//! The supervisor stops the tree — SIGTERM to group C and to every descendant, then SIGKILL
//! of all of them, repeated until none is left — when
//!
//! * the deadline minus `--grace` comes without a later deadline (a stopped or starved
//!   `run`, a partition): SIGTERM then, SIGKILL at the deadline;
//! * `run` dies (EOF): SIGTERM at once, SIGKILL `--grace` later or at the deadline, whichever
//!   is first;
//! * COMMAND itself ends: what it left behind gets the same treatment, then the supervisor
//!   reports COMMAND's status — `run` releases the lease only after that;
//! * `run` says `lost`: SIGKILL at once (a successor may hold the lock already).
//!
//! So SIGTERM comes at least `--grace` + margin and SIGKILL at least margin before etcd can
//! expire the lease. "Every descendant" is exact on Linux: the supervisor is a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`), so orphans of the tree become its children instead
//! of init's and nothing escapes by double-forking or `setsid`, and descendants are found
//! through `/proc`. Elsewhere it is process group C only: a descendant that leaves the group
//! and is orphaned escapes. The supervisor's own death (SIGKILL) ends the PID namespace with
//! ns-init; without one, it is noticed by `run`, which is a subreaper too and kills group C
//! and every descendant it then has (COMMAND dies of its parent-death signal) — and if `run`
//! dies with it, what COMMAND started outlives both.
//!
//! The terminal: when `run` had it (its group G in the foreground), group C gets it for
//! COMMAND's lifetime ([`super::terminal`]), and the supervisor hands it back to G once the
//! tree is gone — also when `run` died meanwhile.
//!
//! Job control: the terminal's stop signals (Ctrl-Z's SIGTSTP to the foreground group C,
//! SIGTTIN/SIGTTOU to a background C that touches the terminal) reach group C alone, while
//! the shell waits for `run` in G. So COMMAND's stops are passed up — ns-init waits for its
//! child's stops and says `stopped SIG` (without a namespace the supervisor waits for
//! COMMAND's itself) — and `run` stops G with the same signal and, once continued, continues
//! C ([`super::terminal::follow_stop`]). What the supervisor passes on to C — SIGHUP and
//! SIGTERM sent to `run`, and its own SIGTERM of the tree — comes with SIGCONT, so that a
//! stopped COMMAND ends too (a shell's hang-up or `kill` of a stopped job continues only
//! G). While `run` is stopped it sends no deadline: a job stopped past the deadline minus
//! the grace has its tree stopped as above. Once the tree is gone, if `run`'s job was hung
//! up or G is orphaned — a `run` stopped there (its stop still under way when its shell
//! went) would be continued by nobody — the supervisor continues G if it passed a stop up
//! to `run`, else `run` alone, so that `run` reads the report and exits: G's other
//! processes may be stopped for reasons of their own.
//!
//! [`margin`]: leasehold::arbiters::etcd::margin

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, Signal, WaitOptions, WaitStatus, kill_process, kill_process_group};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};

use super::fds::{receive_with_fds, send_with_fds};
use super::namespace::Binding;
use crate::exit::{Failure, Outcome};

/// Nanoseconds of the clock deadlines are given in: the etcd arbiter's own
/// ([`leasehold::arbiters::etcd::clock_ns`]), which every process of the machine reads alike.
pub fn now() -> u64 {
    leasehold::arbiters::etcd::clock_ns()
}

/// `d` in nanoseconds (saturating).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The hidden role's arguments: `leasehold worker etcd-supervisor --grace NS --caller-group
/// G -- COMMAND...`, stdin a Unix socket to `run`.
#[derive(clap::Args, Debug)]
pub struct SupervisorArgs {
    /// How long before the deadline COMMAND's tree gets SIGTERM (nanoseconds).
    #[arg(long, value_name = "NS")]
    grace: u64,
    /// `run`'s process group, to which the terminal goes back when `run` gave it to COMMAND.
    #[arg(long, value_name = "PGID")]
    caller_group: i32,
    /// COMMAND and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// Why the supervisor stopped COMMAND's tree (or, `Command`, why it had nothing to stop).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// COMMAND ended by itself; what it left behind was stopped.
    Command,
    /// The deadline minus the grace came without a later deadline.
    Deadline,
    /// `run` said the lease is lost.
    Lost,
    /// `run` died.
    Parent,
}

impl Why {
    fn name(self) -> &'static str {
        match self {
            Why::Command => "command",
            Why::Deadline => "deadline",
            Why::Lost => "lost",
            Why::Parent => "parent",
        }
    }

    /// The reason a `run` reads from a report line.
    pub fn parse(s: &str) -> Option<Why> {
        [Why::Command, Why::Deadline, Why::Lost, Why::Parent]
            .into_iter()
            .find(|w| w.name() == s)
    }
}

/// Sends `sig` once to every process of the tree: on Linux each descendant of this process
/// and each member of process group `group`; elsewhere the group (all that can be found
/// there). Once each: a COMMAND that handles SIGTERM must not run its handler twice.
pub fn signal_tree(group: Option<Pid>, sig: Signal) {
    #[cfg(target_os = "linux")]
    for pid in crate::procs::descendants(group) {
        let _ = kill_process(pid, sig);
    }
    #[cfg(not(target_os = "linux"))]
    if let Some(group) = group {
        let _ = kill_process_group(group, sig);
    }
}

/// Makes this process a child subreaper (Linux): orphaned descendants become its children,
/// so it can find, kill and reap all of them.
pub fn become_subreaper() -> Result<(), Failure> {
    #[cfg(target_os = "linux")]
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| Failure::failed(format!("cannot become a child subreaper: {e}")))?;
    Ok(())
}

/// Whether anything of the tree is left: a child not yet reaped, or a member of `group`.
fn group_alive(group: Option<Pid>) -> bool {
    group.is_some_and(|g| rustix::process::test_kill_process_group(g).is_ok())
}

/// Reaps every child that has ended, telling `ended` each — and each stop and continue of
/// a child, which `ended` tells apart ([`WaitStatus::stopped`], [`WaitStatus::continued`]);
/// returns whether children remain.
fn reap(mut ended: impl FnMut(Pid, WaitStatus)) -> bool {
    let options = WaitOptions::NOHANG | WaitOptions::UNTRACED | WaitOptions::CONTINUED;
    loop {
        match rustix::process::wait(options) {
            Ok(Some((pid, status))) => ended(pid, status),
            Ok(None) => return true,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

/// SIGKILLs group `group` and every descendant, again after each reaping, until nothing is
/// left: what `run` does when its supervisor died. Blocks until then.
pub fn kill_all(group: Option<Pid>) {
    loop {
        signal_tree(group, Signal::KILL);
        let children = reap(|_, _| {});
        if !children && !group_alive(group) {
            return;
        }
        if children {
            // One child ends (it was SIGKILLed); then look again: its orphans are ours now.
            let _ = rustix::process::wait(WaitOptions::empty());
        } else {
            // Members of the group that are not our children (no subreaper here): they die
            // of the SIGKILL just sent; look again shortly.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// What `run` hands the supervisor before anything else: the socket on which COMMAND's
/// process will wait for the word (`run` gives it the word directly: one hop, not two),
/// and the user's stdin if it is open — one byte, `s` (stdin attached) or `n`, so that the
/// supervisor reads exactly it.
pub fn send_handles(
    sock: &UnixStream,
    word: std::os::fd::BorrowedFd<'_>,
    stdin: Option<std::os::fd::BorrowedFd<'_>>,
) -> std::io::Result<()> {
    match stdin {
        Some(stdin) => send_with_fds(sock, b"s", &[word, stdin]),
        None => send_with_fds(sock, b"n", &[word]),
    }
}

/// Receives what [`send_handles`] sent: COMMAND's socket, and the user's stdin if it was open.
fn receive_handles(sock: &UnixStream) -> Result<(OwnedFd, Option<OwnedFd>), Failure> {
    let fail = |e: &dyn std::fmt::Display| Failure::failed(format!("supervisor: from run: {e}"));
    let mut tag = [0u8; 1];
    let (n, fds) = receive_with_fds(sock, &mut tag).map_err(|e| fail(&e))?;
    let mut fds = fds.into_iter();
    match (n, tag[0], fds.next(), fds.next()) {
        (1, b's', Some(word), Some(stdin)) => Ok((word, Some(stdin))),
        (1, b'n', Some(word), None) => Ok((word, None)),
        (0, ..) => Err(fail(&"run is gone")),
        _ => Err(fail(&"an unexpected message")),
    }
}

/// The word `run` gives COMMAND's process: the fencing token, with the user's stdin
/// attached if it is open.
pub fn send_go(
    word: &UnixStream,
    token: u64,
    stdin: Option<std::os::fd::BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let tag = if stdin.is_some() { "s" } else { "n" };
    let fds: Vec<_> = stdin.into_iter().collect();
    send_with_fds(word, format!("{tag}{token}\n").as_bytes(), &fds)
}

/// What COMMAND's process (the exec helper) waits for ([`send_go`]): the grant's fencing
/// token and the user's stdin. `None` when the socket closed without a grant.
pub fn receive_go(sock: &UnixStream) -> std::io::Result<Option<(String, Option<OwnedFd>)>> {
    let mut line = Vec::new();
    let mut stdin = None;
    let mut buf = [0u8; 64];
    loop {
        let (n, fds) = receive_with_fds(sock, &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        stdin = fds.into_iter().next().or(stdin);
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|b| *b == b'\n') {
            // `s` or `n` (stdin attached or not), then the token.
            let text = String::from_utf8_lossy(&line[..end]).into_owned();
            let token = text.get(1..).unwrap_or_default().to_string();
            return Ok(Some((token, stdin)));
        }
    }
}

/// What `run` says when the lease is granted: `go NS TTY`.
struct Go {
    /// The first deadline ([`now`]'s nanoseconds).
    deadline: u64,
    /// Whether `run` gave the terminal to COMMAND's group (`1`), which then goes back.
    terminal: bool,
}

/// Reads `run`'s lines (blocking) until `go`; `None` at EOF (or a failed read): no grant.
/// What follows `go` stays in `pending`.
fn wait_for_go(sock: &UnixStream, pending: &mut Vec<u8>) -> Option<Go> {
    let mut buf = [0u8; 256];
    loop {
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            let words: Vec<&str> = line.split(' ').collect();
            if let ["go", deadline, tty] = words.as_slice()
                && let Ok(deadline) = deadline.parse::<u64>()
            {
                return Some(Go {
                    deadline,
                    terminal: *tty == "1",
                });
            }
        }
        match (&*sock).read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

/// A stop under way: why, and when the tree gets SIGKILL.
struct Stop {
    why: Why,
    kill_at: u64,
}

/// The supervisor's state.
struct Supervisor {
    sock: UnixStream,
    /// Bytes from `run` not yet making a whole line.
    pending: Vec<u8>,
    /// EOF seen on the socket: `run` is gone.
    orphaned: bool,
    command: Pid,
    status: Option<u8>,
    deadline: u64,
    grace: u64,
    stop: Option<Stop>,
    killed: bool,
    /// The socket to ns-init (COMMAND in a PID namespace), until it closes.
    init: Option<UnixStream>,
    /// Whether `run` gave the terminal to group C (`go … 1`, or `terminal` after a
    /// continue), so that it goes back to `run`'s group at the end.
    handed: bool,
    /// A SIGHUP was passed on (`run`'s job hung up).
    hung_up: bool,
    /// A stop of COMMAND was passed up to `run` (`stopped SIG`), which then stops its
    /// group G: only then may G need continuing at the end.
    passed_stop: bool,
    /// Bytes from ns-init not yet making a whole line.
    init_pending: Vec<u8>,
}

impl Supervisor {
    fn group(&self) -> Option<Pid> {
        Some(self.command)
    }

    /// Begins stopping the tree (once): SIGTERM now, SIGKILL at the deadline or after the
    /// grace, whichever comes first (at once for [`Why::Lost`]).
    fn begin(&mut self, why: Why, now: u64) {
        if self.stop.is_some() {
            return;
        }
        let kill_at = match why {
            Why::Lost => now,
            _ => self.deadline.min(now.saturating_add(self.grace)),
        };
        self.stop = Some(Stop { why, kill_at });
        signal_tree(self.group(), Signal::TERM);
        // A stopped tree (a job stopped at the terminal, with `run`) acts on SIGTERM only
        // once continued, as a shell's `kill` continues a stopped job.
        signal_tree(self.group(), Signal::CONT);
    }

    /// Tells `run` that COMMAND was stopped by `sig` (job control: `run` stops its own
    /// group likewise, so that the shell sees its job stopped).
    fn stopped(&mut self, sig: i32) {
        self.passed_stop = true;
        // The socket is non-blocking; `run` reads all the time, so it has room.
        let _ = (&self.sock).write_all(format!("stopped {sig}\n").as_bytes());
    }

    /// Reads what `run` sent, acting on each whole line.
    fn read_socket(&mut self) {
        let mut buf = [0u8; 4096];
        match (&self.sock).read(&mut buf) {
            Ok(0) => self.orphaned = true,
            Ok(n) => self.pending.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                ) => {}
            Err(_) => self.orphaned = true,
        }
        let mut renewed = false;
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            match line.split_once(' ') {
                Some(("deadline", ns)) => {
                    if let Ok(ns) = ns.parse::<u64>() {
                        self.deadline = self.deadline.max(ns);
                        renewed = true;
                    }
                }
                _ if line == "lost" => self.begin(Why::Lost, now()),
                _ if line == "terminal" => self.handed = true,
                _ => {}
            }
        }
        if renewed {
            // The answer `run` watches for: the deadline this process now enforces. (The
            // socket is non-blocking; `run` reads all the time, so it has room.)
            let _ = (&self.sock).write_all(format!("ok {}\n", self.deadline).as_bytes());
        }
    }

    /// Reads what ns-init sent: `stopped SIG` when COMMAND was stopped (passed on to
    /// `run`), `exit STATUS` when COMMAND ended with processes left in its namespace. EOF:
    /// ns-init ended (it is reaped with the other children).
    fn read_init(&mut self) {
        let Some(init) = &self.init else { return };
        let mut buf = [0u8; 64];
        match (&*init).read(&mut buf) {
            Ok(0) => self.init = None,
            Ok(n) => self.init_pending.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                ) => {}
            Err(_) => self.init = None,
        }
        while let Some(end) = self.init_pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.init_pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]).into_owned();
            if let Some(Ok(status)) = line.strip_prefix("exit ").map(str::parse::<u8>) {
                self.status.get_or_insert(status);
            } else if let Some(Ok(sig)) = line.strip_prefix("stopped ").map(str::parse::<i32>) {
                self.stopped(sig);
            }
        }
    }

    /// When the loop must look again by itself (`None`: only when something happens).
    fn next_wake(&self) -> Option<u64> {
        match &self.stop {
            None => Some(self.deadline.saturating_sub(self.grace)),
            Some(stop) if !self.killed => Some(stop.kill_at),
            Some(_) => None,
        }
    }
}

/// The supervisor: see the module docs. Exits with COMMAND's status (which `run` also
/// reads from the `exit` report, with why the tree was stopped).
pub fn supervise(args: SupervisorArgs) -> Outcome {
    let fail =
        |what: &str, e: &dyn std::fmt::Display| Failure::failed(format!("supervisor: {what}: {e}"));
    let sock = rustix::stdio::stdin()
        .try_clone_to_owned()
        .map(UnixStream::from)
        .map_err(|e| fail("stdin", &e))?;
    // `run`, whose child this process is (it is continued at the end where nobody else
    // would: below).
    let run = Pid::from_raw(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()));
    become_subreaper()?;
    // Signals: SIGCHLD wakes the loop to reap; termination signals are passed on to
    // COMMAND's group (queued if they come before COMMAND exists).
    let (sigs, poke) = UnixStream::pair().map_err(|e| fail("signal pipe", &e))?;
    sigs.set_nonblocking(true)
        .map_err(|e| fail("signal pipe", &e))?;
    poke.set_nonblocking(true)
        .map_err(|e| fail("signal pipe", &e))?;
    let mut forward = Vec::new();
    for sig in [SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
        let poke = poke.try_clone().map_err(|e| fail("signal pipe", &e))?;
        signal_hook::low_level::pipe::register(sig, poke)
            .map_err(|e| fail("signal handler", &e))?;
        if sig != SIGCHLD {
            let flag = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(sig, flag.clone())
                .map_err(|e| fail("signal handler", &e))?;
            forward.push((sig, flag));
        }
    }
    let (word, stdin) = receive_handles(&sock)?;
    if args.command.is_empty() {
        return Err(Failure::usage("supervisor: COMMAND is required after --"));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    // Everything that can fail comes before COMMAND starts: from then on nothing returns
    // early with COMMAND unsupervised.
    #[cfg(target_os = "linux")]
    let timer = Timer::new().map_err(|e| fail("timer", &e))?;
    let me = std::process::id();
    // COMMAND's tree in a PID namespace of its own where the kernel allows it
    // (`namespace.rs`); this process is single-threaded here, and stays so.
    let binding = super::namespace::enter()?;
    if let Binding::Refused(why) = &binding {
        eprintln!(
            "leasehold: warning: COMMAND's tree is not bound to its supervisor by the kernel ({why}): if run and its supervisor are killed together (SIGKILL), what COMMAND started keeps running"
        );
    }
    let mut init = None;
    let child = match binding {
        // ns-init (PID 1 of the namespace, process group C of its own), which starts
        // COMMAND's process in its group once it has COMMAND's socket.
        Binding::Kernel => {
            let (ours, theirs) = UnixStream::pair().map_err(|e| fail("socket pair", &e))?;
            let mut child = Command::new(exe)
                .args(leasehold_lab::platform::WORKER_ARGS)
                .arg("etcd-ns-init")
                .arg("--")
                .args(&args.command)
                .stdin(Stdio::from(OwnedFd::from(theirs)))
                .process_group(0)
                .spawn()
                .map_err(|e| Failure::failed(format!("cannot start COMMAND's namespace: {e}")))?;
            if let Err(e) = super::namespace::hand_over(&ours, word) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail("COMMAND's namespace", &e));
            }
            init = Some(ours);
            child
        }
        // COMMAND's process directly: the exec helper arms the parent-death signal (our
        // death kills it) and checks we are still its parent, then waits on `word` for
        // `run`'s word (the grant's token and the user's stdin) and becomes COMMAND. In a
        // process group of its own.
        Binding::Refused(_) => Command::new(exe)
            .arg("_exec-with-parent-death-signal")
            .arg(me.to_string())
            .arg("--")
            .args(&args.command)
            .stdin(Stdio::from(word))
            .process_group(0)
            .spawn()
            .map_err(|e| Failure::failed(format!("cannot start COMMAND: {e}")))?,
    };
    let command =
        Pid::from_raw(child.id() as i32).ok_or_else(|| Failure::failed("COMMAND has no pid"))?;
    drop(child); // reaped below, with every other child (`wait`), never through std
    // One write (the socket is empty: it cannot be short).
    let _ = (&sock).write_all(format!("pid {}\n", command.as_raw_nonzero()).as_bytes());
    let mut pending = Vec::new();
    // `run` says `go` here before it gives COMMAND's process the word, so COMMAND never
    // runs unless we know the deadline (or, `run` dead after `go`, stop it at once).
    let Some(go) = wait_for_go(&sock, &mut pending) else {
        // No grant (`run` gave up or died): COMMAND's process goes without having run.
        let _ = kill_process_group(command, Signal::KILL);
        while !matches!(
            rustix::process::wait(WaitOptions::empty()),
            Err(e) if e != rustix::io::Errno::INTR
        ) {}
        return Ok(0);
    };
    // The terminal goes back through the user's stdin if it is the terminal, else stdout.
    let terminal = match stdin {
        Some(fd) if rustix::termios::isatty(&fd) => Some(fd),
        _ => rustix::stdio::stdout().try_clone_to_owned().ok(),
    };
    let _ = sock.set_nonblocking(true);
    let mut s = Supervisor {
        sock,
        pending,
        orphaned: false,
        command,
        status: None,
        deadline: go.deadline,
        grace: args.grace,
        stop: None,
        killed: false,
        init,
        init_pending: Vec::new(),
        handed: go.terminal,
        hung_up: false,
        passed_stop: false,
    };
    // The first deadline is acknowledged too (`run` watches that we answer).
    let _ = (&s.sock).write_all(format!("ok {}\n", s.deadline).as_bytes());
    loop {
        let mut stops = Vec::new();
        let children = reap(|pid, status| {
            if pid != s.command || status.continued() {
                return;
            }
            if let Some(sig) = status.stopping_signal() {
                // COMMAND stopped (without a namespace; in one, ns-init tells).
                stops.push(sig);
            } else if s.status.is_none() {
                // (COMMAND's status, or ns-init's if it died before saying COMMAND's.)
                s.status = Some(crate::signals::wait_status_code(status));
            }
        });
        for sig in stops {
            s.stopped(sig);
        }
        for (sig, flag) in &forward {
            if flag.swap(false, Ordering::SeqCst)
                && let Some(sig) = Signal::from_named_raw(*sig)
            {
                let _ = kill_process_group(s.command, sig);
                s.hung_up |= sig == Signal::HUP;
                if matches!(sig, Signal::HUP | Signal::TERM) {
                    // A stopped COMMAND must be able to end: a hang-up or SIGTERM of a
                    // stopped job comes with SIGCONT (from the shell, or the kernel for an
                    // orphaned group), which reaches `run`'s group only.
                    let _ = kill_process_group(s.command, Signal::CONT);
                }
            }
        }
        let t = now();
        if s.stop.is_none() {
            if s.status.is_some() && !children && !group_alive(s.group()) {
                // COMMAND ended and left nothing behind (no child — with a subreaper, no
                // descendant — and nobody in its group): nothing to stop, and no scan of
                // every process on the machine while a successor waits.
                break;
            } else if s.status.is_some() {
                s.begin(Why::Command, t);
            } else if s.orphaned {
                s.begin(Why::Parent, t);
            } else if t.saturating_add(s.grace) >= s.deadline {
                s.begin(Why::Deadline, t);
            }
        }
        if s.stop.as_ref().is_some_and(|stop| t >= stop.kill_at) {
            // Again after each reaping: the orphans of what just died are ours now.
            s.killed = true;
            signal_tree(s.group(), Signal::KILL);
        }
        if s.status.is_some() && !children && !group_alive(s.group()) {
            break;
        }
        let wake_at = s.next_wake();
        let mut fds = vec![PollFd::new(&sigs, PollFlags::IN)];
        let mut at_sock = None;
        if !s.orphaned {
            at_sock = Some(fds.len());
            fds.push(PollFd::new(&s.sock, PollFlags::IN));
        }
        let mut at_init = None;
        if let Some(init) = &s.init {
            at_init = Some(fds.len());
            fds.push(PollFd::new(init, PollFlags::IN));
        }
        // Without a subreaper, members of the group that are not our children end without
        // a SIGCHLD: look again shortly while only they are left.
        let timeout = match (wake_at, s.status.is_some() && !children) {
            (_, true) => Some(Duration::from_millis(5)),
            (Some(at), false) => Some(Duration::from_nanos(at.saturating_sub(t))),
            (None, false) => None,
        };
        #[cfg(target_os = "linux")]
        let timeout = {
            // A timer on the boot-time clock fires at once after a suspend; poll's own
            // timeout would not count the time the machine slept.
            timer.set(wake_at);
            fds.push(PollFd::new(&timer.fd, PollFlags::IN));
            timeout.filter(|_| s.status.is_some() && !children)
        };
        let spec = timeout.map(|d| rustix::time::Timespec {
            tv_sec: d.as_secs() as _,
            tv_nsec: d.subsec_nanos() as _,
        });
        let _ = poll(&mut fds, spec.as_ref());
        let ready = |at: Option<usize>| at.is_some_and(|i| !fds[i].revents().is_empty());
        let (readable, from_init) = (ready(at_sock), ready(at_init));
        drop(fds);
        let mut drain = [0u8; 64];
        while (&sigs).read(&mut drain).is_ok_and(|n| n > 0) {}
        #[cfg(target_os = "linux")]
        timer.clear();
        if readable && !s.orphaned {
            s.read_socket();
        }
        if from_init {
            s.read_init();
        }
    }
    if let Some(tty) = terminal.as_ref().filter(|_| s.handed) {
        super::terminal::take_back(tty, command, args.caller_group);
    }
    let status = s.status.unwrap_or(1);
    let why = s.stop.as_ref().map_or(Why::Command, |stop| stop.why);
    let _ = s.sock.set_nonblocking(false);
    let _ = (&s.sock).write_all(format!("exit {status} {}\n", why.name()).as_bytes());
    if let Some(caller) = Pid::from_raw(args.caller_group)
        && !s.orphaned
        && (s.hung_up || super::terminal::orphaned(caller))
    {
        // `run` may be stopped where no shell will continue it: its job hung up, or its
        // shell gone (the kernel continues an orphaned group only if its stop had completed
        // when it became orphaned). It reads the report above once continued. The group
        // only if `run` stopped it (following COMMAND's stop); else `run` alone — the
        // group's other processes may be stopped for reasons of their own.
        if s.passed_stop {
            let _ = kill_process_group(caller, Signal::CONT);
        } else if let Some(run) = run {
            let _ = kill_process(run, Signal::CONT);
        }
    }
    Ok(status)
}

/// A timer on the boot-time clock (Linux), for the loop's wake-ups.
#[cfg(target_os = "linux")]
struct Timer {
    fd: OwnedFd,
}

#[cfg(target_os = "linux")]
impl Timer {
    fn new() -> std::io::Result<Timer> {
        use rustix::time::{TimerfdClockId, TimerfdFlags, timerfd_create};
        let fd = timerfd_create(
            TimerfdClockId::Boottime,
            TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
        )?;
        Ok(Timer { fd })
    }

    /// Arms the timer for `at` ([`now`]'s nanoseconds; `None`: disarmed).
    fn set(&self, at: Option<u64>) {
        use rustix::time::{Itimerspec, TimerfdTimerFlags, Timespec, timerfd_settime};
        let spec = |ns: u64| Timespec {
            tv_sec: (ns / 1_000_000_000) as _,
            tv_nsec: (ns % 1_000_000_000) as _,
        };
        // 0 disarms; an instant already past fires at once, so never pass 0 for "now".
        let value = at.map_or(spec(0), |ns| spec(ns.max(1)));
        let _ = timerfd_settime(
            &self.fd,
            TimerfdTimerFlags::ABSTIME,
            &Itimerspec {
                it_interval: spec(0),
                it_value: value,
            },
        );
    }

    /// Consumes an expiry (the descriptor is non-blocking).
    fn clear(&self) {
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut buf);
    }
}
