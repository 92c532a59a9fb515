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
//! * **Never unlinked.** Recreating a lock pathname while an older holder still owns the first
//!   inode would create a second mutex. Lock files therefore accumulate; a safe collector needs
//!   a quiescent boundary (see DESIGN.md) and does not exist yet.
//! * **Rooted opens.** The root directory is opened, the namespace is opened as a real child
//!   directory of that handle (a symlink is refused), and the lock file is opened relative to
//!   the namespace handle (`openat`, `O_NOFOLLOW`) — never by joining path strings. A
//!   non-regular lock file (directory, symlink, FIFO, …) is refused and left as it is; a lock
//!   file's bytes and mode are never changed. Because the lease holds directory handles, a held
//!   lease keeps working after the managed root is renamed.
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

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::{Budget, Error, ErrorClass, Lease, LeaseOptions, LockDir};

/// How long an acquisition waits at most unless [`KeyedLeases::max_wait`] says otherwise.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

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
}

impl KeyError {
    /// How a caller should treat this error: an empty or unknown key is
    /// [`ErrorClass::Usage`] (nothing was created); a lease error has its own class.
    pub fn class(&self) -> ErrorClass {
        match self {
            KeyError::EmptyKey { .. } | KeyError::Unknown { .. } => ErrorClass::Usage,
            KeyError::Lease(e) => e.class(),
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
    let digest = Sha256::digest(key.trim().as_bytes());
    let mut name = String::with_capacity(69);
    for b in digest.iter() {
        let _ = write!(name, "{b:02x}");
    }
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
    pub fn max_wait(mut self, max: Option<Duration>) -> KeyedLeases {
        self.max_wait = max;
        self
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
        if let Some(ns) = adm.existing()? {
            match self
                .options
                .create(false)
                .acquire_at(ns, &adm.name, &budget)
            {
                Err(Error::NotFound { .. }) => {} // no lock file yet: ask `known`
                other => return admit(adm.key, other?, &budget),
            }
        }
        let ns = self.allocate(&adm, known)?;
        let lease = self
            .options
            .create(true)
            .acquire_at(&ns, &adm.name, &budget)?;
        admit(adm.key, lease, &budget)
    }

    /// [`acquire`](Self::acquire) for async code (feature `tokio`): the same admission rules
    /// (unknown keys allocate nothing, the [`max_wait`](Self::max_wait) cap, the cancellation
    /// re-check right before admission), but the wait never blocks an executor thread and
    /// costs no thread of its own (see [`LeaseOptions::acquire_at_async`]). Dropping the
    /// future abandons the wait and leaves the key free. `known` and the directory opens run
    /// inline: they are a few local, non-blocking metadata calls.
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        &self,
        key: &str,
        budget: &Budget,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        let adm = self.prepare(key)?;
        let budget = self.capped(budget);
        if let Some(ns) = adm.existing()? {
            let options = self.options.create(false);
            match options.acquire_at_async(ns, &adm.name, &budget).await {
                Err(Error::NotFound { .. }) => {} // no lock file yet: ask `known`
                other => return admit(adm.key, other?, &budget),
            }
        }
        let ns = self.allocate(&adm, known)?;
        let lease = self
            .options
            .create(true)
            .acquire_at_async(&ns, &adm.name, &budget)
            .await?;
        admit(adm.key, lease, &budget)
    }

    /// Admission before any wait: the trimmed key, its lock name, the managed root and the
    /// namespace directory if it exists. Creates nothing.
    fn prepare<'k>(&self, key: &'k str) -> Result<Admission<'k>, KeyError> {
        let key = normalize(key)?;
        let unknown = || KeyError::Unknown {
            key: key.to_string(),
            root: self.root.clone(),
        };
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
        known: impl FnOnce(&str) -> bool,
    ) -> Result<LockDir, KeyError> {
        if !known(adm.key) {
            return Err(KeyError::Unknown {
                key: adm.key.to_string(),
                root: self.root.clone(),
            });
        }
        Ok(adm.root.child(&self.namespace, true)?)
    }

    fn capped(&self, budget: &Budget) -> Budget {
        let cap = self.max_wait.and_then(|m| Instant::now().checked_add(m));
        let deadline = match (budget.deadline(), cap) {
            (Some(d), Some(c)) => Some(d.min(c)),
            (d, c) => d.or(c),
        };
        let capped = match deadline {
            Some(d) => Budget::until(d),
            None => Budget::unlimited(),
        };
        match budget.cancel_token() {
            Some(t) => capped.with_cancel(t.clone()),
            None => capped,
        }
    }
}

/// Admits the operation holding `lease`, unless the budget was cancelled meanwhile: a
/// cancellation that raced with the lock being granted must still stop the operation from
/// starting (the lease is then released by the drop).
/// A key admitted to try for its lease.
struct Admission<'k> {
    key: &'k str,
    name: String,
    root: LockDir,
    ns: Option<LockDir>,
}

impl Admission<'_> {
    /// The namespace to try the existing lock file in: the open itself (with
    /// `create(false)`) answers whether the key's lock file exists, which saves a lookup in a
    /// directory that may hold a lock file for every key ever seen. (On Windows, which keeps
    /// no lock files, that answer is "no" unless someone left a file of that name.)
    fn existing(&self) -> Result<Option<&LockDir>, KeyError> {
        Ok(self.ns.as_ref())
    }
}

fn admit(key: &str, lease: Lease, budget: &Budget) -> Result<KeyLease, KeyError> {
    if budget.cancel_token().is_some_and(|t| t.is_cancelled()) {
        return Err(Error::Cancelled {
            path: lease.path().to_path_buf(),
        }
        .into());
    }
    Ok(KeyLease {
        key: key.to_string(),
        lease,
    })
}

/// The lease of one key: the holder is the key's only operation owner until it releases (or
/// drops this, or its process dies).
#[derive(Debug)]
pub struct KeyLease {
    key: String,
    lease: Lease,
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

    /// Checks that the locked inode is still the key's lock file; call it before a write and
    /// fail closed on an error.
    pub fn verify(&self) -> crate::Result<()> {
        self.lease.verify()
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
