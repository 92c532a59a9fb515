//! `leasehold doc (read | update | watch) FILE`: a file of the user's own shared by several
//! processes, through `leasehold_stores::Document` (the library decides the protocol; this
//! verb converts and reports).
//!
//! `update` runs COMMAND under the document's lease with the current content on its stdin;
//! COMMAND's stdout becomes the new version only if COMMAND exits 0 (and, for a `.json` file,
//! the output parses). The lease is this process's, never COMMAND's: COMMAND does not inherit
//! the lock descriptor (it is close-on-exec) and runs in a process group of its own, which
//! this process kills when SIGINT or SIGTERM arrives, writing nothing. If this process
//! is SIGKILLed, COMMAND may go on running, but its output is never written (only this process
//! writes) and the lease ends with this process, so the next update does not wait for it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold::{Classify, ErrorClass};
use leasehold_stores::document::{Document, DocumentError, DocumentOptions, Snapshot, Version};

use crate::exit::{Failure, OK, Outcome};
use crate::signals::Interrupts;
use crate::wait::Wait;

/// `doc`'s exit statuses, closing `doc --help`.
const EXIT_STATUSES: &str = "A FILE whose name ends in .json is JSON: update refuses to run COMMAND on a document that does not parse, and writes COMMAND's output only if it parses.

Exit status:
  0          done (read: the content was printed; update: the new version was written)
  1          any other failure (I/O, no document to read); nothing was written
  2          usage error, an unusable FILE (a symlink, FIFO or directory; permission denied; over the size limit) or content that does not parse; nothing was written
  75         update: the lease could not be had (--no-wait, or --timeout ran out), or --if VERSION is no longer the document's version; nothing was written
  126, 127   update: COMMAND could not be started, or was not found
  N          update: COMMAND exited with N (not 0); nothing was written
  130, 143   SIGINT or SIGTERM ended the wait, COMMAND (nothing was written) or watch";

#[derive(Args, Debug)]
#[command(after_help = EXIT_STATUSES)]
pub struct DocArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Print the current content of FILE (no lock is taken; always one whole version).
    Read {
        /// Print the version (32 hex digits) instead of the content.
        #[arg(long)]
        version: bool,
        /// The document.
        file: PathBuf,
    },
    /// Replace FILE with what COMMAND makes of it, under FILE's lease: COMMAND reads the
    /// current content on stdin; its stdout is written only if it exits 0. Prints the new
    /// version.
    Update {
        /// Give up waiting for the lease after SECS seconds (decimals allowed); default: wait
        /// without limit.
        #[arg(long, value_name = "SECS", value_parser = super::parse_secs, conflicts_with = "no_wait")]
        timeout: Option<Duration>,
        /// Try once for the lease; do not wait.
        #[arg(long)]
        no_wait: bool,
        /// The lock file (default: FILE.lock beside FILE); every writer must use the same.
        #[arg(long, value_name = "PATH")]
        lock: Option<PathBuf>,
        /// Where the lock file's mount keeps kernel locks on each host (NFS with
        /// local_lock=all or nolock, SMB with nobrl, sshfs, bindfs and other FUSE): take a
        /// record lease with a TTL of SECS seconds (at least 0.03) instead of refusing;
        /// elsewhere the kernel lease, as without it. The flag form of
        /// LEASEHOLD_SHARED_MOUNT=record:SECS, which it overrides.
        #[arg(long, value_name = "SECS")]
        ttl: Option<String>,
        /// Update only if FILE is still at VERSION (as `doc read --version` printed it);
        /// otherwise exit 75 naming the current version.
        #[arg(long = "if", value_name = "VERSION")]
        if_version: Option<String>,
        /// The document.
        file: PathBuf,
        /// The command that makes the new content from the current one.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Print FILE's version (if there is a document), then one line per new version, until
    /// SIGINT or SIGTERM. Versions written faster than they are read may be coalesced.
    Watch {
        /// The document.
        file: PathBuf,
    },
}

pub fn main(args: DocArgs) -> Outcome {
    match args.action {
        Action::Read { version, file } => read(&file, version),
        Action::Update {
            timeout,
            no_wait,
            lock,
            ttl,
            if_version,
            file,
            command,
        } => {
            let expected = match if_version {
                Some(v) => Some(
                    v.parse::<Version>()
                        .map_err(|e| Failure::usage(format!("doc update: --if: {e}")))?,
                ),
                None => None,
            };
            let doc = document(&file, lock, ttl.as_deref())?;
            update(&doc, timeout, no_wait, expected, &command)
        }
        Action::Watch { file } => watch(&file),
    }
}

