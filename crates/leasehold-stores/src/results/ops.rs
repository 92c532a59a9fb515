//! The operations on one result, each under its ID's lease: stage, paths, finish, apply,
//! discard and abort (and the removal they share).

use std::io;
use std::path::Path;

use leasehold::{Budget, CancelToken};

use super::admission::{Held, verify};
use super::error::{Result, ResultError, not_published};
use leasehold::{FileKind, LockDir};

use super::files::{
    self, PRIVATE_DIR, Removal, TARGET_DIR, copy, describe_files, now_ms, remove_tree,
    remove_tree_until, walk,
};
use super::{Entry, Publication, ResultStore};
use crate::id::SafeId;

impl ResultStore {
    /// Creates the candidate `id` holding a copy of the regular files under `source`
    /// (creating the managed root if missing). An ID that already has a candidate or a
    /// publication is [`ResultError::Exists`]. Returns the record.
    ///
    /// Once admitted, the budget's cancellation token is still obeyed at every file: a
    /// cancelled stage removes its partial copy and is [`ResultError::Stopped`] (nothing
    /// staged).
    pub fn stage(&self, id: &str, source: &Path, budget: &Budget) -> Result<Entry> {
        let budget = &budget.started();
        let id = SafeId::trimmed(id)?;
        let id = id.as_str();
        let files = self.stage_files(source)?;
        let lease = self.admit(id, budget, true)?;
        self.stage_admitted(id, source, files, &lease, budget.cancel_token())
    }

    /// Before admission: the sorted regular files under `source` (walked through handles),
    /// and the results directory (0700, with the root).
    pub(super) fn stage_files(&self, source: &Path) -> Result<Vec<String>> {
        let src = open_source(source)?;
        let mut files = Vec::new();
        walk(&src, "", &mut files)?;
        files.sort();
        self.area("results", true)?;
        Ok(files)
    }

    pub(super) fn stage_admitted(
        &self,
        id: &str,
        source: &Path,
        files: Vec<String>,
        lease: &Held,
        cancel: Option<&CancelToken>,
    ) -> Result<Entry> {
        if self.exists(id) {
            return Err(ResultError::Exists {
                id: id.to_string(),
                root: self.root.clone(),
            });
        }
        if let Some(hook) = &self.staging {
            hook(id);
        }
        let src = open_source(source)?;
        let results = self
            .area("results", true)?
            .ok_or_else(|| self.unknown(id))?;
        // Assembled under a hidden name and renamed into place whole: a crash never leaves a
        // candidate without its record. Only the ID's owner touches this name.
        let staging = format!(".stage-{id}");
        let entry = Entry {
            id: id.to_string(),
            created_ms: now_ms(),
            files,
        };
        let io_error = |source| ResultError::Io {
            op: "stage",
            path: self.candidate(id),
            source,
        };
        let built = (|| {
            remove_tree(&results, &staging).map_err(|e| (false, e))?;
            let dir = results
                .create_child(&staging, PRIVATE_DIR)
                .map_err(|e| (false, e.into()))?;
            let into = dir
                .create_child("files", PRIVATE_DIR)
                .map_err(|e| (false, e.into()))?;
            for rel in &entry.files {
                if stopped(cancel) {
                    return Ok(false);
                }
                copy(&src, &into, rel, PRIVATE_DIR)?;
            }
            let record = serde_json::to_vec_pretty(&entry)
                .map_err(io::Error::other)
                .map_err(|e| (false, e))?;
            if stopped(cancel) {
                return Ok(false);
            }
            verify(lease).map_err(|e| (false, e))?;
            files::write(&dir, "entry.json", 0o600, &record).map_err(|e| (false, e))?;
            results
                .rename(&staging, &results, id)
                .map_err(|e| (false, e.into()))?;
            results.sync().map_err(|e| (false, e))?;
            Ok(true)
        })();
        match built {
            Ok(true) => Ok(entry),
            Ok(false) => {
                let removed = remove_tree(&results, &staging);
                Err(ResultError::Stopped {
                    id: id.to_string(),
                    op: "stage",
                    done: match removed {
                        Ok(_) => "nothing (the partial copy was removed)".into(),
                        Err(e) => format!(
                            "nothing (the partial copy {} is left for sweep: {e})",
                            results.path().join(&staging).display()
                        ),
                    },
                    not_done: "the candidate was not created; stage it again".into(),
                })
            }
            Err((from_source, e)) => {
                let _ = remove_tree(&results, &staging);
                Err(match from_source {
                    true => ResultError::Source {
                        path: source.to_path_buf(),
                        reason: e.to_string(),
                    },
                    false => io_error(e),
                })
            }
        }
    }

