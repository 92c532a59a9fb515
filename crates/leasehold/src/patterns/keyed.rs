//! Per-key operation leases: one kernel lease per (managed root, normalized key).
//!
//! A store whose records can be inspected, mutated and removed by several processes at once
//! (an isolated run's *result*, for example) needs one operation owner per record. Re-checking a
//! cached record does not give that: two processes can both see "present" and both delete.
//! [`KeyedLeases`] hands out an exclusive [`Lease`] per key, so that whoever holds it may
//! reinspect, mutate and clean up the record without anyone else acting on it meanwhile.
//!
//! Contract, and why each rule is there:
//!
//! * **Keys are trimmed.** Keys equal after trimming are the same record and share one lease;
//!   a key that is empty after trimming is refused ([`KeyError::EmptyKey`]).
//! * **Lock names are hashes.** The lock file of a key is `<sha256(trimmed key) in lowercase
//!   hex>.lock`, so no key can name a path (`..`, `/`, NUL and overlong keys all hash to a
//!   plain 64-character name).
//! * **Versioned namespace outside the records.** Lock files live in `<root>/<namespace>/`,
//!   a directory the caller names (the result store's is its own `.result-locks-v1`), never
//!   inside the removable record, so removing a record never removes its lock.
//! * **Unlinked only by the collector's protocol.** Recreating a lock pathname while an older
//!   holder still owns the first inode would create a second mutex, so nothing but
//!   [`KeyedLeases::collect`] ever removes a lock file, and it does so only like this:
//!   1. every acquisition holds the namespace's collector lock (`<namespace>/.collector.lock`,
//!      never removed) *shared* across open → lock → verify of a key's lock file; the
//!      collector holds it *exclusive*, without waiting (a busy namespace is skipped), so no
//!      acquisition is ever between opening and verifying a file the collector removes;
//!   2. per file, the collector opens it without following, takes `LOCK_EX|LOCK_NB` (a held
//!      file is kept), lists the live keys *again* (every earlier holder has released, so a
//!      record it created is now visible), checks that the path still names the inode it
//!      locked, and unlinks while it holds the lock;
//!   3. an acquisition that waited in a key's queue (it waits without the collector lock, so
//!      a collection is never held up by a wait) may wake on an unlinked inode: the post-lock
//!      inode check every lease makes sees the path no longer names it and reopens — a key
//!      without a record is then unknown, as if it had never been seen.
//!
//!   Two holders of one key would need two inodes both named by the path while held, and the
//!   only unlink happens under the lock of the inode it removes.
//! * **Rooted opens.** The root directory is opened, the namespace is opened as a real child
//!   directory of that handle (a symlink is refused), and the lock file is opened relative to
//!   the namespace handle (`openat`, `O_NOFOLLOW`) — never by joining path strings. A
//!   non-regular lock file (directory, symlink, FIFO, …) is refused and left as it is; a lock
//!   file's bytes and mode are never changed. The lease holds directory handles, so its lock
//!   stays held if the managed root or the namespace is renamed, but newcomers would then
//!   resolve the path elsewhere: [`KeyLease::verify`] checks the whole chain from the root
//!   path and fails closed.
//! * **Admission.** An unknown key — no existing lock file, and the caller's `known`
//!   predicate says there is no record — allocates nothing (not even the namespace directory)
//!   and fails with [`KeyError::Unknown`]. Knowing a key is not authority: the caller must
//!   inspect its record again once the lease is held, because it may have vanished meanwhile.
//! * **Bounded waits.** A wait is bounded by the caller's [`Budget`] and, unless lifted with
//!   [`KeyedLeases::max_wait`], by [`DEFAULT_MAX_WAIT`]. A timeout abandons the waiter only; a
//!   holder keeps its lease until it releases or its process dies. Cancellation is checked
//!   once more after the lock was obtained, right before the operation is admitted, so a
//!   cancelled caller never starts an operation.
//! * Different keys have different lock files and proceed in parallel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::lease::{self, claim::Mode};
use crate::{Budget, Classify, Error, ErrorClass, Lease, LeaseOptions, LockDir};

/// How long an acquisition waits at most unless [`KeyedLeases::max_wait`] says otherwise.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

/// The namespace's collector lock (see the module documentation): held shared by every
/// acquisition across open → lock → verify, exclusive by a collection. Hidden, so it is never
/// mistaken for a key's lock file; never removed.
pub const COLLECTOR_LOCK: &str = ".collector.lock";

