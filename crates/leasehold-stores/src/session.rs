//! The session log: one agent session persisted as an append-only JSON-lines log that exactly
//! one process writes while any number of readers (search, UI, export) read it freely.
//!
//! Layout: a session `ID` is the directory `DIR/ID/` (mode 0700) holding
//!
//! * `session.jsonl` — the records, one JSON value per line (mode 0600), written through
//!   [`AppendLog`]: one `write` per record, a torn tail repaired before the next append;
//! * `session.lock` — the session's write lease (mode 0600), a kernel lease: a crashed writer
//!   never blocks the next one, a live one is never expropriated. It is never removed (removing
//!   a lock file under a holder lets a second writer lock a new inode beside it).
//!
//! The contract, and why:
//!
//! * **IDs are safe names** ([`SessionId`]): `[A-Za-z0-9._-]`, 1–128 characters, not starting
//!   with `.` — so an ID is always exactly one directory entry inside `DIR` (no `..`, no `/`,
//!   no hidden or special names), whatever the caller passes.
//! * **Lazy materialization.** A [`SessionWriter`] for an existing session takes the lease when
//!   it is opened; for a new session it takes it only right before the first record is
//!   written, so a session that never writes leaves nothing on disk — not even its directory.
//! * **One writer.** A second writer gets [`SessionError::SessionAlreadyOwned`] with the holder
//!   pid(s) where the OS reveals them; it never waits, because a live writer keeps its session
//!   for as long as it runs.
//! * **On a directory shared between hosts** whose mount keeps kernel locks on each host, with
//!   [`LeaseOptions::on_shared_mount`] choosing [`SharedMount::Record`], the write lease is a
//!   record lease. A second writer then waits up to one and a half TTLs before it is refused
//!   (a claim from another host is known stale only once it stood unrenewed for a TTL), and
//!   every append is fenced: [`MountLease::verify_for_write`], and the grant's token, claimed
//!   in `session.lock.fence` before the log was opened, compared again. A writer paused past
//!   its TTL while another took the session over appends nothing once resumed.
//! * **Readers** ([`SessionReader`]) never open the lock file, so they can neither disturb nor
//!   wait for a writer; they see a prefix of whole records.
//! * **Records are at most [`MAX_RECORD_LEN`] bytes** (64 MiB, as one line): writers refuse
//!   a longer one ([`SessionError::RecordTooLong`]) before anything is written, so a reader
//!   never holds more than that of a line, and a longer torn tail is skipped in constant
//!   memory.
//! * **Nothing another user prepared is trusted** (the ownership rule of
//!   [`leasehold::check_trusted`]): `DIR`, `DIR/ID` and `session.jsonl` must belong to this
//!   user (or root) and be writable by nobody else, as the lock file must (the lease judges
//!   it when it opens it), unless the store's [`LeaseOptions::allow_shared_state`] says
//!   sharing is intended. Whoever may write the session directory can move `session.lock`
//!   away and admit a second writer; whoever may write the log can forge the records that
//!   readers serve. Writers and readers alike refuse such a session before anything is
//!   created, opened or served.

use std::fmt;
use std::path::{Path, PathBuf};

/// The longest record a session holds (64 MiB, as one line without its newline).
pub use leasehold::patterns::append::MAX_RECORD_LEN;
use leasehold::patterns::append::{AppendError, AppendLog, Durability, LogReader, TornTail};
use leasehold::patterns::durable::create_dir_durable;
#[cfg(feature = "tokio")]
use leasehold::patterns::offload;
use leasehold::{
    Budget, Classify, Error, ErrorClass, HolderInfo, LeaseOptions, LockDir, LockMode, MountLease,
    SharedMount,
};

use crate::fence::Fence;

use crate::id::{IdError, SafeId};

/// The log file inside a session directory.
const LOG_NAME: &str = "session.jsonl";
/// The lock file inside a session directory.
const LOCK_NAME: &str = "session.lock";

/// A session ID: a [`SafeId`] taken exactly as given ([`SafeId::new`]; no trimming), so that
/// everything holding one may use it as the single directory name `DIR/ID` (the rule is
/// [`SafeId`]'s, stated once for every store).
///
/// ```
/// use leasehold_stores::session::SessionId;
///
/// assert_eq!(SessionId::new("run-42").unwrap().as_str(), "run-42");
/// for unsafe_id in ["", "..", "a/b", ".hidden", "tab\tname"] {
///     assert!(SessionId::new(unsafe_id).is_err());
/// }
/// ```
pub type SessionId = SafeId;

