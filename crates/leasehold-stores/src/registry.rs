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

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use leasehold::patterns::authority::{
    Authority, AuthorityError, KernelArbiter, Observer, State, Store, StoreFailure,
};
use leasehold::patterns::durable::create_dir_durable;
#[cfg(feature = "tokio")]
use leasehold::patterns::offload;
use leasehold::{Budget, ErrorClass, HolderInfo};
use serde_json::{Map, Value, json};

use crate::document::{DocumentFiles, JsonDocument, RealFiles};

/// The document, relative to the home directory.
pub const DOCUMENT: &str = "storages/multi_root_workspace.json";
/// The default lease, relative to the home directory.
pub const LEASE: &str = "storages/multi_root_workspace.lock";

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
    #[error("registry is held by another process{holders}")]
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
}

impl RegistryError {
    /// How a caller should treat this error: an invalid root is [`ErrorClass::Usage`],
    /// another authority [`ErrorClass::Contended`], a failed store [`ErrorClass::Failure`],
    /// and a lease error its own class (an unusable lease path is `Usage`, a cancelled wait
    /// `Cancelled`).
    pub fn class(&self) -> ErrorClass {
        match self {
            RegistryError::InvalidRoot { .. } => ErrorClass::Usage,
            RegistryError::Contended { .. } => ErrorClass::Contended,
            RegistryError::StorageFailed { .. } => ErrorClass::Failure,
            RegistryError::Lease(e) => e.class(),
        }
    }

    /// The contract's error code: `invalid-root`, `registry-contended` or `storage-failed`.
    pub fn code(&self) -> &'static str {
        match self {
            RegistryError::InvalidRoot { .. } => "invalid-root",
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
    doc: JsonDocument,
    loaded: Option<Map<String, Value>>,
    /// Whether the document's directory and its home have been made durable since the store
    /// was opened (see [`RegistryStore::ensure_durable_dirs`]).
    dirs_durable: bool,
}

impl RegistryStore {
    /// The store over `doc`.
    pub fn new(doc: JsonDocument) -> RegistryStore {
        RegistryStore {
            doc,
            loaded: None,
            dirs_durable: false,
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
        let path = self.doc.path().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let home = dir
                .parent()
                .filter(|h| !h.as_os_str().is_empty())
                .unwrap_or(dir);
            create_dir_durable(dir, home).map_err(|e| {
                self.doc
                    .failure(format!("cannot make its directory durable: {e}"))
            })?;
        }
        self.dirs_durable = true;
        Ok(())
    }

    fn parse(&self, doc: &Map<String, Value>) -> Result<Scope, StoreFailure> {
        let bad = |what: &str| self.doc.failure(format!("does not parse: {what}"));
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
        let scope = self.parse(&doc)?;
        self.loaded = Some(doc);
        Ok(scope)
    }

    fn commit(&mut self, scope: &Scope, _fence: Option<u64>) -> Result<(), StoreFailure> {
        let Some(mut doc) = self.loaded.clone() else {
            return Err(self.doc.failure("write before a successful load".into()));
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
        self.doc.save(&doc)?;
        self.loaded = Some(doc);
        Ok(())
    }

    fn close(&mut self) {
        self.loaded = None;
    }
}

type RegistryAuthority = Authority<KernelArbiter, RegistryStore>;

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
/// [`acquire`]: Registry::acquire
pub struct Registry {
    /// Shared so that the async faces can run a write or a teardown on the blocking pool.
    authority: Arc<RegistryAuthority>,
    paths: RegistryPaths,
}

impl Registry {
    /// A registry over `paths` on the real file system. Nothing is opened yet.
    pub fn new(paths: RegistryPaths) -> Registry {
        Registry::with_files(paths, Arc::new(RealFiles), None)
    }

    /// A registry whose document operations go through `files` (fault injection), with an
    /// optional lifecycle observer.
    pub fn with_files(
        paths: RegistryPaths,
        files: Arc<dyn DocumentFiles>,
        observer: Option<Observer>,
    ) -> Registry {
        let store = RegistryStore::new(JsonDocument::with_files(&paths.document, files));
        let mut authority = Authority::new(KernelArbiter::new(&paths.lease), store);
        if let Some(o) = observer {
            authority = authority.with_observer(o);
        }
        Registry {
            authority: Arc::new(authority),
            paths,
        }
    }

    /// The files.
    pub fn paths(&self) -> &RegistryPaths {
        &self.paths
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
                holders: HolderInfo::of_path(&self.paths.lease),
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

    /// Removes `root` from `primary`. Neither needs to exist any more: each is canonicalized
    /// if it exists, else taken as an absolute, lexically normalized path. Removing an
    /// absent entry succeeds; a primary left without roots is dropped.
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
        let (Ok(primary), Some(target)) = (primary.canonicalize(), canonical_target(path)) else {
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
    /// nothing (see [`Authority::acquire_async`]).
    pub async fn acquire_async(&self, budget: &Budget) -> Result<(), RegistryError> {
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
    let primary = resolve_for_removal(primary)?;
    let root = resolve_for_removal(root)?;
    authority.mutate(move |scope| {
        if let Some(roots) = scope.get_mut(&primary) {
            roots.retain(|r| *r != root);
            if roots.is_empty() {
                scope.remove(&primary);
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
    let canonical = path
        .canonicalize()
        .map_err(|e| invalid(format!("not an existing directory ({e})")))?;
    if !canonical.is_dir() {
        return Err(invalid("not a directory".into()));
    }
    if canonical.to_str().is_none() {
        return Err(invalid("path is not valid UTF-8".into()));
    }
    Ok(canonical)
}

/// `path` canonicalized if it exists, else absolute and lexically normalized.
fn resolve_for_removal(path: &Path) -> Result<PathBuf, RegistryError> {
    if let Ok(c) = path.canonicalize() {
        return Ok(c);
    }
    let absolute = std::path::absolute(path).map_err(|e| RegistryError::InvalidRoot {
        path: path.to_path_buf(),
        reason: format!("cannot make the path absolute ({e})"),
    })?;
    Ok(normalize_lexically(&absolute))
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
    if let Ok(c) = path.canonicalize() {
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
        Some(p) if !p.as_os_str().is_empty() => p.canonicalize().ok()?,
        _ => std::env::current_dir().ok()?,
    };
    Some(parent.join(name))
}
