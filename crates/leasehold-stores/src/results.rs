//! The isolated result store: candidate file sets that an isolated run produced, which may
//! later be applied to a workspace, discarded, published, aborted, or swept when they expire.
//!
//! Layout of a managed root:
//!
//! ```text
//! ROOT/results/<id>/entry.json      the record: ID, creation time, proposed files
//! ROOT/results/<id>/files/...       the proposed files
//! ROOT/published/<id>.json          a publication (finish): the result is ready to apply
//! ROOT/.result-locks-v1/<sha256(id)>.lock   per-ID operation locks (never removed)
//! ```
//!
//! Why every operation takes the ID's lease: two processes can inspect one result at once,
//! inspection itself may delete an empty result, and apply, discard, finish, abort and sweep
//! all remove candidates. A check of a cached record does not stop two processes from acting
//! on one result at the same time; one operation owner per ID does. So each operation (but the
//! read-only [`ResultStore::pending`]) is admitted through [`KeyedLeases`], then *reinspects*
//! the record under the lease (knowing an ID is not authority: it may have vanished while we
//! waited), mutates, cleans up, and only then releases.
//!
//! Crash safety: a candidate is assembled in a hidden staging directory and renamed into place
//! whole; records and publications are written with [`replace_file`]; a removal first drops the
//! publication (so `pending` never lists a result whose files are gone), then renames the
//! candidate to a hidden trash name before deleting it, so a crash never leaves a half-deleted
//! candidate that looks valid. Hidden names start with `.`, which no ID may.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::patterns::durable::{create_dir_durable, replace_file};
use leasehold::patterns::keyed::{KeyError, KeyLease, KeyedLeases, RESULT_NAMESPACE};
#[cfg(feature = "tokio")]
use leasehold::patterns::offload;
use leasehold::{Budget, Error as LeaseError, HolderInfo};
use serde::{Deserialize, Serialize};

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

/// How a [`ResultError`] should be treated by a caller (the CLI maps these to exit statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The input (ID, source directory, lock path) is unusable; nothing was changed.
    Usage,
    /// Another process owns the ID; nothing was changed.
    Contended,
    /// The wait was cancelled; nothing was changed.
    Cancelled,
    /// An I/O or storage failure.
    Failure,
}

/// Errors of the result store. Each names the ID or path and says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResultError {
    /// The ID is empty after trimming or not safe as a path component.
    #[error("invalid result ID {id:?}: {reason}")]
    InvalidId {
        /// The ID as given.
        id: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// No candidate, publication or lock exists for the ID; nothing was created.
    #[error("unknown-result: no result {id:?} in {root}; nothing was created")]
    Unknown {
        /// The trimmed ID.
        id: String,
        /// The managed root.
        root: PathBuf,
    },
    /// `stage` of an ID that already has a candidate or publication.
    #[error(
        "result-exists: result {id:?} already exists in {root}; discard it or choose another ID"
    )]
    Exists {
        /// The trimmed ID.
        id: String,
        /// The managed root.
        root: PathBuf,
    },
    /// Another process holds the ID's operation lease; nothing was changed.
    #[error(
        "result {id:?} is busy: its operation lease {path} is held by another process{holders}; nothing was changed"
    )]
    Busy {
        /// The trimmed ID.
        id: String,
        /// The lock file.
        path: PathBuf,
        /// Holders the OS revealed.
        holders: HolderInfo,
    },
    /// The wait for the ID's lease was cancelled; nothing was changed.
    #[error("result {id:?}: waiting for its operation lease was cancelled; nothing was changed")]
    Cancelled {
        /// The trimmed ID.
        id: String,
    },
    /// `finish` could not be admitted: nothing was published.
    #[error(
        "durability unavailable: result {id:?} was not published: {source}; retry finish with the same ID"
    )]
    NotPublished {
        /// The trimmed ID.
        id: String,
        /// Why admission failed.
        source: Box<ResultError>,
    },
    /// The source directory of `stage` is unusable; nothing was staged.
    #[error("{path}: {reason}; nothing was staged")]
    Source {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A record does not parse or names an unsafe path; it is left as it is.
    #[error("result {id:?}: {path} is unreadable: {reason}; inspect or discard the result")]
    Corrupt {
        /// The trimmed ID.
        id: String,
        /// The record.
        path: PathBuf,
        /// The parse failure.
        reason: String,
    },
    /// An operation failed after it had changed something.
    #[error("result {id:?}: {op} failed part-way: {source}; done: {done}; not done: {not_done}")]
    Partial {
        /// The trimmed ID.
        id: String,
        /// The operation.
        op: &'static str,
        /// What was done.
        done: String,
        /// What was not done.
        not_done: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// An I/O failure before anything was changed.
    #[error("{path}: {op}: {source}; nothing was changed")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The lock path is unusable, or the lease was lost or could not be taken.
    #[error(transparent)]
    Lock(LeaseError),
}

impl ResultError {
    /// How the caller should treat this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            ResultError::InvalidId { .. }
            | ResultError::Unknown { .. }
            | ResultError::Exists { .. }
            | ResultError::Source { .. } => ErrorClass::Usage,
            ResultError::Busy { .. } => ErrorClass::Contended,
            ResultError::Cancelled { .. } => ErrorClass::Cancelled,
            ResultError::NotPublished { source, .. } => source.class(),
            ResultError::Lock(e) if e.is_unusable_path() => ErrorClass::Usage,
            _ => ErrorClass::Failure,
        }
    }
}

