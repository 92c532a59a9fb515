//! The `leasehold` command-line tool. Its surface is specified in `cli-contract.md`; every
//! error is one line on stderr starting with `leasehold: `, and the exit statuses are the
//! contract's (0, 1, 2, 75).

mod cmd;
mod exit;
mod signals;

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
    /// Run COMMAND while holding an exclusive lease on LOCKFILE.
    Run(cmd::run::RunArgs),
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
    /// Internal (`run --etcd`): arm the parent-death signal, then exec COMMAND.
    #[command(name = "_exec-with-parent-death-signal", hide = true)]
    ExecWithParentDeathSignal(cmd::etcd::ExecArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Run(args) => cmd::run::main(args),
        Command::Status(args) => cmd::status::main(args),
        Command::Bench(args) => cmd::bench::main(args),
        Command::Registry(args) => cmd::registry::main(args),
        Command::Results(args) => cmd::results::main(args),
        Command::Session(args) => cmd::session::main(args),
        Command::Torture(args) => cmd::torture::main(args),
        Command::ExecWithParentDeathSignal(args) => cmd::etcd::exec(args),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            failure.print();
            ExitCode::from(failure.code)
        }
    }
}
