//! `leasehold flock`: a drop-in for util-linux `flock(1)` 2.38 (contract v1.3), also run when
//! this binary is invoked under the name `flock` (a symlink), so that a script switches by
//! `PATH` alone.
//!
//! The same argv as flock(1) — parsed like its `getopt_long("+sexnoFuw:E:hV?")`: options
//! first (clustered short options, `-w5`/`-w 5`, `--wait=5`/`--wait 5`, unambiguous long
//! prefixes), then one of
//!
//! * `FILE|DIRECTORY COMMAND [ARGS...]` — lock, run COMMAND (which inherits the lock, as do
//!   its descendants), exit with its status (128 + N when signal N killed it);
//! * `FILE|DIRECTORY -c COMMAND` — the same through `$SHELL -c` (`/bin/sh` when unset);
//! * `NUMBER` — lock the already open descriptor NUMBER (`exec 9>f; flock -n 9`): the lock is
//!   the open file description's and stays with the shell after we exit. As with flock(1) it
//!   may be open on any file `flock(2)` locks: a regular file, a directory, a FIFO or pipe, a
//!   device (the refusals of FILE guard opening a path, and the shell opened this one).
//!
//! Exit statuses as flock(1): COMMAND's; 1 (or `-E N`) when the lock could not be had (`-n`,
//! `-w` ran out; nothing is printed unless `--verbose`); 64 usage; 65 when locking failed;
//! 66 when FILE cannot be opened; 69 when COMMAND cannot be run; 71 out of descriptors or
//! memory, or a file system without locks; 73 a read-only or full file system.
//!
//! Deliberate differences (documented in README.md):
//!
//! * FILE is opened as leasehold opens every lock file: a symlink (even to a valid file),
//!   FIFO, socket or device is refused with exit 66 and one line saying why, never followed
//!   or opened (flock(1) follows links and hangs on a FIFO); a new FILE is created 0600 (not
//!   0666 minus umask); missing parents are not created, as in flock(1). A regular FILE gets
//!   leasehold's lease: the inode is verified after locking, network, FUSE and overlay file
//!   systems are refused (before anything is created there) unless
//!   `LEASEHOLD_ALLOW_NETWORK_FS=1`, as for `run`, and shared holders never
//!   starve an exclusive waiter of ours (the lock's gate: see the library's `SharedLease`;
//!   a gate another user could have prepared is ignored, whatever this verb accepts of lock
//!   files).
//! * Not a difference: a FILE that another user owns, or that its group or others may write
//!   (a shared `/var/lock`-style file), is locked as flock(1) locks it, although `run` and
//!   the stores refuse such files unless `LEASEHOLD_ALLOW_SHARED=1`. A script that switches
//!   to this verb by `PATH` shares lock files between users that way, and would otherwise
//!   stop with 66. The ownership rule protects state a verb keeps (a store whose lock file a
//!   stranger could replace under its writer); here the caller chose a bare lock file, the
//!   lease is the open file description, and whoever may replace the file could do the same
//!   to flock(1)'s users.
//! * A DIRECTORY is locked as flock(1) does: opened read-only, never through a symlink; it
//!   has no gate, and neither has a NUMBER descriptor.
//! * SIGINT/SIGTERM while waiting end the wait at once: exit 130/143, COMMAND not run. While
//!   COMMAND runs they (and SIGHUP/SIGQUIT) are forwarded to it, as `leasehold run` does.
//! * Errors are one line starting `leasehold: `; `--verbose` lines go where flock(1) puts them.
//! * POSIX only (Linux, macOS, the BSDs; on Windows the verb says in one line that it is not
//!   available, exit 2). Safe Rust cannot borrow a descriptor by its number, so the NUMBER
//!   form duplicates the inherited descriptor: `pidfd_getfd` on this very process on Linux,
//!   an open of `/dev/fd/NUMBER` on macOS and the BSDs (see [`inherited`]). No `--fcntl`
//!   (util-linux 2.39).

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Args;
use leasehold::{AnyLease, Budget, Error, ErrorClass, LeaseOptions, LockMode};
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::exit::{Failure, OK, Outcome};
use crate::signals::Interrupts;

