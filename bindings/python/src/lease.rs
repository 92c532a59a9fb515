//! `acquire`, `try_acquire`, `acquire_async`, `Lease`, `Record` and `holders`: the library's
//! lease, translated. Timeouts become [`Budget`]s, keyword options become [`LeaseOptions`]
//! (`on_shared_mount=Record(ttl=...)`: `SharedMount::Record`, taken through the library's
//! `acquire_mount_lease`), and the wait is the library's (see `wait.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use std::time::Duration;

use leasehold::{Budget, CancelToken, Holders, LeaseOptions, LockMode, MountLease, SharedMount};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::to_pyerr;
use crate::wait::{self, Waited};

/// A lease held by this process: exclusive, or shared with `shared=True`. Released by
/// `release()`, by leaving its `with` block, when it is garbage-collected (the library
/// lease's drop closes the descriptor), and by the kernel when the process exits. A kernel
/// lease never expires; a record lease (`on_shared_mount=Record(...)` on a mount whose locks
/// stay on each host) ends a TTL after its holder stopped renewing it.
#[pyclass(module = "leasehold_lock", name = "Lease", frozen)]
pub(crate) struct Lease {
    /// The library's lease (in a child forked without exec, the library's copy answers as a
    /// released lease: see `leasehold::after_fork_in_child` and `leasehold::RecordLease`).
    held: Mutex<MountLease>,
    path: PathBuf,
    shared: bool,
    fencing_token: Option<u64>,
}

impl Lease {
    fn new(held: MountLease) -> Lease {
        Lease {
            path: held.path().to_path_buf(),
            shared: held.mode() == LockMode::Shared,
            fencing_token: held.fencing_token(),
            held: Mutex::new(held),
        }
    }

    /// The library's lease.
    fn held(&self) -> MutexGuard<'_, MountLease> {
        // A panic cannot leave the lease half-changed: every method is one library call.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl Lease {
    /// The lock file's path, as given.
    #[getter]
    fn path(&self) -> std::ffi::OsString {
        self.path.as_os_str().to_os_string()
    }

    /// Whether this is a shared (reader) lease.
    #[getter]
    fn shared(&self) -> bool {
        self.shared
    }

    /// A record lease's fencing token, which grows with every grant; `None` for a kernel
    /// lease. It is `T·2^20 + k`: `T` the server's grant, `k` the hand-overs on one host
    /// since; compare tokens as numbers only.
    #[getter]
    fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Whether the lease is held: `False` once released, and in a process forked from the
    /// one that took it (the child lets go of its copy at the fork: see
    /// `_after_fork_in_child`).
    #[getter(held)]
    fn is_held(&self) -> bool {
        self.held().is_held()
    }

    /// Raises `LeaseError(code='LOST')` unless the lease still stands for its path: the lock
    /// file was removed or replaced (a newcomer would lock the new file), or the lease was
    /// released; for a record lease, its validity ran out and a renewal found the record
    /// taken over (it reads the record once a third of the TTL is spent). Call it before a
    /// write that the lease must guard.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let held = self.held();
        let lease: &MountLease = &held;
        py.detach(|| lease.verify()).map_err(|e| to_pyerr(py, e))
    }

    /// Releases the lease (closes its descriptor). Idempotent; the lock file stays.
    fn release(&self) {
        self.held().release();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Releases the lease; returns `None`, so an exception in the block propagates.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.release();
    }

    fn __repr__(&self) -> String {
        format!(
            "<leasehold_lock.Lease {:?} {}, {}>",
            self.path,
            if self.shared { "shared" } else { "exclusive" },
            if self.is_held() { "held" } else { "released" }
        )
    }
}

/// A path argument as every function of the package takes one: a `str`, `bytes`, or an
/// `os.PathLike` of either (`bytes` decoded as `os.fsdecode` does, so any file name the
/// system has comes through).
pub(crate) fn path_arg(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let decoded = obj.py().import("os")?.getattr("fsdecode")?.call1((obj,))?;
    decoded.extract()
}

/// What the keyword options of `acquire`, `try_acquire` and `acquire_async` ask for.
fn options(
    allow_network_fs: bool,
    allow_shared_state: bool,
    on_shared_mount: Option<&Record>,
) -> LeaseOptions {
    LeaseOptions::new()
        .allow_network_filesystem(allow_network_fs)
        .allow_shared_state(allow_shared_state)
        .on_shared_mount(shared_mount(on_shared_mount))
}

