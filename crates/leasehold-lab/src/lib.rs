//! The lab of the `leasehold` command-line tool: `leasehold bench` (lease costs and waiter
//! latencies against kernel floors measured in the same run) and `leasehold torture` (crash
//! torture with SIGKILLed workers, checking exclusion and the stores' durability).
//!
//! Internal, with no stable API: the CLI (`crates/leasehold-cli`) is its only user and keeps
//! `bench`, `torture` and the hidden `worker bench|torture` as thin verbs over
//! [`bench`](mod@bench) and [`torture`]. Their workers are the `leasehold` binary re-executed
//! ([`platform::worker_command`]), so the lab runs only inside that binary.
//!
//! What the CLI and the lab share lives here, below both: [`platform`] (how a worker is
//! started, timed and killed; `run --etcd` starts its supervisor the same way),
//! [`env`](mod@env) (the environment's opt-ins as lease options) and [`parse_secs`]. A failure of the lab is an
//! [`exit::Failure`] (a class and a message), which the CLI turns into its exit status and
//! its one line on stderr.
#![deny(unsafe_code)]
// Its docs are read with the private items (`cargo doc -p leasehold-lab
// --document-private-items`): the modules' overviews link to the items they describe.
#![allow(rustdoc::private_intra_doc_links)]

// The bench reads /proc and thread ids on POSIX: Linux and Windows (its own floors), not
// macOS and the BSDs.
#[cfg(any(target_os = "linux", windows))]
pub mod bench;
pub mod env;
pub mod exit;
pub mod platform;
#[cfg(all(feature = "etcd", unix))]
mod private_etcd;
mod sync;
pub mod torture;

use std::time::Duration;

/// Parses a wait budget in seconds: a non-negative decimal number.
pub fn parse_secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("'{s}' is not a non-negative number of seconds"));
    }
    Duration::try_from_secs_f64(v).map_err(|_| format!("'{s}' is too large"))
}
