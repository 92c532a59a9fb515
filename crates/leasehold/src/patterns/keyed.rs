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
//!   1. a collection unlinks a lock file only while it holds that file's own lock
//!      (`LOCK_EX|LOCK_NB`: a held file is kept), after checking that the path still names
//!      the inode it locked, and after listing the live keys *once* for its batch (every
//!      earlier holder of those files has released, so a record it created is visible);
//!   2. an acquisition relies on the post-lock check every lease makes: it opens the key's
//!      lock file, locks it, and checks that the path still names the inode it locked. One
//!      that opened a file the collector then removed gets the lock of an unlinked inode,
//!      sees that the path no longer names it, and tries again (a key without a record is
//!      then unknown, as if it had never been seen); a wait in a key's queue never reopens
//!      the path by itself (`LeaseOptions::follow_replaced`) but goes back to the admission;
//!   3. collections exclude each other through the namespace's collector lock
//!      (`<namespace>/.collector.lock`, never removed), held exclusive for one batch of
//!      `COLLECT_BATCH` files at a time and released before the next, so acquisitions go on
//!      between batches and a collection of any size holds a key up for one batch at most.
//!      Acquisitions do not take it on their way in. Only one that found its key busy looks
//!      at it, so that "busy" means a holder has the key and not that a collection was
//!      passing by: it tries the key once more under the collector lock held shared,
//!      waiting for a collection's batch to end first (at least `COLLECTOR_GRACE`,
//!      whatever the budget). It never creates the collector lock: where there is none,
//!      no collection has begun, and the busy try stands.
//!
//!   Two holders of one key would need two inodes both named by the path while held: each
//!   holder checked after locking that the path named its inode, and the only unlink
//!   happens under the lock of the inode it removes, so no path ever names an inode other
//!   than the one its holder locked. docs/design.md gives the argument in full, and
//!   `leasehold torture --gc` checks it with workers SIGKILLed during collections.
//! * **Rooted opens.** The root directory is opened, the namespace is opened as a real child
//!   directory of that handle (a symlink is refused), and the lock file is opened relative to
//!   the namespace handle (`openat`, `O_NOFOLLOW`) — never by joining path strings. A
//!   non-regular lock file (directory, symlink, FIFO, …) is refused and left as it is; a lock
//!   file's bytes and mode are never changed. The lease holds directory handles, so its lock
//!   stays held if the managed root or the namespace is renamed, but newcomers would then
//!   resolve the path elsewhere: [`KeyLease::verify`] checks the whole chain from the root
//!   path and fails closed.
//! * **At a plain lease's cost.** A [`KeyedLeases`] (and its clones) keeps the root and the
//!   namespace open, so that an acquisition opens nothing but the key's lock file (the path
//!   walks to the root and the namespace cost more than the rest of an acquisition). The
//!   busy path keeps descriptors of the collector lock, each its own open file description
//!   (`flock` on one description does not count its holders, so concurrent acquisitions
//!   each take their own). The kept directories are checked again —
//!   trusted ([`check_dirs`](KeyedLeases::check_dirs)), and still what the root path and the
//!   namespace name lead to, as [`KeyLease::verify`] checks them — at least every
//!   `RECHECK` (100 ms) and as soon as a lease they gave fails its
//!   [`verify`](KeyLease::verify); a chain that moved is opened afresh, and the collector
//!   lock's descriptors are reopened at every check. Safety does not wait for that check:
//!   a lease taken in a namespace that moved fails its `verify`, which every write makes
//!   first.
//! * **Admission.** An unknown key — no existing lock file, and the caller's `known`
//!   predicate says there is no record — allocates nothing (not even the namespace directory)
//!   and fails with [`KeyError::Unknown`]. Knowing a key is not authority: the caller must
//!   inspect its record again once the lease is held, because it may have vanished meanwhile.
//!   The decisions of an admission are made in one place (`Admission::next`); the blocking
//!   and the async face only carry out the waits it asks for, through the lease's own
//!   acquisition (the kernel's queue), as the lease's two drivers do.
//! * **Bounded waits.** A wait is bounded by the caller's [`Budget`] and, unless lifted with
//!   [`KeyedLeases::max_wait`], by [`DEFAULT_MAX_WAIT`]. A timeout abandons the waiter only; a
//!   holder keeps its lease until it releases or its process dies. Cancellation is checked
//!   once more after the lock was obtained, right before the operation is admitted, so a
//!   cancelled caller never starts an operation.
//! * Different keys have different lock files and proceed in parallel.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::lease::{self, claim::Mode};
use crate::{Budget, Classify, Error, ErrorClass, Lease, LeaseHandle, LeaseOptions, LockDir};