/// Errors of the session store. Each names the session (or path) and, where the user can
/// act, says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The ID is not a safe name ([`SafeId`]); nothing was read or created.
    #[error("invalid session ID {id:?}: {reason}; use {}", SafeId::RULE)]
    InvalidId {
        /// The rejected ID (lossily converted if it was not UTF-8).
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No such session exists (reading never creates one).
    #[error("unknown-session: there is no session {id} in {}", dir.display())]
    UnknownSession {
        /// The session asked for.
        id: SessionId,
        /// The sessions directory looked in.
        dir: PathBuf,
    },
    /// Another process holds the session's write lease.
    #[error("session {id} is owned by {}", holders.who())]
    SessionAlreadyOwned {
        /// The session.
        id: SessionId,
        /// The holder pid(s), where the OS reveals them.
        holders: HolderInfo,
    },
    /// A record is not one JSON value; nothing of it was written.
    #[error("session {id}: record is not JSON: {reason}")]
    NotJson {
        /// The session.
        id: SessionId,
        /// The parser's complaint.
        reason: String,
    },
    /// A record is longer than [`MAX_RECORD_LEN`] (64 MiB): nothing of it was written. The
    /// limit keeps what a reader must hold for one record bounded.
    #[error(
        "session {id}: a record of {len} bytes is longer than the limit of {MAX_RECORD_LEN} bytes (64 MiB); nothing of it was written (split it into smaller records)"
    )]
    RecordTooLong {
        /// The session.
        id: SessionId,
        /// The record's length in bytes (as written: compacted, without its newline).
        len: usize,
    },
    /// The write handle was released; open a new one to write again.
    #[error("session {id}: the write handle was released")]
    Released {
        /// The session.
        id: SessionId,
    },
    /// Taking the lease or opening the session directory failed (the error names the path).
    #[error(transparent)]
    Lease(Error),
    /// Opening, repairing, reading or appending to the log failed (the error names the path).
    #[error(transparent)]
    Log(AppendError),
}

impl Classify for SessionError {
    /// How a caller should treat this error: an invalid ID, an unknown session, a record
    /// that is not JSON or an unusable path (a symlink, FIFO or directory where a session
    /// file should be, permission denied, a file or directory another user could have
    /// prepared, …) is [`ErrorClass::Usage`] and changed nothing;
    /// a session owned by another process is [`ErrorClass::Contended`]; a lease or log
    /// error has its own class; anything else is [`ErrorClass::Failure`].
    fn class(&self) -> ErrorClass {
        match self {
            SessionError::InvalidId { .. }
            | SessionError::UnknownSession { .. }
            | SessionError::NotJson { .. }
            | SessionError::RecordTooLong { .. } => ErrorClass::Usage,
            SessionError::SessionAlreadyOwned { .. } => ErrorClass::Contended,
            SessionError::Released { .. } => ErrorClass::Failure,
            SessionError::Lease(e) => e.class(),
            SessionError::Log(e) => e.class(),
        }
    }
}

impl SessionError {
    /// True when the caller's input is at fault and nothing was changed (the class
    /// [`ErrorClass::Usage`]).
    pub fn is_unusable_input(&self) -> bool {
        self.class() == ErrorClass::Usage
    }

    /// True when another process owns the session (the class [`ErrorClass::Contended`]).
    pub fn is_contended(&self) -> bool {
        self.class() == ErrorClass::Contended
    }
}

impl From<IdError> for SessionError {
    fn from(IdError { id, reason }: IdError) -> SessionError {
        SessionError::InvalidId { id, reason }
    }
}

impl From<AppendError> for SessionError {
    fn from(e: AppendError) -> SessionError {
        match e {
            AppendError::Lease(e) => SessionError::Lease(e),
            other => SessionError::Log(other),
        }
    }
}