/// sysexits.h, as flock(1) uses them.
const EX_USAGE: u8 = 64;
const EX_DATAERR: u8 = 65;
const EX_NOINPUT: u8 = 66;
const EX_UNAVAILABLE: u8 = 69;
const EX_OSERR: u8 = 71;
const EX_CANTCREAT: u8 = 73;

/// `leasehold flock ARGS...` as clap sees it (for `--help` of the binary): everything after
/// the verb is flock(1)'s argv, parsed by [`run`].
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct FlockArgs {
    /// flock(1)'s options, then FILE|DIRECTORY COMMAND [ARGS...], FILE|DIRECTORY -c COMMAND,
    /// or NUMBER (see `leasehold flock --help`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

/// Runs `leasehold flock` from clap's parse.
pub fn main(args: FlockArgs) -> Outcome {
    run(&args.args, "leasehold")
}

/// The flock(1) argv this process was started with, if it is to behave as `flock`: invoked
/// under the name `flock`, or as `leasehold flock`. Returns the arguments after the name or
/// verb, and the program name for `--verbose` lines.
pub fn argv_of(argv: &[OsString]) -> Option<(&[OsString], &'static str)> {
    let name = argv.first().map(Path::new).and_then(Path::file_name)?;
    if name == "flock" {
        return Some((&argv[1..], "flock"));
    }
    (argv.get(1).map(OsString::as_os_str) == Some(OsStr::new("flock")))
        .then(|| (&argv[2..], "leasehold"))
}

/// What to do, from the argv.
#[derive(Debug, PartialEq)]
struct Plan {
    op: Op,
    /// `None`: wait without limit; `Some(ZERO)`: try once.
    wait: Option<Duration>,
    conflict: u8,
    close: bool,
    no_fork: bool,
    verbose: bool,
    what: What,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Lock(LockMode),
    Unlock,
}

#[derive(Debug, PartialEq)]
enum What {
    /// FILE|DIRECTORY and the command (program first).
    Path(PathBuf, Vec<OsString>),
    /// An inherited descriptor number.
    Fd(i32),
}

/// Why parsing stopped before a plan.
#[derive(Debug, PartialEq)]
enum Stop {
    Help,
    Version,
    Usage(String),
}

const LONG: [&str; 14] = [
    "shared",
    "exclusive",
    "unlock",
    "nonblocking",
    "nonblock",
    "nb",
    "timeout",
    "wait",
    "conflict-exit-code",
    "close",
    "no-fork",
    "verbose",
    "help",
    "version",
];

/// Resolves a long option as getopt_long does: an exact name, or a prefix of exactly one
/// (prefixes of several names that mean the same option count as one).
fn long_option(given: &str) -> Result<&'static str, String> {
    if let Some(exact) = LONG.iter().find(|n| **n == given) {
        return Ok(exact);
    }
    let mut hits: Vec<&'static str> = LONG
        .iter()
        .copied()
        .filter(|n| n.starts_with(given))
        .collect();
    fn canonical(n: &'static str) -> &'static str {
        match n {
            "nonblocking" | "nonblock" | "nb" => "nonblock",
            "wait" | "timeout" => "wait",
            other => other,
        }
    }
    hits.dedup_by(|a, b| canonical(a) == canonical(b));
    match hits.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("unrecognized option '--{given}'")),
        _ => Err(format!("option '--{given}' is ambiguous")),
    }
}

fn parse_wait(v: &str) -> Result<Duration, String> {
    super::parse_secs(v).map_err(|_| format!("invalid timeout value: '{v}'"))
}

fn parse_code(v: &str) -> Result<u8, String> {
    let n: i64 = v
        .trim()
        .parse()
        .map_err(|_| format!("invalid exit code: '{v}'"))?;
    u8::try_from(n).map_err(|_| "exit code out of range (expected 0 to 255)".to_string())
}

