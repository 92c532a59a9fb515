//! The one table from the library's errors to the Python surface's exceptions and stable codes
//! (bindings/python/README.md: the Node surface's codes). Nothing else in the binding decides what an
//! error means.
//!
//! The exception classes themselves (`LeaseError`, `Timeout`) are Python classes in
//! `leasehold_lock/_errors.py`, so that `Timeout` can derive from both `LeaseError` and the
//! built-in `TimeoutError`, as `filelock.Timeout` does; they are looked up once.

use std::path::Path;

use std::sync::OnceLock;

use leasehold::{Classify, Error, ErrorClass, NotWaited, OptIn};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

/// The stable code of `e`, and the path (or key) it names. One row per variant the surface
/// tells apart; variants added later fall back on their [`ErrorClass`].
pub(crate) fn classify(e: &Error) -> (&'static str, Option<&Path>) {
    match e {
        Error::Contended { path, .. }
        | Error::TimedOut { path, .. }
        | Error::GateHeld { path, .. } => ("CONTENDED", Some(path)),
        Error::Cancelled { path } => ("CANCELLED", Some(path)),
        // `verify` on a released lease: the right is not held, as after a replaced file.
        Error::LeaseLost { path } | Error::Released { path } => ("LOST", Some(path)),
        Error::Expired { .. } => ("LOST", None),
        Error::NotRegularFile { path, .. }
        | Error::NotDirectory { path, .. }
        | Error::ParentNotDirectory { path }
        | Error::PermissionDenied { path }
        | Error::NameTooLong { path } => ("INVALID_INPUT", Some(path)),
        Error::InvalidPath { path, .. } => ("INVALID_INPUT", Some(path)),
        Error::BadEndpoints { .. } => ("INVALID_INPUT", None),
        Error::Untrusted { path, .. } => ("UNTRUSTED", Some(path)),
        Error::NetworkFilesystem { path, .. } => ("NETWORK_FS", Some(path)),
        Error::SharedUnsupported { path }
        | Error::LockingUnsupported { path, .. }
        | Error::Unsupported { path, .. } => ("UNSUPPORTED", Some(path)),
        Error::NotFound { path }
        | Error::Unstable { path, .. }
        | Error::TooManyOpenFiles { path, .. }
        | Error::Io { path, .. } => ("IO", Some(path)),
        Error::Unreachable { .. } => ("IO", None),
        other => (
            match other.class() {
                ErrorClass::Usage => "INVALID_INPUT",
                ErrorClass::Contended => "CONTENDED",
                ErrorClass::Cancelled => "CANCELLED",
                ErrorClass::Failure => "IO",
            },
            None,
        ),
    }
}

/// What a contention error knows, described only when Python asks: its message names the
/// holder, and looking holders up reads `/proc/locks`, which stalls every `flock` on the
/// machine for a moment — so a failed try (a `FileLock` polled with `blocking=False`) must
/// not pay for it unless its message or `pids` is read.
#[pyclass(module = "leasehold_lock._native", name = "_Cause", frozen)]
pub(crate) struct Cause {
    error: Error,
    message: OnceLock<String>,
}

#[pymethods]
impl Cause {
    /// The holder pids the OS reveals (empty when it does not tell), looked up on first call.
    fn pids(&self, py: Python<'_>) -> Vec<u32> {
        py.detach(|| {
            self.error
                .holders()
                .map(|h| h.pids().to_vec())
                .unwrap_or_default()
        })
    }

    /// The message, in the surface's terms (the setting to change is `timeout`).
    fn message(&self, py: Python<'_>) -> String {
        py.detach(|| {
            self.message
                .get_or_init(|| contention_message(&self.error))
                .clone()
        })
    }
}

/// Contention in the Python surface's terms: the library error's
/// [situation](Error::situation) (the lock file, its holders or the gate it was held up at),
/// how long it waited or why it did not, and the setting to change named as a Python caller
/// writes it (`timeout=`), never the Rust `Budget`. The one place the binding words a
/// contention.
fn contention_message(e: &Error) -> String {
    const TO_WAIT: &str = "pass timeout=SECONDS to wait, or None to wait without limit";
    let what = match e {
        Error::Contended {
            why: NotWaited::Expired { .. },
            ..
        } => format!(
            "not waited for: its deadline had already passed when the wait began ({TO_WAIT})"
        ),
        Error::Contended { .. } | Error::GateHeld { waited: None, .. } => {
            format!("not waited for ({TO_WAIT})")
        }
        Error::TimedOut { waited, .. }
        | Error::GateHeld {
            waited: Some(waited),
            ..
        } => format!(
            "gave up after {waited:.1?}; allow a longer wait with a larger timeout (seconds; None waits without limit)"
        ),
        other => return other.to_string(),
    };
    match e.situation() {
        Some(situation) => format!("{situation}; {what}"),
        None => e.to_string(),
    }
}

/// A setting the library names in a refusal, as a Python caller writes it: the surface's one
/// table of them.
fn keyword(setting: OptIn) -> String {
    match setting {
        OptIn::NetworkFilesystem => "allow_network_fs=True".into(),
        OptIn::SharedState => "allow_shared_state=True".into(),
        OptIn::RecordLease => "on_shared_mount=leasehold_lock.Record(ttl=SECONDS)".into(),
        // The package runs only where other processes honour locks: nothing to opt into.
        _ => "a single-process lease, which this package does not offer".into(),
    }
}

/// The library's message, with the setting that opts out of a refusal named as the Python
/// keyword ([`keyword`]).
fn message(e: &Error) -> String {
    e.worded(keyword)
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The Python exception for `e`: `leasehold_lock.Timeout` for contention, `leasehold_lock.LeaseError`
/// with its code otherwise.
pub(crate) fn to_pyerr(py: Python<'_>, e: Error) -> PyErr {
    match build(py, e) {
        Ok(err) => err,
        Err(failed) => failed,
    }
}

fn build(py: Python<'_>, e: Error) -> PyResult<PyErr> {
    let module = ERRORS.get_or_try_init(py, || {
        PyModule::import(py, "leasehold_lock._errors").map(Bound::unbind)
    })?;
    let module = module.bind(py);
    let (code, path) = classify(&e);
    let path = path.map(|p| p.as_os_str().to_os_string());
    let kwargs = PyDict::new(py);
    let value = if code == "CONTENDED" {
        let cause = Cause {
            error: e,
            message: OnceLock::new(),
        };
        kwargs.set_item("cause", cause)?;
        module.getattr("Timeout")?.call((path,), Some(&kwargs))?
    } else {
        kwargs.set_item("code", code)?;
        kwargs.set_item("path", path)?;
        module
            .getattr("LeaseError")?
            .call((message(&e),), Some(&kwargs))?
    };
    Ok(PyErr::from_value(value))
}