type Result<T, E = ResultError> = std::result::Result<T, E>;

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

/// A callback told when an operation starts waiting for a busy ID (shared by clones).
type Notice = Arc<dyn Fn(&str, &LeaseError) + Send + Sync>;

/// A result store in one managed root (see the module documentation). Clones share the
/// root, the wait policy and the notice.
#[derive(Clone)]
pub struct ResultStore {
    root: PathBuf,
    leases: KeyedLeases,
    notice: Option<(Duration, Notice)>,
}

impl std::fmt::Debug for ResultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultStore")
            .field("root", &self.root)
            .finish()
    }
}

impl ResultStore {
    /// The store in `root` (nothing is opened or created until an operation runs).
    pub fn new(root: impl Into<PathBuf>) -> ResultStore {
        let root = root.into();
        ResultStore {
            leases: KeyedLeases::new(root.clone(), RESULT_NAMESPACE),
            root,
            notice: None,
        }
    }

    /// Caps every wait (see [`KeyedLeases::max_wait`]; 30 s by default).
    pub fn max_wait(mut self, max: Option<Duration>) -> ResultStore {
        self.leases = self.leases.max_wait(max);
        self
    }

    /// Calls `notice` once when an operation has waited `after` for a busy ID and goes on
    /// waiting (a CLI tells its user what it is waiting for).
    pub fn on_wait(
        mut self,
        after: Duration,
        notice: impl Fn(&str, &LeaseError) + Send + Sync + 'static,
    ) -> ResultStore {
        self.notice = Some((after, Arc::new(notice)));
        self
    }

    /// The managed root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The operation lock file of `id`.
    pub fn lock_path(&self, id: &str) -> PathBuf {
        self.leases.lock_path(id)
    }

    fn candidate(&self, id: &str) -> PathBuf {
        self.root.join("results").join(id)
    }

    fn publication(&self, id: &str) -> PathBuf {
        self.root.join("published").join(format!("{id}.json"))
    }

    /// Whether a candidate or a publication stands for `id` (admission only, never authority).
    fn exists(&self, id: &str) -> bool {
        fs::symlink_metadata(self.candidate(id)).is_ok()
            || fs::symlink_metadata(self.publication(id)).is_ok()
    }

    /// Takes `id`'s lease within `budget`. With `create`, a lock file may be allocated for a
    /// new ID; otherwise only for an ID with a candidate or publication.
    fn admit(&self, id: &str, budget: &Budget, create: bool) -> Result<KeyLease> {
        let known = |k: &str| create || self.exists(k);
        if let Some((quick, notice)) = self.first_wait(budget) {
            match self.leases.acquire(id, &quick, known) {
                Err(KeyError::Lease(e)) if e.is_contended() => notice(id, &e),
                other => return other.map_err(|e| self.admission_error(id, e)),
            }
        }
        self.leases
            .acquire(id, budget, known)
            .map_err(|e| self.admission_error(id, e))
    }

    /// [`admit`](Self::admit) for async code: the wait for the ID's lease is reactor-driven
    /// ([`KeyedLeases::acquire_async`]), so it blocks no executor thread and no thread waits
    /// for it; dropping the future abandons it and leaves the ID free.
    #[cfg(feature = "tokio")]
    async fn admit_async(&self, id: &str, budget: &Budget, create: bool) -> Result<KeyLease> {
        let known = |k: &str| create || self.exists(k);
        if let Some((quick, notice)) = self.first_wait(budget) {
            match self.leases.acquire_async(id, &quick, known).await {
                Err(KeyError::Lease(e)) if e.is_contended() => notice(id, &e),
                other => return other.map_err(|e| self.admission_error(id, e)),
            }
        }
        self.leases
            .acquire_async(id, budget, known)
            .await
            .map_err(|e| self.admission_error(id, e))
    }

    /// With an [`on_wait`](Self::on_wait) notice that `budget` outlasts: the budget of the
    /// first, quiet part of the wait, and the notice to give when it runs out.
    fn first_wait(&self, budget: &Budget) -> Option<(Budget, &Notice)> {
        let (after, notice) = self.notice.as_ref()?;
        let first = Instant::now().checked_add(*after)?;
        if budget.deadline().is_some_and(|d| d <= first) {
            return None;
        }
        let quick = match budget.cancel_token() {
            Some(t) => Budget::until(first).with_cancel(t.clone()),
            None => Budget::until(first),
        };
        Some((quick, notice))
    }

