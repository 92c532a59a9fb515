//! `leasehold run`: hold an exclusive (with `--shared`, a shared) kernel lease on LOCKFILE
//! while COMMAND runs — or, on a mount whose kernel locks stay on each host with `--ttl SECS`
//! (or `LEASEHOLD_SHARED_MOUNT=record:SECS`) given, an exclusive record lease
//! ([`leasehold::RecordLease`]), renewed by this process while COMMAND runs, whose fencing
//! token COMMAND gets as `LEASEHOLD_FENCING_TOKEN`.
//!
//! The lease's descriptor is inherited by COMMAND (as with `flock(1)`), so the kernel keeps
//! the lock for as long as COMMAND or any descendant holding the descriptor lives — even when
//! this process is SIGKILLed. COMMAND is spawned only after the lease is held.
//!
//! On Windows the lease is a kernel object handle that is not inherited: it lasts while this
//! process waits for COMMAND, and ends if this process is killed first (COMMAND keeps
//! running unprotected). Termination signals are not forwarded there.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::exit::{CONTENDED, Failure, Outcome};
#[cfg(unix)]
use crate::signals::Forward;
use crate::signals::Interrupts;
use crate::wait::Wait;
use clap::Args;
use leasehold::{Error, ErrorClass, LockMode, MountLease};

/// `run`'s own exit statuses, closing `run --help` (contract v1.3, `run`).
macro_rules! run_exit_statuses {
    () => {
        "Exit status:
  COMMAND's  when COMMAND ran: its status, or 128+N if signal N killed it
  126        COMMAND was found but could not be started
  127        COMMAND was not found
  75         the lease could not be had (--no-wait, or --timeout ran out); N with --conflict-exit-code N
  130, 143   SIGINT or SIGTERM ended the wait (COMMAND never ran)
  74         LOCKFILE's path came to lead elsewhere while COMMAND ran (the file replaced or removed, a directory above it renamed, a symlink on the way re-pointed): COMMAND and what it started were stopped
  2          usage error, or an unusable LOCKFILE (a symlink, FIFO, socket, device or directory; permission denied)
  1          any other failure (I/O; with --etcd: endpoint unreachable, or `lease lost`)"
    };
}

#[derive(Args, Debug)]
#[cfg_attr(not(windows), command(after_help = run_exit_statuses!()))]
#[cfg_attr(
    windows,
    command(
        after_help = concat!(run_exit_statuses!(), "\n\nOn Windows COMMAND does not inherit the lease (a kernel object handle, not a descriptor): the lease lasts while leasehold runs, and killing leasehold frees it while COMMAND may still run. Contention messages name no pid: Windows does not reveal holders.")
    )
)]
pub struct RunArgs {
    /// Take a shared lease: shared holders run at once; shared and exclusive exclude each
    /// other, and a waiting exclusive `run` is never starved by overlapping shared ones.
    #[arg(long)]
    shared: bool,
    /// Give up after SECS seconds (decimals allowed); default: wait without limit.
    #[arg(long, value_name = "SECS", value_parser = super::parse_secs, conflicts_with = "no_wait")]
    timeout: Option<Duration>,
    /// Try once; do not wait.
    #[arg(long)]
    no_wait: bool,
    /// Exit status when the lease could not be had.
    #[arg(long, value_name = "N", default_value_t = CONTENDED)]
    conflict_exit_code: u8,
    /// etcd endpoints (comma-separated http:// or https:// URLs; https trusts the system's
    /// CAs, or SSL_CERT_FILE): arbitrate with etcd; LOCKFILE is then a lock NAME.
    #[arg(long, value_name = "ENDPOINTS")]
    etcd: Option<String>,
    /// Where LOCKFILE's mount keeps kernel locks on each host (NFS with local_lock=all or
    /// nolock, SMB with nobrl, sshfs, bindfs and other FUSE): hold an exclusive record lease
    /// with a TTL of SECS seconds (at least 0.03) instead of refusing; elsewhere the kernel
    /// lease, as without it. The flag form of LEASEHOLD_SHARED_MOUNT=record:SECS. With
    /// --etcd: the etcd lease's TTL in seconds (at least 2; default 10).
    #[arg(long, value_name = "SECS")]
    ttl: Option<String>,
    /// With --etcd: how long before the lease can run out COMMAND gets SIGTERM (default: a
    /// third of the TTL; at most half).
    ///
    /// Each acknowledged keep-alive (one every TTL/3) sets a deadline: its send time + TTL −
    /// margin, margin = max(TTL/10, 0.2 s); etcd cannot expire the lease before deadline +
    /// margin. If no keep-alive is acknowledged, COMMAND and every process it started get
    /// SIGTERM at deadline − GRACE and SIGKILL at the deadline: SIGTERM at least GRACE +
    /// margin, SIGKILL at least margin before the lease can expire — even if leasehold itself
    /// is stopped, since a supervisor of COMMAND keeps that time. With --ttl 10: SIGTERM at
    /// least 4.3 s, SIGKILL at least 1 s before. When COMMAND ends, what it left running gets
    /// SIGTERM, and SIGKILL GRACE later, before the lease is released.
    #[arg(long, value_name = "SECS", value_parser = super::parse_secs, requires = "etcd")]
    grace: Option<Duration>,
    /// The lock file (created 0600 if absent; never removed); with --etcd, the lock NAME.
    lockfile: PathBuf,
    /// The command to run while holding the lease.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<std::ffi::OsString>,
}