/// Parses flock(1)'s argv (without the program name).
fn parse(args: &[OsString]) -> Result<Plan, Stop> {
    if args.is_empty() {
        return Err(Stop::Usage("not enough arguments".into()));
    }
    let mut plan = Plan {
        op: Op::Lock(LockMode::Exclusive),
        wait: None,
        conflict: 1,
        close: false,
        no_fork: false,
        verbose: false,
        what: What::Fd(-1),
    };
    let mut i = 0;
    let value = |i: &mut usize, inline: Option<String>, name: &str| -> Result<String, Stop> {
        if let Some(v) = inline {
            return Ok(v);
        }
        *i += 1;
        args.get(*i)
            .map(|v| v.to_string_lossy().into_owned())
            .ok_or_else(|| Stop::Usage(format!("option '{name}' requires an argument")))
    };
    while let Some(arg) = args.get(i) {
        let text = arg.to_string_lossy();
        if text == "--" {
            i += 1;
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let name = long_option(name).map_err(Stop::Usage)?;
            let takes = matches!(name, "timeout" | "wait" | "conflict-exit-code");
            if !takes && inline.is_some() {
                return Err(Stop::Usage(format!(
                    "option '--{name}' doesn't allow an argument"
                )));
            }
            match name {
                "shared" => plan.op = Op::Lock(LockMode::Shared),
                "exclusive" => plan.op = Op::Lock(LockMode::Exclusive),
                "unlock" => plan.op = Op::Unlock,
                "nonblocking" | "nonblock" | "nb" => plan.wait = Some(Duration::ZERO),
                "timeout" | "wait" => {
                    let v = value(&mut i, inline, "--wait")?;
                    plan.wait = Some(parse_wait(&v).map_err(Stop::Usage)?);
                }
                "conflict-exit-code" => {
                    let v = value(&mut i, inline, "--conflict-exit-code")?;
                    plan.conflict = parse_code(&v).map_err(Stop::Usage)?;
                }
                "close" => plan.close = true,
                "no-fork" => plan.no_fork = true,
                "verbose" => plan.verbose = true,
                "help" => return Err(Stop::Help),
                _ => return Err(Stop::Version),
            }
            i += 1;
            continue;
        }
        let Some(cluster) = text.strip_prefix('-').filter(|c| !c.is_empty()) else {
            break; // the first operand ('+' in flock's optstring: options stop here)
        };
        let chars: Vec<char> = cluster.chars().collect();
        let mut k = 0;
        while k < chars.len() {
            let c = chars[k];
            match c {
                's' => plan.op = Op::Lock(LockMode::Shared),
                'x' | 'e' => plan.op = Op::Lock(LockMode::Exclusive),
                'u' => plan.op = Op::Unlock,
                'n' => plan.wait = Some(Duration::ZERO),
                'o' => plan.close = true,
                'F' => plan.no_fork = true,
                'h' => return Err(Stop::Help),
                'V' => return Err(Stop::Version),
                'w' | 'E' => {
                    let rest: String = chars[k + 1..].iter().collect();
                    let inline = (!rest.is_empty()).then_some(rest);
                    let v = value(&mut i, inline, &format!("-{c}"))?;
                    if c == 'w' {
                        plan.wait = Some(parse_wait(&v).map_err(Stop::Usage)?);
                    } else {
                        plan.conflict = parse_code(&v).map_err(Stop::Usage)?;
                    }
                    k = chars.len();
                    continue;
                }
                other => return Err(Stop::Usage(format!("invalid option -- '{other}'"))),
            }
            k += 1;
        }
        i += 1;
    }
    if plan.no_fork && plan.close {
        return Err(Stop::Usage(
            "the --no-fork and --close options are incompatible".into(),
        ));
    }
    let operands = &args[i.min(args.len())..];
    plan.what = match operands {
        [] => {
            return Err(Stop::Usage(
                "requires file descriptor, file or directory".into(),
            ));
        }
        [number] => {
            let n = number.to_string_lossy();
            match n.trim().parse::<i32>() {
                Ok(fd) if fd >= 0 => What::Fd(fd),
                _ => return Err(Stop::Usage(format!("bad file descriptor: '{n}'"))),
            }
        }
        [file, flag, rest @ ..] if flag == "-c" || flag == "--command" => {
            let [command] = rest else {
                return Err(Stop::Usage(format!(
                    "{} requires exactly one command argument",
                    flag.to_string_lossy()
                )));
            };
            let shell = std::env::var_os("SHELL")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| OsString::from("/bin/sh"));
            What::Path(
                PathBuf::from(file),
                vec![shell, OsString::from("-c"), command.clone()],
            )
        }
        [file, command @ ..] => What::Path(PathBuf::from(file), command.to_vec()),
    };
    Ok(plan)
}