/// What the `on_shared_mount` keyword chose (`None`: refuse, the default): the library's
/// [`SharedMount`]. The one reading of it for `acquire`, `try_acquire`, `acquire_async` and
/// `Document`.
pub(crate) fn shared_mount(on_shared_mount: Option<&Record>) -> SharedMount {
    match on_shared_mount {
        Some(record) => SharedMount::Record { ttl: record.ttl },
        None => SharedMount::Refuse,
    }
}

/// `on_shared_mount=Record(ttl=SECONDS)`: on a mount whose kernel locks stay on each host
/// (NFS with `local_lock=all` or `nolock`, SMB with `nobrl`, sshfs and most FUSE), an
/// exclusive lease is a record lease with this TTL, which excludes processes on every host
/// sharing the directory and carries a fencing token (the library's
/// `SharedMount::Record`). Elsewhere the kernel's lease is taken as without it.
#[pyclass(module = "leasehold_lock", name = "Record", frozen, eq)]
#[derive(PartialEq)]
pub(crate) struct Record {
    ttl: Duration,
}

#[pymethods]
impl Record {
    #[new]
    #[pyo3(signature = (ttl))]
    fn new(ttl: f64) -> PyResult<Record> {
        match Duration::try_from_secs_f64(ttl) {
            Ok(d) if ttl > 0.0 => Ok(Record { ttl: d }),
            _ => Err(PyValueError::new_err(format!(
                "Record(ttl={ttl}): the TTL must be a positive number of seconds (how long a holder that stopped renewing keeps waiters on other hosts out)"
            ))),
        }
    }

    /// The TTL, in seconds.
    #[getter]
    fn ttl(&self) -> f64 {
        self.ttl.as_secs_f64()
    }

    fn __repr__(&self) -> String {
        format!("leasehold_lock.Record(ttl={})", self.ttl.as_secs_f64())
    }
}

/// The mode of the `shared` keyword.
fn mode(shared: bool) -> LockMode {
    match shared {
        true => LockMode::Shared,
        false => LockMode::Exclusive,
    }
}

/// The budget for a Python `timeout`, as every call of the package reads one: the library's
/// reading of a number of seconds ([`Budget::from_timeout_secs`]: infinity waits without
/// limit, `0` tries once, a positive number waits at most that long, NaN and negatives are
/// refused), after `None` and `-1` — filelock's spelling of "no limit", this package's alone —
/// are read as no limit; a refusal is a `ValueError` naming the keyword.
pub(crate) fn budget(timeout: Option<f64>) -> PyResult<Budget> {
    match timeout {
        None => Ok(Budget::unlimited()),
        Some(-1.0) => Ok(Budget::unlimited()),
        Some(t) => Budget::from_timeout_secs(t).map_err(|_| {
            PyValueError::new_err(format!(
                "timeout must be None or -1 (no limit), 0 (try once) or a positive number of seconds, not {t}"
            ))
        }),
    }
}

/// Takes the lease on `path`, waiting at most `timeout` seconds (`None`: without limit;
/// `0`: try once). Raises `leasehold_lock.Timeout` when it could not be had in time. The GIL is
/// released while waiting, and Ctrl-C ends the wait with `KeyboardInterrupt`. With
/// `on_shared_mount=Record(ttl=...)`, an exclusive lease on a mount whose kernel locks stay
/// on each host is a record lease (a lock path there is refused without it, naming it).
#[pyfunction]
#[pyo3(signature = (path, timeout=None, *, shared=false, allow_network_fs=false, allow_shared_state=false, on_shared_mount=None))]
pub(crate) fn acquire(
    py: Python<'_>,
    #[pyo3(from_py_with = path_arg)] path: PathBuf,
    timeout: Option<f64>,
    shared: bool,
    allow_network_fs: bool,
    allow_shared_state: bool,
    on_shared_mount: Option<Bound<'_, Record>>,
) -> PyResult<Lease> {
    let budget = budget(timeout)?;
    let record = on_shared_mount.as_ref().map(Bound::get);
    let opts = options(allow_network_fs, allow_shared_state, record);
    let mode = mode(shared);
    let waited = if record.is_some() {
        // The library decides from the mount which lease to take; its wait across hosts
        // polls, on a thread of its own (`wait.rs`).
        wait::block_thread(py, budget, move |budget| {
            opts.acquire_mount_lease(&path, mode, budget)
        })?
    } else if budget.remaining().is_none() {
        // No limit: the library's blocking wait, inline in the kernel's queue (`wait.rs`).
        wait::block_inline(py, |budget| {
            opts.acquire_mode(&path, mode, budget)
                .map(MountLease::Kernel)
        })
    } else {
        wait::block(py, async {
            opts.acquire_mode_async(&path, mode, &budget)
                .await
                .map(MountLease::Kernel)
        })?
    };
    match waited {
        Waited::Done(Ok(held)) => Ok(Lease::new(held)),
        Waited::Done(Err(e)) => Err(to_pyerr(py, e)),
        Waited::Interrupted(raised) => Err(raised),
    }
}

