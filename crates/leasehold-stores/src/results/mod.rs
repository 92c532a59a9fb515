//! The isolated result store: candidate file sets that an isolated run produced, which may
//! later be applied to a workspace, discarded, published, aborted, or swept when they expire.
//!
//! Layout of a managed root:
//!
//! ```text
//! ROOT/results/<id>/entry.json      the record: ID, creation time, proposed files
//! ROOT/results/<id>/files/...       the proposed files
//! ROOT/results/<id>/applying.json   while an apply writes: its TARGET and process number
//! ROOT/published/<id>.json          a publication (finish): the result is ready to apply
//! ROOT/.result-locks-v1/<sha256(id)>.lock   per-ID operation locks (removed only by gc)
//! ROOT/.result-locks-v1/.collector.lock      exclusive by gc per batch; shared by an admission retrying a busy ID
//! ROOT/.result-records-v1/<sha256(id)>.lock(.lease/, .fence)   per-ID record leases (a host-only mount, record lease chosen)
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
//! whole; records and publications are written with
//! [`replace_file`](leasehold::patterns::durable::replace_file); a removal first drops the
//! publication (so `pending` never lists a result whose files are gone), then renames the
//! candidate to a hidden trash name before deleting it, so a crash never leaves a half-deleted
//! candidate that looks valid. Hidden names start with `.`, which no ID may.
//!
//! Handles, not paths: every read, write, rename and removal below the root (and every
//! write into a TARGET, every read of a SRC) goes through directory handles opened one
//! component at a time without following symlinks ([`LockDir`]'s data operations), so
//! another user who can write the root or TARGET cannot redirect a write or a removal; only a real candidate (a
//! directory with a regular `entry.json`) is ever removed. Lock files of IDs without records
//! are collected by [`ResultStore::gc`] (the keyed collector's protocol); leftovers of killed
//! operations go in [`ResultStore::sweep`], each under its ID's lease — and the temporaries
//! a killed `apply` left in its TARGET go at the next operation on that ID (`applying`).
//!
//! On a shared mount: where the [`LeaseOptions`](leasehold::LeaseOptions) choose
//! [`SharedMount::Record`](leasehold::SharedMount::Record) and the root's mount keeps kernel
//! locks on each host ([`MountLocks::HostOnly`](leasehold::MountLocks::HostOnly)), an ID's
//! keyed lease is only this host's queue; the operation then also takes the ID's record lease
//! (`ROOT/.result-records-v1/<sha256(id)>.lock`, its `.lease/` directory and its `.fence`),
//! which excludes across hosts, claims its token in the fence before reading the record, and
//! makes the fenced checks before every write (`admission`'s `Held::verify`). `gc` refuses
//! there, and nothing removes the record namespace (docs/design.md, "The result store on a
//! shared mount"). By default such a root is refused, naming the option.
//!
//! The code follows those seams: `error` (the typed errors), `records` (`entry.json` and
//! publications), `admission` (taking an ID's lease), `applying` (a killed apply's
//! leftovers in TARGET), `ops` (stage, paths, finish, apply, discard, abort), `sweep`
//! (expiry, discovery, gc), `asynchronous` (the async faces), `files` (the file-system steps
//! they share, through directory handles).

mod admission;
mod applying;
#[cfg(feature = "tokio")]
mod asynchronous;
mod error;
mod files;
mod ops;
mod records;
mod sweep;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use leasehold::patterns::keyed::KeyedLeases;

use error::Result;
pub use error::ResultError;
use leasehold::LockDir;
pub use records::{Entry, Publication};
pub use sweep::{GcReport, SweepReport};

/// The directory of the per-ID operation locks, under the managed root. Versioned: lock
/// files are never removed and their names are this layout's (SHA-256 of the trimmed ID), so
/// a future layout gets a new directory instead of reinterpreting old lock files — two
/// layouts reading one name two ways would be two mutexes for one result.
const RESULT_NAMESPACE: &str = ".result-locks-v1";

/// The directory of the per-ID record leases (see "On a shared mount" above), under the
/// managed root: `<sha256(id)>.lock` (this host's queue), its `.lease/` directory and its
/// `.fence`. Outside [`RESULT_NAMESPACE`], so that [`ResultStore::gc`]'s collector never
/// reaches them; nothing removes them.
const RECORD_NAMESPACE: &str = ".result-records-v1";

/// A hook [`ResultStore::observe`] installs.
type Hook = Arc<dyn Fn(&str) + Send + Sync>;

