//! The store's records: a candidate's `entry.json` and its publication (result IDs are
//! [`SafeId`]s, trimmed: `crate::id`).

use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use super::ResultStore;
use super::error::{Result, ResultError};
use leasehold::LockDir;

use super::files;
use crate::id::SafeId;

/// The record of a candidate (`results/<id>/entry.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The trimmed ID.
    pub id: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// The proposed files, as relative paths with `/` separators, sorted.
    pub files: Vec<String>,
}

/// A publication (`published/<id>.json`): the candidate was inspected and declared ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publication {
    /// The trimmed ID.
    pub id: String,
    /// The candidate's creation time (ms since the epoch).
    pub created_ms: u64,
    /// When it was published (ms since the epoch).
    pub published_ms: u64,
    /// The files the result would change.
    pub files: Vec<String>,
}

/// The largest record or publication read (a bigger file is refused, not read into memory).
const MAX_RECORD: u64 = 64 << 20;

impl ResultStore {
    /// Reads the candidate's record under the lease, through directory handles: `None` when
    /// there is no candidate. A candidate that is not a real directory, or has no regular
    /// `entry.json`, is [`ResultError::Corrupt`] (left as it is).
    pub(super) fn entry(&self, id: &str) -> Result<Option<Entry>> {
        let path = self.candidate(id).join("entry.json");
        let corrupt = |reason: String| ResultError::Corrupt {
            id: id.to_string(),
            path: path.clone(),
            reason,
        };
        let Some(results) = self.area("results", false)? else {
            return Ok(None);
        };
        let Some(candidate) =
            files::child(&results, id, None).map_err(|e| corrupt(e.to_string()))?
        else {
            return Ok(None);
        };
        let bytes = match files::read(&candidate, "entry.json", MAX_RECORD) {
            Ok(Some(b)) => b,
            Ok(None) => return Err(corrupt("missing (not a result)".into())),
            Err(e) => return Err(corrupt(e.to_string())),
        };
        let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if let Some(bad) = entry.files.iter().find(|f| !is_safe_relative(f)) {
            return Err(corrupt(format!("unsafe file path {bad:?}")));
        }
        Ok(Some(entry))
    }

    pub(super) fn read_publication(&self, id: &str) -> Result<Option<Publication>> {
        let path = self.publication(id);
        let corrupt = |reason: String| ResultError::Corrupt {
            id: id.to_string(),
            path: path.clone(),
            reason,
        };
        let Some(published) = self.area("published", false)? else {
            return Ok(None);
        };
        match files::read(&published, &format!("{id}.json"), MAX_RECORD) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| corrupt(e.to_string())),
            Ok(None) => Ok(None),
            Err(e) => Err(corrupt(e.to_string())),
        }
    }
}

/// Names in the area `dir` ending with `suffix` (suffix removed) that are valid IDs; hidden
/// and foreign names are ignored. A missing area is empty.
pub(super) fn list_names(dir: Option<&LockDir>, suffix: &str) -> Result<Vec<String>> {
    let Some(dir) = dir else {
        return Ok(Vec::new());
    };
    let names = files::names(dir, true).map_err(|source| ResultError::Io {
        op: "list",
        path: dir.path().to_path_buf(),
        source,
    })?;
    let mut ids: Vec<String> = names
        .into_iter()
        .filter_map(|name| {
            let id = name.strip_suffix(suffix)?;
            SafeId::is_safe(id).then(|| id.to_string())
        })
        .collect();
    ids.sort();
    Ok(ids)
}

/// A record's file path must stay inside the directory it is joined to.
fn is_safe_relative(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}