/// However short the caller's budget (even "try once"), an acquisition waits this long for a
/// collection that holds the collector lock: a collection holds it for a batch of
/// non-blocking lock-and-unlink steps (microseconds each), and "the key is busy" must mean
/// that a key holder has it, not that a collector was passing by.
const COLLECTOR_GRACE: Duration = Duration::from_secs(1);

/// How many lock files a collection locks before it lists the live keys again.
const COLLECT_BATCH: usize = 256;

/// Errors of keyed admission.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty (or only whitespace) after trimming.
    #[error("key {key:?} is empty after trimming whitespace; give a non-empty ID")]
    EmptyKey {
        /// The key as given.
        key: String,
    },
    /// Nothing is known about the key: no lock file and no record. Nothing was created.
    #[error(
        "unknown key {key:?} under {root}: no record and no lock file exists (nothing was created)"
    )]
    Unknown {
        /// The trimmed key.
        key: String,
        /// The managed root.
        root: PathBuf,
    },
    /// The lease could not be had or the lock path is unusable (see [`Error`]).
    #[error(transparent)]
    Lease(#[from] Error),
    /// A collection could not list the keys that have records; nothing more was removed.
    #[error("cannot list the records under {root}: {source}; lock files were kept")]
    Records {
        /// The managed root.
        root: PathBuf,
        /// Why the listing failed.
        source: std::io::Error,
    },
}

impl Classify for KeyError {
    /// How a caller should treat this error: an empty or unknown key is
    /// [`ErrorClass::Usage`] (nothing was created); a lease error has its own class.
    fn class(&self) -> ErrorClass {
        match self {
            KeyError::EmptyKey { .. } | KeyError::Unknown { .. } => ErrorClass::Usage,
            KeyError::Lease(e) => e.class(),
            KeyError::Records { .. } => ErrorClass::Failure,
        }
    }
}

/// The lowercase hex SHA-256 of the trimmed key, plus `.lock`: the lock file's name.
///
/// ```
/// use leasehold::patterns::keyed::lock_name;
/// assert_eq!(lock_name("  abc\n"), lock_name("abc"));
/// assert!(lock_name("../etc/passwd").ends_with(".lock"));
/// ```
pub fn lock_name(key: &str) -> String {
    let mut name = String::with_capacity(69);
    lease::push_sha256_hex(&mut name, key.trim().as_bytes());
    name.push_str(".lock");
    name
}

/// Trims `key`, refusing one that is empty afterwards.
pub fn normalize(key: &str) -> Result<&str, KeyError> {
    let trimmed = key.trim();
    if trimmed.is_empty() {
        return Err(KeyError::EmptyKey {
            key: key.to_string(),
        });
    }
    Ok(trimmed)
}

/// Per-key leases under one managed root (see the module documentation for the contract).
///
/// ```
/// use leasehold::Budget;
/// use leasehold::patterns::keyed::KeyedLeases;
///
/// let root = tempfile::tempdir().unwrap();
/// let keys = KeyedLeases::new(root.path(), ".example-locks-v1");
/// // Unknown keys allocate nothing.
/// assert!(keys.try_acquire("r1", |_| false).is_err());
/// // A known key gets its lease; aliases after trimming share it.
/// let lease = keys.acquire("r1", &Budget::no_wait(), |_| true).unwrap();
/// assert!(keys.try_acquire(" r1 ", |_| true).unwrap_err().to_string().contains("held"));
/// drop(lease);
/// ```
#[derive(Debug, Clone)]
pub struct KeyedLeases {
    root: PathBuf,
    namespace: String,
    max_wait: Option<Duration>,
    options: LeaseOptions,
}

impl KeyedLeases {
    /// Leases for keys under `root`, with lock files in `root/namespace/`. The namespace is
    /// the caller's store's: name it with a version (`.NAME-locks-v1`), because lock files are
    /// never removed and their names are this layout's, so a future layout must get a new
    /// directory rather than reinterpret old lock files.
    pub fn new(root: impl Into<PathBuf>, namespace: &str) -> KeyedLeases {
        KeyedLeases {
            root: root.into(),
            namespace: namespace.to_string(),
            max_wait: Some(DEFAULT_MAX_WAIT),
            options: LeaseOptions::new(),
        }
    }