/// The sessions directory `DIR`: where sessions are found and created.
///
/// A new session exists on disk only from its first record; a reader works while the writer
/// holds the session's lease, and never touches it.
///
/// ```
/// use leasehold_stores::session::{SessionId, SessionStore};
///
/// let dir = tempfile::tempdir().expect("a temporary directory");
/// let store = SessionStore::new(dir.path().join("sessions"));
/// let id = SessionId::new("run-1").unwrap();
/// let mut writer = store.open_writer(&id).unwrap();
/// assert!(!store.exists(&id).unwrap()); // nothing written yet, nothing created
/// writer.append_value(&serde_json::json!({"step": 1})).unwrap();
/// let mut reader = store.reader(&id).unwrap(); // while the writer holds the lease
/// assert_eq!(reader.next().unwrap().unwrap(), br#"{"step":1}"#);
/// assert!(reader.next().is_none());
/// ```
#[derive(Debug, Clone)]
pub struct SessionStore {
    dir: PathBuf,
    durability: Durability,
    options: LeaseOptions,
}

impl SessionStore {
    /// A store rooted at `dir`. Nothing is created until a session is first written.
    pub fn new(dir: impl Into<PathBuf>) -> SessionStore {
        SessionStore {
            dir: dir.into(),
            durability: Durability::default(),
            options: LeaseOptions::new(),
        }
    }

    /// Takes session leases with `options` (for example to accept a network or FUSE file
    /// system); `create` is always on. With [`LeaseOptions::allow_shared_state`] the
    /// sessions directory, the session directories, their logs and their lock files may
    /// belong to another user or be writable by others; without it (the default) such a
    /// session is refused with [`Error::Untrusted`], naming the path.
    pub fn with_lease_options(mut self, options: LeaseOptions) -> SessionStore {
        self.options = options;
        self
    }

    /// Sets the durability of appends (default: `fsync` every record).
    pub fn with_durability(mut self, durability: Durability) -> SessionStore {
        self.durability = durability;
        self
    }

    /// The sessions directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens a write handle on session `id`. If the session exists, its write lease is taken
    /// now (and a torn tail repaired); otherwise nothing happens on disk until the first
    /// append. Never waits: an owned session is [`SessionError::SessionAlreadyOwned`].
    pub fn open_writer(&self, id: &SessionId) -> Result<SessionWriter, SessionError> {
        let mut writer = SessionWriter {
            store: self.clone(),
            id: id.clone(),
            state: State::Pending,
            repaired: None,
        };
        if let Some(dir) = self.session_dir(id)? {
            writer.take(dir)?;
        }
        Ok(writer)
    }

    /// Opens a reader of session `id`'s records. Never touches the lock and creates nothing;
    /// an unknown session is [`SessionError::UnknownSession`].
    pub fn reader(&self, id: &SessionId) -> Result<SessionReader, SessionError> {
        let dir = self
            .session_dir(id)?
            .ok_or_else(|| SessionError::UnknownSession {
                id: id.clone(),
                dir: self.dir.clone(),
            })?;
        let log = LogReader::open_at(&dir, LOG_NAME).map_err(SessionError::Lease)?;
        Ok(SessionReader { log })
    }

    /// Whether session `id` exists (its directory does).
    pub fn exists(&self, id: &SessionId) -> Result<bool, SessionError> {
        Ok(self.session_dir(id)?.is_some())
    }

    /// Refuses session `id` if another user could have prepared what stands at `DIR`,
    /// `DIR/ID` or `DIR/ID/session.jsonl` (missing paths are fine), unless shared state is
    /// allowed. Judged top-down before any of them is opened or created: once `DIR` is
    /// trusted nobody else can replace `DIR/ID` after the look, and once `DIR/ID` is, nobody
    /// else can replace the log. (The lock file is judged by the lease, on its descriptor.)
    fn check_trusted(&self, id: &SessionId) -> Result<(), SessionError> {
        if self.options.allows_shared_state() {
            return Ok(());
        }
        let session = self.dir.join(id.as_str());
        for path in [&self.dir, &session, &session.join(LOG_NAME)] {
            leasehold::check_trusted(path).map_err(SessionError::Lease)?;
        }
        Ok(())
    }

