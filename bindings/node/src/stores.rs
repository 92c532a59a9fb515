//! The three stores of `leasehold-stores` behind `Registry`, `SessionLog` and `ResultStore`,
//! each through its async face: waits for a lease on the reactor, file work and fsyncs on
//! tokio's blocking pool — never on libuv's pool, never on the JavaScript thread.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold::Budget;
use leasehold::patterns::authority::State;
use leasehold::patterns::offload;
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths};
use leasehold_stores::results::ResultStore;
use leasehold_stores::session::{AsyncSessionWriter, SessionError, SessionId, SessionStore};
use napi::Either;
use napi_derive::napi;

use crate::errors::{self, Failure};
use crate::lease::{NativeOptIns, Waiter, budget};

/// What a store call answers when it has nothing to return: nothing, or the failure.
type Done = Option<Failure>;

/// `Registry.open`'s options (the signal stays in JavaScript: see [`Waiter`]).
#[napi(object)]
pub struct NativeRegistryOptions {
    /// The home directory: the store is `HOME/storages/multi_root_workspace.json`.
    pub home: String,
    /// The lease's lock file (default `HOME/storages/multi_root_workspace.lock`).
    pub lease_path: Option<String>,
    /// How long to wait for the authority: absent or 0, try once (the CLI's default).
    pub timeout_ms: Option<f64>,
    /// `LeaseOptions::allow_network_filesystem`.
    pub allow_network_fs: Option<bool>,
    /// `LeaseOptions::allow_shared_state`: the lock file, the storages directory and the
    /// document may belong to another user or be group/other-writable.
    pub allow_shared_state: Option<bool>,
    /// `onSharedMount: { record: { ttlMs } }`'s TTL (`lease::shared_mount`; absent: refuse).
    pub record_ttl_ms: Option<f64>,
}

/// The store-wide authority over the multi-root workspace registry.
#[napi]
pub struct NativeRegistry {
    inner: Arc<Registry>,
}

fn state_name(state: &State) -> &'static str {
    match state {
        State::Active => "active",
        State::Contended => "contended",
        State::StorageFailed { .. } => "storage-failed",
    }
}

/// Whether a registry error is a state the registry now reports (another authority, a
/// failed store) rather than a failure of the call.
fn is_state(e: &RegistryError) -> bool {
    matches!(
        e,
        RegistryError::Contended { .. } | RegistryError::StorageFailed { .. }
    )
}

#[napi]
impl Waiter {
    /// Opens the registry and tries to become its authority within `timeoutMs`: contention
    /// and a failed store are states of the registry, not failures.
    #[napi]
    pub async fn open_registry(
        &self,
        options: NativeRegistryOptions,
    ) -> Either<NativeRegistry, Failure> {
        let budget = match budget(Some(options.timeout_ms.unwrap_or(0.0)), self.token()) {
            Ok(b) => b,
            Err(f) => return Either::B(f),
        };
        let paths = RegistryPaths::in_home(
            &PathBuf::from(options.home),
            options.lease_path.map(PathBuf::from),
        );
        let shared_mount = match crate::lease::shared_mount(options.record_ttl_ms) {
            Ok(s) => s,
            Err(f) => return Either::B(f),
        };
        let registry = Registry::with_options(
            paths,
            crate::lease::opt_ins(options.allow_network_fs, options.allow_shared_state)
                .on_shared_mount(shared_mount),
        );
        match registry.acquire_async(&budget).await {
            Err(e) if !is_state(&e) => Either::B(errors::registry(&e)),
            _ => Either::A(NativeRegistry {
                inner: Arc::new(registry),
            }),
        }
    }
}

#[napi]
impl NativeRegistry {
    /// `active`, `contended` or `storage-failed`.
    #[napi(getter)]
    pub fn state(&self) -> String {
        state_name(&self.inner.state()).into()
    }

    /// The published scope, primary → roots: empty unless active (fail closed).
    #[napi]
    pub fn scope(&self) -> std::collections::HashMap<String, Vec<String>> {
        let lossy = |p: &std::path::Path| p.to_string_lossy().into_owned();
        self.inner
            .scope()
            .iter()
            .map(|(primary, roots)| (lossy(primary), roots.iter().map(|r| lossy(r)).collect()))
            .collect()
    }

    /// Whether a sandbox of `primary` may touch `path`; false unless active.
    #[napi]
    pub fn grants(&self, primary: String, path: String) -> bool {
        self.inner
            .grants(&PathBuf::from(primary), &PathBuf::from(path))
    }

    /// Records `root` under `primary` (`NOT_AUTHORITY` unless active).
    #[napi]
    pub async fn add(&self, primary: String, root: String) -> Done {
        self.inner
            .add_async(primary, root)
            .await
            .err()
            .map(|e| errors::registry(&e))
    }