    /// Caps every wait at `max` (`None`: only the caller's budget bounds it). Defaults to
    /// [`DEFAULT_MAX_WAIT`], so that a forgotten unlimited budget cannot park an operation
    /// forever behind a wedged holder.
    #[must_use]
    pub fn max_wait(mut self, max: Option<Duration>) -> KeyedLeases {
        self.max_wait = max;
        self
    }

    /// Takes every lease with `options` (their `create` is managed here). With
    /// [`LeaseOptions::allow_shared_state`] the managed root and the lock namespace may belong
    /// to another user or be writable by others (see [`check_trusted`](crate::check_trusted)),
    /// as lock files then may; without it (the default) such a root or namespace is refused
    /// with [`Error::Untrusted`]: whoever may write it can remove or replace lock files under
    /// their holders (issue 18).
    #[must_use]
    pub fn with_options(mut self, options: LeaseOptions) -> KeyedLeases {
        self.options = options;
        self
    }

    /// The managed root and the lock namespace, judged as lock files are: nobody else may
    /// be able to write them, unless shared state is allowed. Every acquisition checks this
    /// first; a store that creates directories under the root before it asks for a lease
    /// calls it before it creates anything.
    ///
    /// # Errors
    /// [`Error::Untrusted`] naming the directory and who else could write it.
    pub fn check_dirs(&self) -> Result<(), KeyError> {
        if self.options.allows_shared_state() {
            return Ok(());
        }
        crate::check_trusted(&self.root)?;
        crate::check_trusted(self.root.join(&self.namespace))?;
        Ok(())
    }

    /// The managed root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the lock file of `key` is (for messages and inspection; leases never open it by
    /// this path).
    pub fn lock_path(&self, key: &str) -> PathBuf {
        self.root.join(&self.namespace).join(lock_name(key))
    }

    /// Takes `key`'s lease if it is free right now. See [`acquire`](Self::acquire).
    pub fn try_acquire(
        &self,
        key: &str,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        self.acquire(key, &Budget::no_wait(), known)
    }

    /// Takes `key`'s lease, waiting within `budget` (and [`max_wait`](Self::max_wait)).
    ///
    /// `known` is asked, with the trimmed key, only when no lock file exists yet: `true`
    /// allows the lock file (and the namespace directory) to be created. When it answers
    /// `false`, nothing is created and the result is [`KeyError::Unknown`]. Whatever `known`
    /// answered, the caller must reinspect its record under the returned lease.
    pub fn acquire(
        &self,
        key: &str,
        budget: &Budget,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        let adm = self.prepare(key)?;
        let budget = self.capped(budget);
        let mut vouch = Vouch::new(known);
        let mut at = self.namespace(&adm, &mut vouch)?;
        let lease = loop {
            let entered = self.enter(&at.ns, &Self::graced(&budget))?;
            let step = self.try_once(&adm, at, &mut vouch);
            drop(entered);
            match step? {
                Step::Done(lease, ns) => break (lease, ns),
                Step::Again(next) => at = next,
                Step::Wait(next) => {
                    let waited = self
                        .options
                        .create(next.create)
                        .acquire_at(&next.ns, &adm.name, &budget);
                    match self.after_wait(&adm, next, waited, &mut vouch)? {
                        Step::Done(lease, ns) => break (lease, ns),
                        Step::Again(next) | Step::Wait(next) => at = next,
                    }
                }
            }
        };
        admit(adm.key, lease, &budget)
    }

