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

use leasehold::LeaseOptions;

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