pub fn main(args: RunArgs) -> Outcome {
    if let Some(endpoints) = args.etcd {
        let ttl = match args.ttl.as_deref() {
            Some(secs) => super::etcd::parse_ttl(secs).map_err(Failure::usage)?,
            None => super::etcd::DEFAULT_TTL,
        };
        return super::etcd::run(super::etcd::RunEtcd {
            endpoints,
            ttl,
            grace: super::etcd::grace(ttl, args.grace)?,
            timeout: args.timeout,
            no_wait: args.no_wait,
            conflict_exit_code: args.conflict_exit_code,
            name: args.lockfile.to_string_lossy().into_owned(),
            command: args.command,
        });
    }
    let interrupts = Interrupts::install()?;
    // Forwarding is set up before the lease is taken, so that a SIGINT/SIGTERM landing after
    // the grant — before or while COMMAND is spawned — is queued and delivered to COMMAND
    // once it exists, never lost (the handlers above would otherwise swallow it).
    #[cfg(unix)]
    let forward = Forward::install().map_err(handler_failure)?;
    let lease = acquire(&args, &interrupts)
        .map_err(|failure| failure.conflict_code(args.conflict_exit_code))?;
    #[cfg(unix)]
    forward.hangups().map_err(handler_failure)?;
    if interrupts.signal().is_some() {
        // Interrupted in the instant the lease arrived: COMMAND must not start.
        return Ok(interrupts.exit_code());
    }
    #[cfg(unix)]
    lease
        .share_with_children(true)
        .map_err(|e| Failure::failed(&e))?;
    let Some((program, rest)) = args.command.split_first() else {
        return Err(Failure::usage("run: COMMAND is required after --"));
    };
    let mut command = Command::new(program);
    command.args(rest);
    // COMMAND inherits a shared lease: its own shared acquisitions of the lock are nested
    // in ours and must not wait behind a writer that waits for us (the library's rule).
    #[cfg(unix)]
    if let Some((name, value)) = lease.child_env() {
        command.env(name, value);
    }
    // A record lease's token, for COMMAND to hand to whatever checks it before a write.
    if let Some(token) = lease.fencing_token() {
        command.env("LEASEHOLD_FENCING_TOKEN", token.to_string());
    }
    let mut child = command.spawn().map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        Failure::with_status(
            code,
            format!("cannot run {}: {e}", program.to_string_lossy()),
        )
    })?;
    // Our own copy is no longer needed for inheritance; keep it held until COMMAND ends.
    #[cfg(unix)]
    let _ = lease.share_with_children(false);
    #[cfg(unix)]
    forward.start(child.id());
    // While COMMAND runs, the lease's path is checked again and again: moved away, COMMAND's
    // tree is stopped (see `watch`). The watch ends, and its stop of the tree is complete,
    // before the lease is released.
    #[cfg(unix)]
    let (status, moved) = std::thread::scope(|scope| {
        let (done, ended) = std::sync::mpsc::channel::<()>();
        let (pid, lease) = (child.id(), &lease);
        let watch = scope.spawn(move || watch(lease, pid, ended));
        let status = child.wait();
        drop(done);
        (status, watch.join().ok().flatten())
    });
    #[cfg(not(unix))]
    let status = child.wait();
    let status = status
        .map_err(|e| Failure::failed(format!("waiting for {}: {e}", program.to_string_lossy())))?;
    drop(lease);
    #[cfg(unix)]
    if let Some((lost, record)) = moved {
        let since = match record {
            true => "since another holder may be running beside it",
            false => "since a newcomer could lock a new file at the path",
        };
        return Err(Failure::with_status(
            crate::exit::MOVED,
            format!(
                "{lost}; COMMAND was stopped (status {}), {since}",
                crate::signals::exit_status(status)
            ),
        ));
    }
    Ok(crate::signals::exit_status(status))
}