/// How long an acquisition waits at most unless [`KeyedLeases::max_wait`] says otherwise.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

/// The namespace's collector lock (see the module documentation): held exclusive by a
/// collection for one batch, shared by an acquisition that found its key busy and tries it
/// once more. Hidden, so it is never mistaken for a key's lock file; never removed.
pub const COLLECTOR_LOCK: &str = ".collector.lock";

/// However short the caller's budget (even "try once"), an acquisition waits this long for a
/// collection that holds the collector lock: a collection holds it for one batch (a
/// non-blocking lock, a listing of the live keys and unlinks), and "the key is busy" must
/// mean that a key holder has it, not that a collector was passing by.
const COLLECTOR_GRACE: Duration = Duration::from_secs(1);

/// How long a collection waits for the collector lock before each batch: acquisitions hold
/// it shared only across one more try of a busy key (microseconds), so this passes only
/// when another collection keeps it; the collection then stops and reports itself busy.
const COLLECTOR_PATIENCE: Duration = Duration::from_millis(100);

/// How many lock files a collection takes per batch: one exclusive hold of the collector
/// lock and one listing of the live keys per batch.
const COLLECT_BATCH: usize = 256;

/// How many collector-lock descriptors a namespace keeps for the next acquisitions; more
/// concurrent acquisitions open their own and close them afterwards.
const KEPT_DOORS: usize = 8;

/// How long the kept root and namespace are used before they are checked again (see the
/// module documentation): two `fstatat`s and the trust check cost more than the rest of an
/// acquisition, so they are made at this pace rather than every time.
const RECHECK: Duration = Duration::from_millis(100);

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
/// Clones share the kept directories and collector-lock descriptors (see the module
/// documentation, "At a plain lease's cost").
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
    /// The root and namespace as last opened and checked (shared by clones).
    kept: Arc<Mutex<Option<Kept>>>,
}

/// The kept root and namespace, and when they are to be checked again.
#[derive(Debug)]
struct Kept {
    dirs: Arc<Dirs>,
    recheck: Instant,
}

/// The opened root and, once it exists, the opened namespace.
#[derive(Debug)]
struct Dirs {
    root: LockDir,
    ns: Option<Arc<Namespace>>,
}

/// An opened namespace and the collector-lock descriptors it keeps for acquisitions.
#[derive(Debug)]
struct Namespace {
    dir: LockDir,
    doors: Mutex<Doors>,
    /// A lease taken in it failed its [`KeyLease::verify`]: check the chain again now.
    moved: AtomicBool,
}

/// The kept collector-lock handles, and the generation they belong to: a check of the
/// namespace starts a new one, so that no descriptor opened before it is kept after it.
#[derive(Debug, Default)]
struct Doors {
    generation: u64,
    kept: Vec<LeaseHandle>,
}

/// A collector-lock handle in use, and its generation.
#[derive(Debug)]
struct Door {
    handle: LeaseHandle,
    generation: u64,
}

impl Namespace {
    fn new(dir: LockDir) -> Arc<Namespace> {
        Arc::new(Namespace {
            dir,
            doors: Mutex::default(),
            moved: AtomicBool::new(false),
        })
    }