const USAGE: &str = "\
Usage:
 flock [options] <file>|<directory> <command> [<argument>...]
 flock [options] <file>|<directory> -c <command>
 flock [options] <file descriptor number>

Manage file locks from shell scripts (leasehold's drop-in for util-linux flock(1) 2.38).

Options:
 -s, --shared             get a shared lock
 -x, --exclusive          get an exclusive lock (default)
 -u, --unlock             remove a lock
 -n, --nonblock           fail rather than wait
 -w, --timeout <secs>     wait for a limited amount of time
 -E, --conflict-exit-code <number>  exit code after conflict or timeout
 -o, --close              close file descriptor before running command
 -c, --command <command>  run a single command string through the shell
 -F, --no-fork            execute command without forking
     --verbose            increase verbosity

 -h, --help               display this help
 -V, --version            display version

Differences from util-linux flock(1): a symlink, FIFO, socket or device FILE is refused
(exit 66); a new FILE is created 0600; SIGINT/SIGTERM while waiting exit 130/143.
";

/// Runs flock(1)'s argv `args`; `prog` names this program in `--verbose` lines.
///
/// Stdout (`--help`, `-V`, `--verbose`) is written as flock(1) writes it: a reader that went
/// away ends the output; any other failed write (`> /dev/full`) is one line and exit 1 —
/// after COMMAND has run, which a `--verbose` line never keeps from running (util-linux's
/// `close_stdout` does the same; with `-F` the line is printed before the exec, the one
/// moment left).
pub fn run(args: &[OsString], prog: &str) -> Outcome {
    let stdout = crate::out::Stdout::new();
    let plan = match parse(args) {
        Ok(plan) => plan,
        Err(Stop::Help) => {
            stdout.print(USAGE);
            return stdout.finish().map(|()| OK).map_err(written);
        }
        Err(Stop::Version) => {
            stdout.line(format_args!(
                "flock from leasehold {} (argv-compatible with util-linux flock 2.38)",
                env!("CARGO_PKG_VERSION")
            ));
            return stdout.finish().map(|()| OK).map_err(written);
        }
        Err(Stop::Usage(why)) => {
            return Err(Failure::with_status(
                EX_USAGE,
                format!("flock: {why} (try 'flock --help')"),
            ));
        }
    };
    let interrupts = Interrupts::install()?;
    let budget = match plan.wait {
        Some(d) if d.is_zero() => Budget::no_wait(),
        Some(d) => Budget::timeout(d),
        None => Budget::unlimited(),
    }
    .with_cancel(interrupts.token().clone());
    let started = Instant::now();
    let taken = match &plan.what {
        What::Fd(n) => lock_number(*n, plan.op, &budget),
        What::Path(path, _) => lock_path(path, plan.op, &budget),
    };
    let held = match taken {
        Ok(held) => held,
        Err(Failed::Conflict(timed_out)) => {
            if plan.verbose {
                let why = match timed_out {
                    true => "timeout while waiting to get lock",
                    false => "failed to get lock",
                };
                crate::out::error_line(&format!("flock: {why}"));
            }
            return Ok(plan.conflict);
        }
        Err(Failed::Other(f)) => return Err(f),
    };
    if interrupts.signal().is_some() {
        // Interrupted in the instant the lock arrived: COMMAND must not start.
        return Ok(interrupts.exit_code());
    }
    if plan.verbose {
        let took = started.elapsed();
        stdout.line(format_args!(
            "{prog}: getting lock took {}.{:06} seconds",
            took.as_secs(),
            took.subsec_micros()
        ));
    }
    let What::Path(_, command) = &plan.what else {
        // NUMBER: the lock stays with the inherited description.
        return stdout.finish().map(|()| OK).map_err(written);
    };
    let Some((program, rest)) = command.split_first() else {
        return stdout.finish().map(|()| OK).map_err(written);
    };
    if plan.verbose {
        stdout.line(format_args!(
            "{prog}: executing {}",
            program.to_string_lossy()
        ));
    }
    let fail_exec = |e: std::io::Error| {
        let code = match e.raw_os_error() {
            Some(c) if c == Errno::NOMEM.raw_os_error() => EX_OSERR,
            _ => EX_UNAVAILABLE,
        };
        Failure::with_status(
            code,
            format!(
                "flock: failed to execute {}: {e}",
                program.to_string_lossy()
            ),
        )
    };
    let mut cmd = Command::new(program);
    cmd.args(rest);
    if (plan.no_fork || !plan.close)
        && let Held::Lease(l) = &held
        && let Some((name, value)) = l.child_env()
    {
        // COMMAND inherits a shared lease: its own shared acquisitions of the file are
        // nested in ours and must not wait behind a writer that waits for us.
        cmd.env(name, value);
    }
    if plan.no_fork {
        // exec: the lock's descriptor is kept open across it, so COMMAND holds the lock.
        held.inherit(true)?;
        if let Err(e) = stdout.finish() {
            written(e).print(); // the last moment this process can say so
        }
        let e = cmd.exec();
        return Err(fail_exec(e));
    }
    if !plan.close {
        held.inherit(true)?;
    }
    let mut child = cmd.spawn().map_err(fail_exec)?;
    held.inherit(false)?;
    crate::signals::forward_signals(child.id());
    let status = child
        .wait()
        .map_err(|e| Failure::failed(format!("flock: waiting for the command: {e}")))?;
    drop(held);
    // A `--verbose` line that could not be written fails the run, as in flock(1).
    stdout.finish().map_err(written)?;
    Ok(crate::signals::exit_status(status))
}

/// A failed write to stdout, as flock(1) reports it: exit 1, one line.
fn written(e: std::io::Error) -> Failure {
    Failure::failed(format!("flock: {e}"))
}

/// What stands locked while COMMAND runs.
enum Held {
    /// A lock file's lease, in the mode asked for.
    Lease(AnyLease),
    /// A directory (or, for `-u`, a file) opened here.
    Fd(OwnedFd),
    /// The NUMBER form: the lock is the inherited description's.
    Nothing,
}

impl Held {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Held::Lease(l) => l.as_fd(),
            Held::Fd(fd) => Some(fd.as_fd()),
            Held::Nothing => None,
        }
    }

    /// Whether COMMAND (started from now on) inherits the lock's descriptor.
    fn inherit(&self, yes: bool) -> Result<(), Failure> {
        let Some(fd) = self.fd() else { return Ok(()) };
        let mut flags = rustix::io::fcntl_getfd(fd).map_err(os_failure)?;
        flags.set(rustix::io::FdFlags::CLOEXEC, !yes);
        rustix::io::fcntl_setfd(fd, flags).map_err(os_failure)
    }
}

