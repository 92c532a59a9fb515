//! [`Document`]: one file of the user's own (settings, state), read and rewritten by several
//! processes without losing an update.
//!
//! The protocol, and why each step is there:
//!
//! * **Writers take the document's lease**, a sibling lock file (`<file>.lock` unless
//!   [`DocumentOptions::lock_path`] says otherwise): every update is a read–modify–write,
//!   and two of them interleaved drop one of the changes. The lease makes them one at a
//!   time, across processes.
//! * **Under the lease, the durable content is read again** — never a copy cached from
//!   before the lease was had — so the change is applied to the latest version.
//! * **The new content is written whole and durably** by the library's one rewrite
//!   ([`replace_file_with`], through the document's directory opened once per update: a
//!   temporary beside the file, fsync, rename over the file, fsync of the directory). The
//!   lease is verified after the temporary's fsync and before the rename: a writer whose
//!   lock file was removed or replaced meanwhile (so another writer may hold a new one)
//!   renames nothing. Under a record lease (a mount whose kernel locks stay on each host,
//!   [`DocumentOptions::on_shared_mount`]) the verification also refuses when too little
//!   of the lease's validity is left ([`MountLease::verify_for_write`]), and the grant's
//!   fencing token is claimed in a fence beside the lock file before the read and compared
//!   again last before the rename, so a holder paused past its TTL writes nothing once a
//!   successor began. Temporaries a killed writer left are
//!   removed at the next update, under the lease, when no writer can be writing one: under
//!   the kernel's exclusive lease a rewrite's temporary has one fixed name
//!   ([`replace_file_held`]), which the next update's rewrite replaces (an update that
//!   writes nothing removes it before it lets the lease go), and the directory is listed ([`remove_temporaries_in`]) at a handle's first update only; under
//!   a record lease every rewrite has a name of its own and every update lists.
//! * **Readers take no lock.** The file at the path is only ever replaced by a rename, and
//!   a rename swaps the whole file at once: a reader opens either the old file or the new
//!   one and reads it to the end, never a mix, whatever the writers do meanwhile.
//!
//! A **version** ([`Version`]) is a digest of the content (the first 128 bits of its
//! SHA-256), not something stored with it: the file holds exactly what the caller wrote, a
//! reader can compute the version of what it read, and the same bytes are the same version in
//! every process and every face (Rust, the CLI, Node, Python). An update that writes the bytes
//! already there makes no new version; [`Document::update_if`] compares the content a caller
//! saw with the content there now, which is what a compare-and-set on a document means.

use std::error::Error as StdError;
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::patterns::durable::{
    InDir, Step, create_dirs, held_temporary_name, remove_temporaries_in, replace_file_held,
    replace_file_with,
};
use leasehold::{
    AnyLease, Budget, Classify, Error as LeaseError, ErrorClass, LeaseHandle, LeaseOptions,
    LockDir, LockMode, MountLease, SharedMount,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::MAX_DOCUMENT_BYTES;
use crate::fence::Fence;

/// The version of a document's content: the first 128 bits of the SHA-256 of its bytes,
/// written as 32 lowercase hex digits ([`Display`](fmt::Display), parsed back by
/// [`FromStr`](std::str::FromStr)). The same bytes are the same version in every process.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version([u8; 16]);

impl Version {
    /// The version of `content`.
    pub fn of(content: &[u8]) -> Version {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(content);
        let mut v = [0u8; 16];
        v.copy_from_slice(&digest[..16]);
        Version(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({self})")
    }
}

/// A text that is not a [`Version`] (32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a document version (32 hex digits, as `doc read` prints them)")]
pub struct BadVersion(pub String);

impl std::str::FromStr for Version {
    type Err = BadVersion;
    fn from_str(s: &str) -> Result<Version, BadVersion> {
        let bad = || BadVersion(s.to_string());
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut v = [0u8; 16];
        for (i, byte) in v.iter_mut().enumerate() {
            let pair = s.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(Version(v))
    }
}

/// One whole version of a document: its content and the [`Version`] of that content.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The file's bytes, exactly as written.
    pub content: Vec<u8>,
    /// Their version.
    pub version: Version,
}

impl Snapshot {
    fn new(content: Vec<u8>) -> Snapshot {
        Snapshot {
            version: Version::of(&content),
            content,
        }
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("version", &self.version)
            .field("len", &self.content.len())
            .finish()
    }
}

/// Errors of a [`Document`]. Each names the document's path; none leaves a torn document.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// Opening the document or taking its lease failed: the path is a symlink, FIFO or
    /// directory ([`LeaseError::NotRegularFile`], naming the path), permission denied, the
    /// lease is held by another process and the budget ran out ([`LeaseError::TimedOut`]),
    /// the lease was lost before the rename ([`LeaseError::LeaseLost`]; nothing was
    /// written), … The inner error says which and what to do.
    #[error(transparent)]
    Lease(LeaseError),
    /// The document, or the content an update would write, is larger than the limit
    /// ([`DocumentOptions::max_bytes`]); nothing was written.
    #[error(
        "{}: {what} is larger than the limit of {limit} bytes; nothing was written (every reader holds a whole version in memory, which the limit bounds: keep the document smaller, or split it into several)",
        path.display()
    )]
    TooLarge {
        /// The document.
        path: PathBuf,
        /// "the document" or "the new content".
        what: &'static str,
        /// The limit in bytes.
        limit: u64,
    },
    /// The document is JSON ([`DocumentOptions::json`], or a JSON helper was used) but what
    /// is in the file does not parse. It is left exactly as it is: an update never
    /// overwrites it; [`Document::replace`] does, when the caller means to.
    #[error(
        "{}: the document does not parse as JSON ({reason}); it is left as it is: repair it, or replace it explicitly",
        path.display()
    )]
    NotParsable {
        /// The document.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },
    /// The content an update would write is not valid (not JSON, for a JSON document);
    /// nothing was written.
    #[error(
        "{}: the new content does not parse as JSON ({reason}); nothing was written",
        path.display()
    )]
    InvalidContent {
        /// The document.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },
    /// [`Document::update_if`] lost: the document is no longer the version the caller saw
    /// (another update came first, or it was removed). Nothing was written; read it again
    /// and retry.
    #[error(
        "{}: the document changed: expected version {expected}, found {}; nothing was written (read it again and retry)",
        path.display(),
        current.map_or_else(|| "no document".to_string(), |v| format!("version {v}"))
    )]
    Conflict {
        /// The document.
        path: PathBuf,
        /// The version the caller expected.
        expected: Version,
        /// The version there now; `None` when there is no document.
        current: Option<Version>,
    },
    /// The caller's closure failed; nothing was written.
    #[error("{}: the update was abandoned: {source}; nothing was written", path.display())]
    Aborted {
        /// The document.
        path: PathBuf,
        /// What the closure reported.
        source: Box<dyn StdError + Send + Sync>,
    },
    /// Reading the document or writing its new version failed before the rename (a full
    /// disk, a read-only file system, …): the old version is whole and in place, and the
    /// update did not happen.
    #[error("{}: {op}: {source}; the old version is left whole", path.display())]
    Io {
        /// The document.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// Syncing the directory failed after the new version was renamed into place: readers
    /// see the new version, but it is not known to survive a crash. Do not treat the update
    /// as done; read the document to see which version is there.
    #[error(
        "{}: the new version is in place but may not survive a crash (directory fsync: {source}); the outcome is unknown, read the document again",
        path.display()
    )]
    OutcomeUnknown {
        /// The document.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Classify for DocumentError {
    /// How a caller should treat this error: a lease or path error has its own class (a
    /// symlink, FIFO or directory at the path is [`ErrorClass::Usage`], a lease held
    /// elsewhere past the budget [`ErrorClass::Contended`]); a document or new content that
    /// is too large or does not parse is [`ErrorClass::Usage`]; a lost
    /// [`update_if`](Document::update_if) is [`ErrorClass::Contended`] (retry after reading
    /// again); anything else is [`ErrorClass::Failure`].
    fn class(&self) -> ErrorClass {
        match self {
            DocumentError::Lease(e) => e.class(),
            DocumentError::TooLarge { .. }
            | DocumentError::NotParsable { .. }
            | DocumentError::InvalidContent { .. } => ErrorClass::Usage,
            DocumentError::Conflict { .. } => ErrorClass::Contended,
            DocumentError::Aborted { .. }
            | DocumentError::Io { .. }
            | DocumentError::OutcomeUnknown { .. } => ErrorClass::Failure,
        }
    }
}

