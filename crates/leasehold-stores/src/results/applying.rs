//! What a killed `apply` leaves in its TARGET, and its removal under the ID's lease.
//!
//! `apply` writes each file into TARGET with a durable rewrite: a temporary beside the file
//! (`.NAME.tmp.PID.N`, [`temporary_name`](leasehold::patterns::durable::temporary_name)),
//! renamed over it. A process killed between creating and renaming one leaves it behind,
//! in a directory that is not the store's: neither a re-apply nor `sweep` could tell it from
//! a file of the user's. So before it writes, `apply` records in the
//! candidate which TARGET it writes into and the process number its temporaries carry
//! (`results/<id>/applying.json`); whoever next holds the ID's lease — a re-apply, discard,
//! abort, sweep — finds the record, removes exactly that process's temporaries of the
//! candidate's files in that TARGET (regular files only, through handles, nothing followed),
//! then the record. Under the lease no other apply of this ID can be writing, and a
//! temporary of another process (another ID's apply into the same TARGET) is never touched.
//! A successful apply removes its record itself before the candidate goes.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use leasehold::patterns::durable::{temporary_of, temporary_pid};
use serde::{Deserialize, Serialize};

use super::ResultStore;
use super::error::{Result, ResultError};
use leasehold::{FileKind, LockDir};

use super::files::{self, split};

/// The record of an apply in progress, inside the candidate.
const MARKER: &str = "applying.json";

/// The largest record read (it holds a path and a number).
const MAX_MARKER: u64 = 64 << 10;

/// Where an apply writes, and the process number its temporaries carry.
#[derive(Debug, Serialize, Deserialize)]
struct Applying {
    /// TARGET, absolute.
    target: PathBuf,
    /// The `PID` of its `.NAME.tmp.PID.N` temporaries.
    pid: u32,
}

impl ResultStore {
    /// The candidate's directory, if it is there.
    fn candidate_dir(&self, id: &str) -> Result<Option<LockDir>> {
        let Some(results) = self.area("results", false)? else {
            return Ok(None);
        };
        files::child(&results, id, None)
            .map_err(|e| self.applying_error(id, "open the candidate", e))
    }

    /// Records, durably, that this process is about to write `id`'s files into `target`.
    /// Under the ID's lease, after [`settle_applying`](Self::settle_applying).
    pub(super) fn mark_applying(&self, id: &str, target: &Path) -> Result<()> {
        let target = std::path::absolute(target).map_err(|e| ResultError::Unusable {
            path: target.to_path_buf(),
            reason: e.to_string(),
        })?;
        let record = Applying {
            target,
            pid: temporary_pid(),
        };
        let bytes = serde_json::to_vec(&record).map_err(io::Error::other);
        let Some(candidate) = self.candidate_dir(id)? else {
            return Err(self.unknown(id));
        };
        bytes
            .and_then(|b| files::write(&candidate, MARKER, 0o600, &b))
            .map_err(|e| self.applying_error(id, "record the apply", e))
    }

    /// Removes this process's record of a finished apply (its temporaries are all renamed).
    pub(super) fn unmark_applying(&self, id: &str) -> Result<()> {
        let Some(candidate) = self.candidate_dir(id)? else {
            return Ok(());
        };
        candidate
            .remove_file(MARKER)
            .map_err(io::Error::from)
            .and_then(|_| candidate.sync())
            .map_err(|e| self.applying_error(id, "remove the apply record", e))
    }

    /// Under `id`'s lease: removes what a killed apply of `id` left in its TARGET (see the
    /// module docs), then its record. Returns how many temporaries were removed; a candidate
    /// without a record has none.
    pub(super) fn settle_applying(&self, id: &str) -> Result<usize> {
        let Some(candidate) = self.candidate_dir(id)? else {
            return Ok(0);
        };
        let bytes = match files::read(&candidate, MARKER, MAX_MARKER) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(0),
            Err(e) => return Err(self.applying_error(id, "read the apply record", e)),
        };
        let mut removed = 0;
        // A record that does not parse names no TARGET: there is nothing it could tell us to
        // remove (it is ours, in a private directory, written whole by a durable rewrite).
        if let Ok(applying) = serde_json::from_slice::<Applying>(&bytes) {
            let files = match self.entry(id)? {
                Some(entry) => entry.files,
                None => Vec::new(),
            };
            removed = remove_leftovers(&applying, &files)
                .map_err(|e| self.applying_error(id, "remove a killed apply's temporaries", e))?;
        }
        self.unmark_applying(id)?;
        Ok(removed)
    }

    fn applying_error(&self, id: &str, op: &'static str, source: io::Error) -> ResultError {
        ResultError::Io {
            op,
            path: self.candidate(id).join(MARKER),
            source,
        }
    }
}

/// Removes `applying.pid`'s temporaries of `files` in `applying.target`: per directory of
/// the files, one listing; regular files only; a missing TARGET or directory has none.
fn remove_leftovers(applying: &Applying, files: &[String]) -> io::Result<usize> {
    let Some(target) = files::open_dir(&applying.target, false)? else {
        return Ok(0);
    };
    let mut by_dir: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for rel in files {
        let (dir, name) = split(rel);
        by_dir.entry(dir).or_default().push(name);
    }
    let mut removed = 0;
    for (dir, names) in by_dir {
        let Some(here) = files::descend(&target, dir, None)? else {
            continue;
        };
        let mut here_removed = 0;
        // TARGET is the user's: names that are not UTF-8 are theirs (ours are), skipped.
        for found in files::names(&here, false)? {
            let ours = temporary_of(&found)
                .is_some_and(|(of, pid)| pid == applying.pid && names.contains(&of));
            if ours && here.entry(&found)? == Some(FileKind::Regular) && here.remove_file(&found)? {
                here_removed += 1;
            }
        }
        if here_removed > 0 {
            here.sync()?;
        }
        removed += here_removed;
    }
    Ok(removed)
}
