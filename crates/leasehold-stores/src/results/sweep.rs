//! Expiry and discovery: sweeping old results without waiting, and listing publications.

use std::time::Duration;

use leasehold::FileKind;
use leasehold::patterns::keyed::KeyError;
use serde::Serialize;

use super::ResultStore;
use super::error::{Result, ResultError};
use super::files;
use super::files::now_ms;
use super::records::list_names;
use crate::id::SafeId;

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// IDs removed because they were older than the limit.
    pub removed: Vec<String>,
    /// IDs skipped because another process held their operation lease.
    pub skipped: Vec<String>,
    /// IDs that could not be examined or removed, with the reason (left as they were).
    #[serde(skip)]
    pub failed: Vec<(String, String)>,
    /// Leftovers of killed operations removed under their ID's lease: staging and trash
    /// directories (`results/.stage-ID`, `results/.trash-ID`), temporaries of killed
    /// rewrites (`published/.ID.json.tmp.*`), and the temporaries a killed apply left in its
    /// TARGET (each file's `.NAME.tmp.PID.N`).
    #[serde(skip)]
    pub leftovers: usize,
}

/// What a lock-file collection ([`ResultStore::gc`]) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    /// Lock files removed.
    pub removed: usize,
    /// Lock files kept: the ID has a candidate or publication, or the file is held, young or
    /// unusable (or a collection could not run now: see [`busy`](Self::busy)).
    pub kept: usize,
    /// Another collection kept the collector lock, so this one stopped part-way (what it had
    /// not examined is counted as kept); run it again.
    #[serde(skip)]
    pub busy: bool,
}

impl ResultStore {
    /// Removes the operation lock files of IDs that have no candidate and no publication,
    /// that no process holds, and whose lock file is older than `older_than`. Never waits.
    /// Safe against every concurrent operation, and never holds one up for more than a
    /// batch: see [`KeyedLeases::collect`], whose protocol this is; the IDs with records are
    /// listed once before the first batch and once per batch of lock files.
    ///
    /// [`KeyedLeases::collect`]: leasehold::patterns::keyed::KeyedLeases::collect
    ///
    /// # Errors
    /// [`ResultError::Unusable`] on a managed root whose IDs take record leases (a mount
    /// whose kernel locks stay on each host, the record lease chosen): a collector there
    /// would not see another host's holders of a lock file, so it collects nothing.
    pub fn gc(&self, older_than: Duration) -> Result<GcReport> {
        if self.record_ttl().is_some() {
            return Err(ResultError::Unusable {
                path: self.root.join(super::RESULT_NAMESPACE),
                reason: "gc does not collect lock files on a mount whose kernel locks stay on each host: a lock file another host holds looks free from here, so collecting it could remove it under that holder; the lock files are kept (a few empty files per ID)".into(),
            });
        }
        let live = || -> std::io::Result<Vec<String>> {
            let io = |e: ResultError| std::io::Error::other(e.to_string());
            let area = |name| self.area(name, false).map_err(io);
            let mut ids = list_names(area("results")?.as_ref(), "").map_err(io)?;
            ids.extend(list_names(area("published")?.as_ref(), ".json").map_err(io)?);
            Ok(ids)
        };
        let done = self.leases.collect(older_than, live).map_err(|e| match e {
            KeyError::Records { root, source } => ResultError::Io {
                op: "gc: list results",
                path: root,
                source,
            },
            KeyError::Lease(e) => ResultError::Lock(e),
            other => ResultError::Io {
                op: "gc",
                path: self.root.join(super::RESULT_NAMESPACE),
                source: std::io::Error::other(other.to_string()),
            },
        })?;
        Ok(GcReport {
            removed: done.removed,
            kept: done.kept,
            busy: done.busy,
        })
    }