    /// The session's directory handle if it exists (never following a symlink), once
    /// [`check_trusted`](Self::check_trusted) has accepted it.
    fn session_dir(&self, id: &SessionId) -> Result<Option<LockDir>, SessionError> {
        self.check_trusted(id)?;
        let root = match LockDir::open(&self.dir) {
            Ok(root) => root,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(SessionError::Lease(e)),
        };
        match root.child(id.as_str(), false) {
            Ok(dir) => Ok(Some(dir)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(SessionError::Lease(e)),
        }
    }
}

// The open log carries its directory handle (to verify the chain before each append), and
// Windows' Lease its target's paths and object name; one State per open writer.
#[allow(clippy::large_enum_variant)]
enum State {
    /// A new session: nothing on disk, no lease yet.
    Pending,
    /// Lease held, log open.
    Open { lease: Held, log: AppendLog },
    /// Released; writing needs a new handle.
    Released,
}

/// A session's write lease: the kernel's, or (on a mount whose kernel locks stay on each
/// host, when the store's options chose it) a record lease with the fence its token was
/// claimed in.
struct Held {
    lease: MountLease,
    fence: Option<(Fence, u64)>,
}

impl Held {
    /// Before every write: the library's rule ([`MountLease::verify_for_write`]), then the
    /// fence still holds this grant's token. Returns the kernel lease the log verifies.
    /// (A kernel lease alone is verified by the log itself.)
    fn before_write(&self) -> Result<&leasehold::Lease, SessionError> {
        if let Some((fence, token)) = &self.fence {
            self.lease.verify_for_write().map_err(SessionError::Lease)?;
            fence
                .last_checks(*token, &self.lease)
                .map_err(SessionError::Lease)?;
        }
        self.kernel()
    }

    fn kernel(&self) -> Result<&leasehold::Lease, SessionError> {
        self.lease.exclusive_kernel().ok_or_else(|| {
            SessionError::Lease(Error::LeaseLost {
                path: self.lease.path().to_path_buf(),
            })
        })
    }
}

/// The single writer of one session. It holds the session's write lease from the moment it
/// is needed (see [`SessionStore::open_writer`]) for the rest of its life, verifies it before
/// every write, and releases it on [`release`](SessionWriter::release) or drop.
#[must_use = "a session writer releases the session's lease when dropped: keep it while appending"]
pub struct SessionWriter {
    store: SessionStore,
    id: SessionId,
    state: State,
    repaired: Option<TornTail>,
}

impl fmt::Debug for SessionWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionWriter")
            .field("dir", &self.store.dir)
            .field("id", &self.id)
            .field("holds_lease", &self.holds_lease())
            .finish()
    }
}

