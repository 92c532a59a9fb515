//! One module per verb of the contract.

// The bench reads /proc and thread ids: Linux only.
#[cfg_attr(not(target_os = "linux"), path = "unsupported.rs")]
#[cfg_attr(not(target_os = "linux"), allow(clippy::duplicate_mod))]
pub mod bench;
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
#[cfg_attr(windows, path = "unsupported.rs")]
#[cfg_attr(windows, allow(clippy::duplicate_mod))]
pub mod torture;
#[cfg(unix)] // bench and torture, the verbs with workers, are POSIX-only
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
