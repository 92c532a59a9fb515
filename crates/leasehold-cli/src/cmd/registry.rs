//! `leasehold registry`: the multi-root workspace registry, under a store-wide authority.
//!
//! One-shot verbs (`add`, `remove`, `list`) acquire the authority (waiting up to `--timeout`,
//! default: try once), do their one thing, and tear down — releasing the lease only after
//! the write is durable. `serve` is long-lived: it tries once at start and never waits,
//! answers one JSON line per request line, and on EOF or SIGTERM drains, closes the store
//! and releases the lease before exiting 0. Requests are read and handled one at a time on
//! the main thread (a flooding writer is held back by the pipe); a signal only raises a
//! stop seen before the next request, so SIGTERM never interrupts a write and never waits
//! for a backlog. On Windows the stops are the console's control events (Ctrl-C,
//! Ctrl-Break, closing the console window, logoff, shutdown); for the last three Windows ends
//! the process soon after it is told, so teardown there is best effort — the kernel destroys
//! the lease object with the process anyway, and every answered mutation is already durable.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold::{Budget, Classify, ErrorClass};

use leasehold::patterns::authority::State;
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths, Scope, existing_dir};
#[cfg(unix)]
use rustix::event::{PollFd, PollFlags};
use serde_json::{Map, Value, json};
#[cfg(unix)]
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::exit::{Failure, OK, Outcome};
use crate::signals::Interrupts;
use crate::wait::Wait;

#[derive(Args, Debug)]
pub struct RegistryArgs {
    /// Home directory (default: $LEASEHOLD_HOME, else ~/.leasehold).
    #[arg(long, value_name = "DIR", global = true)]
    home: Option<PathBuf>,
    /// Lease file (default: DIR/storages/multi_root_workspace.lock).
    #[arg(long, value_name = "P", global = true)]
    lease_path: Option<PathBuf>,
    /// One-shot verbs: wait up to SECS for the authority (default: try once).
    #[arg(long, value_name = "SECS", value_parser = super::parse_secs, global = true)]
    timeout: Option<Duration>,
    /// etcd endpoints (comma-separated http:// or https:// URLs; https trusts the system's
    /// CAs, or SSL_CERT_FILE): the registry lives in etcd.
    #[arg(long, value_name = "ENDPOINTS", global = true)]
    etcd: Option<String>,
    /// With --etcd: the key prefix (default leasehold/registry).
    #[arg(long, value_name = "P", global = true, requires = "etcd")]
    prefix: Option<String>,
    /// The authority's lease TTL in seconds. With --etcd: the etcd lease's (at least 2;
    /// default 10). Without it, where the lease file's mount keeps kernel locks on each host
    /// (NFS with local_lock=all or nolock, SMB with nobrl, sshfs, bindfs and other FUSE): a
    /// record lease's (at least 0.03), taken instead of refusing; elsewhere the kernel lease,
    /// as without it — the flag form of LEASEHOLD_SHARED_MOUNT=record:SECS, which it
    /// overrides.
    #[arg(long, value_name = "SECS", global = true)]
    ttl: Option<String>,
    #[command(subcommand)]
    op: Op,
}

#[derive(Subcommand, Debug)]
enum Op {
    /// Grant ROOT to PRIMARY (both existing directories).
    Add {
        /// The primary root: an existing directory (stored canonicalized).
        primary: PathBuf,
        /// The root granted to PRIMARY: an existing directory (stored canonicalized).
        root: PathBuf,
    },
    /// Withdraw ROOT from PRIMARY (either may no longer exist).
    Remove {
        /// The primary root (canonicalized if it still exists, else taken as written).
        primary: PathBuf,
        /// The root to withdraw (canonicalized if it still exists, else taken as written).
        root: PathBuf,
    },
    /// Print the scope: primary roots and their granted roots.
    List {
        /// Print {"state": ..., "scope": {...}}.
        #[arg(long)]
        json: bool,
    },
    /// Serve JSON-line requests on stdin until EOF or SIGTERM.
    Serve,
}

pub fn main(args: RegistryArgs) -> Outcome {
    let registry = match &args.etcd {
        Some(endpoints) => super::etcd::registry(
            endpoints,
            args.prefix
                .as_deref()
                .unwrap_or(super::etcd::REGISTRY_PREFIX),
            match args.ttl.as_deref() {
                Some(secs) => super::etcd::parse_ttl(secs).map_err(Failure::usage)?,
                None => super::etcd::DEFAULT_TTL,
            },
        )?,
        None => {
            let home = match args.home {
                Some(h) => h,
                None => default_home()?,
            };
            let paths = RegistryPaths::in_home(&home, args.lease_path);
            refuse_lease_on_document(&paths)?;
            let options =
                crate::env::record_lease_options(args.ttl.as_deref()).map_err(Failure::usage)?;
            Registry::with_options(paths, options)
        }
    };
    match args.op {
        Op::Serve => serve(&registry),
        op => one_shot(&registry, args.timeout, op),
    }
}