/// A result store in one managed root (see the module documentation). Clones share the
/// root and the wait policy.
///
/// A wait for a busy ID is silent: a program that tells its user what it waits for wraps the
/// call, as the CLI does (its `wait.rs`: a quiet second, then one line, then the rest of the
/// budget), since only it knows how to say so.
///
/// IDs are trimmed [`SafeId`](crate::id::SafeId)s ([`SafeId::trimmed`](crate::id::SafeId::trimmed));
/// an ID without a candidate or publication is refused without creating anything, not even
/// its lock file.
///
/// ```
/// use leasehold::{Budget, Classify, ErrorClass};
/// use leasehold_stores::results::ResultStore;
///
/// let (root, src) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
/// std::fs::write(src.path().join("a.txt"), "a").unwrap();
/// let results = ResultStore::new(root.path());
/// let now = Budget::no_wait();
/// assert_eq!(results.discard("nope", &now).unwrap_err().class(), ErrorClass::Usage);
/// assert!(!results.lock_path("nope").exists());
/// results.stage(" r1 ", src.path(), &now).unwrap();
/// assert_eq!(results.paths("r1", &now).unwrap(), ["a.txt"]);
/// results.discard("r1", &now).unwrap();
/// ```
#[derive(Clone)]
pub struct ResultStore {
    root: PathBuf,
    leases: KeyedLeases,
    /// [`leases`](Self::leases) on a host-only mount under a record lease, where the
    /// kernel's lock is only this host's queue (see "On a shared mount" above).
    host_leases: KeyedLeases,
    options: leasehold::LeaseOptions,
    staging: Option<Hook>,
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
        let options = leasehold::LeaseOptions::new();
        ResultStore {
            leases: KeyedLeases::new(root.clone(), RESULT_NAMESPACE),
            host_leases: KeyedLeases::new(root.clone(), RESULT_NAMESPACE)
                .with_options(options.allow_network_filesystem(true)),
            root,
            options,
            staging: None,
        }
    }

    /// Takes the IDs' leases with `options` (see [`KeyedLeases::with_options`]: to accept a
    /// managed root shared with other users, or one on a network or FUSE file system).
    /// With [`on_shared_mount`](leasehold::LeaseOptions::on_shared_mount) choosing
    /// [`SharedMount::Record`](leasehold::SharedMount::Record), a managed root on a mount
    /// whose kernel locks stay on each host takes a record lease per ID too (see "On a
    /// shared mount" above); by default such a root is refused, naming that option.
    pub fn with_lease_options(mut self, options: leasehold::LeaseOptions) -> ResultStore {
        self.leases = self.leases.with_options(options);
        self.host_leases = self
            .host_leases
            .with_options(options.allow_network_filesystem(true));
        self.options = options;
        self
    }

    /// Caps every wait (see [`KeyedLeases::max_wait`]; 30 s by default).
    pub fn max_wait(mut self, max: Option<Duration>) -> ResultStore {
        self.leases = self.leases.max_wait(max);
        self.host_leases = self.host_leases.max_wait(max);
        self
    }

    /// Calls `hook` with the ID each time [`stage`](Self::stage) has been admitted and has
    /// found the ID free, right before it writes anything: where a test or a fault injector
    /// pauses or fails a writer that holds the ID's lease.
    pub fn observe(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> ResultStore {
        self.staging = Some(Arc::new(hook));
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

    /// The managed root, opened (its path is the caller's configuration: followed); with
    /// `create`, created (0700) when missing. `Ok(None)`: missing.
    fn root_dir(&self, create: bool) -> Result<Option<LockDir>> {
        // A root others may write is refused before anything is created in it.
        self.leases
            .check_dirs()
            .map_err(|e| self.admission_error("", e))?;
        files::open_dir(&self.root, create).map_err(|e| ResultError::Unusable {
            path: self.root.clone(),
            reason: e.to_string(),
        })
    }

    /// A directory of the root (`results` or `published`), a real directory never followed;
    /// with `create`, created (0700, and the root too) when missing.
    fn area(&self, name: &str, create: bool) -> Result<Option<LockDir>> {
        let Some(root) = self.root_dir(create)? else {
            return Ok(None);
        };
        files::child(&root, name, create.then_some(files::PRIVATE_DIR)).map_err(|e| {
            ResultError::Unusable {
                path: root.path().join(name),
                reason: e.to_string(),
            }
        })
    }

    /// Whether a candidate or a publication stands for `id` (admission only, never
    /// authority). Anything standing there counts, so that the operation is admitted and
    /// judges it under the lease.
    fn exists(&self, id: &str) -> bool {
        let stands = |area: &str, name: &str| match self.area(area, false) {
            Ok(Some(dir)) => !matches!(dir.entry(name), Ok(None)),
            Ok(None) => false,
            Err(_) => true,
        };
        stands("results", id) || stands("published", &format!("{id}.json"))
    }

    fn unknown(&self, id: &str) -> ResultError {
        ResultError::Unknown {
            id: id.to_string(),
            root: self.root.clone(),
        }
    }
}