fn os_failure(e: Errno) -> Failure {
    Failure::with_status(EX_OSERR, format!("flock: {e}"))
}

/// Why no lock: contention (`true`: a wait ran out) or another failure.
enum Failed {
    Conflict(bool),
    Other(Failure),
}

impl From<Failure> for Failed {
    fn from(f: Failure) -> Failed {
        Failed::Other(f)
    }
}

/// A library error as flock(1) would report it: contention → the conflict status; a path
/// that cannot be opened → 66 (73 read-only or full, 71 out of descriptors); a failed lock
/// → 65 (71 when the file system cannot lock); cancellation → 130/143.
fn failed(e: &Error, opening: bool) -> Failed {
    let code = match e {
        Error::Contended { .. } => return Failed::Conflict(false),
        Error::TimedOut { .. } => return Failed::Conflict(true),
        // Held up at the lock's gate (an exclusive waiter ahead, or one stuck there).
        Error::GateHeld { waited, .. } => return Failed::Conflict(waited.is_some()),
        Error::Cancelled { .. } => {
            return Failed::Other(Failure::new(ErrorClass::Cancelled, e));
        }
        Error::TooManyOpenFiles { .. } | Error::LockingUnsupported { .. } => EX_OSERR,
        Error::Io { op, source, .. } => {
            let raw = source.raw_os_error();
            let is = |x: Errno| raw == Some(x.raw_os_error());
            if is(Errno::NOMEM) || is(Errno::MFILE) || is(Errno::NFILE) {
                EX_OSERR
            } else if is(Errno::ROFS) || is(Errno::NOSPC) {
                EX_CANTCREAT
            } else if opening && *op != "lock" {
                EX_NOINPUT
            } else {
                EX_DATAERR
            }
        }
        _ if e.is_unusable_path() || matches!(e, Error::NotFound { .. }) => EX_NOINPUT,
        _ => EX_DATAERR,
    };
    Failed::Other(Failure::with_status(code, e.worded(crate::env::opt_in)))
}

