//! How a Python call waits for a lease: always through one of the library's drivers (its
//! decisions, its kernel-queue wait), never a loop of ours around tries.
//!
//! * **Blocking without a limit** (`acquire(path)`, `timeout=None`; [`block_inline`]): the
//!   library's blocking acquisition with the GIL released, which blocks this very thread in
//!   the kernel's `flock` queue — one thread wake-up per hand-over, as `fcntl.flock` — with
//!   a [`Budget::on_interrupt`](leasehold::Budget::on_interrupt) hook. CPython installs its
//!   signal handlers without `SA_RESTART`, so a signal delivered to the waiting thread (the
//!   kernel prefers the main thread for a process-wide signal such as Ctrl-C's) ends the
//!   `flock` with `EINTR`; the hook then takes the GIL and asks Python to run its handlers
//!   (`PyErr_CheckSignals`, as `fcntl.flock` does under PEP 475): one that raises
//!   (`KeyboardInterrupt`) stops the wait, which the library ends with nothing held, and the
//!   exception propagates; otherwise the wait goes on in the same place in line. On other
//!   threads Python runs no handlers, and the wait goes on.
//! * **Blocking with a timeout** ([`block`]): the calling thread releases the GIL and drives
//!   the library's future on a current-thread runtime of its own (one per Python thread,
//!   made on its first wait), so a grant wakes it directly. Python runs signal handlers only on the
//!   main thread, and only when that thread asks (`PyErr_CheckSignals`); a main thread
//!   that waits therefore wakes every [`SIGNAL_CHECK`] to ask, with the GIL taken just for
//!   that. A handler that raises (SIGINT's `KeyboardInterrupt`) ends the wait: the future is
//!   dropped, which abandons the wait and leaves nothing held (the library's contract), and
//!   the exception propagates. The lock itself is never polled.
//! * **A record lease** (`on_shared_mount=Record(...)`; [`block_thread`]): its wait across
//!   hosts polls and sleeps rather than waiting in the kernel's queue alone, so it runs on a
//!   thread of its own with a [`CancelToken`](leasehold::CancelToken) in its budget; the
//!   calling thread waits for the outcome without the GIL and checks signals as a timed
//!   wait does. A handler that raises cancels the token and waits for the acquisition to
//!   end (a lease granted meanwhile is released) before the exception propagates. Async,
//!   the same acquisition runs on [`runtime`]'s blocking pool.
//! * **Async** (`acquire_async`): the same future runs as a task on [`runtime`], with a
//!   [`CancelToken`](leasehold::CancelToken) in its budget, and reports to the event loop
//!   (`call_soon_threadsafe`) once it has ended. Cancelling the awaiting task cancels the
//!   token and then waits for that report, so that when `CancelledError` reaches the
//!   caller the wait has ended and nothing of it is in line; a lease granted at that very
//!   moment is released before the cancellation completes (`leasehold_lock/__init__.py`).

use std::cell::RefCell;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::pin;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::Poll;
use std::time::Duration;

use leasehold::Budget;
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

/// Runs `acquire` (a blocking acquisition of the library) with the GIL released, its budget
/// unlimited but for signals: a signal handler that raises ends the wait (module
/// documentation).
pub(crate) fn block_inline<T, F>(py: Python<'_>, acquire: F) -> Waited<T>
where
    F: FnOnce(&Budget) -> leasehold::Result<T> + Send,
    T: Send,
{
    let raised: Arc<Mutex<Option<PyErr>>> = Arc::default();
    let budget = Budget::unlimited().on_interrupt({
        let raised = raised.clone();
        move || match Python::attach(|py| py.check_signals()) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                *raised.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    let res = py.detach(|| acquire(&budget));
    let raised = raised.lock().unwrap_or_else(PoisonError::into_inner).take();
    match (res, raised) {
        // The hook stopped the wait: the library's `Cancelled` is the handler's exception.
        (Err(_), Some(raised)) => Waited::Interrupted(raised),
        (res, _) => Waited::Done(res),
    }
}

/// Runs `acquire` (a blocking acquisition of the library whose wait does not sleep in the
/// kernel's queue alone: the record lease polls across hosts) on a thread of its own, with
/// `budget` and a cancellation token; the calling thread waits for its outcome with the GIL
/// released, asking Python every [`SIGNAL_CHECK`] whether a signal arrived (main thread
/// only). A handler that raises cancels the token and waits for the acquisition to end
/// (nothing held: a lease granted meanwhile is released), then the exception propagates.
pub(crate) fn block_thread<T, F>(py: Python<'_>, budget: Budget, acquire: F) -> PyResult<Waited<T>>
where
    F: FnOnce(&Budget) -> leasehold::Result<T> + Send + 'static,
    T: Send + 'static,
{
    let cancel = leasehold::CancelToken::new();
    let budget = budget.with_cancel(cancel.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("leasehold-rec".into())
        .spawn(move || {
            let _ = tx.send(acquire(&budget));
        })
        .map_err(|e| {
            PyRuntimeError::new_err(format!("leasehold: cannot start the wait's thread: {e}"))
        })?;
    let main = on_main_thread(py);
    let lost = || PyRuntimeError::new_err("leasehold: the wait's thread ended without an outcome");
    py.detach(move || {
        loop {
            let got = match main {
                true => rx.recv_timeout(SIGNAL_CHECK),
                false => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match got {
                Ok(res) => return Ok(Waited::Done(res)),
                Err(RecvTimeoutError::Disconnected) => return Err(lost()),
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(raised) = Python::attach(|py| py.check_signals()) {
                        cancel.cancel();
                        drop(rx.recv()); // the acquisition's end (a lease released)
                        return Ok(Waited::Interrupted(raised));
                    }
                }
            }
        }
    })
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