    /// Inspects `id` under its lease: the relative paths the result would change. An empty
    /// result (no files) is removed and reported as an empty list.
    pub fn paths(&self, id: &str, budget: &Budget) -> Result<Vec<String>> {
        let budget = &budget.started();
        let id = SafeId::trimmed(id)?;
        let id = id.as_str();
        let lease = self.admit(id, budget, false)?;
        self.paths_admitted(id, &lease, budget)
    }

    pub(super) fn paths_admitted(
        &self,
        id: &str,
        lease: &Held,
        budget: &Budget,
    ) -> Result<Vec<String>> {
        let _fence = self.fence(id, budget)?;
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
        lease: &Held,
        op: &'static str,
    ) -> Result<Option<Entry>> {
        let entry = self.entry(id)?;
        let published = self.read_publication(id)?;
        match (entry, published) {
            (None, None) => Err(self.unknown(id)),
            (Some(e), _) if !e.files.is_empty() => Ok(Some(e)),
            // No files (or a publication whose candidate is gone): nothing to apply.
            _ => {
                self.remove(id, lease, op, Vec::new(), None)?;
                Ok(None)
            }
        }
    }

    /// Inspects `id` and publishes it (`published/<id>.json`), returning its paths. An empty
    /// result is removed instead. If `id` cannot be admitted, nothing is published and the
    /// error is [`ResultError::NotPublished`]: durability is unavailable, and the caller may
    /// retry with the same ID.
    pub fn finish(&self, id: &str, budget: &Budget) -> Result<Vec<String>> {
        let budget = &budget.started();
        let id = SafeId::trimmed(id)?;
        let id = id.as_str();
        let lease = self
            .admit(id, budget, false)
            .map_err(|e| not_published(id, e))?;
        self.finish_admitted(id, &lease, budget)
    }