impl SessionWriter {
    /// The session.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Whether this handle holds the session's write lease now.
    pub fn holds_lease(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// The torn tail a crashed writer left, if this handle truncated one away.
    pub fn repaired_torn_tail(&self) -> Option<TornTail> {
        self.repaired
    }

    /// Appends one JSON value given as text (surrounding whitespace is dropped; a value
    /// spread over several lines is written compacted onto one). Invalid JSON, and a record
    /// longer than [`MAX_RECORD_LEN`], are refused before anything is created or written.
    pub fn append_json(&mut self, text: &str) -> Result<(), SessionError> {
        let text = text.trim();
        let compact;
        let record = if spans_lines(text) {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| self.not_json(e))?;
            compact = value.to_string();
            compact.as_str()
        } else {
            // One line is written as it is: refused by its length before it is parsed.
            self.check_len(text)?;
            serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| self.not_json(e))?;
            text
        };
        self.check_len(record)?;
        self.append_record(record.as_bytes())
    }

    /// Refuses a record longer than [`MAX_RECORD_LEN`] (before anything is created).
    fn check_len(&self, record: &str) -> Result<(), SessionError> {
        match record.len() > MAX_RECORD_LEN {
            true => Err(SessionError::RecordTooLong {
                id: self.id.clone(),
                len: record.len(),
            }),
            false => Ok(()),
        }
    }

    /// Appends several JSON texts as one batch (see [`AppendLog::append_batch`]): every text
    /// is checked first — one that is not JSON fails the batch and nothing of it is written —
    /// then the lease is verified once, the records go out in one `write` and, unless the
    /// durability is [`Durability::None`], one `fdatasync` follows. Returns how many records
    /// were appended.
    pub fn append_batch<'a>(
        &mut self,
        texts: impl IntoIterator<Item = &'a str>,
    ) -> Result<usize, SessionError> {
        let mut records = Vec::new();
        for text in texts {
            records.push(self.compact_json(text)?);
        }
        if records.is_empty() {
            return Ok(0);
        }
        if matches!(self.state, State::Pending) {
            self.materialize()?;
        }
        match &mut self.state {
            State::Open { lease, log } => Ok(log.append_batch(lease.before_write()?, &records)?),
            State::Released => Err(SessionError::Released {
                id: self.id.clone(),
            }),
            State::Pending => unreachable!("materialize opens the session or fails"),
        }
    }

    /// Checks that `text` is one JSON value of at most [`MAX_RECORD_LEN`] bytes and returns
    /// it as a single line.
    fn compact_json(&self, text: &str) -> Result<String, SessionError> {
        let text = text.trim();
        let record = if spans_lines(text) {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| self.not_json(e))?;
            value.to_string()
        } else {
            self.check_len(text)?;
            serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| self.not_json(e))?;
            text.to_string()
        };
        self.check_len(&record)?;
        Ok(record)
    }

    /// Appends one JSON value (refused, with nothing created or written, if it is longer
    /// than [`MAX_RECORD_LEN`] as one line).
    pub fn append_value(&mut self, value: &serde_json::Value) -> Result<(), SessionError> {
        let record = value.to_string();
        self.check_len(&record)?;
        self.append_record(record.as_bytes())
    }

    /// Pushes appended records to stable storage (needed only with
    /// [`Durability::Batch`] or [`Durability::None`]).
    pub fn sync(&mut self) -> Result<(), SessionError> {
        match &mut self.state {
            State::Open { log, .. } => Ok(log.sync()?),
            _ => Ok(()),
        }
    }

    /// Releases the write lease (after syncing a batch). Idempotent; the lock file stays.
    pub fn release(&mut self) {
        // The log is dropped (and a batch synced) before the lease: no write after release.
        self.state = State::Released;
    }

    fn append_record(&mut self, record: &[u8]) -> Result<(), SessionError> {
        if matches!(self.state, State::Pending) {
            self.materialize()?;
        }
        match &mut self.state {
            State::Open { lease, log } => Ok(log.append(lease.before_write()?, record)?),
            State::Released => Err(SessionError::Released {
                id: self.id.clone(),
            }),
            State::Pending => unreachable!("materialize opens the session or fails"),
        }
    }

    /// Creates the session directory (and `DIR`) and takes the lease: right before the
    /// first write, never earlier.
    fn materialize(&mut self) -> Result<(), SessionError> {
        // Another user's directory (or log) may have appeared since the handle was opened.
        self.store.check_trusted(&self.id)?;
        if self.store.durability != Durability::None {
            // `DIR` (and a fresh home above it) must survive a power cut like the records:
            // `LockDir::create` makes the directories but syncs no parent (found by the
            // power-loss torture, `crates/crashfs`).
            let dir = &self.store.dir;
            let base = dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(dir);
            create_dir_durable(dir, base).map_err(|source| {
                SessionError::Lease(Error::Io {
                    op: "create sessions directory",
                    path: dir.clone(),
                    source,
                })
            })?;
        }
        let root = LockDir::create(&self.store.dir).map_err(SessionError::Lease)?;
        let dir = root
            .child(self.id.as_str(), true)
            .map_err(SessionError::Lease)?;
        if self.store.durability != Durability::None {
            // The session directory's name must survive a crash like its records.
            sync_dir(&root).map_err(|source| {
                SessionError::Lease(Error::Io {
                    op: "sync sessions directory",
                    path: self.store.dir.clone(),
                    source,
                })
            })?;
        }
        self.take(dir)
    }

    /// Takes the session's lease (never waiting; under a record lease, at most one and a
    /// half TTLs, the time a claim from another host takes to be known stale) and opens its
    /// log, repairing a torn tail.
    fn take(&mut self, dir: LockDir) -> Result<(), SessionError> {
        let options = self.store.options.create(true);
        let lease = match options.shared_mount() {
            SharedMount::Record { ttl } => options.acquire_mount_lease(
                dir.path().join(LOCK_NAME),
                LockMode::Exclusive,
                &Budget::timeout(ttl + ttl / 2),
            ),
            _ => options
                .try_acquire_at(&dir, LOCK_NAME)
                .map(|l| MountLease::Kernel(l.into())),
        };
        let lease = lease.map_err(|e| {
            if e.is_contended() {
                SessionError::SessionAlreadyOwned {
                    id: self.id.clone(),
                    holders: e.holders().cloned().unwrap_or_default(),
                }
            } else {
                SessionError::Lease(e)
            }
        })?;
        // A record lease's token is claimed before the log is read or repaired: a writer
        // that resumes after a pause then finds it and appends nothing.
        let fence = match lease.fencing_token() {
            Some(token) => {
                let fence = Fence::of(&dir.path().join(LOCK_NAME));
                fence.claim(token).map_err(SessionError::Lease)?;
                Some((fence, token))
            }
            None => None,
        };
        let lease = Held { lease, fence };
        let (log, torn) =
            AppendLog::open_at(&dir, LOG_NAME, lease.before_write()?, self.store.durability)?;
        self.repaired = torn;
        self.state = State::Open { lease, log };
        Ok(())
    }

    fn not_json(&self, e: serde_json::Error) -> SessionError {
        SessionError::NotJson {
            id: self.id.clone(),
            reason: e.to_string(),
        }
    }
}

