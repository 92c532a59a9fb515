//! `leasehold results`: the isolated result store (stage, inspect, publish, apply, discard,
//! abort, sweep, gc of lock files, list pending) in a managed root.
//!
//! Every verb but `pending` holds the ID's operation lease from admission through
//! reinspection, mutation and cleanup; the wait is bounded by `--timeout` (30 s by default),
//! and SIGINT/SIGTERM stop a wait promptly with nothing changed. Once admitted, `stage`,
//! `apply`, `discard` and `abort` stop at the next file boundary on SIGINT/SIGTERM, leaving
//! the store consistent, say on one line what they did, and exit 130/143.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold::{Classify, ErrorClass};
use leasehold_stores::results::{ResultError, ResultStore};

use crate::exit::{Failure, OK, Outcome};
use crate::signals::Interrupts;
use crate::wait::Wait;

/// The wait for an ID's lease when `--timeout` is not given.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Args, Debug)]
pub struct ResultsArgs {
    /// The managed root (default: $LEASEHOLD_HOME/results, else ~/.leasehold/results).
    #[arg(long, value_name = "DIR", global = true)]
    root: Option<PathBuf>,
    /// Wait at most SECS seconds for the ID's operation lease (default 30).
    #[arg(long, value_name = "SECS", value_parser = super::parse_secs, global = true)]
    timeout: Option<Duration>,
    /// Print JSON (paths, pending, sweep).
    #[arg(long, global = true)]
    json: bool,
    /// Where the root's mount keeps kernel locks on each host (NFS with local_lock=all or
    /// nolock, SMB with nobrl, sshfs, bindfs and other FUSE): each ID's operation holds a
    /// record lease with a TTL of SECS seconds (at least 0.03) instead of refusing (gc is
    /// refused there); elsewhere the kernel lease, as without it. The flag form of
    /// LEASEHOLD_SHARED_MOUNT=record:SECS, which it overrides.
    #[arg(long, value_name = "SECS", global = true)]
    ttl: Option<String>,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand, Debug)]
enum Verb {
    /// Create a candidate holding a copy of the files under SRC.
    Stage {
        /// The result ID (trimmed).
        id: String,
        /// The directory whose files are proposed.
        #[arg(long, value_name = "SRC")]
        from: PathBuf,
    },
    /// List the relative paths the result would change; an empty result is removed.
    Paths {
        /// The result ID.
        id: String,
    },
    /// Inspect and publish the result.
    Finish {
        /// The result ID.
        id: String,
    },
    /// Write the candidate's files into TARGET, then remove candidate and publication.
    Apply {
        /// The result ID.
        id: String,
        /// The directory to write into.
        #[arg(long, value_name = "TARGET")]
        to: PathBuf,
    },
    /// Remove the candidate and its publication.
    Discard {
        /// The result ID.
        id: String,
    },
    /// Abandon the result: remove candidate and publication unless another process owns it.
    Abort {
        /// The result ID.
        id: String,
    },
    /// Remove results older than SECS; busy IDs are skipped, never waited for.
    Sweep {
        /// Minimum age in seconds (decimals allowed).
        #[arg(long, value_name = "SECS", value_parser = super::parse_secs)]
        older_than: Duration,
    },
    /// Remove lock files of IDs with no candidate and no publication that nobody holds;
    /// never waits (held lock files are kept).
    Gc {
        /// Only lock files older than SECS (by modification time).
        #[arg(long, value_name = "SECS", value_parser = super::parse_secs, default_value = "0")]
        older_than: Duration,
    },
    /// List published results (read-only).
    Pending,
}