/// The document at `file`: JSON when its name ends in `.json`; its lease as the
/// environment and `--ttl SECS` (`ttl`) choose ([`crate::env::record_lease_options`]).
fn document(file: &Path, lock: Option<PathBuf>, ttl: Option<&str>) -> Result<Document, Failure> {
    let json = file
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let env = crate::env::record_lease_options(ttl).map_err(Failure::usage)?;
    let mut options = DocumentOptions::new()
        .json(json)
        .allow_shared_state(env.allows_shared_state())
        .allow_network_filesystem(env.allows_network_filesystem())
        .on_shared_mount(env.shared_mount());
    if let Some(lock) = lock {
        options = options.lock_path(lock);
    }
    Ok(Document::open(file, options))
}

fn read(file: &Path, version: bool) -> Outcome {
    let doc = document(file, None, None)?;
    let Some(snap) = doc.read().map_err(|e| Failure::of(&e))? else {
        return Err(Failure::failed(format!(
            "{}: no document there (nothing has been written yet)",
            file.display()
        )));
    };
    if version {
        crate::out::print_line(snap.version)?;
        return Ok(OK);
    }
    raw(&snap.content)?;
    Ok(OK)
}

/// Writes `bytes` to stdout as they are: a reader that went away is the end of output (the
/// rule of `out`), any other failure is one.
fn raw(bytes: &[u8]) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::failed(format!(
            "writing stdout: {e}; the output is incomplete (check where stdout goes)"
        ))),
    }
}

/// What stopped COMMAND's output from becoming the new version (the closure's error).
#[derive(Debug)]
struct NotWritten(Failure);

impl std::fmt::Display for NotWritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message)
    }
}

impl std::error::Error for NotWritten {}

fn update(
    doc: &Document,
    timeout: Option<Duration>,
    no_wait: bool,
    expected: Option<Version>,
    command: &[OsString],
) -> Outcome {
    let Some((program, rest)) = command.split_first() else {
        return Err(Failure::usage("doc update: COMMAND is required after --"));
    };
    let interrupts = Interrupts::install()?;
    let stopper = Stopper::install()?;
    let file = doc.path();
    let wait = Wait::of(no_wait, timeout, interrupts.token());
    let budget = wait.lease_budget(|e| {
        e.situation()
            .map(|held| format!("the document's lease: {held}"))
    });
    let max = leasehold_stores::document::MAX_DOCUMENT_BYTES;
    let make = |current: Option<&[u8]>| -> Result<Option<Vec<u8>>, NotWritten> {
        run_command(program, rest, current.unwrap_or_default(), max, &stopper).map(Some)
    };
    let written = match expected {
        None => doc.try_update(&budget, make),
        Some(expected) => doc.try_update_if(&budget, expected, make),
    };
    match written {
        Ok(Some(Snapshot { version, .. })) => {
            crate::out::print_line(version)?;
            Ok(OK)
        }
        Ok(None) => Err(Failure::failed(format!(
            "{}: nothing was written",
            file.display()
        ))),
        Err(DocumentError::Aborted { source, .. }) => match source.downcast::<NotWritten>() {
            Ok(not) => Err(not.0),
            Err(other) => Err(Failure::failed(format!("{}: {other}", file.display()))),
        },
        // Worded in this tool's terms, as `run` words it: who holds the lease, how long this
        // waited and the option that waits longer.
        Err(DocumentError::Lease(e)) if e.class() == ErrorClass::Contended => {
            let tail = wait.gave_up();
            match e.situation() {
                Some(held) => Err(Failure::new(ErrorClass::Contended, format!("{held}{tail}"))),
                None => Err(Failure::of(&e)),
            }
        }
        Err(DocumentError::Lease(e)) => Err(Failure::lease(&e)),
        Err(e) => Err(Failure::of(&e)),
    }
}

