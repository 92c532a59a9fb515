//! The environment's opt-ins, mapped to [`LeaseOptions`] once for every verb.
//!
//! * `LEASEHOLD_ALLOW_NETWORK_FS=1` — accept lock files on network, FUSE and overlay file
//!   systems ([`LeaseOptions::allow_network_filesystem`]); refused by default because
//!   `flock` there can hang or fail to exclude.
//! * `LEASEHOLD_ALLOW_SHARED=1` — accept lock files, directories and documents that another
//!   user owns or that group/others may write ([`LeaseOptions::allow_shared_state`]);
//!   refused by default because whoever may replace them can break exclusion.
//!
//! Any other value (unset, empty, `0`) leaves the default.

use leasehold::{LeaseOptions, OptIn};

/// Whether the environment variable `name` is set to `1`.
fn on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| v == "1")
}

/// The lease options the environment asks for.
pub fn lease_options() -> LeaseOptions {
    LeaseOptions::new()
        .allow_network_filesystem(on("LEASEHOLD_ALLOW_NETWORK_FS"))
        .allow_shared_state(on("LEASEHOLD_ALLOW_SHARED"))
}

/// A setting the library names in a refusal, as this tool's user sets it: the CLI's one table
/// of them (the variables above), never a Rust API.
pub fn opt_in(setting: OptIn) -> String {
    match setting {
        OptIn::NetworkFilesystem => "LEASEHOLD_ALLOW_NETWORK_FS=1 in the environment".into(),
        OptIn::SharedState => "LEASEHOLD_ALLOW_SHARED=1 in the environment".into(),
        // The tool runs only where other processes honour locks: nothing to opt into.
        _ => "a single-process lease, which this tool does not offer".into(),
    }
}