    /// A collector-lock handle of this namespace: a kept one, or a new one (opened by its
    /// first lock). An acquisition never creates the collector lock: where none exists, no
    /// collection has begun (see [`Admission::confirm_busy`]).
    fn door(&self, options: &LeaseOptions) -> Result<Door, KeyError> {
        let mut doors = guard(&self.doors);
        let generation = doors.generation;
        let handle = match doors.kept.pop() {
            Some(handle) => handle,
            None => {
                drop(doors);
                (options.create(false)).handle_at_mode(&self.dir, COLLECTOR_LOCK, Mode::Shared)?
            }
        };
        Ok(Door { handle, generation })
    }

    /// Keeps `door` for the next acquisition, unless the namespace was checked since it was
    /// handed out or [`KEPT_DOORS`] are kept already (then it closes).
    fn keep(&self, door: Door) {
        let mut doors = guard(&self.doors);
        if door.generation == doors.generation && doors.kept.len() < KEPT_DOORS {
            doors.kept.push(door.handle);
        }
    }

    /// After a check of the namespace: the kept collector-lock descriptors close, new ones
    /// are opened as needed (they are not checked as they lock, see
    /// [`LeaseOptions::handle_at_mode`]).
    fn renew_doors(&self) {
        let mut doors = guard(&self.doors);
        doors.generation += 1;
        doors.kept.clear();
    }

    fn moved(&self) -> bool {
        self.moved.load(Ordering::Relaxed)
    }
}

