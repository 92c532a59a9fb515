//! The multi-root workspace registry: primary root → additional roots a sandbox may grant.
//!
//! Two processes of one product (a desktop app and a headless server, say) share one home
//! and one registry file. The registry is served by an
//! [`Authority`], so exactly one process writes the
//! file and every other grants nothing — [`Registry::grants`] answers `false` whenever this
//! process is not the active authority, because a root removed by the other process must not
//! stay granted from stale memory.
//!
//! Files, under the home directory: the document `storages/multi_root_workspace.json` and,
//! unless configured elsewhere, the lease `storages/multi_root_workspace.lock` (a store moved
//! elsewhere must move its lease with it, or two copies would each have a writer).
//!
//! Document shape (unknown fields, top-level or per workspace, are preserved):
//! `{"version": 1, "workspaces": {"/primary": {"roots": ["/root", ...]}}}`.
//!
//! **On etcd** (feature `etcd`, `Registry::on_etcd`): the processes may be on several
//! machines. The lock is an `EtcdArbiter` under `PREFIX/lock/` and the document is the value
//! of `PREFIX/storages/multi_root_workspace`. Every write is one etcd transaction that succeeds
//! only while the writer's lock key still exists with the create revision it was granted (the
//! fencing token), so a writer paused past its lease's TTL that resumes is refused by etcd
//! itself and writes nothing. Each written document carries `"fencing_token"`, the token it
//! was written under; the file-backed store does the same under a fencing arbiter and refuses
//! to write over a document stamped with a higher token.
//!
//! **On a directory shared between hosts** whose mount keeps kernel locks on each host (NFS
//! with `local_lock=all`, sshfs, most FUSE), with
//! [`LeaseOptions::on_shared_mount`](leasehold::LeaseOptions::on_shared_mount) choosing
//! [`SharedMount::Record`]: the lease is a record lease, whose token is stamped and compared
//! as etcd's is; it is also claimed in the fence beside the lock file when the registry
//! becomes active and compared there last before each rename, and each write refuses when
//! too little of the lease's validity is left ([`MountLease::verify_for_write`]).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

#[cfg(all(feature = "etcd", unix))]
use leasehold::arbiters::etcd::{EtcdArbiter, EtcdGrant, Fenced};
#[cfg(feature = "tokio")]
use leasehold::patterns::authority::AsyncArbiter;
use leasehold::patterns::authority::{
    Arbiter, Authority, AuthorityError, Grant, KernelArbiter, Observer, State, Store, StoreFailure,
};
use leasehold::patterns::durable::create_dir_durable;
#[cfg(feature = "tokio")]
use leasehold::patterns::offload;
use leasehold::{
    Budget, Classify, ErrorClass, HolderInfo, Lease, LeaseOptions, LockMode, MountLease,
    SharedMount,
};

use crate::fence::Fence;
use serde_json::{Map, Value, json};

use crate::document::{DocumentFiles, JsonDocument, RealFiles};

/// The document, relative to the home directory.
pub const DOCUMENT: &str = "storages/multi_root_workspace.json";
/// The default lease, relative to the home directory.
pub const LEASE: &str = "storages/multi_root_workspace.lock";
/// On etcd: the document's key, relative to the prefix.
pub const ETCD_DOCUMENT: &str = "storages/multi_root_workspace";
/// On etcd: the lock's key prefix, relative to the prefix.
pub const ETCD_LOCK: &str = "lock";
/// The field of the document that records the fencing token it was written under (only
/// written under an arbiter that hands out tokens, such as etcd).
pub const FENCING_TOKEN: &str = "fencing_token";

/// What a sandbox may grant: canonical primary root → its additional canonical roots
/// (in the order they were added, without duplicates).
pub type Scope = BTreeMap<PathBuf, Vec<PathBuf>>;

/// Why a registry operation was refused; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A path given to `add` is not an existing directory (or not representable).
    #[error("invalid-root: {}: {reason}", path.display())]
    InvalidRoot {
        /// The path as given.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
    /// Another process is the registry's authority.
    #[error("registry is held by {}", holders.who())]
    Contended {
        /// Holder pids where the OS revealed them.
        holders: HolderInfo,
    },
    /// The registry document cannot be read or written (it is left untouched).
    #[error("registry storage failed: {reason}")]
    StorageFailed {
        /// What went wrong, naming the file.
        reason: String,
    },
    /// The lease could not be taken for another reason than contention.
    #[error("registry lease: {0}")]
    Lease(leasehold::Error),
    /// An etcd key prefix that would put the registry's keys inside another lock's key
    /// range, or another lock's keys inside the registry's (see [`Registry::on_etcd`]);
    /// refused before anything is contacted.
    #[error("etcd prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix as given.
        prefix: String,
        /// Which range it would overlap, and what to choose instead.
        reason: String,
    },
}

