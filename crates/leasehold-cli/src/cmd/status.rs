//! `leasehold status`: who holds a lock file — without creating, changing, blocking on or
//! taking anything (it reads `/proc/locks`, and a record lease's directory; it never calls
//! `flock`, so it cannot make a concurrent acquirer fail).

use std::path::PathBuf;

use clap::Args;
use leasehold::Holders;

use crate::exit::{Failure, OK, Outcome};
use crate::out::print_line;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print {"path": ..., "held": ..., "holders": [...], "mount": {"locks": ..., "fs": ...,
    /// "reason": ...}, "record": null or {"pid": ..., "host": ..., "this_host": ...,
    /// "token": ..., "ttl_ms": ...}}.
    #[arg(long)]
    json: bool,
    /// etcd endpoints (comma-separated http:// or https:// URLs; https trusts the system's
    /// CAs, or SSL_CERT_FILE): LOCKFILE is then a lock NAME.
    #[arg(long, value_name = "ENDPOINTS")]
    etcd: Option<String>,
    /// The lock file to inspect; with --etcd, the lock NAME.
    lockfile: PathBuf,
}

pub fn main(args: StatusArgs) -> Outcome {
    if let Some(endpoints) = &args.etcd {
        return super::etcd::status(endpoints, &args.lockfile.to_string_lossy(), args.json);
    }
    let holders = leasehold::holders(&args.lockfile).map_err(|e| Failure::of(&e))?;
    // A record lease's holder (`run` with LEASEHOLD_SHARED_MOUNT=record:SECS), which may be
    // on another host, where this host's kernel lock shows nothing.
    // A lease directory this user may not read is another user's record lease, which this
    // user could not take either: said as none.
    #[cfg(unix)]
    let record = match leasehold::RecordLease::holder(&args.lockfile) {
        Err(leasehold::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            None
        }
        other => other.map_err(|e| Failure::of(&e))?,
    };
    #[cfg(not(unix))]
    let record: Option<()> = None;
    // A record lease says who holds it on any system; the kernel's lock only where the
    // system reveals its holders.
    let held = match holders.is_held() {
        _ if record.is_some() => true,
        Some(held) => held,
        None => {
            return Err(Failure::failed(format!(
                "{}: this system does not reveal lock holders",
                args.lockfile.display()
            )));
        }
    };
    if args.json {
        let mount = leasehold::MountLocks::of(&args.lockfile).map_err(|e| Failure::of(&e))?;
        let doc = serde_json::json!({
            "path": args.lockfile.to_string_lossy(),
            "held": held,
            "holders": holders.pids(),
            "mount": {"locks": mount.name(), "fs": mount.fs(), "reason": mount.reason()},
            "record": record_json(&record),
        });
        print_line(doc)?;
    } else {
        #[cfg(unix)]
        if let Some(h) = &record {
            print_line(format!("held by {}", record_words(h)))?;
            return Ok(OK);
        }
        match &holders {
            Holders::Held { pids } if !pids.is_empty() => {
                let list: Vec<String> = pids.iter().map(u32::to_string).collect();
                print_line(format!("held by pid {}", list.join(", ")))?;
            }
            Holders::Held { .. } => print_line("held")?,
            _ => print_line("free")?,
        }
    }
    Ok(OK)
}

/// A record lease's holder as `status` and contention name it: "pid N on this host (record
/// lease, fencing token T)", or "on host H" (its identity's 16 hex digits) for another's.
#[cfg(unix)]
pub fn record_words(h: &leasehold::RecordHolder) -> String {
    let host = match h.this_host {
        true => "this host".to_string(),
        false => format!("host {}", h.host),
    };
    format!(
        "pid {} on {host} (record lease, fencing token {})",
        h.pid, h.token
    )
}

#[cfg(unix)]
fn record_json(record: &Option<leasehold::RecordHolder>) -> serde_json::Value {
    match record {
        Some(h) => serde_json::json!({
            "pid": h.pid,
            "host": h.host,
            "this_host": h.this_host,
            "token": h.token,
            "ttl_ms": u64::try_from(h.ttl.as_millis()).unwrap_or(u64::MAX),
        }),
        None => serde_json::Value::Null,
    }
}

#[cfg(not(unix))]
fn record_json(_: &Option<()>) -> serde_json::Value {
    serde_json::Value::Null
}
