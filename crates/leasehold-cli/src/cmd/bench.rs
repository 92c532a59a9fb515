//! `leasehold bench`: the lab's benchmark (`crates/leasehold-lab/src/bench/`), its failure
//! reported as every verb's.

pub use leasehold_lab::bench::{BenchArgs, WorkerArgs};

use crate::exit::{Failure, Outcome};

/// Runs `leasehold bench`.
pub fn main(args: BenchArgs) -> Outcome {
    leasehold_lab::bench::main(args).map_err(Failure::from)
}

/// Runs one worker of a running `leasehold bench`.
pub fn worker(args: &WorkerArgs) -> Outcome {
    leasehold_lab::bench::worker(args).map_err(Failure::from)
}
