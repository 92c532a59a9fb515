//! `leasehold torture`: the lab's crash torture (`crates/leasehold-lab/src/torture/`), its
//! failure reported as every verb's.

pub use leasehold_lab::torture::{TortureArgs, WorkerArgs};

use crate::exit::{Failure, Outcome};

/// Runs `leasehold torture`.
pub fn main(args: TortureArgs) -> Outcome {
    leasehold_lab::torture::main(args).map_err(Failure::from)
}

/// Runs one worker (or one increment under `run`) of a running `leasehold torture`.
pub fn worker(args: WorkerArgs) -> Outcome {
    leasehold_lab::torture::worker(args).map_err(Failure::from)
}