    /// [`acquire`](Self::acquire) for async code (feature `tokio`): the same admission rules
    /// (unknown keys allocate nothing, the [`max_wait`](Self::max_wait) cap, the cancellation
    /// re-check right before admission, the collector lock), but the wait never blocks an
    /// executor thread and costs no thread of its own (see [`LeaseOptions::acquire_at_async`]).
    /// Dropping the future abandons the wait and leaves the key free. `known` and the
    /// directory opens run inline: they are a few local, non-blocking metadata calls. The
    /// future owns the budget (pass it by value, or `&budget`), as for
    /// [`LeaseOptions::acquire_async`].
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        &self,
        key: &str,
        budget: impl Into<Budget>,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        let adm = self.prepare(key)?;
        let budget = self.capped(&budget.into());
        let mut vouch = Vouch::new(known);
        let mut at = self.namespace(&adm, &mut vouch)?;
        let lease = loop {
            let entered = self.enter_async(&at.ns, &Self::graced(&budget)).await?;
            let step = self.try_once(&adm, at, &mut vouch);
            drop(entered);
            match step? {
                Step::Done(lease, ns) => break (lease, ns),
                Step::Again(next) => at = next,
                Step::Wait(next) => {
                    let waited = self
                        .options
                        .create(next.create)
                        .acquire_at_async(&next.ns, &adm.name, &budget)
                        .await;
                    match self.after_wait(&adm, next, waited, &mut vouch)? {
                        Step::Done(lease, ns) => break (lease, ns),
                        Step::Again(next) | Step::Wait(next) => at = next,
                    }
                }
            }
        };
        admit(adm.key, lease, &budget)
    }

    /// Where to try first: the existing namespace (its lock file is opened without creating
    /// it), or — for a key `known` vouches for — a namespace created now.
    fn namespace(
        &self,
        adm: &Admission<'_>,
        vouch: &mut Vouch<impl FnOnce(&str) -> bool>,
    ) -> Result<At, KeyError> {
        match &adm.ns {
            Some(ns) => Ok(At {
                ns: ns.clone(),
                create: false,
            }),
            None => Ok(At {
                ns: self.allocate(adm, vouch)?,
                create: true,
            }),
        }
    }

    /// One non-blocking try, made while the collector lock is held shared: open, lock and
    /// verify the key's lock file. A missing file is created only for a key `known` vouches
    /// for; a busy one is waited for afterwards, outside the collector lock.
    fn try_once(
        &self,
        adm: &Admission<'_>,
        at: At,
        vouch: &mut Vouch<impl FnOnce(&str) -> bool>,
    ) -> Result<Step, KeyError> {
        let tried = self
            .options
            .create(at.create)
            .try_acquire_at(&at.ns, &adm.name);
        match tried {
            Ok(lease) => Ok(Step::Done(lease, at.ns)),
            Err(Error::NotFound { .. }) if !at.create => Ok(Step::Again(At {
                ns: self.allocate(adm, vouch)?,
                create: true,
            })),
            Err(e) if e.is_contended() => Ok(Step::Wait(at)),
            Err(e) => Err(e.into()),
        }
    }

    /// The outcome of a wait in a key's queue. A lock file the collector removed meanwhile
    /// (the waiter woke on an unlinked inode and found no file to reopen) makes the key
    /// unknown unless `known` vouches for it.
    fn after_wait(
        &self,
        adm: &Admission<'_>,
        at: At,
        waited: crate::Result<Lease>,
        vouch: &mut Vouch<impl FnOnce(&str) -> bool>,
    ) -> Result<Step, KeyError> {
        match waited {
            Ok(lease) => Ok(Step::Done(lease, at.ns)),
            Err(Error::NotFound { .. }) if !at.create => Ok(Step::Again(At {
                ns: self.allocate(adm, vouch)?,
                create: true,
            })),
            Err(e) => Err(e.into()),
        }
    }

    /// Holds the namespace's collector lock shared (POSIX; Windows keeps no lock files to
    /// collect, and its named objects have no shared mode).
    fn enter(&self, ns: &LockDir, budget: &Budget) -> Result<Option<Lease>, KeyError> {
        if cfg!(windows) {
            return Ok(None);
        }
        let entered =
            self.options
                .create(true)
                .acquire_at_mode(ns, COLLECTOR_LOCK, budget, Mode::Shared)?;
        Ok(Some(entered))
    }

    #[cfg(feature = "tokio")]
    async fn enter_async(&self, ns: &LockDir, budget: &Budget) -> Result<Option<Lease>, KeyError> {
        if cfg!(windows) {
            return Ok(None);
        }
        let entered = self
            .options
            .create(true)
            .acquire_at_mode_async(ns, COLLECTOR_LOCK, budget, Mode::Shared)
            .await?;
        Ok(Some(entered))
    }

    /// The budget of the wait for the collector lock: the caller's, but at least
    /// [`COLLECTOR_GRACE`] (a cancellation still ends it at once).
    fn graced(budget: &Budget) -> Budget {
        budget.at_least(COLLECTOR_GRACE)
    }

    /// Removes the lock files of keys that have no record, that nobody holds, and that are
    /// older than `older_than` (by modification time: lock files are never written, so it is
    /// their creation), by the protocol in the module documentation. `live` lists the keys
    /// that have records; it is called once before and once after each batch of lock files
    /// is locked. Never waits: a held lock file is kept, and a namespace whose collector lock
    /// is busy (an acquisition is between open and verify, or another collection runs) is
    /// left alone and reported [`busy`](Collection::busy).
    ///
    /// Lock files that are not a key's (foreign or hidden names, non-regular files) are left
    /// as they are and not counted.
    ///
    /// # Errors
    /// [`KeyError::Records`] when `live` fails, [`KeyError::Lease`] for an unusable root or
    /// namespace or an I/O failure.
    pub fn collect(
        &self,
        older_than: Duration,
        mut live: impl FnMut() -> std::io::Result<Vec<String>>,
    ) -> Result<Collection, KeyError> {
        let mut report = Collection::default();
        let root = match LockDir::open(&self.root) {
            Ok(dir) => dir,
            Err(Error::NotFound { .. }) => return Ok(report),
            Err(e) => return Err(e.into()),
        };
        let ns = match root.child(&self.namespace, false) {
            Ok(ns) => ns,
            Err(Error::NotFound { .. }) => return Ok(report),
            Err(e) => return Err(e.into()),
        };
        let names: Vec<String> = ns
            .names()?
            .into_iter()
            .filter_map(|n| n.into_string().ok())
            .filter(|n| is_lock_name(n))
            .collect();
        let exclusive = self.options.create(true).acquire_at_mode(
            &ns,
            COLLECTOR_LOCK,
            &Budget::no_wait(),
            Mode::Exclusive,
        );
        let _exclusive = match exclusive {
            Ok(lease) => lease,
            Err(e) if e.is_contended() => {
                report.kept = names.len();
                report.busy = true;
                return Ok(report);
            }
            Err(e) => return Err(e.into()),
        };
        let mut list = || -> Result<std::collections::HashSet<String>, KeyError> {
            let keys = live().map_err(|source| KeyError::Records {
                root: self.root.clone(),
                source,
            })?;
            Ok(keys.iter().map(|k| lock_name(k)).collect())
        };
        let first = list()?;
        let (live_names, candidates): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|n| first.contains(n));
        report.kept += live_names.len();
        let now = std::time::SystemTime::now();
        for batch in candidates.chunks(COLLECT_BATCH) {
            let mut locked = Vec::with_capacity(batch.len());
            for name in batch {
                match self.options.create(false).try_acquire_at(&ns, name) {
                    Ok(lease) => {
                        let age = now.duration_since(lease.modified()?).unwrap_or_default();
                        if age < older_than {
                            report.kept += 1;
                        } else {
                            locked.push((name, lease));
                        }
                    }
                    Err(Error::NotFound { .. }) => {} // gone meanwhile
                    Err(_) => report.kept += 1,       // held, or unusable: left as it is
                }
            }
            if locked.is_empty() {
                continue;
            }
            // Every holder that had one of these files before us has released it now, so a
            // record it created is visible to this second listing.
            let again = list()?;
            for (name, lease) in locked {
                if !again.contains(name) && lease.unlink_locked()? {
                    report.removed += 1;
                } else {
                    report.kept += 1;
                }
            }
        }
        if report.removed > 0 {
            let _ = ns.sync();
        }
        Ok(report)
    }

    /// Admission before any wait: the trimmed key, its lock name, the managed root and the
    /// namespace directory if it exists. Creates nothing.
    fn prepare<'k>(&self, key: &'k str) -> Result<Admission<'k>, KeyError> {
        let key = normalize(key)?;
        let unknown = || KeyError::Unknown {
            key: key.to_string(),
            root: self.root.clone(),
        };
        self.check_dirs()?;
        let root = match LockDir::open(&self.root) {
            Ok(dir) => dir,
            Err(Error::NotFound { .. }) => return Err(unknown()),
            Err(e) => return Err(e.into()),
        };
        let ns = match root.child(&self.namespace, false) {
            Ok(ns) => Some(ns),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Admission {
            key,
            name: lock_name(key),
            root,
            ns,
        })
    }

    /// The path for a key with no lock file yet: only a key `known` vouches for may create
    /// its lock file (and the namespace directory).
    fn allocate(
        &self,
        adm: &Admission<'_>,
        vouch: &mut Vouch<impl FnOnce(&str) -> bool>,
    ) -> Result<LockDir, KeyError> {
        if !vouch.ask(adm.key) {
            return Err(KeyError::Unknown {
                key: adm.key.to_string(),
                root: self.root.clone(),
            });
        }
        Ok(adm.root.child(&self.namespace, true)?)
    }

    /// The caller's budget, started now (its steps — the collector lock, the try, the wait
    /// in the key's queue — share it), cut to [`max_wait`](Self::max_wait).
    fn capped(&self, budget: &Budget) -> Budget {
        match self.max_wait {
            Some(cap) => budget.at_most(cap),
            None => budget.started(),
        }
    }
}