use crate::mutex::lock as guard;

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
            kept: Arc::default(),
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
    /// their holders.
    #[must_use]
    pub fn with_options(mut self, options: LeaseOptions) -> KeyedLeases {
        self.options = options;
        // What was opened under the old options is not reused under the new ones.
        self.kept = Arc::default();
        self
    }

    /// The managed root and the lock namespace, judged as lock files are: nobody else may
    /// be able to write them, unless shared state is allowed. Acquisitions check this
    /// whenever they check the kept root and namespace again (at least every `RECHECK`, see
    /// the module documentation); a store that creates directories under the root before it
    /// asks for a lease calls it before it creates anything.
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
        let mut admission = Admission::new(self, key, budget, known)?;
        loop {
            match admission.next()? {
                Next::Admitted(lease) => return Ok(lease),
                Next::Wait(wait) => admission.waited(wait.run(self.options)),
            }
        }
    }

    /// [`acquire`](Self::acquire) for async code (feature `tokio`): the same admission
    /// (`Admission::next` decides; only the waits differ), but a wait never blocks an
    /// executor thread and costs no thread of its own (see
    /// [`LeaseOptions::acquire_at_async`]). Dropping the future abandons the wait and leaves
    /// the key free. `known` and the directory opens run inline: they are a few local,
    /// non-blocking metadata calls. The future owns the budget (pass it by value, or
    /// `&budget`), as for [`LeaseOptions::acquire_async`].
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        &self,
        key: &str,
        budget: impl Into<Budget>,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        let mut admission = Admission::new(self, key, &budget.into(), known)?;
        loop {
            match admission.next()? {
                Next::Admitted(lease) => return Ok(lease),
                Next::Wait(wait) => admission.waited(wait.run_async(self.options).await),
            }
        }
    }

    /// The root and namespace to acquire in (see the module documentation, "At a plain
    /// lease's cost"): the kept ones until their check is due; then, once trusted, the kept
    /// ones if the root path and the namespace name still lead to them (the chain
    /// [`KeyLease::verify`] checks), else opened afresh. `Ok(None)`: the root does not
    /// exist. Creates nothing. A missing namespace is looked for every time (another
    /// process may make it, and a key's existing lock file makes it known).
    fn dirs(&self, now: Instant) -> Result<Option<Arc<Dirs>>, KeyError> {
        let kept = match &*guard(&self.kept) {
            Some(k) if now < k.recheck && k.dirs.ns.as_ref().is_some_and(|ns| !ns.moved()) => {
                return Ok(Some(k.dirs.clone()));
            }
            Some(k) => Some(k.dirs.clone()),
            None => None,
        };
        self.check_dirs()?;
        if let Some(dirs) = kept {
            match &dirs.ns {
                Some(ns) if ns.dir.verify().is_ok() => {
                    ns.renew_doors();
                    return Ok(Some(self.keep_checked(dirs, now)));
                }
                Some(_) => {}
                None if dirs.root.verify().is_ok() => {
                    // No namespace yet when it was kept: one may have been made since.
                    return match dirs.root.child(&self.namespace, false) {
                        Ok(ns) => Ok(Some(self.keep(dirs.root.clone(), Some(ns)))),
                        Err(Error::NotFound { .. }) => Ok(Some(dirs)),
                        Err(e) => Err(e.into()),
                    };
                }
                None => {}
            }
        }
        let root = match LockDir::open(&self.root) {
            Ok(dir) => dir,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let ns = match root.child(&self.namespace, false) {
            Ok(ns) => Some(ns),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Some(self.keep(root, ns)))
    }

    /// Keeps `root` and `ns`, just opened, for the next acquisitions.
    fn keep(&self, root: LockDir, ns: Option<LockDir>) -> Arc<Dirs> {
        let dirs = Arc::new(Dirs {
            root,
            ns: ns.map(Namespace::new),
        });
        self.keep_checked(dirs, Instant::now())
    }

    /// Keeps `dirs`, checked at `now`, until the next check is due.
    fn keep_checked(&self, dirs: Arc<Dirs>, now: Instant) -> Arc<Dirs> {
        *guard(&self.kept) = Some(Kept {
            dirs: dirs.clone(),
            recheck: now + RECHECK,
        });
        dirs
    }

    /// The namespace for a key with no lock file yet: only a key `known` vouches for may
    /// create its lock file (and the namespace directory).
    fn allocate(
        &self,
        dirs: &Dirs,
        key: &str,
        vouch: &mut Vouch<impl FnOnce(&str) -> bool>,
    ) -> Result<Arc<Namespace>, KeyError> {
        if !vouch.ask(key) {
            return Err(KeyError::Unknown {
                key: key.to_string(),
                root: self.root.clone(),
            });
        }
        if let Some(ns) = &dirs.ns {
            return Ok(ns.clone());
        }
        let ns = dirs.root.child(&self.namespace, true)?;
        let kept = self.keep(dirs.root.clone(), Some(ns));
        kept.ns.clone().ok_or_else(|| {
            KeyError::Lease(Error::NotFound {
                path: self.root.join(&self.namespace),
            })
        })
    }

    /// The caller's budget, started now (its steps — the collector lock, the try, the wait
    /// in the key's queue — share it), cut to [`max_wait`](Self::max_wait).
    fn capped(&self, budget: &Budget) -> Budget {
        match self.max_wait {
            Some(cap) => budget.at_most(cap),
            None => budget.started(),
        }
    }

    /// Removes the lock files of keys that have no record, that nobody holds, and that are
    /// older than `older_than` (by modification time: lock files are never written, so it is
    /// their creation), by the protocol in the module documentation: in batches of
    /// `COLLECT_BATCH` lock files, each under the collector lock (released before the next
    /// batch): the batch's files locked (never waiting: a held lock file is kept), `live`
    /// asked once, the files of keys without records unlinked. `live` lists the keys that
    /// have records; it is also asked once before the first batch, and each listing tells
    /// the next batch which files to leave alone (the listing after a batch's locks is the
    /// one that decides).
    ///
    /// The collector lock is waited for a moment (`COLLECTOR_PATIENCE`) before each batch;
    /// if another collection keeps it longer, this one stops and reports itself
    /// [`busy`](Collection::busy), keeping whatever it had not examined.
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
        let mut list = || -> Result<HashSet<String>, KeyError> {
            let keys = live().map_err(|source| KeyError::Records {
                root: self.root.clone(),
                source,
            })?;
            Ok(keys.iter().map(|k| lock_name(k)).collect())
        };
        let mut with_records = list()?;
        let now = std::time::SystemTime::now();
        let mut batches = names.chunks(COLLECT_BATCH);
        while let Some(batch) = batches.next() {
            let (live, batch): (Vec<&String>, Vec<&String>) =
                batch.iter().partition(|n| with_records.contains(*n));
            report.kept += live.len();
            if batch.is_empty() {
                continue;
            }
            // The collector lock first: an acquisition that finds one of this batch's files
            // busy waits for it (see `Admission::confirm_busy`), not in the queue of a file
            // the batch is about to unlink.
            let exclusive = self.options.create(true).acquire_at_mode(
                &ns,
                COLLECTOR_LOCK,
                &Budget::timeout(COLLECTOR_PATIENCE),
                Mode::Exclusive,
            );
            let exclusive = match exclusive {
                Ok(lease) => lease,
                Err(e) if e.is_contended() => {
                    report.busy = true;
                    report.kept += batch.len() + batches.map(<[String]>::len).sum::<usize>();
                    break;
                }
                Err(e) => return Err(e.into()),
            };
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
            if !locked.is_empty() {
                // Every holder that had one of these files before us has released it now, so
                // a record it created is visible to this listing.
                with_records = list()?;
            }
            for (name, lease) in locked {
                if !with_records.contains(name) && lease.unlink_locked()? {
                    report.removed += 1;
                } else {
                    report.kept += 1;
                }
            }
            // Acquisitions go on between batches.
            drop(exclusive);
        }
        if report.removed > 0 {
            let _ = ns.sync();
        }
        Ok(report)
    }
}