/// Takes the lease on `path` if it is free right now; `None` when another holder has it.
#[pyfunction]
#[pyo3(signature = (path, *, shared=false, allow_network_fs=false, allow_shared_state=false, on_shared_mount=None))]
pub(crate) fn try_acquire(
    py: Python<'_>,
    #[pyo3(from_py_with = path_arg)] path: PathBuf,
    shared: bool,
    allow_network_fs: bool,
    allow_shared_state: bool,
    on_shared_mount: Option<Bound<'_, Record>>,
) -> PyResult<Option<Lease>> {
    let record = on_shared_mount.as_ref().map(Bound::get);
    let opts = options(allow_network_fs, allow_shared_state, record);
    let mode = mode(shared);
    let res = py.detach(|| match record {
        Some(_) => opts.try_acquire_mount_lease(&path, mode),
        None => opts.try_acquire_mode(&path, mode).map(MountLease::Kernel),
    });
    match res {
        Ok(held) => Ok(Some(Lease::new(held))),
        Err(e) if e.is_contended() => Ok(None),
        Err(e) => Err(to_pyerr(py, e)),
    }
}

/// The result of an async acquisition, turned into a `Lease` or the exception object on the
/// event loop's side (where the GIL is held).
fn outcome(py: Python<'_>, res: leasehold::Result<MountLease>) -> PyResult<Py<PyAny>> {
    match res {
        Ok(held) => Ok(Bound::new(py, Lease::new(held))?.into_any().unbind()),
        Err(e) => Ok(to_pyerr(py, e).into_value(py).into_any()),
    }
}

/// An async acquisition in progress (see `leasehold_lock.acquire_async`, which drives it).
#[pyclass(module = "leasehold_lock._native", name = "_AsyncWait", frozen)]
pub(crate) struct AsyncWait {
    cancel: CancelToken,
    /// Set once the driver's thread that delivered the outcome has left Python.
    left: Arc<(Mutex<bool>, Condvar)>,
}

#[pymethods]
impl AsyncWait {
    /// Ends the wait: the library's acquisition sees its token cancelled at once and ends
    /// (nothing held); `finish` is still called, with the outcome.
    fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Returns once the driver's thread that delivered the outcome has left Python (at once,
    /// almost always); `finish` calls it before anything else. Without it the awaiting code
    /// could end, and the interpreter begin to shut down, while that thread still released
    /// its thread state, which CPython aborts ("PyGILState_Release: thread state ... must be
    /// current when releasing"): a script that exited right after its `await` crashed about
    /// one run in twenty. Waits without the GIL, which that thread may need to leave.
    fn settled(&self, py: Python<'_>) {
        let left = self.left.clone();
        py.detach(move || {
            let (done, changed) = &*left;
            let mut done = done.lock().unwrap_or_else(PoisonError::into_inner);
            while !*done {
                done = changed.wait(done).unwrap_or_else(PoisonError::into_inner);
            }
        });
    }
}