/// A key admitted to try for its lease. The namespace, when it exists, is tried first with
/// `create(false)`: the open itself answers whether the key's lock file exists, which saves a
/// lookup in a directory that may hold a lock file for every key ever seen. (On Windows,
/// which keeps no lock files, that answer is "no" unless someone left a file of that name.)
struct Admission<'k> {
    key: &'k str,
    name: String,
    root: LockDir,
    ns: Option<LockDir>,
}

/// Where the next try goes: the namespace, and whether a missing lock file may be created.
struct At {
    ns: LockDir,
    create: bool,
}

/// What a try (or a wait) came to.
enum Step {
    Done(Lease, LockDir),
    /// Try again at once (the lock file was missing and may now be created).
    Again(At),
    /// The key is busy: wait in its queue.
    Wait(At),
}

/// The caller's `known`, asked at most once (a key may be found missing twice: before its
/// first try and after a wait that woke on a collected inode).
struct Vouch<F> {
    known: Option<F>,
    answer: bool,
}

impl<F: FnOnce(&str) -> bool> Vouch<F> {
    fn new(known: F) -> Vouch<F> {
        Vouch {
            known: Some(known),
            answer: false,
        }
    }
    fn ask(&mut self, key: &str) -> bool {
        if let Some(known) = self.known.take() {
            self.answer = known(key);
        }
        self.answer
    }
}

