//! One module per verb of the contract.

// The bench reads /proc and thread ids on POSIX: Linux and Windows (its own floors), not
// macOS and the BSDs.
#[cfg_attr(not(any(target_os = "linux", windows)), path = "unsupported.rs")]
#[cfg_attr(not(any(target_os = "linux", windows)), allow(clippy::duplicate_mod))]
pub mod bench;
pub mod doc;
pub mod etcd;
// flock(2) and inherited descriptors: POSIX only.
#[cfg_attr(windows, path = "unsupported.rs")]
#[cfg_attr(windows, allow(clippy::duplicate_mod))]
pub mod flock;
pub mod registry;
pub mod results;
pub mod run;
pub mod session;
pub mod status;
pub mod torture;
pub mod worker;

/// The wait budgets' parser (`--timeout SECS` and the like), shared with the lab's
/// `torture --seconds`.
pub use leasehold_lab::parse_secs;