/// `--lease-path` naming the document itself (however spelled) would lock the file that
/// every rewrite replaces: each write would orphan the lock. Refused before anything starts.
fn refuse_lease_on_document(paths: &RegistryPaths) -> Result<(), Failure> {
    let absolute = |p: &Path| std::path::absolute(p).map(|a| a.components().collect::<PathBuf>());
    let same_name = matches!(
        (absolute(&paths.lease), absolute(&paths.document)),
        (Ok(a), Ok(b)) if a == b
    );
    let same_file = match (paths.lease.canonicalize(), paths.document.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same_name || same_file {
        return Err(Failure::usage(format!(
            "--lease-path {}: is the registry document itself; choose another lock file (default: beside it, {})",
            paths.lease.display(),
            leasehold_stores::registry::LEASE
        )));
    }
    Ok(())
}

fn default_home() -> Result<PathBuf, Failure> {
    if let Some(h) = std::env::var_os("LEASEHOLD_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(Path::new(&h).join(".leasehold")),
        None => Err(Failure::usage(
            "registry: no home directory: set LEASEHOLD_HOME or HOME, or pass --home",
        )),
    }
}

fn one_shot(registry: &Registry, timeout: Option<Duration>, op: Op) -> Outcome {
    // Input errors first: they do not depend on who holds the registry.
    if let Op::Add { primary, root } = &op {
        for p in [primary, root] {
            existing_dir(p).map_err(|e| Failure::of(&e))?;
        }
    }
    let interrupts = Interrupts::install()?;
    let stdout = crate::out::Stdout::new();
    if let Err(failure) = acquire(registry, timeout, &interrupts) {
        if let (Op::List { json: true }, false) = (&op, failure.class == ErrorClass::Cancelled) {
            stdout.line(json!({"state": state_name(&registry.state()), "scope": {}}));
        }
        return Err(failure);
    }
    let done = match &op {
        Op::Add { primary, root } => registry.add(primary, root),
        Op::Remove { primary, root } => registry.remove(primary, root),
        Op::List { json: true } => {
            stdout.line(json!({"state": "active", "scope": scope_json(&registry.scope())}));
            Ok(())
        }
        Op::List { json: false } => {
            print_list(&stdout, &registry.scope());
            Ok(())
        }
        Op::Serve => Ok(()),
    };
    registry.teardown();
    done.map_err(|e| failure(&e))?;
    // The listing is printed before the teardown; a failed write is reported after it.
    stdout.finish().map(|()| OK).map_err(Failure::from)
}

/// Acquires the authority within `--timeout` (default: try once), saying once on stderr,
/// after about a second, that it is waiting and for whom (see [`Wait`]). Contention says
/// "registry is held by another process (pid N)", how long it waited and which option
/// waits longer.
fn acquire(
    registry: &Registry,
    timeout: Option<Duration>,
    interrupts: &Interrupts,
) -> Result<(), Failure> {
    let wait = Wait::up_to(timeout.unwrap_or(Duration::ZERO), interrupts.token());
    let budget = wait.lease_budget(|e: &leasehold::Error| {
        e.is_contended().then(|| {
            let who = e.holders().map_or("another process".into(), |h| h.who());
            format!("the registry, held by {who}")
        })
    });
    registry.acquire(&budget).map_err(|e| match e.class() {
        ErrorClass::Contended => Failure::of_with(&e, &wait.gave_up()),
        _ => failure(&e),
    })
}

/// Each primary root on a line, each of its granted roots below it, indented.
fn print_list(stdout: &crate::out::Stdout, scope: &Scope) {
    let mut text = String::new();
    for (primary, roots) in scope {
        text.push_str(&format!("{}\n", primary.display()));
        for r in roots {
            text.push_str(&format!("  {}\n", r.display()));
        }
    }
    stdout.print(&text);
}

fn state_name(s: &State) -> &'static str {
    match s {
        State::Active => "active",
        State::Contended => "contended",
        State::StorageFailed { .. } => "storage-failed",
    }
}

fn scope_json(scope: &Scope) -> Value {
    let map: Map<String, Value> = scope
        .iter()
        .map(|(p, roots)| {
            let roots: Vec<Value> = roots
                .iter()
                .map(|r| Value::String(r.to_string_lossy().into_owned()))
                .collect();
            (p.to_string_lossy().into_owned(), Value::Array(roots))
        })
        .collect();
    Value::Object(map)
}

/// The longest request line read; a longer one is answered `invalid-request` and skipped.
const MAX_REQUEST: usize = 1 << 20;