/// How a [`Document`] is opened.
#[derive(Clone)]
pub struct DocumentOptions {
    lock_path: Option<PathBuf>,
    json: bool,
    max_bytes: u64,
    allow_shared_state: bool,
    allow_network_filesystem: bool,
    shared_mount: SharedMount,
    recheck: Duration,
    observer: Option<Observer>,
}

/// A test seam: called after each step of a durable write ([`DocumentOptions::observe`]).
type Observer = std::sync::Arc<dyn Fn(Step) -> io::Result<()> + Send + Sync>;

impl fmt::Debug for DocumentOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DocumentOptions")
            .field("lock_path", &self.lock_path)
            .field("json", &self.json)
            .field("max_bytes", &self.max_bytes)
            .field("allow_shared_state", &self.allow_shared_state)
            .field("allow_network_filesystem", &self.allow_network_filesystem)
            .field("shared_mount", &self.shared_mount)
            .field("recheck", &self.recheck)
            .field("observed", &self.observer.is_some())
            .finish()
    }
}

impl Default for DocumentOptions {
    fn default() -> Self {
        DocumentOptions {
            lock_path: None,
            json: false,
            max_bytes: MAX_DOCUMENT_BYTES,
            allow_shared_state: false,
            allow_network_filesystem: false,
            shared_mount: SharedMount::Refuse,
            recheck: Duration::from_secs(1),
            observer: None,
        }
    }
}

impl DocumentOptions {
    /// The defaults: the lease is `<file>.lock` beside the file, the content is bytes (not
    /// checked as JSON), the size limit is [`MAX_DOCUMENT_BYTES`] (16 MiB), a watcher
    /// re-reads at least once a second.
    pub fn new() -> DocumentOptions {
        DocumentOptions::default()
    }

    /// The lock file writers lease; by default `<file>.lock` beside the file. Every process
    /// writing the document must use the same one.
    #[must_use]
    pub fn lock_path(mut self, path: impl Into<PathBuf>) -> DocumentOptions {
        self.lock_path = Some(path.into());
        self
    }

    /// With `true`, the document is JSON: an update refuses to run on a document that does
    /// not parse ([`DocumentError::NotParsable`]; it is left as it is) and refuses to write
    /// content that does not parse ([`DocumentError::InvalidContent`]).
    #[must_use]
    pub fn json(mut self, json: bool) -> DocumentOptions {
        self.json = json;
        self
    }

    /// The largest document read or written, in bytes (default [`MAX_DOCUMENT_BYTES`]): a
    /// reader holds a whole version in memory, so the limit bounds what it must hold.
    #[must_use]
    pub fn max_bytes(mut self, limit: u64) -> DocumentOptions {
        self.max_bytes = limit;
        self
    }