/// Runs COMMAND with `input` on its stdin, in a process group of its own; its stdout if it
/// exited 0.
fn run_command(
    program: &OsString,
    rest: &[OsString],
    input: &[u8],
    max: u64,
    stopper: &Stopper,
) -> Result<Vec<u8>, NotWritten> {
    let name = program.to_string_lossy().into_owned();
    if let Some(sig) = stopper.fired() {
        return Err(NotWritten(Failure::with_status(
            128u8.wrapping_add(sig as u8),
            format!("signal {sig} arrived before {name} ran; nothing was written"),
        )));
    }
    let mut cmd = Command::new(program);
    cmd.args(rest).stdin(Stdio::piped()).stdout(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd.spawn().map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        };
        NotWritten(Failure::with_status(
            code,
            format!("cannot run {name}: {e}"),
        ))
    })?;
    stopper.watch(child.id());
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let (read, status) = std::thread::scope(|s| {
        // Fed from a thread: COMMAND may write before it has read all of its input.
        s.spawn(move || {
            if let Some(mut stdin) = stdin.take() {
                // COMMAND may exit without reading it all (EPIPE): its status decides.
                let _ = stdin.write_all(input);
            }
        });
        let mut out = Vec::new();
        let read = stdout
            .take()
            .map(|o| o.take(max.saturating_add(1)).read_to_end(&mut out))
            .transpose()
            .map(|_| out);
        if read.as_ref().is_ok_and(|o| o.len() as u64 > max) {
            stopper.kill_now();
        }
        (read, child.wait())
    });
    stopper.done();
    if let Some(sig) = stopper.fired() {
        return Err(NotWritten(Failure::with_status(
            128u8.wrapping_add(sig as u8),
            format!("signal {sig} stopped {name}; nothing was written"),
        )));
    }
    let status =
        status.map_err(|e| NotWritten(Failure::failed(format!("waiting for {name}: {e}"))))?;
    let out = read.map_err(|e| {
        NotWritten(Failure::failed(format!(
            "reading the output of {name}: {e}; nothing was written"
        )))
    })?;
    if out.len() as u64 > max {
        return Err(NotWritten(Failure::usage(format!(
            "the output of {name} is larger than the limit of {max} bytes; nothing was written"
        ))));
    }
    if !status.success() {
        let code = crate::signals::exit_status(status);
        return Err(NotWritten(Failure::with_status(
            code,
            format!("{name} exited with status {code}; nothing was written"),
        )));
    }
    Ok(out)
}

/// Stops COMMAND (its whole process group, SIGKILL) when SIGINT or SIGTERM arrives,
/// and remembers which signal did.
struct Stopper {
    signal: Arc<AtomicI32>,
    child: Arc<AtomicU32>,
}

impl Stopper {
    #[cfg(unix)]
    fn install() -> Result<Stopper, Failure> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .map_err(|e| Failure::failed(format!("cannot install signal handler: {e}")))?;
        let stopper = Stopper {
            signal: Arc::default(),
            child: Arc::default(),
        };
        let (signal, child) = (stopper.signal.clone(), stopper.child.clone());
        std::thread::spawn(move || {
            for sig in signals.forever() {
                signal.store(sig, Ordering::SeqCst);
                kill_group(child.load(Ordering::SeqCst));
            }
        });
        Ok(stopper)
    }

    #[cfg(not(unix))]
    fn install() -> Result<Stopper, Failure> {
        Ok(Stopper {
            signal: Arc::default(),
            child: Arc::default(),
        })
    }

    /// COMMAND is `pid` (and its process group): a signal from now on stops it. One that
    /// came while it was being started stops it now.
    fn watch(&self, pid: u32) {
        self.child.store(pid, Ordering::SeqCst);
        if self.fired().is_some() {
            kill_group(pid);
        }
    }

    /// COMMAND was reaped: its pid may be reused, so it is never signalled again.
    fn done(&self) {
        self.child.store(0, Ordering::SeqCst);
    }

    fn kill_now(&self) {
        kill_group(self.child.load(Ordering::SeqCst));
    }

    fn fired(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            n => Some(n),
        }
    }
}

/// SIGKILLs the process group `pid` leads (nothing for 0).
#[cfg(unix)]
fn kill_group(pid: u32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

#[cfg(not(unix))]
fn kill_group(_pid: u32) {}

fn watch(file: &Path) -> Outcome {
    let interrupts = Interrupts::install()?;
    let doc = document(file, None, None)?;
    let mut watch = doc.watch().map_err(|e| Failure::of(&e))?;
    let out = crate::out::Stdout::new();
    // The version there now first (when there is one): a script then knows the watch is on,
    // and sees every version written after that line.
    if let Some(now) = watch.seen()
        && !out.line(now)
    {
        out.finish()?;
        return Ok(OK);
    }
    loop {
        if interrupts.signal().is_some() {
            out.finish()?;
            return Ok(interrupts.exit_code());
        }
        match watch.next_timeout(Duration::from_millis(200)) {
            Ok(Some(snap)) => {
                if !out.line(snap.version) {
                    // The reader went away (or a write failed): nothing more to do.
                    out.finish()?;
                    return Ok(OK);
                }
            }
            Ok(None) => {}
            Err(e) => return Err(Failure::of(&e)),
        }
    }
}