    pub(super) fn finish_admitted(
        &self,
        id: &str,
        lease: &Held,
        budget: &Budget,
    ) -> Result<Vec<String>> {
        let _fence = self.fence(id, budget).map_err(|e| not_published(id, e))?;
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
            let published = self
                .area("published", true)
                .map_err(|e| io::Error::other(e.to_string()))?
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            verify(lease)?;
            files::write(&published, &format!("{id}.json"), 0o600, &doc)
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
    ///
    /// Once admitted, the budget's cancellation token is still obeyed before every file: a
    /// cancelled apply stops there, keeping candidate and publication (apply again to
    /// finish), and is [`ResultError::Stopped`], saying what it wrote.
    pub fn apply(&self, id: &str, target: &Path, budget: &Budget) -> Result<Vec<String>> {
        let budget = &budget.started();
        let id = SafeId::trimmed(id)?;
        let id = id.as_str();
        let lease = self.admit(id, budget, false)?;
        self.apply_admitted(id, target, &lease, budget)
    }

    pub(super) fn apply_admitted(
        &self,
        id: &str,
        target: &Path,
        lease: &Held,
        budget: &Budget,
    ) -> Result<Vec<String>> {
        let cancel = budget.cancel_token();
        let _fence = self.fence(id, budget)?;
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
        let into = files::open_dir(target, true)
            .and_then(|t| t.ok_or_else(|| io::Error::from(io::ErrorKind::NotFound)))
            .map_err(|e| ResultError::Unusable {
                path: target.to_path_buf(),
                reason: e.to_string(),
            })?;
        let from = self
            .area("results", false)?
            .and_then(|r| files::child(&r, id, None).transpose())
            .transpose()
            .and_then(|c| c.map(|c| files::child(&c, "files", None)).transpose())
            .map(Option::flatten);
        let from = match from {
            Ok(Some(dir)) => Some(dir),
            Ok(None) if entry.files.is_empty() => None,
            Ok(None) => {
                return Err(ResultError::Corrupt {
                    id: id.to_string(),
                    path: self.candidate(id).join("files"),
                    reason: "missing".into(),
                });
            }
            Err(e) => {
                return Err(ResultError::Corrupt {
                    id: id.to_string(),
                    path: self.candidate(id),
                    reason: e.to_string(),
                });
            }
        };
        // What a killed apply of this ID left in its TARGET goes first; then this apply is
        // recorded, so that if it is killed too, the next owner of the ID can clean up after
        // it (see `applying`).
        verify(lease).map_err(|source| ResultError::Io {
            op: "apply",
            path: self.lock_path(id),
            source,
        })?;
        self.settle_applying(id)?;
        self.mark_applying(id, target)?;
        let mut written: Vec<String> = Vec::new();
        for rel in &entry.files {
            if stopped(cancel) {
                let left = entry.files.len() - written.len();
                return Err(ResultError::Stopped {
                    id: id.to_string(),
                    op: "apply",
                    done: describe_files("wrote", &written, target),
                    not_done: format!(
                        "{left} file(s) not written starting with {rel:?}; {} (apply again to finish)",
                        self.kept(id)
                    ),
                });
            }
            let step = (|| {
                verify(lease)?;
                let from = from
                    .as_ref()
                    .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
                copy(from, &into, rel, TARGET_DIR).map_err(|(_, e)| e)
            })();
            if let Err(source) = step {
                let left = entry.files.len() - written.len();
                return Err(ResultError::Partial {
                    id: id.to_string(),
                    op: "apply",
                    done: describe_files("wrote", &written, target),
                    not_done: format!(
                        "{left} file(s) not written starting with {rel:?}; {}",
                        self.kept(id)
                    ),
                    source,
                });
            }
            written.push(rel.clone());
        }
        let done = vec![describe_files("wrote", &written, target)];
        // Every temporary was renamed into place: nothing of this apply is left to clean.
        self.unmark_applying(id).map_err(|e| ResultError::Partial {
            id: id.to_string(),
            op: "apply",
            done: done.join(", "),
            not_done: self.kept(id),
            source: io::Error::other(e.to_string()),
        })?;
        self.remove(id, lease, "apply", done, cancel)?;
        Ok(entry.files)
    }

    /// Removes the candidate and publication of `id` under its lease.
    ///
    /// Once admitted, the budget's cancellation token is still obeyed: before anything is
    /// removed (nothing changes), and at every file of the candidate's deletion, which then
    /// stops with the candidate already out of the store (its rest left under a hidden
    /// trash name for [`sweep`](Self::sweep)); either way [`ResultError::Stopped`] says
    /// which.
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
        let budget = &budget.started();
        let id = SafeId::trimmed(id)?;
        let id = id.as_str();
        let lease = self.admit(id, budget, false)?;
        self.remove_existing(id, &lease, op, budget)
    }

    pub(super) fn remove_existing(
        &self,
        id: &str,
        lease: &Held,
        op: &'static str,
        budget: &Budget,
    ) -> Result<()> {
        let _fence = self.fence(id, budget)?;
        if !self.exists(id) {
            return Err(self.unknown(id));
        }
        self.remove(id, lease, op, Vec::new(), budget.cancel_token())
    }

    /// What of `id` is still in the store, as a message's "not done" says it: looked at, not
    /// assumed (an apply whose lease had been split said "candidate and
    /// publication kept" of what another process had removed).
    pub(super) fn kept(&self, id: &str) -> String {
        let stands = |area: &str, name: &str| match self.area(area, false) {
            Ok(Some(dir)) => !matches!(dir.entry(name), Ok(None)),
            Ok(None) => false,
            // Unreadable: something may still stand there; do not say it is gone.
            Err(_) => true,
        };
        let publication = format!("{id}.json");
        match (stands("results", id), stands("published", &publication)) {
            (true, true) => "candidate and publication kept",
            (true, false) => "candidate kept (it has no publication)",
            (false, true) => "publication kept, but its candidate is gone",
            (false, false) => "candidate and publication are no longer in the store",
        }
        .to_string()
    }