/// Whether `name` is a key's lock file name: 64 lowercase hex digits and `.lock`.
fn is_lock_name(name: &str) -> bool {
    name.strip_suffix(".lock")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// What a [`KeyedLeases::collect`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Collection {
    /// Lock files removed.
    pub removed: usize,
    /// Lock files kept: a key with a record, held, too young, or unusable.
    pub kept: usize,
    /// The collector lock was busy, so nothing was examined (everything was kept).
    pub busy: bool,
}

/// Admits the operation holding `lease`, unless the budget was cancelled meanwhile: a
/// cancellation that raced with the lock being granted must still stop the operation from
/// starting (the lease is then released by the drop).
fn admit(key: &str, (lease, ns): (Lease, LockDir), budget: &Budget) -> Result<KeyLease, KeyError> {
    if budget.cancel_token().is_some_and(|t| t.is_cancelled()) {
        return Err(Error::Cancelled {
            path: lease.path().to_path_buf(),
        }
        .into());
    }
    Ok(KeyLease {
        key: key.to_string(),
        lease,
        ns,
    })
}

/// The lease of one key: the holder is the key's only operation owner until it releases (or
/// drops this, or its process dies). A `KeyLease` that is not bound is released at once:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// let root = tempfile::tempdir().unwrap();
/// let jobs = leasehold::patterns::keyed::KeyedLeases::new(root.path(), ".job-locks-v1");
/// jobs.try_acquire("job-7", |_| true).unwrap(); // error: unused `KeyLease`
/// ```
#[derive(Debug)]
#[must_use = "a key's lease is released when dropped: bind it (`let _lease = ...`) for as long as the operation runs"]
pub struct KeyLease {
    key: String,
    lease: Lease,
    /// The namespace handle, reached from the root path: [`KeyLease::verify`] walks it again.
    ns: LockDir,
}

impl KeyLease {
    /// The trimmed key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lock file's path (for messages).
    pub fn path(&self) -> &Path {
        self.lease.path()
    }

    /// Checks that the lease still excludes newcomers; call it before a write and fail
    /// closed on an error. The whole chain is checked, from the root path to the lock file:
    /// the locked inode is still the key's lock file in the namespace handle, the namespace
    /// is still the root's child of that name, and the root path still names the root
    /// handle. (A renamed namespace or root would keep our handles working while a newcomer
    /// resolves the path to a fresh namespace and takes the same key.) Three `fstatat`s.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] naming what moved, [`Error::Released`], or an I/O error.
    pub fn verify(&self) -> crate::Result<()> {
        self.lease.verify()?;
        self.ns.verify()
    }

    /// Whether the lease is still held.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Releases the lease. Idempotent; the lock file stays.
    pub fn release(&mut self) {
        self.lease.release();
    }

    /// The underlying lease.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}