/// The failure to install a signal handler.
#[cfg(unix)]
fn handler_failure(e: std::io::Error) -> Failure {
    Failure::failed(format!("cannot install signal handler: {e}"))
}

/// How often `run` checks, while COMMAND runs, that LOCKFILE's path still leads to the file
/// it locked ([`MountLease::verify`]: one `fstatat` of the whole path), or that a record
/// lease is still held (no I/O while two thirds of its validity are left).
#[cfg(unix)]
const WATCH_EVERY: Duration = Duration::from_millis(200);

/// How long COMMAND's tree has between SIGTERM and SIGKILL once the lock was moved away.
#[cfg(unix)]
const MOVED_GRACE: Duration = Duration::from_secs(2);

/// Checks every [`WATCH_EVERY`] that the lease still stands for LOCKFILE's path, until
/// `ended` says COMMAND has exited. leasehold never moves a lock file, but whoever may
/// rename a directory above it (or re-point a symlink on the way: the opt-in
/// `LEASEHOLD_ALLOW_SHARED=1` lets such paths be used), or replace or remove the file
/// itself, moves the lock away from its path while it is held, and the next `run` then
/// locks a new file there and runs beside COMMAND. Once the path leads elsewhere COMMAND's
/// tree is stopped ([`stop_tree`]) and the loss returned. A record lease is lost when a
/// renewal finds it taken over, or when renewals kept failing until its validity ran out;
/// then too the tree is stopped, and the loss returned with `true`.
#[cfg(unix)]
fn watch(
    lease: &MountLease,
    command: u32,
    ended: std::sync::mpsc::Receiver<()>,
) -> Option<(Error, bool)> {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        match ended.recv_timeout(WATCH_EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return None,
        }
        // Only a path that names another file (or none) is a loss; a look that failed (a
        // directory made unsearchable by its owner) moves nothing and is looked at again.
        // A record lease whose renewal failed is lost once its validity has run out.
        let lost = match (lease.verify(), lease) {
            (Err(lost @ Error::LeaseLost { .. }), _) => Some(lost),
            (Err(e), MountLease::Record(r)) if r.remaining().is_none() => Some(e),
            _ => None,
        };
        if let Some(lost) = lost {
            stop_tree(command, &ended);
            return Some((lost, matches!(lease, MountLease::Record(_))));
        }
    }
}