/// One keyed admission: all its decisions, made by [`next`](Self::next), which never
/// blocks; the blocking and the async face carry out the waits it asks for ([`Wait`]) and
/// hand back what came of them ([`waited`](Self::waited)).
///
/// The order of decisions, and why:
///
/// 1. Before anything: the trimmed key, its lock name, the budget capped by
///    [`KeyedLeases::max_wait`], the root and namespace (kept or opened afresh; nothing is
///    created); a namespace that does not exist yet is created only for a key `known`
///    vouches for.
/// 2. One non-blocking try of the key's lock file (created only where allowed), safe by the
///    lease's post-lock check alone; a missing file makes the key allocated now (if `known`
///    vouches) and tried again.
/// 3. Busy: was it a collection passing by? Enter the collector lock, shared, on a kept
///    descriptor, without waiting; held by a collection: wait for it (at least
///    [`COLLECTOR_GRACE`], whatever the budget). Under it, try the key once more, and leave.
/// 4. Still busy: wait in the key's queue, outside the collector lock. A wait that woke on a
///    file the collector removed meanwhile goes back to 2 (it never reopens the path by
///    itself); a key whose file is gone is allocated again only if `known` vouches.
/// 5. Held: admitted, unless the budget was cancelled meanwhile.
struct Admission<'a, 'k, F> {
    leases: &'a KeyedLeases,
    key: &'k str,
    name: String,
    budget: Budget,
    /// "Try once" for the non-blocking tries (made once: a clock read each time measured
    /// a few percent of an acquisition).
    once: Budget,
    /// The budget of a wait for the collector lock (set when a collection is first met).
    grace: Option<Budget>,
    vouch: Vouch<F>,
    dirs: Arc<Dirs>,
    /// Where the next try goes.
    at: At,
    /// The collector-lock handle in use (back to its namespace when the admission ends).
    door: Option<(Arc<Namespace>, Door)>,
    /// What the last wait came to, for the next step.
    got: Option<Waited>,
}

/// Where the next try goes: the namespace, and whether a missing lock file may be created.
struct At {
    ns: Arc<Namespace>,
    create: bool,
}

/// What [`Admission::next`] came to.
enum Next {
    Admitted(KeyLease),
    /// Carry out this wait and hand its outcome to [`Admission::waited`].
    Wait(Wait),
}

