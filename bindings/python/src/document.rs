//! `_Document`, `_Edit` and `_Watch`: the library's `Document` (leasehold-stores), translated.
//! The protocol — the lease, the re-read under it, the durable write, the version — is the
//! library's; `leasehold_lock/_document.py` builds the Python surface (`Document`, `edit`,
//! `update`, `update_async`, `watch`) on these.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use leasehold_stores::document::{
    Document, DocumentError, DocumentOptions, Edit, Snapshot, Version, Watch,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::to_pyerr;
use crate::lease::{Record, shared_mount};
use crate::wait::{self, Waited};

/// A version as Python sees it: `(content, version)`.
type PySnapshot = (Py<PyBytes>, String);

fn snapshot(py: Python<'_>, s: &Snapshot) -> PySnapshot {
    (PyBytes::new(py, &s.content).unbind(), s.version.to_string())
}

/// The Python exception for `e`: a lease error through the binding's one table
/// (`errors.rs`); the document's own errors as `LeaseError` with code `INVALID_INPUT` (too
/// large, does not parse), `CONFLICT` (`update_if` lost) or `IO`.
pub(crate) fn document_error(py: Python<'_>, e: DocumentError) -> PyErr {
    let e = match e {
        DocumentError::Lease(inner) => return to_pyerr(py, inner),
        other => other,
    };
    let (code, path) = match &e {
        DocumentError::TooLarge { path, .. }
        | DocumentError::NotParsable { path, .. }
        | DocumentError::InvalidContent { path, .. } => ("INVALID_INPUT", path.clone()),
        DocumentError::Conflict { path, .. } => ("CONFLICT", path.clone()),
        DocumentError::Aborted { path, .. }
        | DocumentError::Io { path, .. }
        | DocumentError::OutcomeUnknown { path, .. } => ("IO", path.clone()),
        _ => ("IO", PathBuf::new()),
    };
    let build = || -> PyResult<PyErr> {
        let module = PyModule::import(py, "leasehold_lock._errors")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("code", code)?;
        kwargs.set_item("path", path.as_os_str())?;
        let value = module
            .getattr("LeaseError")?
            .call((e.to_string(),), Some(&kwargs))?;
        Ok(PyErr::from_value(value))
    };
    build().unwrap_or_else(|failed| failed)
}

fn parse_version(v: &str) -> PyResult<Version> {
    v.parse()
        .map_err(|e: leasehold_stores::document::BadVersion| PyValueError::new_err(e.to_string()))
}

/// A document (the library's `Document`): a file shared by several processes.
#[pyclass(module = "leasehold_lock._native", name = "_Document", frozen)]
pub(crate) struct PyDocument {
    doc: Document,
}

#[pymethods]
impl PyDocument {
    #[new]
    #[pyo3(signature = (path, lock_path=None, json=false, allow_shared_state=false, on_shared_mount=None))]
    fn new(
        path: PathBuf,
        lock_path: Option<PathBuf>,
        json: bool,
        allow_shared_state: bool,
        on_shared_mount: Option<Bound<'_, Record>>,
    ) -> PyDocument {
        let mut options = DocumentOptions::new()
            .json(json)
            .allow_shared_state(allow_shared_state)
            .on_shared_mount(shared_mount(on_shared_mount.as_ref().map(Bound::get)));
        if let Some(lock) = lock_path {
            options = options.lock_path(lock);
        }
        PyDocument {
            doc: Document::open(path, options),
        }
    }

    #[getter]
    fn path(&self) -> std::ffi::OsString {
        self.doc.path().as_os_str().to_os_string()
    }

    #[getter]
    fn lock_path(&self) -> std::ffi::OsString {
        self.doc.lock_path().as_os_str().to_os_string()
    }

    /// The current version, lock-free: `(content, version)`, or `None` without a document.
    fn read(&self, py: Python<'_>) -> PyResult<Option<PySnapshot>> {
        let doc = &self.doc;
        match py.detach(|| doc.read()) {
            Ok(s) => Ok(s.map(|s| snapshot(py, &s))),
            Err(e) => Err(document_error(py, e)),
        }
    }

