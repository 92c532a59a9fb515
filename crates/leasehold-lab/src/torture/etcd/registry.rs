//! The registry mode: N workers (this binary again, `--etcd-worker`) loop on acknowledged
//! registry mutations on etcd, driven by the shared tending; the checker reads the final
//! registry and the document's whole history from etcd.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use leasehold::Budget;
use leasehold::arbiters::etcd::EtcdArbiter;
use leasehold_stores::registry::{ETCD_DOCUMENT, Registry, RegistryError, stamped};
use serde_json::{Map, Value, json};

use super::super::{AppendLog, Layout, ROOT_POOL, Rng, check};
use super::tend::{self, Driver, End, Hunt, Reply, Settings, Shared, State, TTL, verdict};
use crate::exit::{Failure, Outcome};
use crate::private_etcd::PrivateEtcd;

/// How long a worker waits for the registry before giving up on one operation.
const ACQUIRE_WAIT: Duration = Duration::from_secs(10);

/// A worker's endless loop (ended by SIGKILL, or by the supervisor closing stdin).
pub fn work(layout: &Layout, slot: u32, generation: u32, endpoints: &str, prefix: &str) -> Outcome {
    let ops =
        AppendLog::open(&layout.ops()).map_err(|e| Failure::failed(format!("ops log: {e}")))?;
    let op = |what: &str, rest: &str| {
        ops.record(&format!("{what} {slot} {generation} {rest}"))
            .map_err(|e| Failure::failed(format!("ops log: {e}")))
    };
    let mut rng = Rng::seeded();
    for seq in 1u64.. {
        let root = rng.below(ROOT_POOL as u64) as usize;
        let remove = rng.below(3) == 0;
        let verb = if remove { "remove" } else { "add" };
        op("intent", &format!("{seq} reg {verb} {root}"))?;
        // One authority per operation, as a process would have: teardown disposes it.
        let Ok(registry) = Registry::on_etcd(endpoints, prefix, TTL, None) else {
            continue; // etcd did not answer in time (a loaded machine): not acknowledged
        };
        match registry.acquire(&Budget::timeout(ACQUIRE_WAIT)) {
            Ok(()) => {}
            Err(RegistryError::Contended { .. }) => continue,
            // etcd was slow to answer (a loaded machine): this operation is not acknowledged.
            Err(RegistryError::Lease(_)) => continue,
            Err(e) => {
                op("violation", &format!("registry did not load: {e}"))?;
                continue;
            }
        }
        // A closed stdin (the supervisor gone) ends the worker.
        tend::announce("holding", 0);
        let (primary, root) = (layout.primary(slot), layout.root(root));
        let done = if remove {
            registry.remove(&primary, &root)
        } else {
            registry.add(&primary, &root)
        };
        registry.teardown();
        match done {
            Ok(()) => op("ack", &seq.to_string())?,
            // Deposed while paused, or etcd did not answer: refused, nothing acknowledged.
            Err(RegistryError::Contended { .. } | RegistryError::StorageFailed { .. }) => {
                op("refused", &seq.to_string())?
            }
            Err(e) => op("violation", &format!("registry {verb} failed: {e}"))?,
        }
    }
    Ok(0)
}

/// The registry mode once its etcd is up: the workers driven, the registry and the
/// document's history verified, the report printed. `private` (the run's own etcd) stops
/// once verified.
pub(super) fn run(
    settings: &Settings,
    layout: &Layout,
    endpoints: &str,
    prefix: &str,
    started: Instant,
    private: Option<PrivateEtcd>,
) -> Outcome {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    let workers = Workers {
        exe,
        layout: layout.clone(),
        endpoints: endpoints.to_string(),
        prefix: prefix.to_string(),
    };
    let shared = tend::drive(settings, started, layout, workers);
    let report = verify(layout, endpoints, prefix, settings.workers)?;
    drop(private);
    let elapsed = started.elapsed();
    let st = shared.lock();
    let violations: Vec<String> = st
        .violations
        .iter()
        .cloned()
        .chain(report.violations.iter().cloned())
        .collect();
    if settings.json {
        let v = json!({
            "mode": "etcd",
            "workers": settings.workers,
            "seconds": (elapsed.as_secs_f64() * 10.0).round() / 10.0,
            "kills": st.kills,
            "pauses": st.pauses,
            "kills_by_phase": st.landed,
            "operations": report.ops.registry_acked,
            "refused_after_pause": report.refused,
            "document_writes": report.writes,
            "distinct_tokens": report.tokens,
            "violations": violations.len(),
            "violation_details": violations,
        });
        println!("{v}");
    } else {
        let landed: Vec<String> = st.landed.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "torture (etcd): {} workers, {:.1} s",
            settings.workers,
            elapsed.as_secs_f64()
        );
        println!(
            "kills: {} ({}); pauses past the TTL: {}",
            st.kills,
            landed.join(", "),
            st.pauses
        );
        println!(
            "operations: {} acknowledged, {} refused (deposed or etcd slow)",
            report.ops.registry_acked, report.refused
        );
        println!(
            "document writes checked: {} under {} fencing tokens",
            report.writes, report.tokens
        );
    }
    verdict(settings.json, layout, &violations)
}

/// The registry's workers: this binary again (`--etcd-worker SLOT:GENERATION`), which must
/// only ever end by the schedule's SIGKILL.
struct Workers {
    exe: PathBuf,
    layout: Layout,
    endpoints: String,
    prefix: String,
}

impl Driver for Workers {
    type Slot = ();