/// FILE|DIRECTORY: a regular file (or a missing one, created 0600) gets leasehold's lease;
/// a directory is opened read-only without following a link and its description locked;
/// `-u` opens either and unlocks (which, on a fresh description, only checks it opens).
fn lock_path(path: &Path, op: Op, budget: &Budget) -> Result<Held, Failed> {
    let is_dir = matches!(
        rustix::fs::statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory
    );
    // The environment's opt-ins, as for every verb (`LEASEHOLD_ALLOW_NETWORK_FS=1` is the
    // only way past a network, FUSE or overlay refusal); then a FILE another user owns or
    // may write is locked, as flock(1) locks it: see the module docs,
    // "Deliberate differences".
    let opts = crate::env::lease_options()
        .create_parents(false)
        .allow_shared_state(true);
    match (op, is_dir) {
        (Op::Lock(mode), false) => opts
            .acquire_mode(path, mode, budget)
            .map(Held::Lease)
            .map_err(|e| failed(&e, true)),
        (Op::Lock(mode), true) => {
            let fd = open_plain(path, true)?;
            opts.lock_descriptor(fd.as_fd(), mode, budget)
                .map_err(|e| failed(&e, false))?;
            Ok(Held::Fd(fd))
        }
        (Op::Unlock, dir) => {
            let fd = open_plain(path, dir)?;
            leasehold::unlock_descriptor(fd.as_fd()).map_err(|e| failed(&e, false))?;
            Ok(Held::Fd(fd))
        }
    }
}

/// Opens a directory (read-only, never through a final symlink) or, for `-u`, a lock file as
/// leasehold opens one (no-follow, non-blocking, created 0600), checking what it opened.
fn open_plain(path: &Path, dir: bool) -> Result<OwnedFd, Failed> {
    let mut flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    flags |= match dir {
        true => OFlags::DIRECTORY,
        false => OFlags::NONBLOCK | OFlags::CREATE,
    };
    let cannot = |why: String| {
        Failed::Other(Failure::with_status(
            EX_NOINPUT,
            format!("{}: cannot open lock file: {why}", path.display()),
        ))
    };
    let fd =
        rustix::fs::openat(CWD, path, flags, Mode::from_raw_mode(0o600)).map_err(|e| match e {
            Errno::LOOP => cannot("is a symbolic link; refusing to follow it".into()),
            Errno::ROFS | Errno::NOSPC => Failed::Other(Failure::with_status(
                EX_CANTCREAT,
                format!("{}: cannot open lock file: {e}", path.display()),
            )),
            Errno::MFILE | Errno::NFILE | Errno::NOMEM => Failed::Other(os_failure(e)),
            e => cannot(e.to_string()),
        })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| cannot(e.to_string()))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory | FileType::RegularFile => Ok(fd),
        other => Err(cannot(format!(
            "is a {other:?}, not a regular file or directory"
        ))),
    }
}