    /// With `true`, the lock file and its directory may belong to another user or be
    /// group/other-writable ([`LeaseOptions::allow_shared_state`]).
    #[must_use]
    pub fn allow_shared_state(mut self, allow: bool) -> DocumentOptions {
        self.allow_shared_state = allow;
        self
    }

    /// With `true`, the lock file may be on a network or FUSE file system
    /// ([`LeaseOptions::allow_network_filesystem`]: refused by default, since `flock` there
    /// may not exclude across machines).
    #[must_use]
    pub fn allow_network_filesystem(mut self, allow: bool) -> DocumentOptions {
        self.allow_network_filesystem = allow;
        self
    }

    /// What an update does when the lock file's mount keeps kernel locks on each host (NFS
    /// with `local_lock=all`, sshfs, most FUSE: [`LeaseOptions::on_shared_mount`]): refuse
    /// (the default, [`SharedMount::Refuse`]), or take a record lease with a TTL
    /// ([`SharedMount::Record`]), which excludes writers on every host sharing the
    /// directory. Then every write is fenced: it refuses when too little of the lease's
    /// validity is left, and the grant's fencing token is kept in `<lock>.fence` beside the
    /// lock file, claimed before the read and compared before the rename, so a writer that
    /// was paused past its TTL while another took over writes nothing. docs/network-fs.md
    /// says what is guaranteed.
    #[must_use]
    pub fn on_shared_mount(mut self, choice: SharedMount) -> DocumentOptions {
        self.shared_mount = choice;
        self
    }

    /// Calls `hook` after each step of an update's durable write ([`Step`]: the temporary
    /// created, written, fsynced, renamed, the directory fsynced), under the lease. The seam
    /// crash and fault-injection tests use (as
    /// [`replace_file_observed`](leasehold::patterns::durable::replace_file_observed) is): a
    /// hook that blocks lets a test SIGKILL the writer at that step; an error it returns is
    /// handled as that step's I/O error (before the rename: the old version stays, the
    /// temporary is removed; after it: [`DocumentError::OutcomeUnknown`]).
    #[must_use]
    pub fn observe(
        mut self,
        hook: impl Fn(Step) -> io::Result<()> + Send + Sync + 'static,
    ) -> DocumentOptions {
        self.observer = Some(std::sync::Arc::new(hook));
        self
    }

    /// How long a [`Watch`] waits for a change notification before it re-reads the document
    /// anyway (default one second; at least a millisecond). Where the platform has no
    /// notifications it re-reads this often.
    #[must_use]
    pub fn watch_recheck(mut self, every: Duration) -> DocumentOptions {
        self.recheck = every.max(Duration::from_millis(1));
        self
    }
}

/// One file of the user's own, shared by several processes: lock-free whole-version reads,
/// and updates that never lose another process's change (the module docs give the protocol).
///
/// ```
/// use leasehold::Budget;
/// use leasehold_stores::document::{Document, DocumentOptions};
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let doc = Document::open(dir.path().join("settings.json"), DocumentOptions::new());
/// assert!(doc.read().unwrap().is_none()); // no document yet
/// let wait = Budget::timeout(Duration::from_secs(5));
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Settings { count: u64 }
/// let (settings, _version) = doc.update_json(&wait, |s: &mut Settings| s.count += 1).unwrap();
/// assert_eq!(settings.count, 1);
/// let seen = doc.read().unwrap().unwrap(); // a whole version, without the lease
/// assert_eq!(seen.content, b"{\n  \"count\": 1\n}\n");
/// ```
#[derive(Debug, Clone)]
pub struct Document {
    path: PathBuf,
    lock: PathBuf,
    options: DocumentOptions,
    /// Whether an update through this handle (or a clone) has listed the directory for
    /// leftover temporaries: one under a kernel lease lists once (see `under_lease`).
    listed: Arc<AtomicBool>,
    /// The lock file kept open between this handle's (and its clones') kernel-lease updates
    /// ([`LeaseHandle`]: the next update locks it without opening it; after a `fork`, or
    /// when other processes wait at a release, it is reopened). Empty while an update is
    /// taking it, or before the first kernel lease was released.
    warm: Arc<Mutex<Option<LeaseHandle>>>,
    /// The document's directory as the last update opened it, used again by the next while
    /// the path still names it ([`LockDir::still_at_path`]).
    kept_dir: Arc<Mutex<Option<LockDir>>>,
}

impl Document {
    /// The document at `path` (nothing is opened or created until it is read or updated).
    pub fn open(path: impl Into<PathBuf>, options: DocumentOptions) -> Document {
        let path = path.into();
        let lock = options.lock_path.clone().unwrap_or_else(|| {
            let mut name = path.file_name().unwrap_or_default().to_os_string();
            name.push(".lock");
            path.with_file_name(name)
        });
        Document {
            path,
            lock,
            options,
            listed: Arc::default(),
            warm: Arc::default(),
            kept_dir: Arc::default(),
        }
    }

    /// The document's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file writers lease.
    pub fn lock_path(&self) -> &Path {
        &self.lock
    }

    /// Whether the document is checked as JSON ([`DocumentOptions::json`]).
    pub fn is_json(&self) -> bool {
        self.options.json
    }

