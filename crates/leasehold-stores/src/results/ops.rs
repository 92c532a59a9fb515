//! The operations on one result, each under its ID's lease: stage, paths, finish, apply,
//! discard and abort (and the removal they share).

use std::fs;
use std::io;
use std::path::Path;

use leasehold::Budget;
use leasehold::patterns::durable::{create_dir_durable, replace_file};
use leasehold::patterns::keyed::KeyLease;

use super::admission::verify;
use super::error::{Result, ResultError, not_published};
use super::files::{
    create_dirs, create_dirs_io, describe_files, now_ms, remove_dir_if_present, sync_dir, walk,
};
use super::records::normalize_id;
use super::{Entry, Publication, ResultStore};

impl ResultStore {
    /// Creates the candidate `id` holding a copy of the regular files under `source`
    /// (creating the managed root if missing). An ID that already has a candidate or a
    /// publication is [`ResultError::Exists`]. Returns the record.
    pub fn stage(&self, id: &str, source: &Path, budget: &Budget) -> Result<Entry> {
        let id = normalize_id(id)?;
        let files = self.stage_files(source)?;
        let lease = self.admit(id, budget, true)?;
        self.stage_admitted(id, source, files, &lease)
    }

    /// Before admission: the sorted regular files under `source`, and the results directory.
    pub(super) fn stage_files(&self, source: &Path) -> Result<Vec<String>> {
        let mut files = Vec::new();
        walk(source, source, &mut files)?;
        files.sort();
        create_dirs(&self.root.join("results"))?;
        Ok(files)
    }

    pub(super) fn stage_admitted(
        &self,
        id: &str,
        source: &Path,
        files: Vec<String>,
        lease: &KeyLease,
    ) -> Result<Entry> {
        let results = self.root.join("results");
        if self.exists(id) {
            return Err(ResultError::Exists {
                id: id.to_string(),
                root: self.root.clone(),
            });
        }
        // Assembled under a hidden name and renamed into place whole: a crash never leaves a
        // candidate without its record. Only the ID's owner touches this name.
        let staging = results.join(format!(".stage-{id}"));
        let entry = Entry {
            id: id.to_string(),
            created_ms: now_ms(),
            files,
        };
        let built = (|| {
            remove_dir_if_present(&staging)?;
            fs::create_dir(&staging)?;
            let files = staging.join("files");
            for rel in &entry.files {
                let to = files.join(rel);
                if let Some(parent) = to.parent() {
                    // Nested names too must be durable before the candidate is renamed in.
                    create_dir_durable(parent, &files)?;
                }
                let from = source.join(rel);
                replace_file(&to, &fs::read(&from)?)?;
                fs::set_permissions(&to, fs::metadata(&from)?.permissions())?;
            }
            let record = serde_json::to_vec_pretty(&entry).map_err(io::Error::other)?;
            verify(lease)?;
            replace_file(&staging.join("entry.json"), &record)?;
            fs::rename(&staging, self.candidate(id))?;
            sync_dir(&results)
        })();
        if let Err(source) = built {
            let _ = fs::remove_dir_all(&staging);
            return Err(ResultError::Io {
                op: "stage",
                path: self.candidate(id),
                source,
            });
        }
        Ok(entry)
    }

    /// Inspects `id` under its lease: the relative paths the result would change. An empty
    /// result (no files) is removed and reported as an empty list.
    pub fn paths(&self, id: &str, budget: &Budget) -> Result<Vec<String>> {
        let id = normalize_id(id)?;
        let lease = self.admit(id, budget, false)?;
        self.paths_admitted(id, &lease)
    }

    pub(super) fn paths_admitted(&self, id: &str, lease: &KeyLease) -> Result<Vec<String>> {
        Ok(self
            .inspect(id, lease, "paths")?
            .map(|e| e.files)
            .unwrap_or_default())
    }

    /// The inspection shared by `paths` and `finish`, under the lease.
    /// `None`: the result was empty and has been removed.
    pub(super) fn inspect(
        &self,
        id: &str,
        lease: &KeyLease,
        op: &'static str,
    ) -> Result<Option<Entry>> {
        let entry = self.entry(id)?;
        let published = self.read_publication(id)?;
        match (entry, published) {
            (None, None) => Err(self.unknown(id)),
            (Some(e), _) if !e.files.is_empty() => Ok(Some(e)),
            // No files (or a publication whose candidate is gone): nothing to apply.
            _ => {
                self.remove(id, lease, op, Vec::new())?;
                Ok(None)
            }
        }
    }

    /// Inspects `id` and publishes it (`published/<id>.json`), returning its paths. An empty
    /// result is removed instead. If `id` cannot be admitted, nothing is published and the
    /// error is [`ResultError::NotPublished`]: durability is unavailable, and the caller may
    /// retry with the same ID.
    pub fn finish(&self, id: &str, budget: &Budget) -> Result<Vec<String>> {
        let id = normalize_id(id)?;
        let lease = self
            .admit(id, budget, false)
            .map_err(|e| not_published(id, e))?;
        self.finish_admitted(id, &lease)
    }