    /// Starts an update: waits for the lease (`timeout` seconds; `None` without limit, and
    /// then Ctrl-C ends the wait) and reads the durable content under it. With `expected`,
    /// raises `LeaseError(code='CONFLICT')` unless the document is at that version.
    #[pyo3(signature = (timeout=None, expected=None))]
    fn begin(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        expected: Option<&str>,
    ) -> PyResult<PyEdit> {
        let expected = expected.map(parse_version).transpose()?;
        let doc = &self.doc;
        // The package's one reading of a timeout (`lease.rs`): no limit waits inline.
        let budget = crate::lease::budget(timeout)?;
        let began = match budget.remaining() {
            None => {
                // The library's blocking wait, inline, with Python's signal handlers asked
                // on EINTR (`wait.rs`). A lease error goes through the wait's own channel,
                // so that a Ctrl-C comes out as the handler's exception.
                match wait::block_inline(py, |budget| match doc.begin(budget) {
                    Ok(edit) => Ok(Ok(edit)),
                    Err(DocumentError::Lease(e)) => Err(e),
                    Err(other) => Ok(Err(other)),
                }) {
                    Waited::Done(Ok(began)) => began,
                    Waited::Done(Err(e)) => Err(DocumentError::Lease(e)),
                    Waited::Interrupted(raised) => return Err(raised),
                }
            }
            Some(_) => py.detach(|| doc.begin(&budget)),
        };
        let edit = began.map_err(|e| document_error(py, e))?;
        if let Some(expected) = expected {
            edit.expect(expected).map_err(|e| document_error(py, e))?;
        }
        Ok(PyEdit {
            edit: Mutex::new(Some(edit)),
        })
    }

    /// A watch of new versions, starting from the one there now.
    fn watch(&self, py: Python<'_>) -> PyResult<PyWatch> {
        let doc = &self.doc;
        match py.detach(|| doc.watch()) {
            Ok(w) => Ok(PyWatch {
                watch: Mutex::new(w),
            }),
            Err(e) => Err(document_error(py, e)),
        }
    }
}

/// An update in progress: the lease is held until `commit` or `abort` (or garbage
/// collection, which aborts).
#[pyclass(module = "leasehold_lock._native", name = "_Edit", frozen)]
pub(crate) struct PyEdit {
    edit: Mutex<Option<Edit>>,
}

impl PyEdit {
    fn edit(&self) -> MutexGuard<'_, Option<Edit>> {
        self.edit.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl PyEdit {
    /// The content read under the lease (`None`: no document).
    #[getter]
    fn current(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.edit()
            .as_ref()
            .and_then(|e| e.current())
            .map(|s| PyBytes::new(py, &s.content).unbind())
    }

    /// The current version (`None`: no document).
    #[getter]
    fn version(&self) -> Option<String> {
        self.edit()
            .as_ref()
            .and_then(|e| e.current())
            .map(|s| s.version.to_string())
    }

    /// Writes `content` as the new version (durably) and releases the lease; returns the new
    /// version.
    fn commit(&self, py: Python<'_>, content: Vec<u8>) -> PyResult<String> {
        let Some(edit) = self.edit().take() else {
            return Err(PyValueError::new_err(
                "this edit was already committed or aborted",
            ));
        };
        match py.detach(|| edit.commit(content)) {
            Ok(s) => Ok(s.version.to_string()),
            Err(e) => Err(document_error(py, e)),
        }
    }

    /// Writes nothing and releases the lease (nothing if already done).
    fn abort(&self) {
        if let Some(edit) = self.edit().take() {
            edit.abort();
        }
    }
}

/// New versions of a document.
#[pyclass(module = "leasehold_lock._native", name = "_Watch", frozen)]
pub(crate) struct PyWatch {
    watch: Mutex<Watch>,
}

#[pymethods]
impl PyWatch {
    /// The next new version, waiting at most `timeout` seconds (GIL released): `(content,
    /// version)`, or `None` when none came.
    fn next(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<PySnapshot>> {
        let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::ZERO);
        let res = py.detach(|| {
            self.watch
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .next_timeout(timeout)
        });
        match res {
            Ok(s) => Ok(s.map(|s| snapshot(py, &s))),
            Err(e) => Err(document_error(py, e)),
        }
    }
}