/// NUMBER: the descriptor this process inherited, duplicated (see [`inherited`]): the same
/// open file description, so the lock taken is the shell's and outlives us.
fn lock_number(n: i32, op: Op, budget: &Budget) -> Result<Held, Failed> {
    let dup = inherited(n).map_err(|e| {
        let hint = match e {
            Errno::NOENT if cfg!(not(target_os = "linux")) => {
                " (no /dev/fd/N for it: on FreeBSD mount fdescfs(5) on /dev/fd)"
            }
            _ => "",
        };
        Failed::Other(Failure::with_status(
            EX_DATAERR,
            format!("flock: descriptor {n}: {e}{hint}"),
        ))
    })?;
    let done = match op {
        Op::Lock(mode) => LeaseOptions::new().lock_descriptor(dup.as_fd(), mode, budget),
        Op::Unlock => leasehold::unlock_descriptor(dup.as_fd()),
    };
    done.map_err(|e| failed(&for_number(e, n), false))?;
    Ok(Held::Nothing)
}

/// `e` about descriptor `n`. The library names a descriptor by the number it was given —
/// here the duplicate [`inherited`] made ("descriptor 8" for the user's 9) — while the user knows only `n`.
fn for_number(e: Error, n: i32) -> Error {
    let path = PathBuf::from(format!("descriptor {n}"));
    match e {
        Error::Io { op, source, .. } => Error::Io { op, path, source },
        Error::LockingUnsupported { source, .. } => Error::LockingUnsupported { path, source },
        Error::TooManyOpenFiles { limit, .. } => Error::TooManyOpenFiles { path, limit },
        Error::NotRegularFile { kind, .. } => Error::NotRegularFile { path, kind },
        Error::Contended { holders, why, .. } => Error::Contended { path, holders, why },
        Error::TimedOut {
            holders, waited, ..
        } => Error::TimedOut {
            path,
            holders,
            waited,
        },
        Error::Cancelled { .. } => Error::Cancelled { path },
        other => other,
    }
}

/// A duplicate of this process's descriptor `n` — a new descriptor for the *same open file
/// description*, which is what `flock` locks — without `unsafe` (safe Rust cannot borrow a
/// descriptor by its number; rustix's `BorrowedFd::borrow_raw` is `unsafe`).
///
/// Linux (5.6+): `pidfd_getfd` on a pidfd of this very process, which duplicates like
/// `dup(2)`. Not `/dev/fd/N` there: on Linux that is a symlink into `/proc/self/fd`, and
/// opening it opens the file *again* — a new open file description, whose lock would be
/// ours alone and die with us, not the shell's.
#[cfg(target_os = "linux")]
fn inherited(n: i32) -> Result<OwnedFd, Errno> {
    let me = rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    )?;
    rustix::process::pidfd_getfd(me, n, rustix::process::PidfdGetfdFlags::empty())
}

