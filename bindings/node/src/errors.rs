//! The one table from the library's and the stores' errors to the stable `code`s of the
//! JavaScript surface (the package README, bindings/node/README.md).
//!
//! The native side never throws for a library error: it returns a [`Failure`] and the
//! JavaScript wrapper (`index.js`, `fail`) turns it into the thrown or rejected `Error`, with
//! `code`, the message (the library's, which names the path, ID or key and says what to do;
//! a contention's facts worded in this surface's terms, see `lease.rs`) and `pids` where the OS
//! revealed the holder. That keeps `pids` structured (a napi error carries a code and a
//! message only) and the mapping here, once.
//!
//! Codes follow the error's [`ErrorClass`] (usage → `INVALID_INPUT`, contended → `CONTENDED`,
//! cancelled → `CANCELLED`, failure → `IO`) except where the surface names the case itself.

use leasehold::{Classify, Error, ErrorClass, HolderInfo, NotWaited};
use leasehold_stores::registry::RegistryError;
use leasehold_stores::results::ResultError;
use leasehold_stores::session::SessionError;
use napi_derive::napi;

/// A refused call, as the JavaScript wrapper receives it (see the module documentation).
#[napi(object)]
#[derive(Debug, Clone)]
pub struct Failure {
    /// One of the surface's codes (`CONTENDED`, `CANCELLED`, `LOST`, ...).
    pub code: String,
    /// The library's message, or for a contention the same facts worded in this surface's
    /// terms (`timeoutMs`, not the Rust `Budget`).
    pub message: String,
    /// Holder pids, present when the OS revealed them.
    pub pids: Option<Vec<u32>>,
}

/// The surface's codes.
pub(crate) const CONTENDED: &str = "CONTENDED";
pub(crate) const CANCELLED: &str = "CANCELLED";
pub(crate) const LOST: &str = "LOST";
pub(crate) const INVALID_INPUT: &str = "INVALID_INPUT";
pub(crate) const NOT_AUTHORITY: &str = "NOT_AUTHORITY";
pub(crate) const SESSION_OWNED: &str = "SESSION_OWNED";
pub(crate) const UNTRUSTED: &str = "UNTRUSTED";
pub(crate) const NETWORK_FS: &str = "NETWORK_FS";
pub(crate) const UNSUPPORTED: &str = "UNSUPPORTED";
pub(crate) const STORAGE_FAILED: &str = "STORAGE_FAILED";
pub(crate) const IO: &str = "IO";

impl Failure {
    fn new(code: &str, message: impl std::fmt::Display, holders: Option<&HolderInfo>) -> Failure {
        // The message is rendered first: for a contention it looks the holders up (once, lazily:
        // see `HolderInfo`), and the pids below are the same answer.
        let message = message.to_string();
        let pids = holders.map(|h| h.pids().to_vec()).filter(|p| !p.is_empty());
        Failure {
            code: code.to_string(),
            message,
            pids,
        }
    }

    /// A binding argument the library never saw (a negative timeout, say): `INVALID_INPUT`.
    pub(crate) fn invalid(message: impl std::fmt::Display) -> Failure {
        Failure::new(INVALID_INPUT, message, None)
    }
}

/// The code of an error class, where the surface names no case of its own.
fn of_class(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::Usage => INVALID_INPUT,
        ErrorClass::Contended => CONTENDED,
        ErrorClass::Cancelled => CANCELLED,
        ErrorClass::Failure => IO,
    }
}

/// A lease error. A contention is worded in this surface's terms ([`contention`]); any
/// other error keeps the library's message.
pub(crate) fn lease(e: &Error) -> Failure {
    match contention(e) {
        Some(message) => Failure::new(lease_code(e), message, e.holders()),
        None => Failure::new(lease_code(e), e, e.holders()),
    }
}

/// Contention in the JavaScript surface's terms: the library error's
/// [situation](Error::situation) (the lock file, its holders or the gate it was held up at),
/// how long it waited or why it did not, and the option to change named as a JavaScript
/// caller writes it (`timeoutMs`), never the Rust `Budget`. The one place the binding words a
/// contention.
fn contention(e: &Error) -> Option<String> {
    const TO_WAIT: &str = "pass a timeoutMs to wait, or leave it out to wait without limit";
    const LONGER: &str =
        "pass a larger timeoutMs to wait longer, or leave it out to wait without limit";
    let waited = |ms: u128| format!("gave up after {ms} ms ({LONGER})");
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
        Error::TimedOut { waited: w, .. }
        | Error::GateHeld {
            waited: Some(w), ..
        } => waited(w.as_millis()),
        _ => return None,
    };
    Some(format!("{}; {what}", e.situation()?))
}

fn lease_code(e: &Error) -> &'static str {
    match e {
        Error::LeaseLost { .. } | Error::Released { .. } | Error::Expired { .. } => LOST,
        Error::Untrusted { .. } => UNTRUSTED,
        Error::NetworkFilesystem { .. } => NETWORK_FS,
        Error::SharedUnsupported { .. }
        | Error::LockingUnsupported { .. }
        | Error::Unsupported { .. } => UNSUPPORTED,
        other => of_class(other.class()),
    }
}

/// A registry error. Another authority is `NOT_AUTHORITY` (a mutation while not active);
/// `Registry.open` and `refresh` answer contention as a state, never through this.
pub(crate) fn registry(e: &RegistryError) -> Failure {
    match e {
        RegistryError::Lease(e) => lease(e),
        RegistryError::Contended { holders } => Failure::new(NOT_AUTHORITY, e, Some(holders)),
        RegistryError::StorageFailed { .. } => Failure::new(STORAGE_FAILED, e, None),
        RegistryError::InvalidRoot { .. } | RegistryError::InvalidPrefix { .. } => {
            Failure::new(INVALID_INPUT, e, None)
        }
    }
}

/// A session-log error.
pub(crate) fn session(e: &SessionError) -> Failure {
    match e {
        SessionError::Lease(inner) => lease(inner),
        SessionError::Log(leasehold::patterns::append::AppendError::Lease(inner)) => lease(inner),
        SessionError::SessionAlreadyOwned { holders, .. } => {
            Failure::new(SESSION_OWNED, e, Some(holders))
        }
        other => Failure::new(of_class(other.class()), other, None),
    }
}

/// A result-store error.
pub(crate) fn results(e: &ResultError) -> Failure {
    match e {
        ResultError::Lock(inner) => lease(inner),
        ResultError::Busy { holders, .. } => Failure::new(CONTENDED, e, Some(holders)),
        // Not published because admission failed: the cause's code, the whole message.
        ResultError::NotPublished { source, .. } => Failure {
            message: e.to_string(),
            ..results(source)
        },
        ResultError::Corrupt { .. } => Failure::new(STORAGE_FAILED, e, None),
        other => Failure::new(of_class(other.class()), other, None),
    }
}
