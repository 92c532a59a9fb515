//! How a Python call waits for a lease: always through the library's tokio driver (its
//! decisions, its kernel-queue wait), never a loop of ours around tries.
//!
//! * **Blocking** (`acquire`): the calling thread releases the GIL and drives the library's
//!   future on a current-thread runtime of its own (one per Python thread, made on its
//!   first wait), so a grant wakes it directly. Python runs signal handlers only on the
//!   main thread, and only when that thread asks (`PyErr_CheckSignals`); a main thread
//!   that waits therefore wakes every [`SIGNAL_CHECK`] to ask, with the GIL taken just for
//!   that. A handler that raises (SIGINT's `KeyboardInterrupt`) ends the wait: the future is
//!   dropped, which abandons the wait and leaves nothing held (the library's contract), and
//!   the exception propagates. The lock itself is never polled.
//! * **Async** (`acquire_async`): the same future runs as a task on [`runtime`], with a
//!   [`CancelToken`](leasehold::CancelToken) in its budget, and reports to the event loop
//!   (`call_soon_threadsafe`) once it has ended. Cancelling the awaiting task cancels the
//!   token and then waits for that report, so that when `CancelledError` reaches the
//!   caller the wait has ended and nothing of it is in line; a lease granted at that very
//!   moment is released before the cancellation completes (`leasehold/__init__.py`).

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::sync::OnceLock;
use std::task::Poll;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// How often a waiting main thread asks Python whether a signal arrived: the bound on how
/// late Ctrl-C ends a wait (the surface promises 100 ms; the rest is margin for taking the
/// GIL back from a busy thread, which Python hands over within its 5 ms switch interval).
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(20);

thread_local! {
    /// This thread's runtime for blocking waits (see the module documentation).
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

/// How a blocking wait ended.
pub(crate) enum Waited<T> {
    /// The library's answer.
    Done(leasehold::Result<T>),
    /// A signal handler raised (the wait was abandoned).
    Interrupted(PyErr),
}

/// Runs `fut` (a wait of the library's tokio driver) to completion on this thread with the
/// GIL released, ending it early when a signal handler raises (main thread only).
pub(crate) fn block<T, F>(py: Python<'_>, fut: F) -> PyResult<Waited<T>>
where
    F: Future<Output = leasehold::Result<T>> + Send,
    T: Send,
{
    py.detach(|| {
        RUNTIME.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| {
                        PyRuntimeError::new_err(format!(
                            "leasehold: cannot start this thread's wait driver: {e}"
                        ))
                    })?;
                *slot = Some(rt);
            }
            let Some(rt) = slot.as_ref() else {
                unreachable!("set just above")
            };
            Ok(rt.block_on(drive(fut)))
        })
    })
}

async fn drive<T, F>(fut: F) -> Waited<T>
where
    F: Future<Output = leasehold::Result<T>>,
{
    let mut fut = pin!(fut);
    // The uncontended path ends in this first poll, without a look at the thread or a timer.
    let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
    if let Poll::Ready(done) = first {
        return Waited::Done(done);
    }
    if !Python::attach(on_main_thread) {
        return Waited::Done(fut.await);
    }
    loop {
        tokio::select! {
            biased;
            done = fut.as_mut() => return Waited::Done(done),
            () = tokio::time::sleep(SIGNAL_CHECK) => {
                if let Err(raised) = Python::attach(|py| py.check_signals()) {
                    return Waited::Interrupted(raised);
                }
            }
        }
    }
}

/// The runtime async waits run on: one worker thread (the waits themselves sleep in the
/// library's kernel-wait helpers and the reactor, so more workers would only add idle
/// threads), started on the first `acquire_async`.
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("leasehold-async")
        .enable_all()
        .build()
        .map_err(|e| {
            PyRuntimeError::new_err(format!(
                "leasehold: cannot start the async wait driver: {e}"
            ))
        })?;
    Ok(RUNTIME.get_or_init(|| rt))
}

static MAIN_THREAD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static CURRENT_THREAD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Whether this is Python's main thread, the only one that runs signal handlers. (A thread
/// Python does not know counts as another thread.)
fn on_main_thread(py: Python<'_>) -> bool {
    let look = || -> PyResult<bool> {
        let main = MAIN_THREAD
            .import(py, "threading", "main_thread")?
            .call0()?;
        let current = CURRENT_THREAD
            .import(py, "threading", "current_thread")?
            .call0()?;
        Ok(main.is(&current))
    };
    // Unknown: check, which costs a wake-up every SIGNAL_CHECK and nothing else.
    look().unwrap_or(true)
}