    /// Removes every result older than `older_than`, never waiting: an ID whose lease is held
    /// is skipped and reported. Each removal reinspects the record and its age under the
    /// lease, so a result restaged meanwhile is not removed by its stale age.
    pub fn sweep(&self, older_than: Duration) -> Result<SweepReport> {
        let mut ids = list_names(self.area("results", false)?.as_ref(), "")?;
        ids.extend(list_names(
            self.area("published", false)?.as_ref(),
            ".json",
        )?);
        ids.sort();
        ids.dedup();
        let mut report = SweepReport::default();
        let now = now_ms();
        let limit = u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX);
        for id in ids {
            let lease = match self.take(&id, &leasehold::Budget::no_wait(), |k| self.exists(k)) {
                Ok(lease) => lease,
                Err(e) => match e {
                    ResultError::Busy { .. } => {
                        report.skipped.push(id);
                        continue;
                    }
                    ResultError::Unknown { .. } => continue, // removed meanwhile
                    other => {
                        report.failed.push((id, other.to_string()));
                        continue;
                    }
                },
            };
            // The candidate too (see `fence`): taken by an operation admitted before the
            // lock namespace moved, it is busy like a held lease.
            let _fence = match self.fence(&id, &leasehold::Budget::no_wait()) {
                Ok(fence) => fence,
                Err(ResultError::Split { .. }) => {
                    report.skipped.push(id);
                    continue;
                }
                Err(e) => {
                    report.failed.push((id, e.to_string()));
                    continue;
                }
            };
            // A killed apply's temporaries in its TARGET, whether or not the result expired.
            match self.settle_applying(&id) {
                Ok(n) => report.leftovers += n,
                Err(e) => {
                    report.failed.push((id, e.to_string()));
                    continue;
                }
            }
            let created = match (self.entry(&id), self.read_publication(&id)) {
                (Ok(Some(e)), _) => e.created_ms,
                (Ok(None), Ok(Some(p))) => p.created_ms,
                (Ok(None), Ok(None)) => continue,
                (Err(e), _) | (_, Err(e)) => {
                    report.failed.push((id, e.to_string()));
                    continue;
                }
            };
            if now.saturating_sub(created) < limit {
                continue;
            }
            match self.remove(&id, &lease, "sweep", Vec::new(), None) {
                Ok(()) => report.removed.push(id),
                Err(e) => report.failed.push((id, e.to_string())),
            }
        }
        self.sweep_leftovers(&mut report)?;
        Ok(report)
    }

    /// Removes what killed operations left (see [`SweepReport::leftovers`]), each under its
    /// ID's lease taken without waiting (a busy ID's leftover may be its owner's work in
    /// progress: kept). Regular files and real directories only; nothing is followed.
    fn sweep_leftovers(&self, report: &mut SweepReport) -> Result<()> {
        let mut found: Vec<(String, &'static str, String)> = Vec::new();
        if let Some(results) = self.area("results", false)? {
            for name in files::names(&results, true).unwrap_or_default() {
                for prefix in [".stage-", ".trash-"] {
                    if let Some(id) = name.strip_prefix(prefix) {
                        found.push((id.to_string(), "results", name.clone()));
                    }
                }
            }
        }
        if let Some(published) = self.area("published", false)? {
            for name in files::names(&published, true).unwrap_or_default() {
                let of = leasehold::patterns::durable::temporary_of(&name);
                if let Some(id) = of.and_then(|(file, _)| file.strip_suffix(".json")) {
                    found.push((id.to_string(), "published", name.clone()));
                }
            }
        }
        for (id, area, name) in found {
            if !SafeId::is_safe(&id) {
                continue;
            }
            // A leftover is reason enough to allocate the ID's lock (gc collects it later).
            let Ok(_lease) = self.take(&id, &leasehold::Budget::no_wait(), |_| true) else {
                continue;
            };
            let Some(dir) = self.area(area, false)? else {
                continue;
            };
            let removed = match dir.entry(&name) {
                Ok(Some(FileKind::Directory)) if area == "results" => {
                    files::remove_tree(&dir, &name)
                }
                Ok(Some(FileKind::Regular)) if area == "published" => {
                    dir.remove_file(&name).map_err(Into::into)
                }
                _ => Ok(false),
            };
            match removed {
                Ok(true) => report.leftovers += 1,
                Ok(false) => {}
                Err(e) => report.failed.push((id, e.to_string())),
            }
        }
        Ok(())
    }

    /// The IDs with a publication, sorted. Read-only discovery: it takes no lease and grants
    /// nothing — an operation on a listed ID is admitted and reinspected like any other.
    pub fn pending(&self) -> Result<Vec<String>> {
        list_names(self.area("published", false)?.as_ref(), ".json")
    }
}
