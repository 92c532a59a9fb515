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
//! * **Bounded waits.** A wait is bounded by the caller's [`Budget`](crate::Budget) and,
//!   unless lifted with [`KeyedLeases::max_wait`], by [`DEFAULT_MAX_WAIT`]. A timeout
//!   abandons the waiter only; a holder keeps its lease until it releases or its process
//!   dies. Cancellation is checked once more after the lock was obtained, right before the
//!   operation is admitted, so a cancelled caller never starts an operation.
//! * Different keys have different lock files and proceed in parallel.

mod admission;
mod collect;
mod error;
#[cfg(all(test, unix))]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::lease::{self, claim::Mode};
use crate::mutex::lock as guard;
use crate::{Error, Lease, LeaseHandle, LeaseOptions, LockDir};

pub use error::KeyError;

/// How long an acquisition waits at most unless [`KeyedLeases::max_wait`] says otherwise.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

/// The namespace's collector lock (see the module documentation): held exclusive by a
/// collection for one batch, shared by an acquisition that found its key busy and tries it
/// once more. Hidden, so it is never mistaken for a key's lock file; never removed.
pub const COLLECTOR_LOCK: &str = ".collector.lock";

/// How many collector-lock descriptors a namespace keeps for the next acquisitions; more
/// concurrent acquisitions open their own and close them afterwards.
const KEPT_DOORS: usize = 8;

/// How long the kept root and namespace are used before they are checked again (see the
/// module documentation): two `fstatat`s and the trust check cost more than the rest of an
/// acquisition, so they are made at this pace rather than every time.
const RECHECK: Duration = Duration::from_millis(100);

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
    /// collection has begun (see `Admission::confirm_busy` in admission.rs).
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