impl Classify for RegistryError {
    /// How a caller should treat this error: an invalid root or prefix is [`ErrorClass::Usage`],
    /// another authority [`ErrorClass::Contended`], a failed store [`ErrorClass::Failure`],
    /// and a lease error its own class (an unusable lease path is `Usage`, a cancelled wait
    /// `Cancelled`).
    fn class(&self) -> ErrorClass {
        match self {
            RegistryError::InvalidRoot { .. } | RegistryError::InvalidPrefix { .. } => {
                ErrorClass::Usage
            }
            RegistryError::Contended { .. } => ErrorClass::Contended,
            RegistryError::StorageFailed { .. } => ErrorClass::Failure,
            RegistryError::Lease(e) => e.class(),
        }
    }
}

impl RegistryError {
    /// The contract's error code: `invalid-root`, `registry-contended` or `storage-failed`
    /// (and `invalid-prefix`, which only opening a registry on etcd answers, so no `serve`
    /// answer carries it).
    pub fn code(&self) -> &'static str {
        match self {
            RegistryError::InvalidRoot { .. } => "invalid-root",
            RegistryError::InvalidPrefix { .. } => "invalid-prefix",
            RegistryError::Contended { .. } => "registry-contended",
            RegistryError::StorageFailed { .. } | RegistryError::Lease(_) => "storage-failed",
        }
    }
}

impl From<AuthorityError> for RegistryError {
    fn from(e: AuthorityError) -> Self {
        match e {
            AuthorityError::Contended { holders } => RegistryError::Contended { holders },
            AuthorityError::StorageFailed { reason } => RegistryError::StorageFailed { reason },
            AuthorityError::Lease(e) => RegistryError::Lease(e),
        }
    }
}

/// The registry document as a [`Store`]: keeps the whole JSON object it loaded so that
/// unknown fields are written back unchanged.
pub struct RegistryStore {
    doc: Backend,
    loaded: Option<Map<String, Value>>,
    /// Whether the document's directory and its home have been made durable since the store
    /// was opened (see [`RegistryStore::ensure_durable_dirs`]).
    dirs_durable: bool,
    /// The fence beside the lease's lock file, compared last before a write under a record
    /// lease's token (see [`Fence`]).
    fence: Option<Fence>,
}

/// Where the document lives.
enum Backend {
    File(JsonDocument),
    #[cfg(all(feature = "etcd", unix))]
    Etcd(EtcdDocument),
}

impl Backend {
    /// The document's file, for a file store (etcd keeps the document itself).
    fn file_path(&self) -> Option<&Path> {
        match self {
            Backend::File(d) => Some(d.path()),
            #[cfg(all(feature = "etcd", unix))]
            Backend::Etcd(_) => None,
        }
    }

    fn load(&self) -> Result<Map<String, Value>, StoreFailure> {
        match self {
            Backend::File(d) => d.load(),
            #[cfg(all(feature = "etcd", unix))]
            Backend::Etcd(d) => d.load(),
        }
    }

    fn failure(
        &self,
        op: impl Into<std::borrow::Cow<'static, str>>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> StoreFailure {
        match self {
            Backend::File(d) => d.failure(op, source),
            #[cfg(all(feature = "etcd", unix))]
            Backend::Etcd(d) => StoreFailure::new(d.describe(), op, source),
        }
    }

    /// Writes `doc`, stamped with `fence` when there is one. The file refuses to write over a
    /// document stamped with a higher token (a successor's, or one an etcd that since lost its
    /// data handed out); etcd checks the token itself, in the same transaction as the write.
    fn save(
        &self,
        doc: &mut Map<String, Value>,
        fence: Option<u64>,
        lock_fence: Option<&Fence>,
        check: &mut dyn FnMut() -> Result<(), StoreFailure>,
    ) -> Result<(), StoreFailure> {
        if let Some(token) = fence {
            doc.insert(FENCING_TOKEN.into(), json!(token));
        }
        match self {
            Backend::File(d) => {
                if let Some(token) = fence {
                    let on_disk = d.load()?;
                    if let Some(newer) = stamped(&on_disk).filter(|t| *t > token) {
                        return Err(d.failure(
                            format!("refusing to write under fencing token {token}"),
                            format!(
                                "the document records fencing token {newer}: either a later holder wrote it (this one was deposed), or the etcd cluster that hands out the tokens lost its data (wiped, or restored from a backup) and counts from a lower revision again; in that case, once every holder from before has stopped, remove the document's \"{FENCING_TOKEN}\" field"
                            ),
                        ));
                    }
                }
                // Under a record lease, the fence beside the lock file is compared too (a
                // successor claims it before it reads, so this catches a holder deposed before
                // the successor has written anything), and the lease verified again after it:
                // a successor takes over only once this holder's validity has run out.
                match (fence, lock_fence) {
                    (Some(token), Some(f)) => d.save_checked(doc, &mut || {
                        check()?;
                        f.check(token)
                            .map_err(|e| StoreFailure::new("the lease", "fenced out", e))?;
                        match crate::fence::MUTANT {
                            true => Ok(()),
                            false => check(),
                        }
                    }),
                    _ => d.save_checked(doc, check),
                }
            }
            // One transaction, checked by etcd itself against the token.
            #[cfg(all(feature = "etcd", unix))]
            Backend::Etcd(d) => {
                check()?;
                d.save(doc, fence)
            }
        }
    }
}