/// Starts `acquire` on the library's tokio driver (the binding's runtime) and returns at
/// once; when the acquisition has ended — and its wait with it — `finish(outcome)` is
/// called on `event_loop` (`call_soon_threadsafe`) with a `Lease` or an exception.
/// `leasehold_lock.acquire_async` wraps this in a coroutine.
#[pyfunction]
#[pyo3(signature = (path, timeout, shared, allow_network_fs, allow_shared_state, on_shared_mount, event_loop, finish))]
#[allow(clippy::too_many_arguments)] // the surface's keywords, then the loop's two ends
pub(crate) fn start_acquire(
    #[pyo3(from_py_with = path_arg)] path: PathBuf,
    timeout: Option<f64>,
    shared: bool,
    allow_network_fs: bool,
    allow_shared_state: bool,
    on_shared_mount: Option<Bound<'_, Record>>,
    event_loop: Py<PyAny>,
    finish: Py<PyAny>,
) -> PyResult<AsyncWait> {
    let cancel = CancelToken::new();
    let budget = budget(timeout)?.with_cancel(cancel.clone());
    let record = on_shared_mount.as_ref().map(Bound::get);
    let opts = options(allow_network_fs, allow_shared_state, record);
    let mode = mode(shared);
    let left = Arc::new((Mutex::new(false), Condvar::new()));
    let leaving = left.clone();
    let runtime = wait::runtime()?;
    match record {
        // The library decides from the mount which lease to take; its wait across hosts
        // polls, on a thread of the runtime's blocking pool.
        Some(_) => drop(runtime.spawn_blocking(move || {
            let res = opts.acquire_mount_lease(&path, mode, &budget);
            deliver(res, event_loop, finish, &leaving);
        })),
        None => drop(runtime.spawn(async move {
            let res = opts.acquire_mode_async(&path, mode, budget).await;
            deliver(res.map(MountLease::Kernel), event_loop, finish, &leaving);
        })),
    }
    Ok(AsyncWait { cancel, left })
}

/// Hands an async acquisition's outcome to the event loop (`finish` on `event_loop`), then
/// says, through `leaving`, that this thread has left Python. The acquisition is over
/// (dropped) before the loop hears of it.
fn deliver(
    res: leasehold::Result<MountLease>,
    event_loop: Py<PyAny>,
    finish: Py<PyAny>,
    leaving: &(Mutex<bool>, Condvar),
) {
    Python::attach(move |py| {
        let delivered = outcome(py, res)
            .and_then(|value| event_loop.call_method1(py, "call_soon_threadsafe", (finish, value)));
        if let Err(e) = delivered {
            // The loop is closed: nobody waits any more, and a lease in `value` was
            // dropped with it (released).
            e.write_unraisable(py, None);
        }
        drop(event_loop); // while attached: nothing of Python is left to drop after
    });
    // Out of Python: `finish` (see `AsyncWait::settled`) may go on.
    let (done, changed) = leaving;
    *done.lock().unwrap_or_else(PoisonError::into_inner) = true;
    changed.notify_all();
}

/// Who holds the lock file at `path`, without taking, creating or disturbing anything: the
/// holder pids (`[]`: free), or `None` where the system does not reveal holders (or hides
/// who holds it).
#[pyfunction]
pub(crate) fn holders(
    py: Python<'_>,
    #[pyo3(from_py_with = path_arg)] path: PathBuf,
) -> PyResult<Option<Vec<u32>>> {
    match py.detach(|| leasehold::holders(&path)) {
        Ok(Holders::Free) => Ok(Some(Vec::new())),
        Ok(Holders::Held { pids }) if !pids.is_empty() => Ok(Some(pids)),
        Ok(_) => Ok(None),
        Err(e) => Err(to_pyerr(py, e)),
    }
}

/// Registered by the package with `os.register_at_fork(after_in_child=...)`: in a child
/// forked without exec, lets go of every lease, wait and gate inherited from the parent,
/// never unlocking them (the library's `after_fork_in_child`); the inherited `Lease`
/// objects then say they are not held. `False` where part of the library's state could not
/// be reset (a thread of the parent held its lock at the fork).
#[pyfunction]
#[pyo3(name = "_after_fork_in_child")]
pub(crate) fn after_fork_in_child() -> bool {
    // No fork without exec elsewhere (Windows): Python registers nothing there.
    #[cfg(unix)]
    return leasehold::after_fork_in_child();
    #[cfg(not(unix))]
    true
}

/// Registered with `os.register_at_fork(before=...)`: the library's `before_fork`, on the
/// thread about to fork.
#[pyfunction]
#[pyo3(name = "_before_fork")]
pub(crate) fn before_fork() {
    #[cfg(unix)]
    leasehold::before_fork();
}

/// Registered with `os.register_at_fork(after_in_parent=...)`: the library's
/// `after_fork_in_parent`.
#[pyfunction]
#[pyo3(name = "_after_fork_in_parent")]
pub(crate) fn after_fork_in_parent() {
    #[cfg(unix)]
    leasehold::after_fork_in_parent();
}