/// A wait an admission asks its face to carry out.
enum Wait {
    /// For a collection to release the collector lock: take it shared.
    Collector { dir: LockDir, budget: Budget },
    /// In a key's queue.
    Key {
        dir: LockDir,
        name: String,
        create: bool,
        budget: Budget,
    },
}

/// What a [`Wait`] came to.
enum Waited {
    Collector(crate::Result<Lease>),
    Key(crate::Result<Lease>),
}

impl Wait {
    fn run(self, options: LeaseOptions) -> Waited {
        match self {
            Wait::Collector { dir, budget } => Waited::Collector(
                options
                    .create(true)
                    .acquire_at_mode(&dir, COLLECTOR_LOCK, &budget, Mode::Shared),
            ),
            Wait::Key {
                dir,
                name,
                create,
                budget,
            } => Waited::Key(
                (options.create(create).follow_replaced(false)).acquire_at(&dir, &name, &budget),
            ),
        }
    }

    #[cfg(feature = "tokio")]
    async fn run_async(self, options: LeaseOptions) -> Waited {
        match self {
            Wait::Collector { dir, budget } => Waited::Collector(
                options
                    .create(true)
                    .acquire_at_mode_async(&dir, COLLECTOR_LOCK, &budget, Mode::Shared)
                    .await,
            ),
            Wait::Key {
                dir,
                name,
                create,
                budget,
            } => Waited::Key(
                options
                    .create(create)
                    .follow_replaced(false)
                    .acquire_at_async(&dir, &name, &budget)
                    .await,
            ),
        }
    }
}

/// What one try of the key came to.
enum Try {
    Held(Lease),
    /// Try again at once (the lock file was missing and may now be created).
    Again,
    /// The key is busy: wait in its queue.
    Busy(Error),
    /// A collection holds the collector lock: wait for it.
    Collecting,
}

impl<'a, 'k, F: FnOnce(&str) -> bool> Admission<'a, 'k, F> {
    fn new(
        leases: &'a KeyedLeases,
        key: &'k str,
        budget: &Budget,
        known: F,
    ) -> Result<Self, KeyError> {
        let key = normalize(key)?;
        if budget.cancel_token().is_some_and(|t| t.is_cancelled()) {
            // Cancelled before it started: nothing is taken, not even for an instant.
            return Err(KeyError::Lease(Error::Cancelled {
                path: leases.lock_path(key),
            }));
        }
        let name = lock_name(key);
        let now = Instant::now();
        let Some(dirs) = leases.dirs(now)? else {
            return Err(KeyError::Unknown {
                key: key.to_string(),
                root: leases.root.clone(),
            });
        };
        let mut vouch = Vouch::new(known);
        // The namespace, when it exists, is tried first with `create(false)`: the open itself
        // answers whether the key's lock file exists, which saves a lookup in a directory
        // that may hold a lock file for every key ever seen. (On Windows, which keeps no lock
        // files, that answer is "no" unless someone left a file of that name.)
        let at = match &dirs.ns {
            Some(ns) => At {
                ns: ns.clone(),
                create: false,
            },
            None => At {
                ns: leases.allocate(&dirs, key, &mut vouch)?,
                create: true,
            },
        };
        Ok(Admission {
            leases,
            key,
            name,
            budget: leases.capped(budget),
            // Started here, so that a busy try reads as a single try (not a passed deadline).
            once: Budget::no_wait().started(),
            grace: None,
            vouch,
            dirs,
            at,
            door: None,
            got: None,
        })
    }