/// The fencing token a document was written under, if stamped.
pub fn stamped(doc: &Map<String, Value>) -> Option<u64> {
    doc.get(FENCING_TOKEN).and_then(Value::as_u64)
}

/// Where `leasehold run --etcd NAME` keeps its locks: `leasehold/lock/NAME/`.
pub const ETCD_RUN_LOCKS: &str = "leasehold/lock";

/// Checks that an etcd registry at `prefix` (trailing `/` ignored) cannot overlap another
/// lock's keys. A registry keeps its lock under `PREFIX/lock/` and its document, a key
/// without a lease, at `PREFIX/storages/multi_root_workspace`; every key under a lock's
/// range is read as that lock's holder or waiter. So `prefix`
///
/// * must not be empty;
/// * must have no segment `lock` (between `/`s): such a prefix lies inside the lock range of
///   the registry (or of the `run --etcd` lock) named by what precedes that segment, and the
///   registry's never-expiring document there blocked that lock for ever;
///   conversely no other registry can then lie inside this one's;
/// * must not be `leasehold`, whose `lock/` range is where `leasehold run --etcd` keeps
///   every lock ([`ETCD_RUN_LOCKS`]).
///
/// Two registries with such prefixes never overlap, whatever else their prefixes share (one
/// may even lie below the other: `a` and `a/b`).
///
/// # Errors
///
/// [`RegistryError::InvalidPrefix`], saying which range it would overlap and what to use.
pub fn check_etcd_prefix(prefix: &str) -> Result<(), RegistryError> {
    let bad = |reason: String| {
        Err(RegistryError::InvalidPrefix {
            prefix: prefix.to_string(),
            reason,
        })
    };
    let trimmed = prefix.trim_end_matches('/');
    let instead = "choose one with no `lock` segment, such as leasehold/registry (the default)";
    if trimmed.is_empty() {
        return bad(format!("names no key range; {instead}"));
    }
    if trimmed.split('/').any(|segment| segment == ETCD_LOCK) {
        return bad(format!(
            "a `{ETCD_LOCK}` segment puts the registry's keys inside another lock's key range (a registry keeps its lock under PREFIX/{ETCD_LOCK}/, `run --etcd NAME` under {ETCD_RUN_LOCKS}/NAME/), where its document would hold that lock for ever; {instead}"
        ));
    }
    if format!("{trimmed}/{ETCD_LOCK}") == ETCD_RUN_LOCKS {
        return bad(format!(
            "its lock range {ETCD_RUN_LOCKS}/ holds every `run --etcd` lock; {instead}"
        ));
    }
    Ok(())
}

/// The registry document as the value of one etcd key, written only under a valid token.
#[cfg(all(feature = "etcd", unix))]
struct EtcdDocument {
    arbiter: EtcdArbiter,
    key: String,
}

#[cfg(all(feature = "etcd", unix))]
impl EtcdDocument {
    fn describe(&self) -> String {
        format!("etcd key {} at {}", self.key, self.arbiter.endpoints())
    }

    fn load(&self) -> Result<Map<String, Value>, StoreFailure> {
        let fail = |op: &'static str, source: Box<dyn std::error::Error + Send + Sync>| {
            StoreFailure::new(self.describe(), op, source)
        };
        let bytes = self
            .arbiter
            .get(&self.key)
            .map_err(|e| fail("cannot read", e.into()))?;
        let Some(bytes) = bytes else {
            return Ok(Map::new());
        };
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Err(fail("does not parse", "not a JSON object".into())),
            Err(e) => Err(fail("does not parse", e.into())),
        }
    }

    fn save(&self, doc: &Map<String, Value>, fence: Option<u64>) -> Result<(), StoreFailure> {
        let fail = |op: &'static str, source: Box<dyn std::error::Error + Send + Sync>| {
            StoreFailure::new(self.describe(), op, source)
        };
        let Some(token) = fence else {
            return Err(fail("refusing to write", "no fencing token".into()));
        };
        let bytes = serde_json::to_vec(doc).map_err(|e| fail("cannot encode", e.into()))?;
        match self.arbiter.put_fenced(token, &self.key, bytes) {
            Ok(Fenced::Written) => Ok(()),
            Ok(Fenced::Refused) => Err(fail(
                "etcd refused the write",
                format!("fencing token {token} no longer holds the lock").into(),
            )),
            Err(e) => Err(fail("cannot write", e.into())),
        }
    }
}

impl RegistryStore {
    /// The store over `doc`.
    pub fn new(doc: JsonDocument) -> RegistryStore {
        RegistryStore {
            doc: Backend::File(doc),
            loaded: None,
            dirs_durable: false,
            fence: None,
        }
    }