/// The async face of a [`SessionWriter`] (feature `tokio`), from
/// [`SessionStore::open_writer_async`].
///
/// Appends `fsync` (with the default durability) and the first one creates the session, so
/// every operation runs on tokio's blocking pool; the lease is never waited for (a session
/// owned by another process is refused at once, as in the blocking API), so there is no wait
/// to make asynchronous. The writer sits behind a mutex shared with those blocking steps:
/// appends from several tasks are written one at a time, in the order they take the mutex,
/// and an append whose future is dropped still completes whole — a record is never cut.
#[cfg(feature = "tokio")]
#[derive(Debug, Clone)]
#[must_use = "a session writer releases the session's lease when dropped: keep it while appending"]
pub struct AsyncSessionWriter {
    id: SessionId,
    writer: std::sync::Arc<std::sync::Mutex<SessionWriter>>,
}

#[cfg(feature = "tokio")]
impl SessionStore {
    /// [`open_writer`](Self::open_writer) without blocking the executor (taking the lease of
    /// an existing session and repairing its torn tail run on the blocking pool).
    pub async fn open_writer_async(
        &self,
        id: &SessionId,
    ) -> Result<AsyncSessionWriter, SessionError> {
        let (store, id) = (self.clone(), id.clone());
        let writer = offload({
            let id = id.clone();
            move || store.open_writer(&id)
        })
        .await?;
        Ok(AsyncSessionWriter {
            id,
            writer: std::sync::Arc::new(std::sync::Mutex::new(writer)),
        })
    }
}

#[cfg(feature = "tokio")]
impl AsyncSessionWriter {
    /// The session.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// [`SessionWriter::append_json`] on the blocking pool.
    pub async fn append_json(&self, text: impl Into<String>) -> Result<(), SessionError> {
        let text = text.into();
        self.with(move |w| w.append_json(&text)).await
    }

    /// [`SessionWriter::append_value`] on the blocking pool.
    pub async fn append_value(&self, value: serde_json::Value) -> Result<(), SessionError> {
        self.with(move |w| w.append_value(&value)).await
    }

    /// [`SessionWriter::sync`] on the blocking pool.
    pub async fn sync(&self) -> Result<(), SessionError> {
        self.with(SessionWriter::sync).await
    }

    /// Whether the writer holds the session's write lease (asked after any running append).
    pub async fn holds_lease(&self) -> bool {
        self.with(|w| w.holds_lease()).await
    }

    /// [`SessionWriter::release`] after any running append, on the blocking pool (a batch is
    /// synced first). Every clone of this handle is released with it.
    pub async fn release(&self) {
        self.with(SessionWriter::release).await
    }

    async fn with<T: Send + 'static>(
        &self,
        step: impl FnOnce(&mut SessionWriter) -> T + Send + 'static,
    ) -> T {
        let writer = self.writer.clone();
        offload(move || {
            // A panic in a step is resumed in its caller; later appends are still guarded by
            // the writer's own checks (lease verified before each write, torn tail repaired),
            // so a poisoned mutex is not fatal.
            let mut w = writer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            step(&mut w)
        })
        .await
    }
}

/// Whether `text` has a line break (and so must be compacted onto one line). Byte searches:
/// the standard library's `memchr`, fast even over a record of the size limit.
fn spans_lines(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.contains(&b'\n') || bytes.contains(&b'\r')
}

/// A lock-free reader of one session's records, in order: a prefix of whole records (a torn
/// or in-progress final line is skipped and reported by [`torn_tail`](SessionReader::torn_tail)).
///
/// It holds at most [`MAX_RECORD_LEN`] bytes of a line: a longer torn tail is skipped in
/// constant memory, and a longer whole line (no writer writes one) ends the records with an
/// error naming the log and the line's offset.
#[derive(Debug)]
pub struct SessionReader {
    log: Option<LogReader>,
}

impl SessionReader {
    /// The final line without a newline that reading stopped at, once reached.
    pub fn torn_tail(&self) -> Option<TornTail> {
        self.log.as_ref().and_then(LogReader::torn_tail)
    }
}