    /// Removes `root` from `primary` (`NOT_AUTHORITY` unless active).
    #[napi]
    pub async fn remove(&self, primary: String, root: String) -> Done {
        self.inner
            .remove_async(primary, root)
            .await
            .err()
            .map(|e| errors::registry(&e))
    }

    /// Tries once more to become the authority (re-reading the store); answers the state.
    #[napi]
    pub async fn refresh(&self) -> Either<String, Failure> {
        match self.inner.refresh_async().await {
            Err(e) if !is_state(&e) => Either::B(errors::registry(&e)),
            _ => Either::A(state_name(&self.inner.state()).into()),
        }
    }

    /// Drains in-flight mutations, closes the store and releases the lease (last).
    #[napi]
    pub async fn close(&self) {
        self.inner.teardown_async().await;
    }
}

/// One writer of one session log; it takes the session's write lease at its first append.
#[napi]
pub struct NativeSessionLog {
    store: SessionStore,
    id: SessionId,
    writer: Arc<Mutex<Writer>>,
}

#[derive(Clone)]
enum Writer {
    /// No append yet (or the last attempt to take the lease failed): no lease.
    None,
    Open(AsyncSessionWriter),
    Closed,
}

/// A session ID checked by the store's one ID type.
fn session_id(id: String) -> Result<SessionId, Failure> {
    SessionId::new(id).map_err(|e| errors::session(&e.into()))
}

/// The log of session `id` in `dir`; takes no lease and touches nothing yet.
#[napi]
pub fn open_session_log(
    dir: String,
    id: String,
    options: Option<NativeOptIns>,
) -> Either<NativeSessionLog, Failure> {
    let opened = session_id(id).and_then(|id| {
        Ok(NativeSessionLog {
            store: SessionStore::new(dir)
                .with_lease_options(NativeOptIns::lease_options(options.as_ref())?),
            id,
            writer: Arc::new(Mutex::new(Writer::None)),
        })
    });
    match opened {
        Ok(log) => Either::A(log),
        Err(f) => Either::B(f),
    }
}

/// Every whole record of session `id` in `dir`, as JSON texts; never takes the lock.
#[napi]
pub fn read_session(
    dir: String,
    id: String,
    options: Option<NativeOptIns>,
) -> Either<Vec<String>, Failure> {
    // The error is worded at once (on Windows a `SessionError` is large enough for clippy's
    // `result_large_err` in a closure that returns it).
    let read = || -> Result<Vec<String>, Failure> {
        let failed = |e: SessionError| errors::session(&e);
        let id = SessionId::new(id).map_err(|e| failed(e.into()))?;
        let reader = SessionStore::new(dir)
            .with_lease_options(NativeOptIns::lease_options(options.as_ref())?)
            .reader(&id)
            .map_err(failed)?;
        let mut records = Vec::new();
        for r in reader {
            records.push(String::from_utf8_lossy(&r.map_err(failed)?).into_owned());
        }
        Ok(records)
    };
    match read() {
        Ok(records) => Either::A(records),
        Err(f) => Either::B(f),
    }
}