    /// Does what is due without blocking, and says what the face should do next.
    fn next(&mut self) -> Result<Next, KeyError> {
        loop {
            let tried = match self.got.take() {
                Some(Waited::Key(waited)) => self.after_wait(waited)?,
                Some(Waited::Collector(entered)) => {
                    let _entered = entered?;
                    self.try_key()?
                }
                None => self.first_try()?,
            };
            match tried {
                Try::Held(lease) => return self.admit(lease).map(Next::Admitted),
                Try::Again => {}
                Try::Busy(e) => {
                    // Try-once: the try was the whole wait.
                    if self.budget.deadline().is_some_and(|d| d <= Instant::now()) {
                        return Err(e.into());
                    }
                    return Ok(Next::Wait(Wait::Key {
                        dir: self.at.ns.dir.clone(),
                        name: self.name.clone(),
                        create: self.at.create,
                        budget: self.budget.clone(),
                    }));
                }
                Try::Collecting => {
                    let grace = self.grace.get_or_insert_with(|| graced(&self.budget));
                    return Ok(Next::Wait(Wait::Collector {
                        dir: self.at.ns.dir.clone(),
                        budget: grace.clone(),
                    }));
                }
            }
        }
    }

    /// Takes in what a [`Wait`] came to; [`next`](Self::next) goes on from there.
    fn waited(&mut self, waited: Waited) {
        self.got = Some(waited);
    }

    /// The try of steps 2 and 3: the key once, and if it is busy, once more under the
    /// collector lock.
    fn first_try(&mut self) -> Result<Try, KeyError> {
        match self.try_key()? {
            // Windows keeps no lock files to collect, and its named objects have no shared
            // mode.
            Try::Busy(busy) if !cfg!(windows) => self.confirm_busy(busy),
            tried => Ok(tried),
        }
    }

    /// Enters the collector lock on a kept descriptor (never waiting), tries the key once
    /// more under it, and leaves: a key a collection's batch held a moment ago is then
    /// either free or gone (and known or not), and one still busy has a holder.
    ///
    /// Where the namespace has no collector lock, `busy` stands as it is and nothing is
    /// created (an operation that only waited changes nothing on disk): a collection
    /// creates the collector lock before it locks any key, and it is never removed, so a
    /// key a collection held at the first try would have found it there.
    fn confirm_busy(&mut self, busy: Error) -> Result<Try, KeyError> {
        let mut door = match self.door.take() {
            Some((ns, door)) if Arc::ptr_eq(&ns, &self.at.ns) => (ns, door),
            other => {
                if let Some((ns, door)) = other {
                    ns.keep(door);
                }
                let door = self.at.ns.door(&self.leases.options)?;
                (self.at.ns.clone(), door)
            }
        };
        let tried = match door.1.handle.lock(&self.once) {
            Ok(entered) => {
                let tried = self.try_key();
                drop(entered);
                tried
            }
            Err(e) if e.is_contended() => Ok(Try::Collecting),
            // No collector lock: no collection has begun. The handle is not kept.
            Err(Error::NotFound { .. }) => return Ok(Try::Busy(busy)),
            Err(e) => Err(e.into()),
        };
        self.door = Some(door);
        tried
    }

    /// One non-blocking try of the key's lock file. A missing file is created only for a
    /// key `known` vouches for.
    fn try_key(&mut self) -> Result<Try, KeyError> {
        let tried = (self.leases.options).create(self.at.create).acquire_at(
            &self.at.ns.dir,
            &self.name,
            &self.once,
        );
        match tried {
            Ok(lease) => Ok(Try::Held(lease)),
            Err(e) if e.is_contended() => Ok(Try::Busy(e)),
            // A collection removed the file under the try again and again (each time between
            // the open and the lock): with no collector lock on the way in, that is the
            // collector passing by, not someone else deleting lock files — try afresh.
            Err(Error::Unstable { .. }) => Ok(Try::Again),
            Err(e) => self.missing(e),
        }
    }

    /// The outcome of a wait in the key's queue. A wait does not follow a lock file replaced
    /// under it (`follow_replaced(false)`): the file it waited on was collected, or a
    /// newcomer's replaced it — the admission starts again, and a file a collection's batch
    /// holds sends it to the collector lock (step 3), where the batch ends before the next
    /// try. (A wait that reopened the path by itself could be woken on a collected file
    /// again and again, and give up as "replaced 3 times while locking".)
    fn after_wait(&mut self, waited: crate::Result<Lease>) -> Result<Try, KeyError> {
        match waited {
            Ok(lease) => Ok(Try::Held(lease)),
            Err(Error::Unstable { .. }) => Ok(Try::Again),
            Err(e) => self.missing(e),
        }
    }