    /// Admits `id` asynchronously, then runs `body` under its lease on the blocking pool
    /// (the file work and its fsyncs). The lease is released when `body` ends — even if the
    /// caller dropped the future meanwhile: an operation once admitted completes.
    #[cfg(feature = "tokio")]
    async fn admitted_async<T: Send + 'static>(
        &self,
        id: &str,
        budget: &Budget,
        create: bool,
        body: impl FnOnce(&ResultStore, &str, &KeyLease) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let id = normalize_id(id)?.to_string();
        let lease = self.admit_async(&id, budget, create).await?;
        let store = self.clone();
        offload(move || body(&store, &id, &lease)).await
    }

    fn admission_error(&self, id: &str, e: KeyError) -> ResultError {
        match e {
            KeyError::EmptyKey { key } => ResultError::InvalidId {
                id: key,
                reason: "empty after trimming whitespace",
            },
            KeyError::Unknown { key, root } => ResultError::Unknown { id: key, root },
            KeyError::Lease(e) if e.is_contended() => ResultError::Busy {
                id: id.to_string(),
                path: self.lock_path(id),
                holders: e.holders().cloned().unwrap_or_default(),
            },
            KeyError::Lease(LeaseError::Cancelled { .. }) => {
                ResultError::Cancelled { id: id.to_string() }
            }
            KeyError::Lease(e) => ResultError::Lock(e),
            other => ResultError::Io {
                op: "admit",
                path: self.lock_path(id),
                source: io::Error::other(other.to_string()),
            },
        }
    }

    /// Reads the candidate's record under the lease: `None` when there is no candidate.
    fn entry(&self, id: &str) -> Result<Option<Entry>> {
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

    fn read_publication(&self, id: &str) -> Result<Option<Publication>> {
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

    fn unknown(&self, id: &str) -> ResultError {
        ResultError::Unknown {
            id: id.to_string(),
            root: self.root.clone(),
        }
    }

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
    fn stage_files(&self, source: &Path) -> Result<Vec<String>> {
        let mut files = Vec::new();
        walk(source, source, &mut files)?;
        files.sort();
        create_dirs(&self.root.join("results"))?;
        Ok(files)
    }

    fn stage_admitted(
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

    fn paths_admitted(&self, id: &str, lease: &KeyLease) -> Result<Vec<String>> {
        Ok(self
            .inspect(id, lease, "paths")?
            .map(|e| e.files)
            .unwrap_or_default())
    }

    /// The inspection shared by `paths` and `finish`, under the lease.
    /// `None`: the result was empty and has been removed.
    fn inspect(&self, id: &str, lease: &KeyLease, op: &'static str) -> Result<Option<Entry>> {
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

    fn finish_admitted(&self, id: &str, lease: &KeyLease) -> Result<Vec<String>> {
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

    fn apply_admitted(&self, id: &str, target: &Path, lease: &KeyLease) -> Result<Vec<String>> {
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

    fn remove_admitted(&self, id: &str, budget: &Budget, op: &'static str) -> Result<()> {
        let id = normalize_id(id)?;
        let lease = self.admit(id, budget, false)?;
        self.remove_existing(id, &lease, op)
    }

    fn remove_existing(&self, id: &str, lease: &KeyLease, op: &'static str) -> Result<()> {
        if !self.exists(id) {
            return Err(self.unknown(id));
        }
        self.remove(id, lease, op, Vec::new())
    }

    /// Removes the publication, then the candidate, under `lease`; `done` is what the
    /// operation already did (for the report of a failure part-way).
    fn remove(
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

/// Async faces of the result store (feature `tokio`).
///
/// Each operation waits for its ID's lease asynchronously — reactor-driven, so no executor
/// thread blocks and no thread is parked per waiting operation; dropping the future while it
/// waits abandons the operation with nothing changed. Once admitted, the file work (copies,
/// fsyncs, renames, removals) runs on tokio's blocking pool under the lease and completes even
/// if the future is dropped, so a result is never left half-applied by a cancellation. The
/// admission rules, errors and results are those of the blocking operations.
#[cfg(feature = "tokio")]
impl ResultStore {
    /// [`stage`](Self::stage) without blocking the executor (the source is walked on the
    /// blocking pool before admission).
    pub async fn stage_async(
        &self,
        id: &str,
        source: impl Into<PathBuf>,
        budget: &Budget,
    ) -> Result<Entry> {
        let source = source.into();
        let id = normalize_id(id)?;
        let files = {
            let (store, source) = (self.clone(), source.clone());
            offload(move || store.stage_files(&source)).await?
        };
        self.admitted_async(id, budget, true, move |store, id, lease| {
            store.stage_admitted(id, &source, files, lease)
        })
        .await
    }

    /// [`paths`](Self::paths) without blocking the executor.
    pub async fn paths_async(&self, id: &str, budget: &Budget) -> Result<Vec<String>> {
        self.admitted_async(id, budget, false, |store, id, lease| {
            store.paths_admitted(id, lease)
        })
        .await
    }

    /// [`finish`](Self::finish) without blocking the executor.
    pub async fn finish_async(&self, id: &str, budget: &Budget) -> Result<Vec<String>> {
        let id = normalize_id(id)?;
        let lease = self
            .admit_async(id, budget, false)
            .await
            .map_err(|e| not_published(id, e))?;
        let (store, id) = (self.clone(), id.to_string());
        offload(move || store.finish_admitted(&id, &lease)).await
    }

    /// [`apply`](Self::apply) without blocking the executor.
    pub async fn apply_async(
        &self,
        id: &str,
        target: impl Into<PathBuf>,
        budget: &Budget,
    ) -> Result<Vec<String>> {
        let target = target.into();
        self.admitted_async(id, budget, false, move |store, id, lease| {
            store.apply_admitted(id, &target, lease)
        })
        .await
    }

    /// [`discard`](Self::discard) without blocking the executor.
    pub async fn discard_async(&self, id: &str, budget: &Budget) -> Result<()> {
        self.admitted_async(id, budget, false, |store, id, lease| {
            store.remove_existing(id, lease, "discard")
        })
        .await
    }

    /// [`abort`](Self::abort) without blocking the executor.
    pub async fn abort_async(&self, id: &str, budget: &Budget) -> Result<()> {
        self.admitted_async(id, budget, false, |store, id, lease| {
            store.remove_existing(id, lease, "abort")
        })
        .await
    }

    /// [`sweep`](Self::sweep) on the blocking pool (it never waits for a lease).
    pub async fn sweep_async(&self, older_than: Duration) -> Result<SweepReport> {
        let store = self.clone();
        offload(move || store.sweep(older_than)).await
    }
}

/// `finish`'s admission failures: unusable input stays as it is; anything else means the
/// result was not published and the caller may retry with the same ID.
fn not_published(id: &str, e: ResultError) -> ResultError {
    match e.class() {
        ErrorClass::Usage => e,
        _ => ResultError::NotPublished {
            id: id.to_string(),
            source: Box::new(e),
        },
    }
}

/// Names in `dir` ending with `suffix` (suffix removed) that are valid IDs; hidden and
/// foreign names are ignored. A missing directory is empty.
fn list_names(dir: &Path, suffix: &str) -> Result<Vec<String>> {
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

/// Collects the regular files under `dir` as `/`-separated paths relative to `base`.
fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let source = |path: &Path, reason: String| ResultError::Source {
        path: path.to_path_buf(),
        reason,
    };
    let rd = fs::read_dir(dir).map_err(|e| source(dir, format!("cannot read directory: {e}")))?;
    for e in rd {
        let e = e.map_err(|e| source(dir, format!("cannot read directory: {e}")))?;
        let path = e.path();
        let ft = e
            .file_type()
            .map_err(|e| source(&path, format!("cannot inspect: {e}")))?;
        if ft.is_dir() {
            walk(base, &path, out)?;
        } else if ft.is_file() {
            let rel = path
                .strip_prefix(base)
                .ok()
                .and_then(|r| r.to_str())
                .ok_or_else(|| source(&path, "file name is not valid UTF-8".into()))?;
            out.push(rel.to_string());
        } else {
            return Err(source(
                &path,
                "is not a regular file or directory (symlinks and special files are not staged)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// A record's file path must stay inside the directory it is joined to.
fn is_safe_relative(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)))
}

fn describe_files(verb: &str, files: &[String], target: &Path) -> String {
    if files.is_empty() {
        "nothing".into()
    } else {
        format!("{verb} {} file(s) into {}", files.len(), target.display())
    }
}

fn verify(lease: &KeyLease) -> io::Result<()> {
    lease.verify().map_err(io::Error::other)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Creates `dir` (a directory directly under the managed root) durably: its name and the
/// root's own name survive a power cut (the keyed leases may have created the root without
/// syncing its parent). Found necessary by the power-loss torture (`crates/crashfs`).
fn create_dirs_io(dir: &Path) -> io::Result<()> {
    let root = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(dir);
    create_dir_durable(dir, root)
}

fn create_dirs(dir: &Path) -> Result<()> {
    create_dirs_io(dir).map_err(|source| ResultError::Io {
        op: "create directory",
        path: dir.to_path_buf(),
        source,
    })
}

fn remove_dir_if_present(dir: &Path) -> io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}