    /// The current version, whole, or `None` when there is no document. Takes no lock and
    /// never waits for a writer: the file is only ever replaced by a rename, so what is read
    /// is one writer's whole content. A symlink, FIFO or directory at the path is refused
    /// ([`LeaseError::NotRegularFile`], naming it) without being opened for reading.
    pub fn read(&self) -> Result<Option<Snapshot>, DocumentError> {
        let name = self.name()?;
        match self.open_dir() {
            Ok(dir) => self.read_in(&dir, name),
            Err(LeaseError::NotFound { .. }) => Ok(None),
            Err(e) => Err(DocumentError::Lease(e)),
        }
    }

    /// The document's directory (`.` for a bare name).
    fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        }
    }

    /// The document's file name, which must be valid UTF-8.
    fn name(&self) -> Result<&str, DocumentError> {
        self.path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| {
                self.io(
                    "open",
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "not a file name a document can have (not valid UTF-8, or none)",
                    ),
                )
            })
    }

    /// [`read`](Self::read) of the file `name` in the open directory `dir`.
    fn read_in(&self, dir: &LockDir, name: &str) -> Result<Option<Snapshot>, DocumentError> {
        let file = match dir.open_read(name) {
            Ok(Some((file, _))) => file,
            Ok(None) | Err(LeaseError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(DocumentError::Lease(e)),
        };
        let limit = self.options.max_bytes;
        // Room for a small document at once: one read and the one that finds its end.
        let mut bytes = Vec::with_capacity(usize::try_from(limit.min(8191) + 1).unwrap_or(8192));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| self.io("read", e))?;
        if bytes.len() as u64 > limit {
            return Err(DocumentError::TooLarge {
                path: self.path.clone(),
                what: "the document",
                limit,
            });
        }
        Ok(Some(Snapshot::new(bytes)))
    }

    /// The current version parsed as JSON into `T`, or `None` when there is no document.
    /// Lock-free, like [`read`](Self::read).
    pub fn read_json<T: DeserializeOwned>(&self) -> Result<Option<(T, Version)>, DocumentError> {
        let Some(snap) = self.read()? else {
            return Ok(None);
        };
        let value = serde_json::from_slice(&snap.content).map_err(|e| self.not_parsable(e))?;
        Ok(Some((value, snap.version)))
    }

    /// Replaces the document with what `f` makes of its current content (`None`: there is
    /// no document), under the lease, waiting for it as `budget` allows; returns the version
    /// written. `f` is given the durable content read under the lease, so no other update
    /// is lost. If `f` panics or the process dies before the rename, the old version stays
    /// whole.
    pub fn update(
        &self,
        budget: &Budget,
        f: impl FnOnce(Option<&[u8]>) -> Vec<u8>,
    ) -> Result<Snapshot, DocumentError> {
        self.modify(budget, None, Parsed::Neither, |cur| {
            Ok::<_, io::Error>(Some(f(cur.map(|s| s.content.as_slice()))))
        })
        .and_then(|s| self.written(s))
    }

    /// [`update`](Self::update) whose closure may decline: `Ok(None)` writes nothing (the
    /// current version is returned, `None` if there is none), `Err` writes nothing and is
    /// returned as [`DocumentError::Aborted`].
    pub fn try_update<E>(
        &self,
        budget: &Budget,
        f: impl FnOnce(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<Option<Snapshot>, DocumentError>
    where
        E: Into<Box<dyn StdError + Send + Sync>>,
    {
        self.modify(budget, None, Parsed::Neither, |cur| {
            f(cur.map(|s| s.content.as_slice()))
        })
    }

    /// [`update`](Self::update) only if the document is still at `expected` (a
    /// compare-and-set): when another update came first, or the document is gone, nothing is
    /// written and the error is [`DocumentError::Conflict`] with the current version.
    pub fn update_if(
        &self,
        budget: &Budget,
        expected: Version,
        f: impl FnOnce(&[u8]) -> Vec<u8>,
    ) -> Result<Snapshot, DocumentError> {
        self.modify(budget, Some(expected), Parsed::Neither, |cur| {
            // `modify` checked the version, so there is a current document here.
            let content = cur.map(|s| s.content.as_slice()).unwrap_or_default();
            Ok::<_, io::Error>(Some(f(content)))
        })
        .and_then(|s| self.written(s))
    }

    /// [`update_if`](Self::update_if) whose closure may decline, as for
    /// [`try_update`](Self::try_update).
    pub fn try_update_if<E>(
        &self,
        budget: &Budget,
        expected: Version,
        f: impl FnOnce(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<Option<Snapshot>, DocumentError>
    where
        E: Into<Box<dyn StdError + Send + Sync>>,
    {
        self.modify(budget, Some(expected), Parsed::Neither, |cur| {
            f(cur.map(|s| s.content.as_slice()))
        })
    }

    /// Replaces the document with `content` under the lease, without looking at what is
    /// there: the explicit replacement of a document that does not parse. (Content that is
    /// not JSON is still refused for a JSON document.)
    pub fn replace(&self, budget: &Budget, content: Vec<u8>) -> Result<Snapshot, DocumentError> {
        self.modify(budget, None, Parsed::Replacing, |_| {
            Ok::<_, io::Error>(Some(content))
        })
        .and_then(|s| self.written(s))
    }

    /// The JSON document as a `T` (its `Default` when there is none), changed by `f`, written
    /// back (pretty-printed, with a final newline) under the lease. A document that does not
    /// parse as a `T` is [`DocumentError::NotParsable`] and is left as it is. Returns the
    /// value written and its version.
    pub fn update_json<T, F>(&self, budget: &Budget, f: F) -> Result<(T, Version), DocumentError>
    where
        T: DeserializeOwned + Serialize + Default,
        F: FnOnce(&mut T),
    {
        let mut out = None;
        let snap = self.modify(budget, None, Parsed::ByTheCaller, |cur| {
            let mut value: T = match cur {
                Some(s) => serde_json::from_slice(&s.content).map_err(|e| self.not_parsable(e))?,
                None => T::default(),
            };
            f(&mut value);
            let mut bytes =
                serde_json::to_vec_pretty(&value).map_err(|e| DocumentError::InvalidContent {
                    path: self.path.clone(),
                    reason: e.to_string(),
                })?;
            bytes.push(b'\n');
            out = Some(value);
            Ok::<_, DocumentError>(Some(bytes))
        })?;
        let version = snap.map(|s| s.version);
        match (out, version) {
            (Some(v), Some(version)) => Ok((v, version)),
            _ => Err(self.io("update", io::Error::other("the update wrote nothing"))),
        }
    }

    /// A blocking iterator of the versions other processes (or this one) write from now on;
    /// see [`Watch`].
    pub fn watch(&self) -> Result<Watch, DocumentError> {
        Watch::new(self.clone())
    }

    /// [`watch`](Self::watch) for async code (feature `tokio`): see [`AsyncWatch`].
    #[cfg(feature = "tokio")]
    pub async fn watch_async(&self) -> Result<AsyncWatch, DocumentError> {
        let doc = self.clone();
        let every = self.options.recheck;
        let watch = leasehold::patterns::offload(move || doc.watch()).await?;
        Ok(AsyncWatch {
            inner: std::sync::Arc::new(std::sync::Mutex::new(watch)),
            every,
        })
    }

    /// The one read–modify–write: lease, collect leftovers, read the durable content, check
    /// `expected`, run `f`, check what it made, write it durably with the lease verified
    /// before the rename, release. `Ok(None)`: `f` declined and there is no document.
    fn modify<E>(
        &self,
        budget: &Budget,
        expected: Option<Version>,
        parsed: Parsed,
        f: impl FnOnce(Option<&Snapshot>) -> Result<Option<Vec<u8>>, E>,
    ) -> Result<Option<Snapshot>, DocumentError>
    where
        E: Into<Box<dyn StdError + Send + Sync>>,
    {
        let edit = self.begin_edit(budget, parsed == Parsed::Neither)?;
        if let Some(expected) = expected {
            edit.expect(expected)?;
        }
        let new = match f(edit.current.as_ref()) {
            Ok(Some(new)) => new,
            Ok(None) => return Ok(edit.abort()),
            Err(e) => {
                let source: Box<dyn StdError + Send + Sync> = e.into();
                // A closure that reports one of our own errors (the JSON helpers) is passed on.
                return Err(match source.downcast::<DocumentError>() {
                    Ok(ours) => *ours,
                    Err(source) => DocumentError::Aborted {
                        path: self.path.clone(),
                        source,
                    },
                });
            }
        };
        edit.commit_checked(new, parsed != Parsed::ByTheCaller)
            .map(Some)
    }

    /// Starts an update by hand, for callers whose change cannot be one closure call (a
    /// binding running a callback of another language, a `with` block, an `await`): takes
    /// the lease as `budget` allows, collects killed writers' temporaries and reads the
    /// durable content, as [`update`](Self::update) does before it runs its closure. The
    /// lease is held until the [`Edit`] is committed, aborted or dropped. A JSON document
    /// that does not parse is [`DocumentError::NotParsable`] here.
    pub fn begin(&self, budget: &Budget) -> Result<Edit, DocumentError> {
        self.begin_edit(budget, true)
    }

    /// [`begin`](Self::begin) without blocking the executor (feature `tokio`): the wait for
    /// the lease is driven by tokio's reactor (dropping the future abandons it, nothing
    /// held), and the collection and the read run on tokio's blocking pool.
    #[cfg(feature = "tokio")]
    pub async fn begin_async(&self, budget: &Budget) -> Result<Edit, DocumentError> {
        let lease = match self.options.shared_mount {
            // A record lease's wait is a poll: it runs on the blocking pool.
            SharedMount::Record { .. } => {
                let (options, lock, budget) =
                    (self.lease_options(), self.lock.clone(), budget.clone());
                leasehold::patterns::offload(move || {
                    options.acquire_mount_lease(&lock, LockMode::Exclusive, &budget)
                })
                .await
            }
            _ => self
                .lease_options()
                .acquire_async(&self.lock, budget)
                .await
                .map(|l| MountLease::Kernel(l.into())),
        }
        .map_err(DocumentError::Lease)?;
        let doc = self.clone();
        leasehold::patterns::offload(move || doc.under_lease(lease, true)).await
    }

    /// [`update`](Self::update) without blocking the executor (feature `tokio`): the wait
    /// as [`begin_async`](Self::begin_async), `f` on the calling task (keep it short: it
    /// holds the lease), the durable write on tokio's blocking pool.
    #[cfg(feature = "tokio")]
    pub async fn update_async(
        &self,
        budget: &Budget,
        f: impl FnOnce(Option<&[u8]>) -> Vec<u8>,
    ) -> Result<Snapshot, DocumentError> {
        let edit = self.begin_async(budget).await?;
        let new = f(edit.current().map(|s| s.content.as_slice()));
        leasehold::patterns::offload(move || edit.commit(new)).await
    }

    fn lease_options(&self) -> LeaseOptions {
        LeaseOptions::new()
            .allow_shared_state(self.options.allow_shared_state)
            .allow_network_filesystem(self.options.allow_network_filesystem)
            .on_shared_mount(self.options.shared_mount)
    }

    fn begin_edit(&self, budget: &Budget, check_current: bool) -> Result<Edit, DocumentError> {
        let lease = match self.warm_handle() {
            Some(mut handle) => {
                let lease = handle.lock_lease(budget);
                self.put_back(handle);
                lease.map(|l| MountLease::Kernel(l.into()))
            }
            None => {
                self.lease_options()
                    .acquire_mount_lease(&self.lock, LockMode::Exclusive, budget)
            }
        }
        .map_err(DocumentError::Lease)?;
        self.under_lease(lease, check_current)
    }

    /// The kept lock file, taken out for this update (`None`: none kept, or another update
    /// of this handle's is taking it). Never where a record lease may be chosen: that choice
    /// is the mount's, made by every acquisition (`LeaseOptions::acquire_mount_lease`).
    fn warm_handle(&self) -> Option<LeaseHandle> {
        if matches!(self.options.shared_mount, SharedMount::Record { .. }) {
            return None;
        }
        self.warm
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Keeps `handle` for the next update, unless another was kept meanwhile.
    fn put_back(&self, handle: LeaseHandle) {
        let mut slot = self.warm.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(handle);
        }
    }

    /// Releases an update's lease; a kernel lease's lock file stays open in the kept handle
    /// ([`Lease::release_into`]: unless other processes wait), and the first one's opens it.
    fn let_go(&self, lease: &mut MountLease) {
        if let MountLease::Kernel(AnyLease::Exclusive(l)) = lease
            && !matches!(self.options.shared_mount, SharedMount::Record { .. })
        {
            let mut slot = self.warm.lock().unwrap_or_else(PoisonError::into_inner);
            if slot.is_none() {
                *slot = self.lease_options().open_handle(&self.lock).ok();
            }
            if let Some(handle) = slot.as_mut() {
                return l.release_into(handle);
            }
        }
        lease.release();
    }

    /// The steps of a start once the lease is held: collect, read, check. The directory is
    /// opened once, here, and the collection, the read and the rewrite all go through it.
    fn under_lease(&self, lease: MountLease, check_current: bool) -> Result<Edit, DocumentError> {
        let name = self.name()?;
        // A record lease's token is claimed before anything is read: a predecessor that
        // resumes after a pause then finds it and writes nothing.
        if let Some(token) = lease.fencing_token() {
            Fence::of(&self.lock)
                .claim(token)
                .map_err(DocumentError::Lease)?;
        }
        let (dir, current) = match self.open_dir() {
            Ok(dir) => {
                // Under the lease no writer is mid-rewrite: any temporary is a killed one's.
                // Under the kernel's exclusive lease a killed writer of this kind left at
                // most the one name the rewrite replaces itself (`replace_file_held`), so the
                // listing is needed only for what others left (a record lease's writers, on
                // a mount whose locks stay on each host): once per handle is enough.
                if !held(&lease) || !self.listed.load(Ordering::Relaxed) {
                    remove_temporaries_in(&dir, name)
                        .map_err(|e| self.io("remove leftover temporaries", e))?;
                    self.listed.store(true, Ordering::Relaxed);
                }
                let current = self.read_in(&dir, name)?;
                (Some(dir), current)
            }
            // No directory yet: nothing to collect, no document; the rewrite creates it.
            Err(LeaseError::NotFound { .. }) => (None, None),
            Err(e) => return Err(self.io("remove leftover temporaries", e.into())),
        };
        if self.options.json
            && check_current
            && let Some(cur) = &current
        {
            serde_json::from_slice::<serde::de::IgnoredAny>(&cur.content)
                .map_err(|e| self.not_parsable(e))?;
        }
        Ok(Edit {
            doc: self.clone(),
            lease,
            dir,
            current,
            settled: false,
        })
    }

    /// The document's directory: the one the last update used while the path still names
    /// it (one `stat` instead of an open, an `fstat` and a close), else opened now.
    fn open_dir(&self) -> Result<LockDir, LeaseError> {
        let mut kept = self.kept_dir.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(dir) = kept.as_ref().filter(|d| d.still_at_path()) {
            return Ok(dir.clone());
        }
        let dir = LockDir::open(self.dir())?;
        *kept = Some(dir.clone());
        Ok(dir)
    }

    /// Refuses content an update must not write: over the limit, or not JSON for a JSON
    /// document.
    fn check_new(&self, new: &[u8], json: bool) -> Result<(), DocumentError> {
        let limit = self.options.max_bytes;
        if new.len() as u64 > limit {
            return Err(DocumentError::TooLarge {
                path: self.path.clone(),
                what: "the new content",
                limit,
            });
        }
        if self.options.json && json {
            serde_json::from_slice::<serde::de::IgnoredAny>(new).map_err(|e| {
                DocumentError::InvalidContent {
                    path: self.path.clone(),
                    reason: e.to_string(),
                }
            })?;
        }
        Ok(())
    }

    /// Writes `new` durably in `dir` (the directory the update opened; `None`: there was
    /// none, it is created now), verifying `lease` after the temporary's fsync and before
    /// the rename.
    fn write(
        &self,
        lease: &MountLease,
        dir: Option<&LockDir>,
        new: &[u8],
    ) -> Result<(), DocumentError> {
        let created;
        let dir = match dir {
            Some(dir) => dir,
            None => {
                if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    create_dirs(dir).map_err(|e| self.io("create the directory", e))?;
                }
                created = LockDir::open(self.dir())
                    .map_err(|e| self.io("write the new version", e.into()))?;
                &created
            }
        };
        let mut lost = None;
        let mut renamed = false;
        let rewrite = match held(lease) {
            true => replace_file_held,
            false => replace_file_with,
        };
        let written = rewrite(&self.path, new, &mut InDir(dir), &mut |step, _| {
            match step {
                Step::Synced => {
                    if let Err(e) = lease.verify_for_write() {
                        lost = Some(e);
                        return Err(io::Error::other("the lease was lost"));
                    }
                }
                Step::Renamed => renamed = true,
                _ => {}
            }
            if let Some(hook) = &self.options.observer {
                hook(step)?;
            }
            // Last before the rename (after the observer, which a test uses to pause a writer
            // between its verification and its rename): the fence, then the validity left
            // on this process's clock (a successor takes over only once it has run out).
            if let (Step::Synced, Some(token)) = (step, lease.fencing_token())
                && let Err(e) = Fence::of(&self.lock).last_checks(token, lease)
            {
                lost = Some(e);
                return Err(io::Error::other("the lease was lost"));
            }
            Ok(())
        });
        match (written, lost) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(lost)) => Err(DocumentError::Lease(lost)),
            (Err(e), None) if renamed => Err(DocumentError::OutcomeUnknown {
                path: self.path.clone(),
                source: e,
            }),
            (Err(e), None) => Err(self.io("write the new version", e)),
        }
    }

    /// What an update whose closure wrote returns: `modify` answers `None` only when the
    /// closure declined, which these callers' closures never do.
    fn written(&self, s: Option<Snapshot>) -> Result<Snapshot, DocumentError> {
        s.ok_or_else(|| self.io("update", io::Error::other("the update wrote nothing")))
    }

    fn io(&self, op: &'static str, source: io::Error) -> DocumentError {
        DocumentError::Io {
            path: self.path.clone(),
            op,
            source,
        }
    }

    fn not_parsable(&self, e: serde_json::Error) -> DocumentError {
        DocumentError::NotParsable {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }
}

/// Which of a JSON document's two checks (the current content parses before the change, the
/// new content after it) an update leaves out ([`Document::modify`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parsed {
    /// Neither: both are made.
    Neither,
    /// The current content is not looked at: an explicit replacement.
    Replacing,
    /// Both are the caller's: it parses the current content as the type it changes (a
    /// stricter check, reported as the same error) and writes a value serialized by
    /// serde_json, JSON by construction ([`Document::update_json`]).
    ByTheCaller,
}

