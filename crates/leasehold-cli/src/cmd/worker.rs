//! `leasehold worker VERB ...`: the one hidden entry point through which `bench` and
//! `torture` re-execute this binary as their worker processes, and `run --etcd` as the
//! supervisor of its COMMAND (`etcd-supervisor`) (on POSIX and Windows; what
//! differs between them, and how a worker's command line is made, is the lab's
//! `crates/leasehold-lab/src/platform.rs`).
//! It only dispatches: the verbs import nothing from it. It is not part of the
//! contract (not listed in `--help`), and each verb's worker arguments are its own
//! (the lab's `bench::WorkerArgs`, `torture::WorkerArgs`).

use clap::{Args, Subcommand};

use crate::exit::Outcome;

/// Arguments of `leasehold worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(subcommand)]
    of: Of,
}

/// Whose worker this process is.
#[derive(Subcommand, Debug)]
enum Of {
    /// A worker of a running `leasehold bench`.
    #[cfg(any(target_os = "linux", windows))]
    Bench(super::bench::WorkerArgs),
    /// A worker (or an increment under `run`) of a running `leasehold torture`.
    Torture(super::torture::WorkerArgs),
    /// The supervisor of `run --etcd`'s COMMAND (`etcd/supervisor.rs`).
    #[cfg(all(feature = "etcd", unix))]
    EtcdSupervisor(super::etcd::supervisor::SupervisorArgs),
    /// The first process of COMMAND's PID namespace under that supervisor
    /// (`etcd/namespace.rs`).
    #[cfg(all(feature = "etcd", unix))]
    EtcdNsInit(super::etcd::namespace::NsInitArgs),
}

/// Runs the worker.
pub fn main(args: WorkerArgs) -> Outcome {
    match args.of {
        #[cfg(any(target_os = "linux", windows))]
        Of::Bench(args) => super::bench::worker(&args),
        Of::Torture(args) => super::torture::worker(args),
        #[cfg(all(feature = "etcd", unix))]
        Of::EtcdSupervisor(args) => super::etcd::supervisor::supervise(args),
        #[cfg(all(feature = "etcd", unix))]
        Of::EtcdNsInit(args) => super::etcd::namespace::ns_init(args),
    }
}
