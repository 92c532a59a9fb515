//! `leasehold results`: the isolated result store (stage, inspect, publish, apply, discard,
//! abort, sweep, list pending) in a managed root.
//!
//! Every verb but `pending` holds the ID's operation lease from admission through
//! reinspection, mutation and cleanup; the wait is bounded by `--timeout` (30 s by default),
//! and SIGINT/SIGTERM stop a wait promptly with nothing changed.

use std::path::PathBuf;
use std::time::Duration;

use super::NOTICE_AFTER;
use clap::{Args, Subcommand};
use leasehold::Budget;
use leasehold_stores::results::{ErrorClass, ResultError, ResultStore};

use crate::exit::{Failure, OK, Outcome};
use crate::signals::Interrupts;

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
    /// List published results (read-only).
    Pending,
}

pub fn main(args: ResultsArgs) -> Outcome {
    let root = match args.root {
        Some(root) => root,
        None => default_root()?,
    };
    let interrupts = Interrupts::install()?;
    let budget = Budget::timeout(args.timeout.unwrap_or(DEFAULT_TIMEOUT))
        .with_cancel(interrupts.token().clone());
    let store = ResultStore::new(root)
        .max_wait(None)
        .on_wait(NOTICE_AFTER, |id, e| {
            let holders = e.holders().map(ToString::to_string).unwrap_or_default();
            eprintln!("leasehold: waiting for result {id:?}: held by another process{holders}");
        });
    let fail = |e: ResultError| match e.class() {
        ErrorClass::Cancelled => Ok(interrupts.exit_code()),
        ErrorClass::Usage => Err(Failure::usage(e)),
        ErrorClass::Contended => Err(Failure::contended(e)),
        ErrorClass::Failure => Err(Failure::failed(e)),
    };
    let json = args.json;
    let done = match args.verb {
        Verb::Stage { id, from } => store.stage(&id, &from, &budget).map(drop),
        Verb::Paths { id } => store.paths(&id, &budget).map(|p| print_list(&p, json)),
        Verb::Finish { id } => store.finish(&id, &budget).map(drop),
        Verb::Apply { id, to } => store.apply(&id, &to, &budget).map(drop),
        Verb::Discard { id } => store.discard(&id, &budget),
        Verb::Abort { id } => store.abort(&id, &budget),
        Verb::Pending => store.pending().map(|p| print_list(&p, json)),
        Verb::Sweep { older_than } => store.sweep(older_than).map(|report| {
            if json {
                println!("{}", serde_json::json!(report));
            } else {
                report
                    .removed
                    .iter()
                    .for_each(|id| println!("removed {id}"));
                report
                    .skipped
                    .iter()
                    .for_each(|id| println!("skipped {id} (busy)"));
            }
            for (id, why) in &report.failed {
                eprintln!("leasehold: sweep left {id:?} as it was: {why}");
            }
        }),
    };
    match done {
        Ok(()) => Ok(OK),
        Err(e) => fail(e),
    }
}

/// One item per line, or a JSON array.
fn print_list(items: &[String], json: bool) {
    if json {
        println!("{}", serde_json::json!(items));
    } else {
        items.iter().for_each(|i| println!("{i}"));
    }
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