    /// Before the first save after opening: makes the names of the document's directory
    /// (`storages/`) and of the home holding it durable. The lease creates `storages/` for
    /// its lock file without syncing its parent, so a fresh home's first acknowledged
    /// mutation would otherwise vanish with its directories in a power cut (found by the
    /// power-loss torture, `crates/crashfs`). Once per opening: two directory fsyncs.
    fn ensure_durable_dirs(&mut self) -> Result<(), StoreFailure> {
        if self.dirs_durable {
            return Ok(());
        }
        // Only a file store has directories of its own (etcd keeps the document itself).
        let Some(path) = self.doc.file_path().map(Path::to_path_buf) else {
            self.dirs_durable = true;
            return Ok(());
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let home = dir
                .parent()
                .filter(|h| !h.as_os_str().is_empty())
                .unwrap_or(dir);
            create_dir_durable(dir, home)
                .map_err(|e| self.doc.failure("cannot make its directory durable", e))?;
        }
        self.dirs_durable = true;
        Ok(())
    }

    fn parse(&self, doc: &Map<String, Value>) -> Result<Scope, StoreFailure> {
        let bad = |what: &str| self.doc.failure("does not parse", what);
        let mut scope = Scope::new();
        let workspaces = match doc.get("workspaces") {
            None | Some(Value::Null) => return Ok(scope),
            Some(Value::Object(w)) => w,
            Some(_) => return Err(bad("\"workspaces\" is not an object")),
        };
        for (primary, entry) in workspaces {
            let roots = entry
                .get("roots")
                .and_then(Value::as_array)
                .ok_or_else(|| bad(&format!("workspace {primary:?} has no \"roots\" array")))?;
            let mut list = Vec::new();
            for r in roots {
                let r = r.as_str().ok_or_else(|| {
                    bad(&format!("workspace {primary:?}: a root is not a string"))
                })?;
                let r = PathBuf::from(r);
                if !list.contains(&r) {
                    list.push(r);
                }
            }
            if !list.is_empty() {
                scope.insert(PathBuf::from(primary), list);
            }
        }
        Ok(scope)
    }
}

impl Store for RegistryStore {
    type Records = Scope;

    fn open(&mut self) -> Result<Scope, StoreFailure> {
        self.dirs_durable = false;
        let doc = self.doc.load()?;
        // Opened under the authority's lease: a temporary beside the document is a killed
        // rewrite's, never one in progress. Best effort: a leftover is harmless.
        if let Some(path) = self.doc.file_path() {
            let _ = leasehold::patterns::durable::remove_temporaries(path);
        }
        let scope = self.parse(&doc)?;
        self.loaded = Some(doc);
        Ok(scope)
    }

    fn commit(&mut self, scope: &Scope, fence: Option<u64>) -> Result<(), StoreFailure> {
        self.commit_checked(scope, fence, &mut || Ok(()))
    }

    /// Stages the new document and calls `check` before renaming it into place
    /// ([`JsonDocument::save_checked`]).
    fn commit_checked(
        &mut self,
        scope: &Scope,
        fence: Option<u64>,
        check: &mut dyn FnMut() -> Result<(), StoreFailure>,
    ) -> Result<(), StoreFailure> {
        let Some(mut doc) = self.loaded.clone() else {
            return Err(self
                .doc
                .failure("cannot write", "the document was not loaded first"));
        };
        let old = match doc.remove("workspaces") {
            Some(Value::Object(w)) => w,
            _ => Map::new(),
        };
        let mut workspaces = Map::new();
        for (primary, roots) in scope {
            let key = primary.to_string_lossy().into_owned();
            let mut entry = match old.get(&key) {
                Some(Value::Object(e)) => e.clone(),
                _ => Map::new(),
            };
            let roots: Vec<String> = roots
                .iter()
                .map(|r| r.to_string_lossy().into_owned())
                .collect();
            entry.insert("roots".into(), json!(roots));
            workspaces.insert(key, Value::Object(entry));
        }
        doc.entry("version").or_insert(json!(1));
        doc.insert("workspaces".into(), Value::Object(workspaces));
        self.ensure_durable_dirs()?;
        self.doc.save(&mut doc, fence, self.fence.as_ref(), check)?;
        self.loaded = Some(doc);
        Ok(())
    }

    fn close(&mut self) {
        self.loaded = None;
    }
}

type RegistryAuthority = Authority<RegistryArbiter, RegistryStore>;

/// Who arbitrates the registry: the kernel lease on one machine, or etcd across machines.
enum RegistryArbiter {
    Kernel(KernelArbiter),
    /// The lease the lock path's mount calls for
    /// ([`LeaseOptions::acquire_mount_lease`]): a record lease where the mount keeps kernel
    /// locks on each host and the options chose one, the kernel's elsewhere.
    Mount {
        lock: PathBuf,
        options: LeaseOptions,
    },
    #[cfg(all(feature = "etcd", unix))]
    Etcd(EtcdArbiter),
}