    fn open(&self, _: usize) -> Result<(), String> {
        Ok(())
    }

    fn command(&self, (): &(), slot: usize, generation: u32) -> Result<Command, String> {
        let mut command = Command::new(&self.exe);
        command
            .arg("torture")
            .arg("--etcd-worker")
            .arg(format!("{slot}:{generation}"))
            .arg("--dir")
            .arg(&self.layout.dir)
            .arg("--etcd")
            .arg(&self.endpoints)
            .arg("--prefix")
            .arg(&self.prefix);
        Ok(command)
    }

    fn what(&self) -> &'static str {
        "worker"
    }

    /// The supervisor hunts are `--etcd-run`'s only: `go`.
    fn hunt(&self, _: &Shared, mut st: MutexGuard<'_, State>, _: usize, _: i32, _: Hunt) -> Reply {
        st.answered += 1;
        Reply::Go
    }

    fn ended(&self, shared: &Shared, (): &(), slot: usize, end: End) {
        let End {
            generation,
            status,
            killed,
            ..
        } = end;
        let by_sigkill = status.as_ref().is_ok_and(|s| s.signal() == Some(9));
        if !(killed && by_sigkill) {
            shared.violation(format!(
                "worker {slot}:{generation} ended by itself: {status:?} (see {})",
                self.layout.stderr().display()
            ));
        }
    }
}

struct Report {
    ops: check::OpsReport,
    refused: u64,
    writes: usize,
    tokens: usize,
    violations: Vec<String>,
}

fn verify(layout: &Layout, endpoints: &str, prefix: &str, workers: u32) -> Result<Report, Failure> {
    let mut violations = Vec::new();
    let mut present = BTreeSet::new();
    let registry = Registry::on_etcd(endpoints, prefix, TTL, None)
        .map_err(|e| Failure::failed(format!("torture: {e}")))?;
    // Killed holders' leases expire within the TTL: wait that long for the final look.
    match registry.acquire(&Budget::timeout(TTL * 3)) {
        Ok(()) => {
            let primaries: BTreeMap<PathBuf, u32> =
                (0..workers).map(|s| (layout.primary(s), s)).collect();
            let roots: BTreeMap<PathBuf, u32> =
                (0..ROOT_POOL).map(|r| (layout.root(r), r as u32)).collect();
            check::registry_entries(
                &registry.scope(),
                &primaries,
                &roots,
                &mut present,
                &mut violations,
            );
        }
        Err(e) => violations.push(format!("registry at the end: {e}")),
    }
    registry.teardown();
    drop(registry);
    let text = std::fs::read_to_string(layout.ops())
        .map_err(|e| Failure::failed(format!("torture: {}: {e}", layout.ops().display())))?;
    let refused = text.lines().filter(|l| l.starts_with("refused ")).count() as u64;
    // `refused` records are this mode's own; the shared checker knows intents, acks and
    // violations (an unacknowledged intent may or may not have landed).
    let rest: String = text
        .lines()
        .filter(|l| !l.starts_with("refused "))
        .map(|l| format!("{l}\n"))
        .collect();
    let ops = check::ops(&rest, &present, 0);
    violations.extend(ops.violations.iter().cloned());

    let arbiter = EtcdArbiter::connect(endpoints, &format!("{prefix}/check"), TTL)
        .map_err(|e| Failure::failed(format!("torture: {e}")))?;
    let history = arbiter
        .history(&format!("{prefix}/{ETCD_DOCUMENT}"))
        .map_err(|e| Failure::failed(format!("torture: document history: {e}")))?;
    let (tokens, order) = token_order(&history);
    violations.extend(order);
    Ok(Report {
        ops,
        refused,
        writes: history.len(),
        tokens,
        violations,
    })
}

/// Checks a document's history (every value it held, oldest first): each write must carry a
/// fencing token, and no token may be lower than one written before it. Returns the number
/// of distinct tokens and the violations.
fn token_order(history: &[Vec<u8>]) -> (usize, Vec<String>) {
    let mut violations = Vec::new();
    let mut newest: Option<u64> = None;
    let mut tokens = BTreeSet::new();
    for (i, bytes) in history.iter().enumerate() {
        let token = serde_json::from_slice::<Map<String, Value>>(bytes)
            .ok()
            .and_then(|doc| stamped(&doc));
        let Some(token) = token else {
            violations.push(format!("document write {i} carries no fencing token"));
            continue;
        };
        tokens.insert(token);
        if let Some(n) = newest.filter(|n| token < *n) {
            violations.push(format!(
                "document write {i} under token {token} landed after token {n}'s first write"
            ));
        }
        newest = newest.max(Some(token));
    }
    (tokens.len(), violations)
}

#[cfg(test)]
mod tests {
    use super::token_order;

    fn doc(token: u64) -> Vec<u8> {
        format!(r#"{{"version":1,"workspaces":{{}},"fencing_token":{token}}}"#).into_bytes()
    }

    #[test]
    fn tokens_that_never_go_down_are_clean_and_a_stale_write_is_caught() {
        let (n, v) = token_order(&[doc(5), doc(5), doc(9), doc(12)]);
        assert_eq!((n, v.len()), (3, 0), "{v:?}");
        let (_, v) = token_order(&[doc(5), doc(9), doc(5)]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("under token 5 landed after token 9"), "{v:?}");
        let (_, v) = token_order(&[b"{}".to_vec()]);
        assert_eq!(v.len(), 1, "an unstamped write: {v:?}");
    }
}
