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
pub mod platform;
pub mod registry;
pub mod results;
pub mod run;
pub mod session;
pub mod status;
pub mod torture;
pub mod worker;

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