/// What the request reader produced next.
enum Input {
    /// One request line (without its newline), possibly not UTF-8.
    Line(Vec<u8>),
    /// A line longer than [`MAX_REQUEST`] (its bytes were dropped).
    TooLong,
    /// SIGTERM/SIGINT arrived, or stdin ended.
    Stop,
}

/// Reads stdin one request at a time, on the serving thread itself: nothing is read ahead
/// of the request being answered beyond one chunk, so a writer that floods stdin is held
/// back by the pipe (back-pressure) instead of filling our memory, and a stop signal is
/// seen before the next request, not after the whole backlog.
#[cfg(unix)]
struct Requests {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
    /// Dropping the rest of an over-long line.
    skipping: bool,
    eof: bool,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    wake: std::os::unix::net::UnixStream,
}

#[cfg(unix)]
impl Requests {
    fn new() -> Result<Requests, Failure> {
        let fail =
            |e: std::io::Error| Failure::failed(format!("cannot install signal handler: {e}"));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (wake, poke) = std::os::unix::net::UnixStream::pair().map_err(fail)?;
        poke.set_nonblocking(true).map_err(fail)?;
        wake.set_nonblocking(true).map_err(fail)?;
        for sig in [SIGTERM, SIGINT] {
            signal_hook::flag::register(sig, stop.clone()).map_err(fail)?;
            signal_hook::low_level::pipe::register(sig, poke.try_clone().map_err(fail)?)
                .map_err(fail)?;
        }
        Ok(Requests {
            buf: Vec::new(),
            scanned: 0,
            skipping: false,
            eof: false,
            stop,
            wake,
        })
    }

    fn stopped(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn next(&mut self) -> Result<Input, Failure> {
        use std::os::fd::AsFd;
        loop {
            if self.stopped() {
                return Ok(Input::Stop);
            }
            if let Some(pos) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                let end = self.scanned + pos;
                let mut line: Vec<u8> = self.buf.drain(..=end).collect();
                line.pop();
                self.scanned = 0;
                if std::mem::take(&mut self.skipping) {
                    continue;
                }
                // The newline may come in the chunk that took the line past the limit.
                if line.len() > MAX_REQUEST {
                    return Ok(Input::TooLong);
                }
                return Ok(Input::Line(line));
            }
            self.scanned = self.buf.len();
            if self.buf.len() > MAX_REQUEST {
                self.buf.clear();
                self.scanned = 0;
                if !std::mem::replace(&mut self.skipping, true) {
                    return Ok(Input::TooLong);
                }
            }
            if self.eof {
                if self.buf.is_empty() || self.skipping {
                    return Ok(Input::Stop);
                }
                self.scanned = 0;
                return Ok(Input::Line(std::mem::take(&mut self.buf)));
            }
            let stdin = std::io::stdin();
            let fds = [stdin.as_fd(), self.wake.as_fd()];
            let mut polled = fds.map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN));
            match rustix::event::poll(&mut polled, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(Failure::failed(format!("reading stdin: {e}"))),
            }
            if polled[0].revents().is_empty() {
                continue; // woken by a signal: the flag is checked at the top
            }
            let mut chunk = [0u8; 64 << 10];
            match rustix::io::read(stdin.as_fd(), &mut chunk) {
                Ok(0) => self.eof = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(rustix::io::Errno::INTR) | Err(rustix::io::Errno::AGAIN) => {}
                Err(e) => return Err(Failure::failed(format!("reading stdin: {e}"))),
            }
        }
    }
}

#[cfg(unix)]
fn serve(registry: &Registry) -> Outcome {
    // SIGTERM/SIGINT only raise a flag: the request being handled finishes first.
    let mut requests = Requests::new()?;
    // Contended or failed is a state to report, not a reason to exit: serve never waits.
    let _ = registry.acquire(&Budget::no_wait());
    answer_all(registry, || requests.next())
}

/// Windows: stdin is read on a thread into a one-slot channel (the reader blocks until the
/// request before it was taken: back-pressure), and console control events (`ctrlc`:
/// `SetConsoleCtrlHandler`) raise a stop seen before the next request.
#[cfg(windows)]
fn serve(registry: &Registry) -> Outcome {
    use std::io::BufRead;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (tx, rx) = std::sync::mpsc::sync_channel::<Input>(1);
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    {
        let (stop, tx) = (stop.clone(), tx.clone());
        ctrlc::set_handler(move || {
            stop.store(true, Ordering::SeqCst);
            let _ = tx.try_send(Input::Stop);
        })
        .map_err(|e| Failure::failed(format!("cannot install console control handler: {e}")))?;
    }
    let _ = registry.acquire(&Budget::no_wait());
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    let input = match line.len() > MAX_REQUEST {
                        true => Input::TooLong,
                        false => Input::Line(line),
                    };
                    if tx.send(input).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Input::Stop);
    });
    answer_all(registry, || {
        Ok(match rx.recv() {
            Ok(input) if !stop.load(Ordering::SeqCst) => input,
            _ => Input::Stop,
        })
    })
}

