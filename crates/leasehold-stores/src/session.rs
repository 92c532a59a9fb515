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
//! * **Readers** ([`SessionReader`]) never open the lock file, so they can neither disturb nor
//!   wait for a writer; they see a prefix of whole records.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use leasehold::patterns::append::{AppendError, AppendLog, Durability, LogReader, TornTail};
use leasehold::patterns::durable::create_dir_durable;
#[cfg(feature = "tokio")]
use leasehold::patterns::offload;
use leasehold::{Classify, Error, ErrorClass, HolderInfo, Lease, LeaseOptions, LockDir};

/// The log file inside a session directory.
const LOG_NAME: &str = "session.jsonl";
/// The lock file inside a session directory.
const LOCK_NAME: &str = "session.lock";

/// A validated session ID: 1–128 characters from `[A-Za-z0-9._-]`, not starting with `.`.
///
/// Validation happens once, here, so that everything holding a `SessionId` may use it as a
/// single directory name: it cannot escape `DIR` (`..`, `/`), hide (`.x`), or name anything
/// special. An ID starting with `-` is valid (command lines pass it after `--`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// The longest ID accepted, in characters (bytes: all allowed characters are ASCII).
    pub const MAX_LEN: usize = 128;

    /// Validates `id`.
    pub fn new(id: impl Into<String>) -> Result<SessionId, SessionError> {
        let id = id.into();
        let reason = if id.is_empty() {
            Some("it is empty")
        } else if id.len() > Self::MAX_LEN {
            Some("it is longer than 128 characters")
        } else if id.starts_with('.') {
            Some("it starts with '.'")
        } else if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            Some("it contains a character outside [A-Za-z0-9._-]")
        } else {
            None
        };
        match reason {
            None => Ok(SessionId(id)),
            Some(reason) => Err(SessionError::InvalidId { id, reason }),
        }
    }

    /// Validates an ID given as an OS string (a command-line argument, possibly not UTF-8).
    pub fn from_os(id: &OsStr) -> Result<SessionId, SessionError> {
        match id.to_str() {
            Some(s) => SessionId::new(s),
            None => Err(SessionError::InvalidId {
                id: id.to_string_lossy().into_owned(),
                reason: "it contains a character outside [A-Za-z0-9._-]",
            }),
        }
    }

    /// The ID as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SessionId {
    type Err = SessionError;
    fn from_str(s: &str) -> Result<SessionId, SessionError> {
        SessionId::new(s)
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Errors of the session store. Each names the session (or path) and, where the user can
/// act, says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The ID is not a safe name; nothing was read or created.
    #[error(
        "invalid session ID {id:?}: {reason}; use 1-128 characters from [A-Za-z0-9._-], not starting with '.'"
    )]
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
    /// file should be, permission denied, …) is [`ErrorClass::Usage`] and changed nothing;
    /// a session owned by another process is [`ErrorClass::Contended`]; a lease or log
    /// error has its own class; anything else is [`ErrorClass::Failure`].
    fn class(&self) -> ErrorClass {
        match self {
            SessionError::InvalidId { .. }
            | SessionError::UnknownSession { .. }
            | SessionError::NotJson { .. } => ErrorClass::Usage,
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

impl From<AppendError> for SessionError {
    fn from(e: AppendError) -> SessionError {
        match e {
            AppendError::Lease(e) => SessionError::Lease(e),
            other => SessionError::Log(other),
        }
    }
}

/// The sessions directory `DIR`: where sessions are found and created.
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
    /// system, or a lock file shared with other users); `create` is always on.
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

    /// The session's directory handle if it exists (never following a symlink).
    fn session_dir(&self, id: &SessionId) -> Result<Option<LockDir>, SessionError> {
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

// Windows' Lease carries its target's paths and object name; one State per open writer.
#[cfg_attr(windows, allow(clippy::large_enum_variant))]
enum State {
    /// A new session: nothing on disk, no lease yet.
    Pending,
    /// Lease held, log open.
    Open { lease: Lease, log: AppendLog },
    /// Released; writing needs a new handle.
    Released,
}

/// The single writer of one session. It holds the session's write lease from the moment it
/// is needed (see [`SessionStore::open_writer`]) for the rest of its life, verifies it before
/// every write, and releases it on [`release`](SessionWriter::release) or drop.
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
    /// spread over several lines is written compacted onto one). Invalid JSON is refused
    /// before anything is created or written.
    pub fn append_json(&mut self, text: &str) -> Result<(), SessionError> {
        let text = text.trim();
        let compact;
        let record = if text.contains(['\n', '\r']) {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| self.not_json(e))?;
            compact = value.to_string();
            compact.as_str()
        } else {
            serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| self.not_json(e))?;
            text
        };
        self.append_record(record.as_bytes())
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
            State::Open { lease, log } => Ok(log.append_batch(lease, &records)?),
            State::Released => Err(SessionError::Released {
                id: self.id.clone(),
            }),
            State::Pending => unreachable!("materialize opens the session or fails"),
        }
    }

    /// Checks that `text` is one JSON value and returns it as a single line.
    fn compact_json(&self, text: &str) -> Result<String, SessionError> {
        let text = text.trim();
        if text.contains(['\n', '\r']) {
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| self.not_json(e))?;
            Ok(value.to_string())
        } else {
            serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| self.not_json(e))?;
            Ok(text.to_string())
        }
    }

    /// Appends one JSON value.
    pub fn append_value(&mut self, value: &serde_json::Value) -> Result<(), SessionError> {
        self.append_record(value.to_string().as_bytes())
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
            State::Open { lease, log } => Ok(log.append(lease, record)?),
            State::Released => Err(SessionError::Released {
                id: self.id.clone(),
            }),
            State::Pending => unreachable!("materialize opens the session or fails"),
        }
    }

    /// Creates the session directory (and `DIR`) and takes the lease: right before the
    /// first write, never earlier.
    fn materialize(&mut self) -> Result<(), SessionError> {
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

    /// Takes the session's lease (never waiting) and opens its log, repairing a torn tail.
    fn take(&mut self, dir: LockDir) -> Result<(), SessionError> {
        let lease = self
            .store
            .options
            .create(true)
            .try_acquire_at(&dir, LOCK_NAME)
            .map_err(|e| {
                if e.is_contended() {
                    SessionError::SessionAlreadyOwned {
                        id: self.id.clone(),
                        holders: e.holders().cloned().unwrap_or_default(),
                    }
                } else {
                    SessionError::Lease(e)
                }
            })?;
        let (log, torn) = AppendLog::open_at(&dir, LOG_NAME, &lease, self.store.durability)?;
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

/// A lock-free reader of one session's records, in order: a prefix of whole records (a torn
/// or in-progress final line is skipped and reported by [`torn_tail`](SessionReader::torn_tail)).
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
    fn ids_are_safe_names() {
        for ok in ["a", "-x", "A.b_c-9", "x..y", &"z".repeat(128)] {
            assert!(SessionId::new(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a b",
            "é",
            "a\n",
            &"z".repeat(129),
        ] {
            assert!(
                matches!(SessionId::new(bad), Err(SessionError::InvalidId { .. })),
                "{bad:?}"
            );
        }
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
