//! `leasehold status`: who holds a lock file — without creating, changing, blocking on or
//! taking anything (it reads `/proc/locks`; it never calls `flock`, so it cannot make a
//! concurrent acquirer fail).

use std::path::PathBuf;

use clap::Args;
use leasehold::Holders;

use crate::exit::{Failure, OK, Outcome};
use crate::out::print_line;

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print {"path": ..., "held": ..., "holders": [...], "mount": {"locks": ..., "fs": ...,
    /// "reason": ...}}.
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
    let held = match holders.is_held() {
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
        });
        print_line(doc)?;
    } else {
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