    /// A lock file that was not there (never created, or removed by the collector while a
    /// waiter slept on it): the key is allocated now if `known` vouches for it, else it is
    /// unknown. Any other error stands.
    fn missing(&mut self, e: Error) -> Result<Try, KeyError> {
        match e {
            Error::NotFound { .. } if !self.at.create => {
                self.at = At {
                    ns: self
                        .leases
                        .allocate(&self.dirs, self.key, &mut self.vouch)?,
                    create: true,
                };
                Ok(Try::Again)
            }
            e => Err(e.into()),
        }
    }

    /// Admits the operation holding `lease`, unless the budget was cancelled meanwhile: a
    /// cancellation that raced with the lock being granted must still stop the operation
    /// from starting (the lease is then released by the drop).
    fn admit(&self, lease: Lease) -> Result<KeyLease, KeyError> {
        if self.budget.cancel_token().is_some_and(|t| t.is_cancelled()) {
            return Err(Error::Cancelled {
                path: lease.path().to_path_buf(),
            }
            .into());
        }
        Ok(KeyLease {
            key: self.key.to_string(),
            lease,
            ns: self.at.ns.clone(),
        })
    }
}

impl<F> Drop for Admission<'_, '_, F> {
    fn drop(&mut self) {
        if let Some((ns, door)) = self.door.take() {
            ns.keep(door);
        }
    }
}

/// The budget of the wait for the collector lock: the caller's, but at least
/// [`COLLECTOR_GRACE`] (a cancellation still ends it at once).
fn graced(budget: &Budget) -> Budget {
    budget.at_least(COLLECTOR_GRACE)
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
    /// Lock files kept: a key with a record, held, too young, or unusable — or not examined
    /// because the collection stopped [`busy`](Self::busy).
    pub kept: usize,
    /// Another collection kept the collector lock, so this one stopped before a batch; what
    /// it had not examined was kept.
    pub busy: bool,
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
    ns: Arc<Namespace>,
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
        // The lease is the namespace handle's: its verify walks the handle's chain too.
        let verdict = self.lease.verify();
        if matches!(verdict, Err(crate::Error::LeaseLost { .. })) {
            // The next acquisition checks the kept root and namespace at once.
            self.ns.moved.store(true, Ordering::Relaxed);
        }
        verdict
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// Two acquisitions in flight through one namespace each hold the collector lock on a
    /// descriptor of their own: `flock` on one open file description does not count its
    /// holders, so if they shared one, the first to leave (`LOCK_UN`) would let a collection
    /// in while the other is still between open and verify.
    #[test]
    fn acquisitions_in_flight_each_hold_the_collector_lock_on_their_own_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let ns = Namespace::new(LockDir::create(dir.path()).unwrap());
        let options = LeaseOptions::new();
        let once = Budget::no_wait();
        let collect = || {
            options
                .create(true)
                .acquire_at_mode(&ns.dir, COLLECTOR_LOCK, &once, Mode::Exclusive)
        };
        // A collection made the collector lock (acquisitions never create it).
        drop(collect().expect("free"));
        let (mut first, mut second) = (ns.door(&options).unwrap(), ns.door(&options).unwrap());
        let held_first = first.handle.lock(&once).unwrap();
        let held_second = second.handle.lock(&once).unwrap();
        drop(held_first);
        assert!(
            collect().unwrap_err().is_contended(),
            "the second still holds it"
        );
        drop(held_second);
        drop(collect().expect("both left"));
        ns.keep(first);
        ns.keep(second);
        assert_eq!(
            guard(&ns.doors).kept.len(),
            2,
            "both kept for the next ones"
        );
        ns.renew_doors();
        let third = ns.door(&options).unwrap();
        assert_eq!(guard(&ns.doors).kept.len(), 0, "a check closed them");
        ns.keep(third);
    }
}