/// Answers one input after the other from `next` until it says stop (EOF, a signal, a
/// console event), fails, or nobody reads the answers any more; then tears down (drain,
/// close, release). The one loop both platforms' `serve` run. An answer that could not be
/// written (a full disk, not a reader that went away) fails the verb after the teardown.
fn answer_all(registry: &Registry, mut next: impl FnMut() -> Result<Input, Failure>) -> Outcome {
    let stdout = crate::out::Stdout::new();
    let outcome = loop {
        let input = match next() {
            Err(e) => break Err(e),
            Ok(input) => input,
        };
        let Some(answer) = respond(registry, input) else {
            break Ok(OK);
        };
        let Some(answer) = answer else { continue };
        if !stdout.line(answer) {
            break Ok(OK); // nobody is listening any more: tear down as on EOF
        }
    };
    registry.teardown();
    let outcome = outcome?;
    stdout.finish()?;
    Ok(outcome)
}

/// What one input asks of `serve`: `None` to stop, `Some(None)` to skip (a blank line),
/// `Some(Some(answer))` to answer.
fn respond(registry: &Registry, input: Input) -> Option<Option<Value>> {
    Some(Some(match input {
        Input::Stop => return None,
        Input::TooLong => {
            let msg = format!("a request line is at most {MAX_REQUEST} bytes");
            answer(registry, Some(bad_request(&msg)))
        }
        Input::Line(bytes) => match String::from_utf8(bytes) {
            Ok(line) if line.trim().is_empty() => return Some(None),
            Ok(line) => handle(registry, &line),
            Err(_) => answer(registry, Some(bad_request("a request line is not UTF-8"))),
        },
    }))
}

/// Answers one request line with one JSON value.
fn handle(registry: &Registry, line: &str) -> Value {
    let request: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        _ => return answer(registry, Some(bad_request("a request is one JSON object"))),
    };
    let op = request.get("op").and_then(Value::as_str).unwrap_or("");
    if op == "refresh" {
        // Look at the state first: an authority whose etcd grant ran out meanwhile (a short
        // outage) withdraws then, so refresh really tries again instead of finding itself
        // still "active"; and ok means active.
        let _ = registry.state();
        let refreshed = registry.refresh().and_then(|()| registry.ensure_active());
        return answer(registry, refreshed.err().map(|e| error_of(&e)));
    }
    if !matches!(op, "add" | "remove" | "list") {
        let msg = format!("unknown op {op:?}: expected add, remove, list or refresh");
        return answer(registry, Some(bad_request(&msg)));
    }
    // Not active: every request but refresh is refused, list included (fail closed).
    if let Err(e) = registry.ensure_active() {
        return answer(registry, Some(error_of(&e)));
    }
    if op == "list" {
        return answer(registry, None);
    }
    let path = |field: &str| {
        request
            .get(field)
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| {
                (
                    "invalid-root",
                    format!("invalid-root: request needs {field:?} as a string path"),
                )
            })
    };
    let (primary, root) = match (path("primary"), path("root")) {
        (Ok(p), Ok(r)) => (p, r),
        (Err(e), _) | (_, Err(e)) => return answer(registry, Some(e)),
    };
    let done = if op == "add" {
        registry.add(&primary, &root)
    } else {
        registry.remove(&primary, &root)
    };
    answer(registry, done.err().map(|e| error_of(&e)))
}

fn bad_request(msg: &str) -> (&'static str, String) {
    ("invalid-request", format!("invalid-request: {msg}"))
}

fn error_of(e: &RegistryError) -> (&'static str, String) {
    (e.code(), message(e))
}

/// A registry error with its class's status and its message in this tool's terms
/// ([`message`]).
fn failure(e: &RegistryError) -> Failure {
    Failure::new(e.class(), message(e))
}

/// A registry error's message; a lease's refusal names the settings that opt out of it as
/// this tool's user sets them ([`crate::env::opt_in`]).
fn message(e: &RegistryError) -> String {
    match e {
        RegistryError::Lease(lease) => {
            format!("registry lease: {}", lease.worded(crate::env::opt_in))
        }
        other => other.to_string(),
    }
}

/// The response: ok, the state after the request, the scope ({} unless active), and the
/// error code and message when the request was refused.
fn answer(registry: &Registry, error: Option<(&'static str, String)>) -> Value {
    let mut v = json!({
        "ok": error.is_none(),
        "state": state_name(&registry.state()),
        "scope": scope_json(&registry.scope()),
    });
    if let Some((code, message)) = error {
        v["error"] = json!(code);
        v["message"] = json!(message);
    }
    v
}