/// A duplicate of this process's descriptor `n` (see the Linux variant for why).
///
/// macOS and the BSDs: an open of `/dev/fd/N`, which there *duplicates* the descriptor.
/// Apple's fd(4) (xnu, `bsd/man/man4/fd.4`) and FreeBSD's fd(4) and fdescfs(5) say: "If the
/// file descriptor is open and the mode the file is being opened with is a subset of the
/// mode of the existing descriptor, the call `fd = open("/dev/fd/0", mode);` and the call
/// `fd = fcntl(0, F_DUPFD, 0);` are equivalent", and "flags to the open(2) call other than
/// O_RDONLY, O_WRONLY and O_RDWR are ignored" (NetBSD's and OpenBSD's fd(4) read the same).
/// The mode must be a subset of the descriptor's, so read-only is asked first and, when
/// refused (`EACCES`: a write-only descriptor, as `exec 9>lockfile` makes), write-only.
/// FreeBSD's devfs alone provides only `/dev/fd/0`–`2` (fd(4), "IMPLEMENTATION NOTES"); for
/// higher numbers fdescfs(5) must be mounted on `/dev/fd`, and the error says so.
#[cfg(all(unix, not(target_os = "linux")))]
fn inherited(n: i32) -> Result<OwnedFd, Errno> {
    let path = format!("/dev/fd/{n}");
    let open =
        |mode: OFlags| rustix::fs::open(path.as_str(), mode | OFlags::CLOEXEC, Mode::empty());
    match open(OFlags::RDONLY) {
        Err(Errno::ACCESS) => open(OFlags::WRONLY),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn argv_is_parsed_as_flock_parses_it() {
        let p = parse(&args(&["-sn", "-E", "7", "f", "echo", "-x"])).unwrap();
        assert_eq!(p.op, Op::Lock(LockMode::Shared));
        assert_eq!(p.wait, Some(Duration::ZERO));
        assert_eq!(p.conflict, 7);
        // Options stop at the first operand: "-x" belongs to the command.
        assert_eq!(p.what, What::Path("f".into(), args(&["echo", "-x"])));
        let p = parse(&args(&[
            "--wait=1.5",
            "--conflict-exit-code",
            "9",
            "--nb",
            "9",
        ]))
        .unwrap();
        assert_eq!(
            (p.wait, p.conflict, p.what),
            (Some(Duration::ZERO), 9, What::Fd(9))
        );
        let p = parse(&args(&["-w1.5", "--exclusive", "--verb", "d", "-c", "a b"])).unwrap();
        assert_eq!(p.wait, Some(Duration::from_millis(1500)));
        assert!(p.verbose);
        assert!(matches!(&p.what, What::Path(_, c) if c[1] == "-c" && c[2] == "a b"));
        assert_eq!(parse(&args(&["--help"])), Err(Stop::Help));
        assert_eq!(parse(&args(&["-V"])), Err(Stop::Version));
        assert_eq!(
            parse(&args(&["-u", "--close", "f", "true"])).unwrap().op,
            Op::Unlock
        );
    }

    #[test]
    fn usage_errors_are_flocks() {
        for bad in [
            &[][..],
            &["-n"],
            &["notanumber"],
            &["-E", "256", "f", "true"],
            &["-w", "soon", "f", "true"],
            &["-F", "-o", "f", "true"],
            &["f", "-c"],
            &["f", "-c", "a", "b"],
            &["-q", "f", "true"],
            &["--no", "f", "true"],
            &["--shared=1", "f", "true"],
            &["-w"],
        ] {
            assert!(
                matches!(parse(&args(bad)), Err(Stop::Usage(_))),
                "{bad:?} must be a usage error"
            );
        }
    }

    #[test]
    fn errors_about_a_number_name_the_users_number_not_our_duplicate() {
        let io = |op| Error::Io {
            op,
            path: PathBuf::from("descriptor 8"),
            source: std::io::Error::from(Errno::IO),
        };
        for (e, op) in [(io("lock"), "lock"), (io("unlock"), "unlock")] {
            let msg = for_number(e, 9).to_string();
            assert!(msg.starts_with(&format!("descriptor 9: {op}: ")), "{msg}");
        }
        let e = Error::LockingUnsupported {
            path: PathBuf::from("descriptor 8"),
            source: std::io::Error::from(Errno::NOLCK),
        };
        assert!(for_number(e, 9).to_string().starts_with("descriptor 9: "));
        let e = Error::Cancelled {
            path: PathBuf::from("descriptor 8"),
        };
        assert!(
            matches!(for_number(e, 9), Error::Cancelled { path } if path == Path::new("descriptor 9"))
        );
    }

    #[test]
    fn invoked_as_flock_or_as_the_verb() {
        let v = args(&["/usr/local/bin/flock", "-n", "f", "true"]);
        assert_eq!(argv_of(&v).map(|(a, p)| (a.len(), p)), Some((3, "flock")));
        let v = args(&["leasehold", "flock", "9"]);
        assert_eq!(
            argv_of(&v).map(|(a, p)| (a.len(), p)),
            Some((1, "leasehold"))
        );
        assert!(argv_of(&args(&["leasehold", "run", "x"])).is_none());
    }
}
