//! Expiry and discovery: sweeping old results without waiting, and listing publications.

use std::time::Duration;

use serde::Serialize;

use super::ResultStore;
use super::error::{Result, ResultError};
use super::files::now_ms;
use super::records::list_names;

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
}

impl ResultStore {
    /// Removes every result older than `older_than`, never waiting: an ID whose lease is held
    /// is skipped and reported. Each removal reinspects the record and its age under the
    /// lease, so a result restaged meanwhile is not removed by its stale age.
    pub fn sweep(&self, older_than: Duration) -> Result<SweepReport> {
        let mut ids = list_names(&self.root.join("results"), "")?;
        ids.extend(list_names(&self.root.join("published"), ".json")?);
        ids.sort();
        ids.dedup();
        let mut report = SweepReport::default();
        let now = now_ms();
        let limit = u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX);
        for id in ids {
            let lease = match self.leases.try_acquire(&id, |k| self.exists(k)) {
                Ok(lease) => lease,
                Err(e) => match self.admission_error(&id, e) {
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
            match self.remove(&id, &lease, "sweep", Vec::new()) {
                Ok(()) => report.removed.push(id),
                Err(e) => report.failed.push((id, e.to_string())),
            }
        }
        Ok(report)
    }

    /// The IDs with a publication, sorted. Read-only discovery: it takes no lease and grants
    /// nothing — an operation on a listed ID is admitted and reinspected like any other.
    pub fn pending(&self) -> Result<Vec<String>> {
        list_names(&self.root.join("published"), ".json")
    }
}
