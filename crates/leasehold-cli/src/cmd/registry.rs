//! `leasehold registry`: the multi-root workspace registry, under a store-wide authority.
//!
//! One-shot verbs (`add`, `remove`, `list`) acquire the authority (waiting up to `--timeout`,
//! default: try once), do their one thing, and tear down — releasing the lease only after
//! the write is durable. `serve` is long-lived: it tries once at start and never waits,
//! answers one JSON line per request line, and on EOF or SIGTERM drains, closes the store
//! and releases the lease before exiting 0. Requests are handled one at a time on the main
//! thread; a signal only queues a stop behind the request being handled, so SIGTERM never
//! interrupts a write. On Windows the stops are the console's control events (Ctrl-C,
//! Ctrl-Break, closing the console window, logoff, shutdown); for the last three Windows ends
//! the process soon after it is told, so teardown there is best effort — the kernel destroys
//! the lease object with the process anyway, and every answered mutation is already durable.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold::{Budget, ErrorClass};

use leasehold::patterns::authority::State;
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths, Scope, existing_dir};
use serde_json::{Map, Value, json};

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
    #[command(subcommand)]
    op: Op,
}

#[derive(Subcommand, Debug)]
enum Op {
    /// Grant ROOT to PRIMARY (both existing directories).
    Add { primary: PathBuf, root: PathBuf },
    /// Withdraw ROOT from PRIMARY (either may no longer exist).
    Remove { primary: PathBuf, root: PathBuf },
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
    let home = match args.home {
        Some(h) => h,
        None => default_home()?,
    };
    let registry = Registry::new(RegistryPaths::in_home(&home, args.lease_path));
    match args.op {
        Op::Serve => serve(&registry),
        op => one_shot(&registry, args.timeout, op),
    }
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
    if let Err(failure) = acquire(registry, timeout, &interrupts) {
        if let (Op::List { json: true }, false) = (&op, failure.class == ErrorClass::Cancelled) {
            print_line(&json!({"state": state_name(&registry.state()), "scope": {}}));
        }
        return Err(failure);
    }
    let done = match &op {
        Op::Add { primary, root } => registry.add(primary, root),
        Op::Remove { primary, root } => registry.remove(primary, root),
        Op::List { json: true } => {
            print_line(&json!({"state": "active", "scope": scope_json(&registry.scope())}));
            Ok(())
        }
        Op::List { json: false } => {
            print_list(&registry.scope());
            Ok(())
        }
        Op::Serve => Ok(()),
    };
    registry.teardown();
    done.map(|()| OK).map_err(|e| Failure::of(&e))
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
    let held_by = |e: &RegistryError| match e {
        RegistryError::Contended { holders } => {
            Some(format!("the registry, held by another process{holders}"))
        }
        _ => None,
    };
    wait.run(|budget| registry.acquire(budget), held_by)
        .map_err(|e| match e.class() {
            ErrorClass::Contended => Failure::of_with(&e, &wait.gave_up()),
            _ => Failure::of(&e),
        })
}

fn print_list(scope: &Scope) {
    let mut out = std::io::stdout().lock();
    for (primary, roots) in scope {
        let _ = writeln!(out, "{}", primary.display());
        for r in roots {
            let _ = writeln!(out, "  {}", r.display());
        }
    }
}

fn print_line(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
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

enum Input {
    Line(String),
    Stop,
}

fn serve(registry: &Registry) -> Outcome {
    let (tx, rx) = mpsc::channel();
    // SIGTERM/SIGINT (Windows: console control events) only queue a stop: the request being
    // handled finishes first.
    on_stop_request(tx.clone())?;
    // Contended or failed is a state to report, not a reason to exit: serve never waits.
    let _ = registry.acquire(&Budget::no_wait());
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(Input::Line(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(Input::Stop);
    });
    let mut out = std::io::stdout().lock();
    for input in rx {
        let Input::Line(line) = input else { break };
        if line.trim().is_empty() {
            continue;
        }
        let answer = handle(registry, &line);
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break; // nobody is listening any more: tear down as on EOF
        }
    }
    registry.teardown();
    Ok(OK)
}

/// Queues [`Input::Stop`] on SIGTERM or SIGINT.
#[cfg(unix)]
fn on_stop_request(stop: mpsc::Sender<Input>) -> Result<(), Failure> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| Failure::failed(format!("cannot install signal handler: {e}")))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = stop.send(Input::Stop);
        }
    });
    Ok(())
}

/// Queues [`Input::Stop`] on any console control event (Ctrl-C, Ctrl-Break, close, logoff,
/// shutdown: `SetConsoleCtrlHandler` through the `ctrlc` crate).
#[cfg(windows)]
fn on_stop_request(stop: mpsc::Sender<Input>) -> Result<(), Failure> {
    ctrlc::set_handler(move || {
        let _ = stop.send(Input::Stop);
    })
    .map_err(|e| Failure::failed(format!("cannot install console control handler: {e}")))
}

/// Answers one request line with one JSON value.
fn handle(registry: &Registry, line: &str) -> Value {
    let request: Value = match serde_json::from_str(line) {
        Ok(v @ Value::Object(_)) => v,
        _ => return answer(registry, Some(bad_request("a request is one JSON object"))),
    };
    let op = request.get("op").and_then(Value::as_str).unwrap_or("");
    if op == "refresh" {
        return answer(registry, registry.refresh().err().map(|e| error_of(&e)));
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
    (e.code(), e.to_string())
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