/// Whether `lease` is the kernel's exclusive lease, which excludes every other writer of the
/// document for the whole rewrite, so that its temporary can have one fixed name
/// ([`replace_file_held`]). A record lease's writers on other hosts are not excluded by this
/// host's kernel: each of their rewrites keeps a name of its own.
fn held(lease: &MountLease) -> bool {
    matches!(lease, MountLease::Kernel(_)) && lease.mode() == LockMode::Exclusive
}

/// An update in progress ([`Document::begin`]): the document's lease is held and
/// [`current`](Self::current) is the durable content read under it. [`commit`](Self::commit)
/// writes the new version; [`abort`](Self::abort), or dropping the `Edit` (a panic, an
/// exception in a binding's callback), writes nothing and releases the lease.
pub struct Edit {
    doc: Document,
    lease: MountLease,
    /// The document's directory, opened under the lease (`None`: it did not exist).
    dir: Option<LockDir>,
    current: Option<Snapshot>,
    /// Whether nothing of a killed writer's is left for this update to remove: set once it
    /// wrote (its rewrite replaced the one temporary name) or removed that name itself.
    settled: bool,
}

impl fmt::Debug for Edit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Edit")
            .field("path", &self.doc.path)
            .field("current", &self.current)
            .finish()
    }
}

impl Edit {
    /// The current version, read under the lease (`None`: there is no document).
    pub fn current(&self) -> Option<&Snapshot> {
        self.current.as_ref()
    }