impl NativeSessionLog {
    fn released(&self) -> Failure {
        errors::session(&SessionError::Released {
            id: self.id.clone(),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[napi]
impl NativeSessionLog {
    /// Appends one JSON text as a record, taking the write lease first if this log does not
    /// hold it yet (`SESSION_OWNED` when another process has it; a later append tries again).
    /// The JavaScript wrapper runs one append at a time, in call order.
    #[napi]
    pub async fn append(&self, text: String) -> Done {
        let current = self.slot().clone();
        let writer = match current {
            Writer::Open(w) => w,
            Writer::Closed => return Some(self.released()),
            Writer::None => match self.store.open_writer_async(&self.id).await {
                Ok(w) => {
                    let closed = {
                        let mut slot = self.slot();
                        let closed = matches!(*slot, Writer::Closed);
                        if !closed {
                            *slot = Writer::Open(w.clone());
                        }
                        closed
                    };
                    if closed {
                        // Closed while the lease was being taken: let it go again.
                        w.release().await;
                        return Some(self.released());
                    }
                    w
                }
                Err(e) => return Some(errors::session(&e)),
            },
        };
        writer
            .append_json(text)
            .await
            .err()
            .map(|e| errors::session(&e))
    }

    /// Releases the write lease (after any append in flight). Idempotent; appends after it
    /// fail.
    #[napi]
    pub fn close(&self) {
        let previous = std::mem::replace(&mut *self.slot(), Writer::Closed);
        if let Writer::Open(w) = previous {
            // Synchronous by the surface: waits for an append in flight, then releases.
            napi::bindgen_prelude::block_on(w.release());
        }
    }
}

/// Isolated results in one managed root, each operation under its ID's lease.
#[napi]
pub struct NativeResultStore {
    store: ResultStore,
    timeout_ms: f64,
}

/// What `gc` did.
#[napi(object)]
pub struct NativeGcReport {
    /// Lock files removed.
    pub removed: u32,
    /// Lock files kept.
    pub kept: u32,
}

/// The CLI's wait for an ID's lease when none is given.
const DEFAULT_TIMEOUT_MS: f64 = 30_000.0;

/// The result store in `root` (nothing is opened or created until an operation runs); each
/// operation waits at most `timeoutMs` (default 30 s, as the CLI) for its ID's lease.
#[napi]
pub fn open_result_store(
    root: String,
    timeout_ms: Option<f64>,
    options: Option<NativeOptIns>,
) -> Either<NativeResultStore, Failure> {
    let timeout_ms = timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if let Err(f) = budget(Some(timeout_ms), None) {
        return Either::B(f);
    }
    let lease_options = match NativeOptIns::lease_options(options.as_ref()) {
        Ok(o) => o,
        Err(f) => return Either::B(f),
    };
    Either::A(NativeResultStore {
        // The wait is the budget given here: no cap of the store's own on top of it.
        store: ResultStore::new(root)
            .max_wait(None)
            .with_lease_options(lease_options),
        timeout_ms,
    })
}

#[napi]
impl NativeResultStore {
    fn budget(&self) -> Budget {
        budget(Some(self.timeout_ms), None).unwrap_or_else(|_| Budget::no_wait())
    }

    /// Creates candidate `id` holding a copy of the files under `from`.
    #[napi]
    pub async fn stage(&self, id: String, from: String) -> Done {
        let got = self.store.stage_async(&id, from, &self.budget()).await;
        got.err().map(|e| errors::results(&e))
    }

    /// The relative paths the result would change (an empty result is removed).
    #[napi]
    pub async fn paths(&self, id: String) -> Either<Vec<String>, Failure> {
        match self.store.paths_async(&id, &self.budget()).await {
            Ok(paths) => Either::A(paths),
            Err(e) => Either::B(errors::results(&e)),
        }
    }

    /// Inspects and publishes the result.
    #[napi]
    pub async fn finish(&self, id: String) -> Done {
        let got = self.store.finish_async(&id, &self.budget()).await;
        got.err().map(|e| errors::results(&e))
    }

    /// Writes the candidate's files into `to`, then removes candidate and publication.
    #[napi]
    pub async fn apply(&self, id: String, to: String) -> Done {
        let got = self.store.apply_async(&id, to, &self.budget()).await;
        got.err().map(|e| errors::results(&e))
    }

    /// Removes the candidate and its publication.
    #[napi]
    pub async fn discard(&self, id: String) -> Done {
        let got = self.store.discard_async(&id, &self.budget()).await;
        got.err().map(|e| errors::results(&e))
    }

    /// Abandons the result (removes candidate and publication).
    #[napi]
    pub async fn abort(&self, id: String) -> Done {
        let got = self.store.abort_async(&id, &self.budget()).await;
        got.err().map(|e| errors::results(&e))
    }

    /// The published results (read-only).
    #[napi]
    pub async fn pending(&self) -> Either<Vec<String>, Failure> {
        let store = self.store.clone();
        match offload(move || store.pending()).await {
            Ok(ids) => Either::A(ids),
            Err(e) => Either::B(errors::results(&e)),
        }
    }

    /// Removes results older than `olderThanSec` (busy IDs are skipped); answers how many.
    #[napi]
    pub async fn sweep(&self, older_than_sec: f64) -> Either<u32, Failure> {
        let older = match seconds(older_than_sec) {
            Ok(d) => d,
            Err(f) => return Either::B(f),
        };
        match self.store.sweep_async(older).await {
            Ok(report) => Either::A(report.removed.len() as u32),
            Err(e) => Either::B(errors::results(&e)),
        }
    }

    /// Removes lock files of IDs with no candidate and no publication that nobody holds.
    #[napi]
    pub async fn gc(&self, older_than_sec: Option<f64>) -> Either<NativeGcReport, Failure> {
        let older = match seconds(older_than_sec.unwrap_or(0.0)) {
            Ok(d) => d,
            Err(f) => return Either::B(f),
        };
        let store = self.store.clone();
        match offload(move || store.gc(older)).await {
            Ok(r) => Either::A(NativeGcReport {
                removed: r.removed as u32,
                kept: r.kept as u32,
            }),
            Err(e) => Either::B(errors::results(&e)),
        }
    }
}

/// A number of seconds ≥ 0.
fn seconds(secs: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| Failure::invalid(format!("{secs} is not a number of seconds ≥ 0")))
}