    pub(super) fn finish_admitted(&self, id: &str, lease: &KeyLease) -> Result<Vec<String>> {
        let Some(entry) = self.inspect(id, lease, "finish")? else {
            return Ok(Vec::new());
        };
        let publication = Publication {
            id: id.to_string(),
            created_ms: entry.created_ms,
            published_ms: now_ms(),
            files: entry.files,
        };
        let path = self.publication(id);
        let written = (|| {
            let doc = serde_json::to_vec_pretty(&publication).map_err(io::Error::other)?;
            create_dirs_io(&self.root.join("published"))?;
            verify(lease)?;
            replace_file(&path, &doc)
        })();
        written.map_err(|source| ResultError::Io {
            op: "publish",
            path,
            source,
        })?;
        Ok(publication.files)
    }

    /// Writes the candidate's files into `target` (created if missing), then removes the
    /// candidate and its publication. The record is reinspected after admission.
    pub fn apply(&self, id: &str, target: &Path, budget: &Budget) -> Result<Vec<String>> {
        let id = normalize_id(id)?;
        let lease = self.admit(id, budget, false)?;
        self.apply_admitted(id, target, &lease)
    }

    pub(super) fn apply_admitted(
        &self,
        id: &str,
        target: &Path,
        lease: &KeyLease,
    ) -> Result<Vec<String>> {
        let Some(entry) = self.entry(id)? else {
            // A publication whose candidate is gone has nothing to apply.
            return match self.read_publication(id)? {
                Some(_) => Err(ResultError::Corrupt {
                    id: id.to_string(),
                    path: self.candidate(id),
                    reason: "the candidate is missing but a publication exists".into(),
                }),
                None => Err(self.unknown(id)),
            };
        };
        let files_dir = self.candidate(id).join("files");
        let mut written: Vec<String> = Vec::new();
        for rel in &entry.files {
            let step = (|| {
                verify(lease)?;
                let from = files_dir.join(rel);
                let to = target.join(rel);
                if let Some(parent) = to.parent() {
                    // TARGET and its subdirectories, new or not, must keep their names
                    // through a power cut once `apply` has answered.
                    create_dir_durable(parent, target)?;
                }
                replace_file(&to, &fs::read(&from)?)?;
                fs::set_permissions(&to, fs::metadata(&from)?.permissions())
            })();
            if let Err(source) = step {
                let left = entry.files.len() - written.len();
                return Err(ResultError::Partial {
                    id: id.to_string(),
                    op: "apply",
                    done: describe_files("wrote", &written, target),
                    not_done: format!(
                        "{left} file(s) not written starting with {rel:?}; candidate and publication kept"
                    ),
                    source,
                });
            }
            written.push(rel.clone());
        }
        let done = vec![describe_files("wrote", &written, target)];
        self.remove(id, lease, "apply", done)?;
        Ok(entry.files)
    }

    /// Removes the candidate and publication of `id` under its lease.
    pub fn discard(&self, id: &str, budget: &Budget) -> Result<()> {
        self.remove_admitted(id, budget, "discard")
    }

    /// Like [`discard`](Self::discard), for a producer abandoning its result: when the ID is
    /// owned by another process the admission error is returned and nothing is deleted
    /// through that owner.
    pub fn abort(&self, id: &str, budget: &Budget) -> Result<()> {
        self.remove_admitted(id, budget, "abort")
    }

    pub(super) fn remove_admitted(
        &self,
        id: &str,
        budget: &Budget,
        op: &'static str,
    ) -> Result<()> {
        let id = normalize_id(id)?;
        let lease = self.admit(id, budget, false)?;
        self.remove_existing(id, &lease, op)
    }

    pub(super) fn remove_existing(
        &self,
        id: &str,
        lease: &KeyLease,
        op: &'static str,
    ) -> Result<()> {
        if !self.exists(id) {
            return Err(self.unknown(id));
        }
        self.remove(id, lease, op, Vec::new())
    }

    /// Removes the publication, then the candidate, under `lease`; `done` is what the
    /// operation already did (for the report of a failure part-way).
    pub(super) fn remove(
        &self,
        id: &str,
        lease: &KeyLease,
        op: &'static str,
        mut done: Vec<String>,
    ) -> Result<()> {
        let partial = |done: &[String], not_done: &str, source| ResultError::Partial {
            id: id.to_string(),
            op,
            done: if done.is_empty() {
                "nothing".into()
            } else {
                done.join(", ")
            },
            not_done: not_done.to_string(),
            source,
        };
        verify(lease).map_err(|e| partial(&done, "publication and candidate kept", e))?;
        let publication = self.publication(id);
        match fs::remove_file(&publication) {
            Ok(()) => {
                let _ = sync_dir(&self.root.join("published"));
                done.push(format!("removed {}", publication.display()));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(partial(&done, "publication and candidate kept", e)),
        }
        let candidate = self.candidate(id);
        let results = self.root.join("results");
        let trash = results.join(format!(".trash-{id}"));
        let removed = (|| {
            remove_dir_if_present(&trash)?;
            match fs::rename(&candidate, &trash) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
            sync_dir(&results)?;
            fs::remove_dir_all(&trash)
        })();
        removed.map_err(|e| partial(&done, "candidate not (fully) removed", e))
    }
}
