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
//!
//! And, read by the verbs that take a lease on a path — `run`, `doc`, `registry` and
//! `session` ([`record_lease_options`]; their flag `--ttl SECS` says the same and wins):
//!
//! * `LEASEHOLD_SHARED_MOUNT=record:SECS` — on a mount whose kernel locks stay on each host
//!   (NFS with `local_lock=all` or `nolock`, SMB with `nobrl`, sshfs, most FUSE), hold a
//!   record lease with a TTL of SECS seconds ([`SharedMount::Record`]) instead of refusing;
//!   `refuse`, empty or unset: refuse ([`SharedMount::Refuse`]). Any other value is a usage
//!   error.

use std::time::Duration;

use leasehold::{LeaseOptions, OptIn, SharedMount};

/// The variable that chooses the record lease ([`shared_mount`]).
pub const SHARED_MOUNT: &str = "LEASEHOLD_SHARED_MOUNT";

/// The lease options of a verb that takes a lease on a path (`run`, `doc update`,
/// `registry`, `session append`): the environment's ([`lease_options`]) with the choice
/// [`shared_mount`] reads from `--ttl SECS` (`ttl_flag`) or `LEASEHOLD_SHARED_MOUNT`. The
/// one conversion every such verb uses; the library decides which lease that gives.
///
/// # Errors
/// As [`shared_mount`]: a usage error, worded.
pub fn record_lease_options(ttl_flag: Option<&str>) -> Result<LeaseOptions, String> {
    Ok(lease_options().on_shared_mount(shared_mount(ttl_flag)?))
}

/// What a verb asks for on a mount whose kernel locks stay on each host: a record lease with
/// the TTL of `--ttl SECS` (`ttl_flag`, the flag form) when given, else what
/// `LEASEHOLD_SHARED_MOUNT` asks for. Where the lock path's mount lets the kernel's lock
/// reach every host, the library takes the kernel lease whatever this says.
///
/// # Errors
/// For a TTL that is not a number of seconds of at least 0.03, or any other value of the
/// variable, what to say of it (naming the flag or variable and what it accepts): a usage
/// error.
pub fn shared_mount(ttl_flag: Option<&str>) -> Result<SharedMount, String> {
    if let Some(secs) = ttl_flag {
        return record_ttl(secs)
            .map(|ttl| SharedMount::Record { ttl })
            .ok_or_else(|| {
                format!(
                    "--ttl {secs}: expected a record lease's TTL in seconds, at least 0.03 (run and registry with --etcd: an etcd lease's, at least 2)"
                )
            });
    }
    let Some(value) = std::env::var_os(SHARED_MOUNT) else {
        return Ok(SharedMount::Refuse);
    };
    let text = value.to_string_lossy();
    let bad = || {
        format!(
            "{SHARED_MOUNT}={text}: expected record:SECS (a record lease's TTL in seconds, at least 0.03) or refuse"
        )
    };
    match text.split_once(':') {
        None if text.is_empty() || text == "refuse" => Ok(SharedMount::Refuse),
        Some(("record", secs)) => record_ttl(secs)
            .map(|ttl| SharedMount::Record { ttl })
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A record lease's TTL written as seconds: a number of at least 0.03; `None` otherwise.
fn record_ttl(secs: &str) -> Option<Duration> {
    let secs: f64 = secs.parse().ok()?;
    let ttl = Duration::try_from_secs_f64(secs).ok()?;
    (ttl >= Duration::from_millis(30)).then_some(ttl)
}

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
        OptIn::RecordLease => {
            "LEASEHOLD_SHARED_MOUNT=record:SECS in the environment, or --ttl SECS with run, doc update, registry, session or results"
                .into()
        }
        // The tool runs only where other processes honour locks: nothing to opt into.
        _ => "a single-process lease, which this tool does not offer".into(),
    }
}
