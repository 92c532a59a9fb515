//! The `leasehold` command-line tool: leasehold's kernel leases and stores for shell scripts
//! and operators.
//!
//! Its surface is the black-box contract in `docs/cli.md`, which the tests under `tests/`
//! drive through the real binary. Every error is one line on stderr starting with
//! `leasehold: ` that names the path or ID and says what to do, and the exit statuses are the
//! contract's: 0 success, 1 failure, 2 usage error or unusable path/input, 75 (EX_TEMPFAIL)
//! contended; 130/143 when SIGINT/SIGTERM end a wait.
//!
//! The verbs, one module each under `cmd/`:
//!
//! * `run` — run a command while holding an exclusive lease; the command inherits the
//!   lease's descriptor (as with `flock(1)`), so the lease lasts while it lives.
//! * `status` — who holds a lock file, without creating, taking or changing anything.
//! * `flock` — a drop-in for util-linux `flock(1)`, also when the binary is run as `flock`.
//! * `doc` — a document of the user's own: lock-free reads, updates through COMMAND under
//!   the document's lease (COMMAND never holds it), a watch of new versions.
//! * `registry`, `session`, `results` — the stores of `leasehold-stores`: the multi-root
//!   workspace registry under a store-wide authority, append-only session logs, and
//!   isolated results under per-ID leases.
//! * `torture`, `bench` — measure the claims: crash torture with SIGKILLed workers, and
//!   latencies and costs against kernel floors measured in the same run. Thin verbs over the
//!   lab crate (`crates/leasehold-lab`), whose failures `exit` reports as every verb's.
//!
//! `exit` maps errors to the
//! contract's statuses and prints them; `out` is the one writer of both streams (stderr
//! lines in one `write` each; on stdout a reader that went away ends the output and any
//! other failed write is exit 1); `signals` turns SIGINT and SIGTERM into cancellation of a
//! wait. Where a verb needs what the platform lacks (`bench` on
//! macOS and the BSDs: `/proc`; `flock` outside Linux: `pidfd_getfd`), it says it is not
//! available (`cmd/unsupported.rs`); the lab's `platform` module
//! (`crates/leasehold-lab/src/platform.rs`) is the one seam that lets `bench`, `torture` and
//! `run --etcd` run their worker processes on POSIX and Windows alike, and the lab's `env` the
//! one map of the environment's opt-ins to lease options. Being a binary, this crate has no public
//! API: the library is `leasehold`, the stores are `leasehold-stores`.
#![deny(unsafe_code)]

mod cmd;
mod exit;
mod out;
#[cfg(target_os = "linux")]
mod procs;
mod signals;
mod wait;

use std::process::ExitCode;

// The environment's opt-ins: the lab's torture reads them too, so they live below both.
use leasehold_lab::env;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// Cross-process leases over local durable state, arbitrated by the kernel.
#[derive(Parser, Debug)]
#[command(name = "leasehold", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run COMMAND while holding an exclusive (or --shared) lease on LOCKFILE.
    Run(cmd::run::RunArgs),
    /// A drop-in for util-linux flock(1) 2.38 (also when this binary is run as `flock`).
    Flock(cmd::flock::FlockArgs),
    /// Tell whether LOCKFILE is held, and by which pids, without touching it.
    Status(cmd::status::StatusArgs),
    /// Measure lease costs and waiter latencies against kernel floors, on this machine.
    Bench(cmd::bench::BenchArgs),
    /// The multi-root workspace registry, under a store-wide single-writer authority.
    Registry(cmd::registry::RegistryArgs),
    /// Stage, inspect, publish, apply, discard, abort and sweep isolated results.
    Results(cmd::results::ResultsArgs),
    /// Append to or read an append-only JSON-lines session log.
    Session(cmd::session::SessionArgs),
    /// Read, update (under its lease, through COMMAND) or watch a document of your own.
    Doc(cmd::doc::DocArgs),
    /// Crash torture: workers mutate under leases while they are SIGKILLed; checks exclusion.
    Torture(cmd::torture::TortureArgs),
    /// Internal: a worker process of `bench` or `torture` (not part of the contract).
    #[command(hide = true)]
    Worker(cmd::worker::WorkerArgs),
    /// Internal (`run --etcd`): arm the parent-death signal, then exec COMMAND.
    #[command(name = "_exec-with-parent-death-signal", hide = true)]
    ExecWithParentDeathSignal(cmd::etcd::ExecArgs),
}

