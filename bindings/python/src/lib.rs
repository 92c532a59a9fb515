//! `leasehold_lock._native`: the Python face of the `leasehold` crate (PyO3, abi3, CPython 3.9+).
//!
//! A binding translates, it never decides: leases, waits and errors are the library's. This
//! module holds the native half — `acquire`, `try_acquire`, `acquire_async`, `Lease`,
//! `holders` — and `leasehold_lock/__init__.py` re-exports it beside the pure-Python pieces
//! (`FileLock`, the exception classes). The files:
//!
//! * `lease.rs`: the functions and the `Lease` class;
//! * `wait.rs`: how a call waits (GIL released, signals checked, async bridged);
//! * `errors.rs`: the one table from the library's errors to the surface's codes;
//! * `document.rs`: the stores' `Document` (`_Document`, `_Edit`, `_Watch`), under
//!   `leasehold_lock.Document`.

#![deny(missing_docs)]
// No unsafe of ours: the FFI is PyO3's (its generated glue allows its own).
#![deny(unsafe_code)]

mod document;
mod errors;
mod lease;
mod wait;

use pyo3::prelude::*;

/// The extension module `leasehold_lock._native`.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<lease::Lease>()?;
    m.add_class::<lease::Record>()?;
    m.add_class::<errors::Cause>()?;
    m.add_function(wrap_pyfunction!(lease::acquire, m)?)?;
    m.add_function(wrap_pyfunction!(lease::try_acquire, m)?)?;
    m.add_class::<lease::AsyncWait>()?;
    m.add_function(wrap_pyfunction!(lease::start_acquire, m)?)?;
    m.add_function(wrap_pyfunction!(lease::holders, m)?)?;
    m.add_function(wrap_pyfunction!(lease::before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(lease::after_fork_in_parent, m)?)?;
    m.add_function(wrap_pyfunction!(lease::after_fork_in_child, m)?)?;
    m.add_class::<document::PyDocument>()?;
    m.add_class::<document::PyEdit>()?;
    m.add_class::<document::PyWatch>()?;
    Ok(())
}