/// Stops COMMAND and everything it started: SIGTERM, then SIGKILL after [`MOVED_GRACE`]
/// (sooner once COMMAND has exited, as `ended` says) to whatever is left. On Linux "the
/// tree" is every descendant of this process, found in `/proc`, and this process becomes a
/// child subreaper first so that what COMMAND's exit orphans stays in it; elsewhere it is
/// COMMAND alone (it shares this process's group, so a group signal would stop us too).
#[cfg(unix)]
fn stop_tree(command: u32, ended: &std::sync::mpsc::Receiver<()>) {
    use rustix::process::Signal;
    #[cfg(target_os = "linux")]
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    let signal = |sig: Signal| {
        #[cfg(target_os = "linux")]
        for pid in crate::procs::descendants(None) {
            let _ = rustix::process::kill_process(pid, sig);
        }
        #[cfg(not(target_os = "linux"))]
        if let Some(pid) = rustix::process::Pid::from_raw(command as i32) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    };
    let _ = command;
    signal(Signal::TERM);
    let running = matches!(
        ended.recv_timeout(MOVED_GRACE),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout)
    );
    // SIGKILL until nothing of the tree runs (a process forking while it is walked may need
    // a second round); zombies wait for their reaper and are not counted. Off Linux only
    // while COMMAND runs: once reaped, its pid may be another process's.
    #[cfg(not(target_os = "linux"))]
    if running {
        signal(Signal::KILL);
    }
    #[cfg(target_os = "linux")]
    let _ = running;
    #[cfg(target_os = "linux")]
    for _ in 0..100 {
        signal(Signal::KILL);
        if crate::procs::descendants(None).is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the lease within the user's budget (see [`Wait`]: it says once when it takes
/// over a second). Contention names the lock file, its holders, how long `run` waited and
/// the option that waits longer.
fn acquire(args: &RunArgs, interrupts: &Interrupts) -> Result<MountLease, Failure> {
    let token = interrupts.token();
    let wait = Wait::of(args.no_wait, args.timeout, token);
    // What holds the lease up, in the library's words — or, for a record lease on a shared
    // mount, its holder as the record names it: the notice names the lock file and its
    // hold-up ("waiting for PATH held by ..."), the final message is the situation and this
    // face's advice.
    let lockfile = args.lockfile.display().to_string();
    let held_by = move |e: &Error| {
        record_hold_up(e)
            .or_else(|| e.hold_up())
            .map(|held| format!("{lockfile} {held}"))
    };
    let options = crate::env::record_lease_options(args.ttl.as_deref()).map_err(Failure::usage)?;
    // One acquisition for the whole wait, which says the notice and goes on waiting on the
    // file it opened (see `Wait::lease_budget`).
    let budget = wait.lease_budget(held_by);
    let mode = match args.shared {
        true => LockMode::Shared,
        false => LockMode::Exclusive,
    };
    let acquired = options.acquire_mount_lease(&args.lockfile, mode, &budget);
    acquired.map_err(|e| {
        // How long it waited, before the holders are looked up (that takes a moment).
        let tail = wait.gave_up();
        let situation = match &e {
            Error::Contended { path, .. } | Error::TimedOut { path, .. } => {
                record_hold_up(&e).map(|held| format!("{}: lock is {held}", path.display()))
            }
            _ => None,
        }
        .or_else(|| e.situation());
        match situation {
            Some(held) => Failure::new(ErrorClass::Contended, format!("{held}{tail}")),
            None => Failure::lease(&e),
        }
    })
}

/// A contention's hold-up when a record lease holds the lock: "held by pid N on this host
/// (record lease, fencing token T)" (the library's words otherwise: `Error::hold_up`).
fn record_hold_up(e: &Error) -> Option<String> {
    match e {
        Error::Contended { path, .. } | Error::TimedOut { path, .. } => {
            record_holder(path).map(|who| format!("held by {who}"))
        }
        _ => None,
    }
}

/// Who holds a record lease on `path`, as contention names it, if one does: "pid N on this
/// host (record lease, fencing token T)".
fn record_holder(path: &std::path::Path) -> Option<String> {
    #[cfg(unix)]
    if let Ok(Some(h)) = leasehold::RecordLease::holder(path) {
        return Some(super::status::record_words(&h));
    }
    let _ = path;
    None
}