    /// Removes the publication, then the candidate, under `lease`; `done` is what the
    /// operation already did (for the report of a failure part-way). `cancel` is obeyed
    /// before anything is removed and at every file of the candidate's deletion.
    pub(super) fn remove(
        &self,
        id: &str,
        lease: &Held,
        op: &'static str,
        mut done: Vec<String>,
        cancel: Option<&CancelToken>,
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
        let stop = |done: &[String], not_done: String| ResultError::Stopped {
            id: id.to_string(),
            op,
            done: if done.is_empty() {
                "nothing".into()
            } else {
                done.join(", ")
            },
            not_done,
        };
        if stopped(cancel) {
            return Err(stop(&done, self.kept(id)));
        }
        verify(lease).map_err(|e| partial(&done, &self.kept(id), e))?;
        // A killed apply's temporaries in its TARGET go before the record that names them.
        self.settle_applying(id)
            .map_err(|e| partial(&done, &self.kept(id), io::Error::other(e.to_string())))?;
        let area = |name| {
            self.area(name, false)
                .map_err(|e| partial(&done, &self.kept(id), io::Error::other(e.to_string())))
        };
        let (published, results) = (area("published")?, area("results")?);
        // The candidate is judged before anything is removed: only a real candidate (a
        // directory with its regular entry.json) is ours to remove.
        let candidate = match &results {
            None => None,
            Some(results) => match results.entry(id) {
                Ok(None) => None,
                Ok(Some(FileKind::Directory)) => {
                    let dir = files::child(results, id, None);
                    match dir
                        .as_ref()
                        .map(|d| d.as_ref().map(|d| d.entry("entry.json")))
                    {
                        Ok(Some(Ok(Some(FileKind::Regular)))) => Some(results),
                        Ok(None) => None,
                        _ => {
                            return Err(partial(
                                &done,
                                &self.kept(id),
                                io::Error::other(format!(
                                    "{} is not a result (no regular entry.json); left as it is",
                                    self.candidate(id).display()
                                )),
                            ));
                        }
                    }
                }
                Ok(Some(_)) | Err(_) => {
                    return Err(partial(
                        &done,
                        &self.kept(id),
                        io::Error::other(format!(
                            "{} is not a real directory; left as it is",
                            self.candidate(id).display()
                        )),
                    ));
                }
            },
        };
        if let Some(published) = &published {
            let name = format!("{id}.json");
            match published.entry(&name) {
                Ok(Some(FileKind::Regular)) => match published.remove_file(&name) {
                    Ok(_) => {
                        let _ = published.sync();
                        done.push(format!("removed {}", self.publication(id).display()));
                    }
                    Err(e) => return Err(partial(&done, &self.kept(id), e.into())),
                },
                Ok(None) => {}
                Ok(Some(_)) => {
                    return Err(partial(
                        &done,
                        &self.kept(id),
                        io::Error::other(format!(
                            "{} is not a regular file; left as it is",
                            self.publication(id).display()
                        )),
                    ));
                }
                Err(e) => return Err(partial(&done, &self.kept(id), e.into())),
            }
        }
        let Some(results) = candidate else {
            return Ok(());
        };
        let trash = format!(".trash-{id}");
        let removed = (|| {
            remove_tree(results, &trash)?;
            if !results.rename(id, results, &trash)? {
                return Ok(Removal::Missing);
            }
            results.sync()?;
            remove_tree_until(results, &trash, &|| stopped(cancel))
        })();
        match removed {
            Ok(Removal::Stopped) => {
                done.push(format!(
                    "took the candidate out of the store (moved to {})",
                    results.path().join(&trash).display()
                ));
                Err(stop(
                    &done,
                    format!(
                        "deleting its files: the rest of {} is left for sweep",
                        results.path().join(&trash).display()
                    ),
                ))
            }
            Ok(_) => Ok(()),
            Err(e) => Err(partial(&done, "candidate not (fully) removed", e)),
        }
    }
}

/// Whether the operation's cancellation token fired. Asked at every file boundary once an
/// operation is admitted, so that SIGINT/SIGTERM (the CLI's token) stop a long stage, apply
/// or discard within one file, with the store consistent (they ran on for
/// up to 14 s). One `poll` of the token's pipe per file.
fn stopped(cancel: Option<&CancelToken>) -> bool {
    cancel.is_some_and(CancelToken::is_cancelled)
}

/// Opens a source directory for `stage` (the caller's path: followed; below it nothing is).
fn open_source(source: &Path) -> Result<LockDir> {
    let unusable = |reason: String| ResultError::Source {
        path: source.to_path_buf(),
        reason,
    };
    files::open_dir(source, false)
        .map_err(|e| unusable(e.to_string()))?
        .ok_or_else(|| unusable("does not exist".into()))
}