pub fn main(args: ResultsArgs) -> Outcome {
    let root = match args.root {
        Some(root) => root,
        None => default_root()?,
    };
    let options = crate::env::record_lease_options(args.ttl.as_deref()).map_err(Failure::usage)?;
    let interrupts = Interrupts::install()?;
    let wait = Wait::up_to(args.timeout.unwrap_or(DEFAULT_TIMEOUT), interrupts.token());
    // The CLI's wait is the whole budget: no cap of the store's own on top of it.
    let store = ResultStore::new(root)
        .max_wait(None)
        .with_lease_options(options);
    // One acquisition of the ID's lease per operation, which says the notice itself
    // (`Wait::lease_budget`).
    let waited = |id: &str, op: &dyn Fn(&leasehold::Budget) -> Result<(), ResultError>| {
        let id = id.to_string();
        op(&wait.lease_budget(move |e: &leasehold::Error| {
            e.is_contended().then(|| {
                let holders = e.holders().map(ToString::to_string).unwrap_or_default();
                format!("result {id:?}: held by another process{holders}")
            })
        }))
    };
    let json = args.json;
    // Printed from inside the work (`paths` under the ID's lease); a failed write is
    // reported once the work is done (see `out::Stdout`).
    let stdout = crate::out::Stdout::new();
    let done = match args.verb {
        Verb::Stage { id, from } => waited(&id, &|b| store.stage(&id, &from, b).map(drop)),
        Verb::Paths { id } => waited(&id, &|b| store.paths(&id, b).map(|p| print_paths(&stdout, &p, json))),
        Verb::Finish { id } => waited(&id, &|b| store.finish(&id, b).map(drop)),
        Verb::Apply { id, to } => waited(&id, &|b| store.apply(&id, &to, b).map(drop)),
        Verb::Discard { id } => waited(&id, &|b| store.discard(&id, b)),
        Verb::Abort { id } => waited(&id, &|b| store.abort(&id, b)),
        Verb::Pending => store.pending().map(|p| print_list(&stdout, &p, json)),
        Verb::Gc { older_than } => store.gc(older_than).map(|report| {
            let text = if json {
                format!(
                    "{}\n",
                    serde_json::json!({"removed": report.removed, "kept": report.kept})
                )
            } else {
                format!(
                    "removed {} lock file(s), kept {}\n",
                    report.removed, report.kept
                )
            };
            // A reader that went away ends the output (the collection is done).
            stdout.print(&text);
            if report.busy {
                crate::out::error_line(
                    "gc: another collection kept the lock namespace, so this one stopped part-way; what it did not examine was kept (run gc again)",
                );
            }
        }),
        Verb::Sweep { older_than } => store.sweep(older_than).map(|report| {
            let text = if json {
                format!("{}\n", serde_json::json!(report))
            } else {
                let removed = report.removed.iter().map(|id| format!("removed {id}\n"));
                let skipped = (report.skipped.iter()).map(|id| format!("skipped {id} (busy)\n"));
                removed.chain(skipped).collect()
            };
            // The sweep has happened: a reader that went away loses only the report.
            stdout.print(&text);
            for (id, why) in &report.failed {
                crate::out::error_line(&format!("sweep left {id:?} as it was: {why}"));
            }
        }),
    };
    match done {
        Ok(()) => stdout.finish().map(|()| OK).map_err(Failure::from),
        Err(e) if e.class() == ErrorClass::Contended => Err(Failure::of_with(&e, &wait.gave_up())),
        Err(e @ ResultError::Stopped { .. }) => {
            // A signal stopped the operation part-way. Unlike a cancelled
            // wait, which changed nothing and exits silently, it says what it did and what is
            // left; the status is still the signal's (130/143).
            crate::out::error_line(&e.to_string());
            Err(Failure::of(&e))
        }
        // The lease's own refusal, in the CLI's words (the options it names are ours).
        Err(ResultError::Lock(e)) => Err(Failure::lease(&e)),
        Err(e) => Err(Failure::of(&e)),
    }
}

/// Relative paths one per line, or a JSON array. A path that a line could not carry
/// unambiguously (a control character such as a newline, a backslash, or a leading `"`) is
/// printed as a JSON string literal — `"` … `"` with JSON escapes — so every line is one path
/// and a quoted line is never also a plain path.
fn print_paths(stdout: &crate::out::Stdout, paths: &[String], json: bool) {
    if json {
        return print_list(stdout, paths, json);
    }
    let quoted: Vec<String> = paths
        .iter()
        .map(|p| {
            if p.starts_with('"') || p.chars().any(|c| c.is_control() || c == '\\') {
                serde_json::json!(p).to_string()
            } else {
                p.clone()
            }
        })
        .collect();
    print_list(stdout, &quoted, false);
}

/// One item per line, or a JSON array; a reader that went away ends the output (EPIPE is
/// not a failure: the verb's work is done).
fn print_list(stdout: &crate::out::Stdout, items: &[String], json: bool) {
    let text = if json {
        format!("{}\n", serde_json::json!(items))
    } else {
        items.iter().map(|i| format!("{i}\n")).collect()
    };
    stdout.print(&text);
}

/// `$LEASEHOLD_HOME/results`, else `~/.leasehold/results`.
fn default_root() -> Result<PathBuf, Failure> {
    if let Some(home) = std::env::var_os("LEASEHOLD_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(home).join("results"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".leasehold").join("results")),
        None => Err(Failure::usage(
            "results: neither LEASEHOLD_HOME nor HOME is set; pass --root DIR",
        )),
    }
}