    /// Writes `new` as the next version (refused, writing nothing, when it is over the size
    /// limit or, for a JSON document, does not parse), durably, with the lease verified
    /// before the rename; then releases the lease. Returns the version written.
    pub fn commit(self, new: Vec<u8>) -> Result<Snapshot, DocumentError> {
        self.commit_checked(new, true)
    }

    /// [`commit`](Self::commit); `json: false` when `new` is JSON by construction (a value
    /// serialized by serde_json), so that only its size is checked.
    fn commit_checked(mut self, new: Vec<u8>, json: bool) -> Result<Snapshot, DocumentError> {
        self.doc.check_new(&new, json)?;
        self.doc.write(&self.lease, self.dir.as_ref(), &new)?;
        self.settled = true;
        self.doc.let_go(&mut self.lease);
        Ok(Snapshot::new(new))
    }

    /// [`DocumentError::Conflict`] unless the current version is `expected` (a
    /// compare-and-set done by hand: check, then [`commit`](Self::commit)); the lease is
    /// still held either way.
    pub fn expect(&self, expected: Version) -> Result<(), DocumentError> {
        let now = self.current.as_ref().map(|s| s.version);
        if now == Some(expected) {
            return Ok(());
        }
        Err(DocumentError::Conflict {
            path: self.doc.path.clone(),
            expected,
            current: now,
        })
    }