impl Iterator for SessionReader {
    type Item = Result<Vec<u8>, SessionError>;

    fn next(&mut self) -> Option<Self::Item> {
        let log = self.log.as_mut()?;
        log.next().map(|r| r.map_err(SessionError::Lease))
    }
}

fn sync_dir(dir: &LockDir) -> std::io::Result<()> {
    dir.sync()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> SessionId {
        SessionId::new(s).unwrap()
    }

    #[test]
    fn an_unsafe_id_is_the_sessions_unusable_input() {
        let e = SessionError::from(SessionId::new("a/b").unwrap_err());
        assert!(matches!(e, SessionError::InvalidId { .. }), "{e}");
        assert!(e.is_unusable_input());
        assert!(
            e.to_string().starts_with("invalid session ID \"a/b\": "),
            "{e}"
        );
    }

    #[test]
    fn a_writer_that_never_writes_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions");
        let store = SessionStore::new(&dir);
        let mut w = store.open_writer(&id("s1")).unwrap();
        assert!(!w.holds_lease());
        assert!(w.append_json("not json").unwrap_err().is_unusable_input());
        w.release();
        assert!(!dir.exists());
        assert!(matches!(
            store.reader(&id("s1")),
            Err(SessionError::UnknownSession { .. })
        ));
    }

    #[test]
    fn a_record_over_the_limit_is_refused_before_anything_is_created() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions");
        let store = SessionStore::new(&dir);
        let mut w = store.open_writer(&id("big")).unwrap();
        let over = format!("\"{}\"", "x".repeat(MAX_RECORD_LEN - 1));
        for e in [
            w.append_json(&over).unwrap_err(),
            w.append_batch(["1", over.as_str()]).unwrap_err(),
        ] {
            assert!(
                matches!(e, SessionError::RecordTooLong { len, .. } if len == MAX_RECORD_LEN + 1),
                "{e}"
            );
            assert!(e.is_unusable_input());
        }
        assert!(!dir.exists(), "a refused record materializes nothing");
    }

    #[test]
    fn a_batch_with_a_non_json_text_writes_and_creates_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions");
        let store = SessionStore::new(&dir).with_durability(Durability::Batch);
        let mut w = store.open_writer(&id("b")).unwrap();
        let err = w.append_batch(["{\"a\":1}", "nope"]).unwrap_err();
        assert!(err.is_unusable_input(), "{err:?}");
        assert!(!dir.exists(), "a refused first batch materializes nothing");
        assert_eq!(
            w.append_batch(["{\"a\":1}", " [2] ", "{\n\"b\": 3\n}"])
                .unwrap(),
            3
        );
        let records: Vec<String> = store
            .reader(&id("b"))
            .unwrap()
            .map(|r| String::from_utf8(r.unwrap()).unwrap())
            .collect();
        assert_eq!(records, ["{\"a\":1}", "[2]", "{\"b\":3}"]);
    }

    #[test]
    fn first_write_takes_the_lease_and_a_second_writer_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::new(tmp.path());
        let mut w = store.open_writer(&id("s")).unwrap();
        w.append_json(" {\"a\": 1} ").unwrap();
        assert!(w.holds_lease());
        let e = store.open_writer(&id("s")).unwrap_err();
        assert!(e.is_contended(), "{e}");
        // The other writer is in this very process: said so, not "another process (pid <ours>)".
        assert!(
            e.to_string()
                .starts_with("session s is owned by this process"),
            "{e}"
        );
        w.append_json("{\n\"b\": 2}").unwrap();
        w.release();
        w.release();
        assert!(matches!(
            w.append_json("1"),
            Err(SessionError::Released { .. })
        ));
        // POSIX: the lock file stays (never removed); Windows: there is none (a kernel object).
        assert_eq!(
            tmp.path().join("s").join(LOCK_NAME).exists(),
            cfg!(unix),
            "lock file is never removed (and never made on Windows)"
        );
        let mut w2 = store.open_writer(&id("s")).unwrap();
        assert!(w2.holds_lease(), "an existing session is leased at open");
        w2.append_value(&serde_json::json!([3])).unwrap();
        let records: Vec<Vec<u8>> = store
            .reader(&id("s"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            records,
            vec![
                b"{\"a\": 1}".to_vec(),
                b"{\"b\":2}".to_vec(),
                b"[3]".to_vec()
            ]
        );
    }

    #[test]
    fn a_pending_writer_is_refused_at_its_first_write() {
        let tmp = tempfile::tempdir().unwrap();
        let store = SessionStore::new(tmp.path());
        let mut late = store.open_writer(&id("s")).unwrap();
        let mut owner = store.open_writer(&id("s")).unwrap();
        owner.append_json("1").unwrap();
        let e = late.append_json("2").unwrap_err();
        assert!(matches!(e, SessionError::SessionAlreadyOwned { .. }), "{e}");
        assert!(!late.holds_lease());
        owner.release();
        late.append_json("3").unwrap();
        let records: Vec<Vec<u8>> = store
            .reader(&id("s"))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(records, vec![b"1".to_vec(), b"3".to_vec()]);
    }

    #[cfg(unix)] // Windows files have no mode bits
    #[test]
    fn modes_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions");
        let mut w = SessionStore::new(&dir).open_writer(&id("s")).unwrap();
        w.append_json("1").unwrap();
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir.clone()), 0o700);
        assert_eq!(mode(dir.join("s")), 0o700);
        assert_eq!(mode(dir.join("s").join(LOG_NAME)), 0o600);
        assert_eq!(mode(dir.join("s").join(LOCK_NAME)), 0o600);
    }

    /// A session directory or log that others may write is refused by
    /// writers and readers alike, before anything is created in it, unless shared state is
    /// allowed. (Other users' files: the CLI's tests, which run as root and chown.)
    #[cfg(unix)] // Windows does not judge ACLs
    #[test]
    fn a_session_others_may_write_is_refused_unless_shared_state_is_allowed() {
        use std::os::unix::fs::PermissionsExt;
        let set_mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let tmp = tempfile::tempdir().unwrap();
        let sdir = tmp.path().join("s");
        std::fs::create_dir(&sdir).unwrap();
        std::fs::write(sdir.join(LOG_NAME), b"{\"forged\":1}\n").unwrap();
        set_mode(&sdir.join(LOG_NAME), 0o600);
        let store = SessionStore::new(tmp.path());
        for (round, (path, mode)) in [(&sdir, 0o777), (&sdir.join(LOG_NAME), 0o666)]
            .into_iter()
            .enumerate()
        {
            set_mode(path, mode);
            let before = std::fs::read_dir(&sdir).unwrap().count();
            for e in [
                store.open_writer(&id("s")).unwrap_err(),
                store.reader(&id("s")).unwrap_err(),
            ] {
                assert!(
                    matches!(&e, SessionError::Lease(Error::Untrusted { path: p, .. }) if p == path),
                    "{e}"
                );
                assert!(e.is_unusable_input(), "{e}");
            }
            assert_eq!(
                std::fs::read_dir(&sdir).unwrap().count(),
                before,
                "the refusal created something"
            );
            let shared = store
                .clone()
                .with_lease_options(LeaseOptions::new().allow_shared_state(true));
            shared
                .open_writer(&id("s"))
                .unwrap()
                .append_json("2")
                .unwrap();
            assert_eq!(shared.reader(&id("s")).unwrap().count(), 2 + round);
            set_mode(path, if path == &sdir { 0o700 } else { 0o600 });
        }
        // A writer opened before the session existed judges it again at its first write.
        let mut late = store.open_writer(&id("t")).unwrap();
        std::fs::create_dir(tmp.path().join("t")).unwrap();
        set_mode(&tmp.path().join("t"), 0o770);
        let e = late.append_json("1").unwrap_err();
        assert!(
            matches!(e, SessionError::Lease(Error::Untrusted { .. })),
            "{e}"
        );
        assert_eq!(std::fs::read_dir(tmp.path().join("t")).unwrap().count(), 0);
    }

    #[test]
    fn opening_an_existing_session_repairs_its_torn_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let sdir = tmp.path().join("s");
        std::fs::create_dir(&sdir).unwrap();
        std::fs::write(sdir.join(LOG_NAME), b"1\n{\"torn\"").unwrap();
        let store = SessionStore::new(tmp.path());
        let mut w = store.open_writer(&id("s")).unwrap();
        assert_eq!(w.repaired_torn_tail(), Some(TornTail { offset: 2, len: 7 }));
        w.append_json("2").unwrap();
        assert_eq!(std::fs::read(sdir.join(LOG_NAME)).unwrap(), b"1\n2\n");
    }
}