fn main() -> ExitCode {
    // flock(1)'s argv is its own (getopt-style, options before FILE): it never meets clap.
    #[cfg(unix)]
    {
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        if let Some((args, prog)) = cmd::flock::argv_of(&argv) {
            return finish(cmd::flock::run(args, prog));
        }
    }
    let parsed = command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return not_parsed(e),
    };
    let outcome = match cli.command {
        Command::Flock(args) => cmd::flock::main(args),
        Command::Run(args) => cmd::run::main(args),
        Command::Status(args) => cmd::status::main(args),
        Command::Bench(args) => cmd::bench::main(args),
        Command::Registry(args) => cmd::registry::main(args),
        Command::Results(args) => cmd::results::main(args),
        Command::Session(args) => cmd::session::main(args),
        Command::Doc(args) => cmd::doc::main(args),
        Command::Torture(args) => cmd::torture::main(args),
        Command::Worker(args) => cmd::worker::main(args),
        Command::ExecWithParentDeathSignal(args) => cmd::etcd::exec(args),
    };
    finish(outcome)
}

/// Whether this build has the etcd arbiter (`--features etcd`, on POSIX).
const ETCD_BUILT: bool = cfg!(all(feature = "etcd", unix));

/// The command line clap parses: the derive's, except that a build without etcd says so
/// (a help that lists `--etcd` as if it worked misleads). There `--etcd` and `--etcd-server` are marked as not in this build (using one
/// says how to rebuild), and the options that mean something only with them are hidden.
fn command() -> clap::Command {
    let cli = Cli::command();
    if ETCD_BUILT { cli } else { without_etcd(cli) }
}

/// [`command`]'s marking of the etcd options, in `cmd` and every subcommand below it.
fn without_etcd(cmd: clap::Command) -> clap::Command {
    const MARK: &str = "(not in this build: rebuild with --features etcd)";
    cmd.mut_args(|arg| match arg.get_id().as_str() {
        "etcd" | "etcd_server" | "etcd_run" => {
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            arg.help(format!("{help} {MARK}"))
        }
        "ttl" | "prefix" | "grace" => arg.hide(true),
        _ => arg,
    })
    .mut_subcommands(without_etcd)
}

/// clap's answer when the command line named nothing to run: `--help` or `--version` text
/// (status 0), or a usage error (status 2, with a hint where the mistake is a known one).
///
/// Help and version go through [`out::Stdout`] like every other output: clap's own
/// `exit()` swallows a failed write, so `leasehold --help > /dev/full` exited 0 with the
/// text lost.
fn not_parsed(mut e: clap::Error) -> ExitCode {
    if e.use_stderr() {
        hint_double_dash(&mut e);
        let _ = e.print(); // a failed write to stderr has nowhere left to be reported
        return ExitCode::from(exit::USAGE);
    }
    let stdout = out::Stdout::new();
    stdout.print(&e.render().to_string());
    finish(
        stdout
            .finish()
            .map(|()| exit::OK)
            .map_err(exit::Failure::from),
    )
}

/// `leasehold run LOCKFILE echo hi` (COMMAND without `--` before it) is clap's "unexpected
/// argument 'echo'", which does not say what to do: add the tip that `--` goes before
/// COMMAND. An unexpected
/// argument that looks like an option keeps clap's own tip.
fn hint_double_dash(e: &mut clap::Error) {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument
        || std::env::args_os().nth(1).is_none_or(|verb| verb != "run")
    {
        return;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return;
    };
    if arg.starts_with('-') {
        return;
    }
    let tip =
        format!("COMMAND goes after `--`: leasehold run [OPTIONS] LOCKFILE -- {arg} [ARGS...]");
    e.insert(
        ContextKind::Suggested,
        ContextValue::StyledStrs(vec![tip.into()]),
    );
}

/// The exit status of a verb's outcome, printing its failure.
fn finish(outcome: exit::Outcome) -> ExitCode {
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            failure.print();
            ExitCode::from(failure.code)
        }
    }
}
