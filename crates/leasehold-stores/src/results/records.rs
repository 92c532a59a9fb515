//! Result IDs and the store's records: a candidate's `entry.json` and its publication.

use std::fs;
use std::io;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use super::ResultStore;
use super::error::{Result, ResultError};

/// The longest ID accepted (bytes after trimming).
pub const MAX_ID_LEN: usize = 128;

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

/// Trims `id` and checks that it is safe as a path component: `[A-Za-z0-9._-]`, 1 to
/// [`MAX_ID_LEN`] characters, not starting with `.` (hidden names are the store's own).
pub fn normalize_id(id: &str) -> Result<&str> {
    let invalid = |reason| ResultError::InvalidId {
        id: id.to_string(),
        reason,
    };
    let t = id.trim();
    if t.is_empty() {
        return Err(invalid("empty after trimming whitespace"));
    }
    if t.len() > MAX_ID_LEN {
        return Err(invalid("longer than 128 characters"));
    }
    if t.starts_with('.') {
        return Err(invalid("must not start with '.'"));
    }
    if !t
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(invalid(
            "only letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    Ok(t)
}

impl ResultStore {
    /// Reads the candidate's record under the lease: `None` when there is no candidate.
    pub(super) fn entry(&self, id: &str) -> Result<Option<Entry>> {
        let path = self.candidate(id).join("entry.json");
        if fs::symlink_metadata(self.candidate(id)).is_err() {
            return Ok(None);
        }
        let corrupt = |reason: String| ResultError::Corrupt {
            id: id.to_string(),
            path: path.clone(),
            reason,
        };
        let bytes = fs::read(&path).map_err(|e| corrupt(e.to_string()))?;
        let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
        if let Some(bad) = entry.files.iter().find(|f| !is_safe_relative(f)) {
            return Err(corrupt(format!("unsafe file path {bad:?}")));
        }
        Ok(Some(entry))
    }

    pub(super) fn read_publication(&self, id: &str) -> Result<Option<Publication>> {
        let path = self.publication(id);
        match fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| ResultError::Corrupt {
                        id: id.to_string(),
                        path,
                        reason: e.to_string(),
                    })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ResultError::Io {
                op: "read publication",
                path,
                source: e,
            }),
        }
    }
}

/// Names in `dir` ending with `suffix` (suffix removed) that are valid IDs; hidden and
/// foreign names are ignored. A missing directory is empty.
pub(super) fn list_names(dir: &Path, suffix: &str) -> Result<Vec<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ResultError::Io {
                op: "list",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut names = Vec::new();
    for e in rd.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        if let Some(id) = name.strip_suffix(suffix)
            && normalize_id(id).is_ok_and(|t| t == id)
        {
            names.push(id.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// A record's file path must stay inside the directory it is joined to.
fn is_safe_relative(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}
