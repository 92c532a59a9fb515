//! `leasehold torture --etcd ENDPOINTS | --etcd-server`: the registry on etcd under SIGKILL
//! and SIGSTOP/SIGCONT of its workers.
//!
//! N workers (this binary again, hidden `--etcd-worker`) loop on acknowledged registry
//! mutations through `Registry::on_etcd` (TTL 2 s), each announcing `holding` once it is the
//! authority and waiting for `go`. The supervisor, until `--kills` events: SIGKILLs a random
//! worker at a random moment, SIGKILLs the first worker to announce `holding`, or SIGSTOPs it
//! there for longer than the TTL (so its lease expires and a successor takes over and
//! writes), then SIGCONTs it and lets it write — a deposed writer that resumes.
//!
//! A pause breaks real-time exclusion on purpose (a lease has a TTL by nature); what must hold
//! is what fencing promises, and the checker proves it from etcd's own history:
//!
//! * every acknowledged mutation is in the final registry (`check::ops`);
//! * in the document's history (every value it held since revision 1, read by a watch),
//!   the fencing tokens never go down: no write under an older token landed after a newer
//!   token's first write.
//!
//! `--etcd-run` tortures `leasehold run --etcd` itself instead: N slots run the counter's
//! COMMAND under `run --etcd` (TTL 2 s) again and again. The COMMAND (`--etcd-role command`)
//! records `enter`, starts a background child (`background`) that records a `beat` every
//! 10 ms until killed, announces `holding`, and on `go` increments a counter file and exits,
//! leaving its child behind. The schedule SIGKILLs `run` (never its supervisor or COMMAND) at
//! random or at `holding`, or SIGSTOPs `run` at `holding` for longer than the TTL and then
//! SIGCONTs it. What must hold, whatever happens to `run`:
//!
//! * no two COMMANDs' process trees ever act at once: each holder's records (COMMAND's and
//!   its child's, timestamps taken while alive) span an interval, and no two intervals of
//!   the counter overlap (`spans`);
//! * every acknowledged increment is in the final counter, and no more than were attempted
//!   (`check::ops`: overlapping increments lose updates);
//! * a `run` paused past its TTL ends with `lease lost` (1), its COMMAND unfinished.
//!
//! `--break-exclusion` gives each slot a lock name of its own: the run must then fail.
//!
//! `--etcd-server` starts a private single-node etcd (the `etcd` binary on PATH) on free
//! loopback ports in the run directory and stops it at the end.
//!
//! The files: this one sets a run up and picks the mode; `registry.rs` and `runs.rs` are the
//! two drivers and their checks; `tend.rs`, what both share (the slots' spawn, hunts and
//! reaping, the schedule and its shutdown, the verdict).

use std::path::Path;
use std::time::Instant;

use super::{Layout, ROOT_POOL, now_ns};
use crate::exit::{Failure, Outcome};
use crate::private_etcd::PrivateEtcd;

pub(super) use registry::work;
pub(super) use runs::role;
pub use tend::Settings;

mod registry;
mod runs;
mod tend;

/// `leasehold torture --etcd …`: the run directory and etcd set up, then either mode.
pub fn run(settings: &Settings) -> Outcome {
    let started = Instant::now();
    let base = settings.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "leasehold-torture-etcd-{}-{}",
        std::process::id(),
        now_ns()
    ));
    let mkdir = |p: &Path| {
        std::fs::create_dir_all(p)
            .map_err(|e| Failure::failed(format!("torture: {}: {e}", p.display())))
    };
    mkdir(&dir)?;
    let dir = dir
        .canonicalize()
        .map_err(|e| Failure::failed(format!("torture: {}: {e}", dir.display())))?;
    let layout = Layout::new(&dir);
    for slot in 0..settings.workers {
        mkdir(&layout.primary(slot))?;
    }
    for r in 0..ROOT_POOL {
        mkdir(&layout.root(r))?;
    }
    let private = match &settings.endpoints {
        Some(_) => None,
        None => Some(PrivateEtcd::start(&dir)?),
    };
    let endpoints = match (&settings.endpoints, &private) {
        (Some(e), _) => e.clone(),
        (None, Some(p)) => p.endpoint.clone(),
        (None, None) => return Err(Failure::failed("torture: no etcd")),
    };
    let prefix = format!("leasehold-torture/{}-{}", std::process::id(), now_ns());
    if settings.run {
        let etcd_pid = private.as_ref().map(PrivateEtcd::pid);
        let report = runs::run_mode(settings, &layout, &endpoints, &prefix, etcd_pid);
        drop(private);
        return runs::finish_run(settings, &layout, report?);
    }
    registry::run(settings, &layout, &endpoints, &prefix, started, private)
}