    /// Writes nothing and releases the lease; returns the current version.
    pub fn abort(mut self) -> Option<Snapshot> {
        self.clear_leftover();
        self.doc.let_go(&mut self.lease);
        self.current.take()
    }

    /// For an update that writes nothing, while it still holds the lease: removes the one
    /// temporary name a killed writer under the kernel's lease can have left
    /// ([`replace_file_held`]; a writing update's rewrite replaces it itself), so that it
    /// is gone after the next update whatever that update did. Under a record lease the
    /// update's listing collected everything already.
    fn clear_leftover(&mut self) {
        if std::mem::replace(&mut self.settled, true) || !held(&self.lease) {
            return;
        }
        if let (Some(dir), Ok(name)) = (&self.dir, self.doc.name()) {
            // Whatever cannot be removed there (a directory) the next rewrite steps over.
            let _ = dir.remove_file(&held_temporary_name(name));
        }
    }
}

impl Drop for Edit {
    /// An update dropped unfinished (a panic, an exception in a binding's callback) removes
    /// what [`Edit::abort`] removes, before its fields, the lease among them, are dropped.
    fn drop(&mut self) {
        self.clear_leftover();
    }
}

/// A blocking iterator of a document's new versions ([`Document::watch`]): each item is the
/// whole version there when the watcher looked, different from the last one it yielded.
///
/// * **Coalescing.** Versions written faster than the watcher reads may be skipped: it
///   yields the version it finds, never an older one after a newer one, and always the
///   latest one eventually. A removal of the document is not a version (the watcher waits
///   for the next one).
/// * **Notifications and the re-check.** On Linux it waits for the directory's change
///   notifications (inotify) and re-reads at least once per
///   [`DocumentOptions::watch_recheck`] anyway (a notification can be lost, e.g. when the
///   directory is replaced); elsewhere it re-reads that often.
/// * An error reading the document is yielded as an `Err` item; the watch goes on.
pub struct Watch {
    doc: Document,
    last: Option<Version>,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    notify: Option<std::os::fd::OwnedFd>,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("path", &self.doc.path)
            .field("last", &self.last)
            .finish()
    }
}