enum RegistryGrant {
    Kernel(Lease),
    Mount(MountLease),
    /// Boxed: the etcd client it carries is large.
    #[cfg(all(feature = "etcd", unix))]
    Etcd(Box<EtcdGrant>),
}

impl Grant for RegistryGrant {
    fn verify(&self) -> leasehold::Result<()> {
        match self {
            RegistryGrant::Kernel(g) => Grant::verify(g),
            // Every verification precedes a write: the library's rule for one.
            RegistryGrant::Mount(g) => g.verify_for_write(),
            #[cfg(all(feature = "etcd", unix))]
            RegistryGrant::Etcd(g) => g.verify(),
        }
    }
    fn release(&mut self) {
        match self {
            RegistryGrant::Kernel(g) => Grant::release(g),
            RegistryGrant::Mount(g) => g.release(),
            #[cfg(all(feature = "etcd", unix))]
            RegistryGrant::Etcd(g) => g.release(),
        }
    }
    fn fencing_token(&self) -> Option<u64> {
        match self {
            RegistryGrant::Kernel(g) => g.fencing_token(),
            RegistryGrant::Mount(g) => g.fencing_token(),
            #[cfg(all(feature = "etcd", unix))]
            RegistryGrant::Etcd(g) => g.fencing_token(),
        }
    }
    fn is_lost(&self) -> bool {
        match self {
            RegistryGrant::Kernel(g) => g.is_lost(),
            RegistryGrant::Mount(g) => !g.is_held(),
            #[cfg(all(feature = "etcd", unix))]
            RegistryGrant::Etcd(g) => g.is_lost(),
        }
    }
}

impl Arbiter for RegistryArbiter {
    type Grant = RegistryGrant;
    fn acquire(&self, budget: &Budget) -> leasehold::Result<RegistryGrant> {
        match self {
            RegistryArbiter::Kernel(a) => a.acquire(budget).map(RegistryGrant::Kernel),
            RegistryArbiter::Mount { lock, options } => {
                acquire_mount(lock, options, budget).map(RegistryGrant::Mount)
            }
            #[cfg(all(feature = "etcd", unix))]
            RegistryArbiter::Etcd(a) => a.acquire(budget).map(|g| RegistryGrant::Etcd(Box::new(g))),
        }
    }
}

/// The mount's lease on `lock`; under a record lease, its token claimed in the fence beside
/// the lock file before the store is read (a predecessor that resumes then writes nothing).
fn acquire_mount(
    lock: &Path,
    options: &LeaseOptions,
    budget: &Budget,
) -> leasehold::Result<MountLease> {
    let lease = options.acquire_mount_lease(lock, LockMode::Exclusive, budget)?;
    if let Some(token) = lease.fencing_token() {
        Fence::of(lock).claim(token)?;
    }
    Ok(lease)
}

/// One arbiter's pending acquisition.
#[cfg(feature = "tokio")]
enum Acquiring<K, M, #[cfg(all(feature = "etcd", unix))] E> {
    Kernel(K),
    Mount(M),
    #[cfg(all(feature = "etcd", unix))]
    Etcd(E),
}

#[cfg(feature = "tokio")]
impl AsyncArbiter for RegistryArbiter {
    fn acquire_async(
        &self,
        budget: impl Into<Budget>,
    ) -> impl std::future::Future<Output = leasehold::Result<RegistryGrant>> + Send {
        let budget = budget.into();
        let acquiring = match self {
            RegistryArbiter::Kernel(a) => Acquiring::Kernel(a.acquire_async(budget)),
            // A record lease's wait is a poll: it runs on the blocking pool.
            RegistryArbiter::Mount { lock, options } => {
                let (lock, options) = (lock.clone(), *options);
                Acquiring::Mount(leasehold::patterns::offload(move || {
                    acquire_mount(&lock, &options, &budget)
                }))
            }
            #[cfg(all(feature = "etcd", unix))]
            RegistryArbiter::Etcd(a) => Acquiring::Etcd(a.acquire_async(budget)),
        };
        async move {
            match acquiring {
                Acquiring::Kernel(f) => f.await.map(RegistryGrant::Kernel),
                Acquiring::Mount(f) => f.await.map(RegistryGrant::Mount),
                #[cfg(all(feature = "etcd", unix))]
                Acquiring::Etcd(f) => f.await.map(|g| RegistryGrant::Etcd(Box::new(g))),
            }
        }
    }
}

/// Where the registry's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryPaths {
    /// The JSON document.
    pub document: PathBuf,
    /// The lease's lock file.
    pub lease: PathBuf,
}

impl RegistryPaths {
    /// The files under `home`; the lease at `lease` when given, else beside the document.
    pub fn in_home(home: &Path, lease: Option<PathBuf>) -> RegistryPaths {
        RegistryPaths {
            document: home.join(DOCUMENT),
            lease: lease.unwrap_or_else(|| home.join(LEASE)),
        }
    }
}

