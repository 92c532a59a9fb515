//! The `leasehold` command-line tool: leasehold's kernel leases and stores for shell scripts
//! and operators.
//!
//! Its surface is the black-box contract in `cli-contract.md`, which the tests under `tests/`
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
//! * `registry`, `session`, `results` — the stores of `leasehold-stores`: the multi-root
//!   workspace registry under a store-wide authority, append-only session logs, and
//!   isolated results under per-ID leases.
//! * `torture`, `bench` — measure the claims: crash torture with SIGKILLed workers, and
//!   latencies and costs against kernel floors measured in the same run.
//!
//! `env` maps the opt-in environment variables to lease options; `exit` maps errors to the contract's statuses and prints them; `out` writes stderr lines in one `write` each and treats a closed stdout as
//! the end of output; `signals` turns SIGINT and
//! SIGTERM into cancellation of a wait. Where a verb needs what the platform lacks (`bench` on
//! macOS and the BSDs: `/proc`; `flock` outside Linux: `pidfd_getfd`), it says it is not
//! available (`cmd/unsupported.rs`); `cmd/platform.rs` is the one seam that lets `bench` and
//! `torture` run their worker processes on POSIX and Windows alike. Being a binary, this crate has no public
//! API: the library is `leasehold`, the stores are `leasehold-stores`.
#![deny(unsafe_code)]

mod cmd;
mod env;
mod exit;
mod out;
mod signals;
mod wait;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Flock(args) => cmd::flock::main(args),
        Command::Run(args) => cmd::run::main(args),
        Command::Status(args) => cmd::status::main(args),
        Command::Bench(args) => cmd::bench::main(args),
        Command::Registry(args) => cmd::registry::main(args),
        Command::Results(args) => cmd::results::main(args),
        Command::Session(args) => cmd::session::main(args),
        Command::Torture(args) => cmd::torture::main(args),
        Command::Worker(args) => cmd::worker::main(args),
        Command::ExecWithParentDeathSignal(args) => cmd::etcd::exec(args),
    };
    finish(outcome)
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