impl Watch {
    fn new(doc: Document) -> Result<Watch, DocumentError> {
        // Subscribed before the first read: a change after it is then never missed.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let notify = subscribe(&doc.path);
        let last = doc.read()?.map(|s| s.version);
        Ok(Watch {
            doc,
            last,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            notify,
        })
    }

    /// The version the watcher last saw (at the start: the one there when it began).
    pub fn seen(&self) -> Option<Version> {
        self.last
    }

    /// The next new version, waiting at most `timeout` for one: `Ok(None)` when none came
    /// in that time. The building block of the iterator, for callers that must stop a watch
    /// (a binding's unsubscribe checks its flag between calls).
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Snapshot>, DocumentError> {
        let end = std::time::Instant::now() + timeout;
        loop {
            if let Some(snap) = self.doc.read()?
                && Some(snap.version) != self.last
            {
                self.last = Some(snap.version);
                return Ok(Some(snap));
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.wait(left.min(self.doc.options.recheck));
        }
    }

    /// Waits for a change notification, or `at_most`.
    fn wait(&mut self, at_most: Duration) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(fd) = &self.notify {
            use rustix::event::{PollFd, PollFlags, Timespec, poll};
            let timeout = Timespec {
                tv_sec: at_most.as_secs().try_into().unwrap_or(i64::MAX),
                tv_nsec: at_most.subsec_nanos().into(),
            };
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            if poll(&mut fds, Some(&timeout)).is_ok() {
                // Drain what is queued: the document is re-read whatever the events said.
                let mut buf = [0u8; 4096];
                while let Ok(n) = rustix::io::read(fd, &mut buf) {
                    if n == 0 {
                        break;
                    }
                }
                return;
            }
        }
        std::thread::sleep(at_most);
    }
}

impl Iterator for Watch {
    type Item = Result<Snapshot, DocumentError>;

    /// Blocks until a new version is there (never ends by itself).
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(snap)) => return Some(Ok(snap)),
                Ok(None) => {}
                Err(e) => {
                    // Not re-read at once: an error that persists is reported once a re-check.
                    let every = self.doc.options.recheck;
                    self.wait(every);
                    return Some(Err(e));
                }
            }
        }
    }
}

/// A [`Watch`] for async code ([`Document::watch_async`], feature `tokio`):
/// [`next`](Self::next) resolves with the next new version, with the same coalescing. The
/// waiting runs on tokio's blocking pool, one re-check interval at a time, so no executor
/// thread is blocked; dropping a `next` future abandons it (the pool's step ends within the
/// interval) and loses no version: the next call yields the latest.
#[cfg(feature = "tokio")]
#[derive(Clone)]
pub struct AsyncWatch {
    inner: std::sync::Arc<std::sync::Mutex<Watch>>,
    every: Duration,
}

#[cfg(feature = "tokio")]
impl fmt::Debug for AsyncWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncWatch").finish_non_exhaustive()
    }
}

#[cfg(feature = "tokio")]
impl AsyncWatch {
    /// The next new version (never ends by itself; an error reading the document is
    /// returned, and the watch goes on at the next call).
    pub async fn next(&self) -> Result<Snapshot, DocumentError> {
        loop {
            let watch = self.inner.clone();
            let every = self.every;
            let step = leasehold::patterns::offload(move || {
                watch
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .next_timeout(every)
            });
            if let Some(snap) = step.await? {
                return Ok(snap);
            }
        }
    }
}

/// An inotify descriptor watching the document's directory for the events a new version
/// makes (a rename into it, a file closed after writing, a creation or removal); `None` where
/// it cannot be had (the watch then re-reads every re-check).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn subscribe(path: &Path) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::inotify::{CreateFlags, WatchFlags, add_watch, init};
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let fd = init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
    let flags = WatchFlags::MOVED_TO
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
        | WatchFlags::ONLYDIR;
    add_watch(&fd, dir, flags).ok()?;
    Some(fd)
}