/// The multi-root workspace registry of one process. Not active until [`acquire`]d.
///
/// Two registries over one home behave as two processes would: one is the authority, the
/// other grants nothing until it takes over with [`refresh`](Registry::refresh) — and then
/// serves its predecessor's last durable write.
///
/// ```
/// use leasehold::{Budget, Classify, ErrorClass, patterns::authority::State};
/// use leasehold_stores::registry::{Registry, RegistryPaths};
///
/// let dirs = || tempfile::tempdir().expect("a temporary directory");
/// let (home, project, extra) = (dirs(), dirs(), dirs());
/// let first = Registry::new(RegistryPaths::in_home(home.path(), None));
/// let second = Registry::new(RegistryPaths::in_home(home.path(), None));
/// first.acquire(&Budget::no_wait()).unwrap();
/// let refused = second.acquire(&Budget::no_wait()).unwrap_err();
/// assert_eq!(refused.class(), ErrorClass::Contended);
/// first.add(project.path(), extra.path()).unwrap();
/// assert!(!second.grants(project.path(), extra.path())); // not the authority: fails closed
/// first.teardown(); // drains, closes the document, releases the lease last
/// second.refresh().unwrap();
/// assert_eq!(second.state(), State::Active);
/// assert!(second.grants(project.path(), extra.path()));
/// ```
///
/// [`acquire`]: Registry::acquire
pub struct Registry {
    /// Shared so that the async faces can run a write or a teardown on the blocking pool.
    authority: Arc<RegistryAuthority>,
    /// The files; `None` on etcd.
    paths: Option<RegistryPaths>,
}

impl Registry {
    /// A registry over `paths` on the real file system. Nothing is opened yet.
    pub fn new(paths: RegistryPaths) -> Registry {
        Registry::with_options(paths, LeaseOptions::new())
    }

    /// A registry over `paths` whose lease is taken with `options`. With
    /// [`LeaseOptions::allow_shared_state`] the storages directory and the document may also
    /// belong to another user or be group/other-writable; by default such a document is
    /// refused (storage-failed, naming it and the reason), as the lock file is.
    pub fn with_options(paths: RegistryPaths, options: LeaseOptions) -> Registry {
        Registry::with_files_and_options(paths, Arc::new(RealFiles), None, options)
    }

    /// A registry whose document operations go through `files` (fault injection), with an
    /// optional lifecycle observer.
    pub fn with_files(
        paths: RegistryPaths,
        files: Arc<dyn DocumentFiles>,
        observer: Option<Observer>,
    ) -> Registry {
        Registry::with_files_and_options(paths, files, observer, LeaseOptions::new())
    }

    /// [`with_files`](Self::with_files) whose lease (and document checks) follow `options`
    /// (see [`with_options`](Self::with_options)).
    pub fn with_files_and_options(
        paths: RegistryPaths,
        files: Arc<dyn DocumentFiles>,
        observer: Option<Observer>,
        options: LeaseOptions,
    ) -> Registry {
        let doc = JsonDocument::with_files(&paths.document, files)
            .allow_shared_state(options.allows_shared_state());
        let mut store = RegistryStore::new(doc);
        let arbiter = match options.shared_mount() {
            SharedMount::Refuse => {
                RegistryArbiter::Kernel(KernelArbiter::new(&paths.lease).with_options(options))
            }
            _ => {
                store.fence = Some(Fence::of(&paths.lease));
                RegistryArbiter::Mount {
                    lock: paths.lease.clone(),
                    options,
                }
            }
        };
        let mut authority = Authority::new(arbiter, store);
        if let Some(o) = observer {
            authority = authority.with_observer(o);
        }
        Registry {
            authority: Arc::new(authority),
            paths: Some(paths),
        }
    }

    /// A registry on etcd at `endpoints` (comma-separated URLs), under key prefix `prefix`:
    /// the lock under `PREFIX/lock/` with leases of `ttl`, the document at
    /// `PREFIX/storages/multi_root_workspace`. Connects now; nothing is acquired yet.
    ///
    /// The prefix is checked first ([`check_etcd_prefix`]): every key under a lock's range
    /// counts as that lock's holder or waiter, so no registry's keys may lie inside another
    /// lock's range.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidPrefix`] for a prefix that [`check_etcd_prefix`] refuses,
    /// before anything is contacted; [`RegistryError::Lease`] with
    /// [`leasehold::Error::Unreachable`] when no endpoint answers within the connect timeout.
    #[cfg(all(feature = "etcd", unix))]
    pub fn on_etcd(
        endpoints: &str,
        prefix: &str,
        ttl: std::time::Duration,
        observer: Option<Observer>,
    ) -> Result<Registry, RegistryError> {
        check_etcd_prefix(prefix)?;
        let prefix = prefix.trim_end_matches('/');
        let arbiter = EtcdArbiter::connect(endpoints, &format!("{prefix}/{ETCD_LOCK}"), ttl)
            .map_err(RegistryError::Lease)?;
        let store = RegistryStore {
            doc: Backend::Etcd(EtcdDocument {
                arbiter: arbiter.clone(),
                key: format!("{prefix}/{ETCD_DOCUMENT}"),
            }),
            loaded: None,
            dirs_durable: true, // etcd has no directories to make durable
            fence: None,
        };
        let mut authority = Authority::new(RegistryArbiter::Etcd(arbiter), store);
        if let Some(o) = observer {
            authority = authority.with_observer(o);
        }
        Ok(Registry {
            authority: Arc::new(authority),
            paths: None,
        })
    }

    /// The files (`None` for a registry on etcd).
    pub fn paths(&self) -> Option<&RegistryPaths> {
        self.paths.as_ref()
    }

    /// Becomes the authority within `budget` (or reports why not); see
    /// [`Authority::acquire`].
    pub fn acquire(&self, budget: &Budget) -> Result<(), RegistryError> {
        Ok(self.authority.acquire(budget)?)
    }

    /// Tries once more to become the authority, reopening the document from disk.
    pub fn refresh(&self) -> Result<(), RegistryError> {
        Ok(self.authority.refresh()?)
    }

    /// The authority's state.
    pub fn state(&self) -> State {
        self.authority.state()
    }

    /// `Ok` while active; otherwise the error any operation would get now. A contention
    /// error names the lease's current holders, looked up afresh (a pid shown must be right).
    pub fn ensure_active(&self) -> Result<(), RegistryError> {
        match self.authority.ensure_active() {
            Ok(()) => Ok(()),
            Err(AuthorityError::Contended { .. }) => Err(RegistryError::Contended {
                holders: self
                    .paths
                    .as_ref()
                    .map(|p| HolderInfo::of_path(&p.lease))
                    .unwrap_or_default(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// The published scope: empty unless active.
    pub fn scope(&self) -> Arc<Scope> {
        self.authority.scope()
    }

    /// Records `root` as an additional root of `primary`. Both must be existing directories;
    /// they are stored canonicalized, and adding an existing pair changes nothing.
    pub fn add(&self, primary: &Path, root: &Path) -> Result<(), RegistryError> {
        add(&self.authority, primary, root)
    }

    /// Removes `root` from `primary`. Neither needs to exist any more: each is matched both
    /// as an absolute, lexically normalized path and, if it exists, canonicalized (so a
    /// directory since replaced by a symlink is still removed). Removing an absent entry
    /// succeeds; a primary left without roots is dropped.
    pub fn remove(&self, primary: &Path, root: &Path) -> Result<(), RegistryError> {
        remove(&self.authority, primary, root)
    }

    /// Whether a sandbox of `primary` may touch `path`: `path` lies inside `primary` or one of
    /// its granted roots. Both are canonicalized first, so neither `..` nor a symlink can
    /// escape (a path that does not exist yet is judged by its canonical parent). Always
    /// `false` while this process is not the active authority (fail closed).
    pub fn grants(&self, primary: &Path, path: &Path) -> bool {
        if self.state() != State::Active {
            return false;
        }
        let scope = self.scope();
        let (Ok(primary), Some(target)) = (canonicalize(primary), canonical_target(path)) else {
            return false;
        };
        if target.starts_with(&primary) {
            return true;
        }
        scope
            .get(&primary)
            .is_some_and(|roots| roots.iter().any(|r| target.starts_with(r)))
    }

    /// Drains, closes the store and releases the lease (also done on drop).
    pub fn teardown(&self) {
        self.authority.teardown();
    }
}

/// Async faces (feature `tokio`). No executor thread blocks: waiting for the lease is
/// reactor-driven (no thread per waiter), and opening the document, every fsync'd write and
/// the draining teardown run on tokio's blocking pool. See the `async_registry` example
/// for a service that takes the registry at start and hands it over on shutdown.
#[cfg(feature = "tokio")]
impl Registry {
    /// [`acquire`](Self::acquire) without blocking the executor: waits for another process
    /// to hand the registry over within `budget`. Dropping the future while it waits takes
    /// nothing (see [`Authority::acquire_async`]). The future owns the budget (pass it by
    /// value, or `&budget` to keep yours).
    pub async fn acquire_async(&self, budget: impl Into<Budget>) -> Result<(), RegistryError> {
        Ok(self.authority.acquire_async(budget).await?)
    }

    /// [`refresh`](Self::refresh) without blocking the executor.
    pub async fn refresh_async(&self) -> Result<(), RegistryError> {
        Ok(self.authority.refresh_async().await?)
    }

    /// [`add`](Self::add) without blocking the executor (the canonicalization and the durable
    /// write run on the blocking pool; once started, the write completes even if the future
    /// is dropped).
    pub async fn add_async(
        &self,
        primary: impl Into<PathBuf>,
        root: impl Into<PathBuf>,
    ) -> Result<(), RegistryError> {
        let (authority, primary, root) = (self.authority.clone(), primary.into(), root.into());
        offload(move || add(&authority, &primary, &root)).await
    }

    /// [`remove`](Self::remove) without blocking the executor (as [`add_async`](Self::add_async)).
    pub async fn remove_async(
        &self,
        primary: impl Into<PathBuf>,
        root: impl Into<PathBuf>,
    ) -> Result<(), RegistryError> {
        let (authority, primary, root) = (self.authority.clone(), primary.into(), root.into());
        offload(move || remove(&authority, &primary, &root)).await
    }

    /// [`teardown`](Self::teardown) without blocking the executor: drains in-flight writes,
    /// closes the document and releases the lease last, on the blocking pool. Call it before
    /// dropping the registry in async code (`Drop` would tear down inline).
    pub async fn teardown_async(&self) {
        self.authority.teardown_async().await;
    }
}

fn add(authority: &RegistryAuthority, primary: &Path, root: &Path) -> Result<(), RegistryError> {
    let primary = existing_dir(primary)?;
    let root = existing_dir(root)?;
    authority.mutate(move |scope| {
        let roots = scope.entry(primary).or_default();
        if !roots.contains(&root) {
            roots.push(root);
        }
    })?;
    Ok(())
}

fn remove(authority: &RegistryAuthority, primary: &Path, root: &Path) -> Result<(), RegistryError> {
    let primaries = spellings_for_removal(primary)?;
    let roots = spellings_for_removal(root)?;
    authority.mutate(move |scope| {
        for primary in &primaries {
            if let Some(entry) = scope.get_mut(primary) {
                entry.retain(|r| !roots.contains(r));
                if entry.is_empty() {
                    scope.remove(primary);
                }
            }
        }
    })?;
    Ok(())
}

/// `path` canonicalized; it must be an existing directory with a UTF-8 name (the document
/// is JSON). This is the check `add` applies to both of its paths.
pub fn existing_dir(path: &Path) -> Result<PathBuf, RegistryError> {
    let invalid = |reason: String| RegistryError::InvalidRoot {
        path: path.to_path_buf(),
        reason,
    };
    let canonical =
        canonicalize(path).map_err(|e| invalid(format!("not an existing directory ({e})")))?;
    if !canonical.is_dir() {
        return Err(invalid("not a directory".into()));
    }
    if canonical.to_str().is_none() {
        return Err(invalid("path is not valid UTF-8".into()));
    }
    Ok(canonical)
}

/// `path.canonicalize()` in the form users write and `std::path::absolute` returns: on
/// Windows without the verbatim prefix (`\\?\C:\…`, `\\?\UNC\…`) that `canonicalize` adds, so
/// that stored paths read `C:\…` and a deleted directory's absolute form (which has no
/// prefix) still matches its stored entry at removal. (The standard library adds the prefix
/// itself where a long path needs it.)
fn canonicalize(path: &Path) -> std::io::Result<PathBuf> {
    let canonical = path.canonicalize()?;
    #[cfg(windows)]
    if let Some(s) = canonical.to_str() {
        if let Some(rest) = s.strip_prefix(r"\\?\UNC\") {
            return Ok(PathBuf::from(format!(r"\\{rest}")));
        }
        if let Some(rest) = s.strip_prefix(r"\\?\")
            && rest.as_bytes().get(1) == Some(&b':')
        {
            return Ok(PathBuf::from(rest));
        }
    }
    Ok(canonical)
}

/// The spellings under which `path` may have been stored: its absolute, lexically
/// normalized form and, when it exists, its canonical form.
///
/// Why both: an entry is stored canonicalized, but the directory may have been replaced by
/// a symlink since (or a parent renamed and linked back); canonicalizing alone would then
/// resolve to where the link points, match nothing and keep the grant while reporting
/// success.
fn spellings_for_removal(path: &Path) -> Result<Vec<PathBuf>, RegistryError> {
    let absolute = std::path::absolute(path).map_err(|e| RegistryError::InvalidRoot {
        path: path.to_path_buf(),
        reason: format!("cannot make the path absolute ({e})"),
    })?;
    let mut out = vec![normalize_lexically(&absolute)];
    if let Ok(c) = canonicalize(path)
        && !out.contains(&c)
    {
        out.push(c);
    }
    Ok(out)
}

/// Resolves `.` and `..` without touching the file system (`..` at the root stays at the
/// root, as the kernel does).
fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The canonical form of `path`, or of its parent joined with its final name when `path`
/// itself does not exist yet.
fn canonical_target(path: &Path) -> Option<PathBuf> {
    if let Ok(c) = canonicalize(path) {
        return Some(c);
    }
    if path.symlink_metadata().is_ok() {
        // Something stands there but does not resolve (a dangling symlink): writing through
        // it would create its target wherever it points.
        return None;
    }
    let name = match path.components().next_back()? {
        Component::Normal(n) => n,
        _ => return None,
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => canonicalize(p).ok()?,
        _ => std::env::current_dir().ok()?,
    };
    Some(parent.join(name))
}
