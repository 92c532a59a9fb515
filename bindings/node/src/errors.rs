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
//! Each code means one thing: an ID that names nothing is `NOT_FOUND`, never `INVALID_INPUT`.
//!
//! Messages are in this surface's words: a setting the library's message names is named as a
//! JavaScript caller writes it (`option`, the one table), and the stores' errors whose
//! library messages start with the CLI contract's codes (`invalid-root:`, `unknown-result:`)
//! or say nothing of what to do next are worded here from their facts (`registry`,
//! `session`, `results`).

use leasehold::{Classify, Error, ErrorClass, HolderInfo, NotWaited, OptIn};
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
pub(crate) const NOT_FOUND: &str = "NOT_FOUND";
pub(crate) const IO: &str = "IO";

impl Failure {
    pub(crate) fn new(
        code: &str,
        message: impl std::fmt::Display,
        holders: Option<&HolderInfo>,
    ) -> Failure {
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

/// A setting the library names in a refusal, as a JavaScript caller writes it: the surface's
/// one table of them.
fn option(setting: OptIn) -> String {
    match setting {
        OptIn::NetworkFilesystem => "the option allowNetworkFs: true".into(),
        OptIn::SharedState => "the option allowSharedState: true".into(),
        OptIn::RecordLease => {
            "the option onSharedMount: { record: { ttlMs } } (of Lease.acquire, Lease.tryAcquire, Document.open, Registry.open, SessionLog.open or ResultStore.open)"
                .into()
        }
        // Node runs only where other processes honour locks: there is nothing to opt into.
        _ => "a single-process lease, which this package does not offer".into(),
    }
}

/// A lease error. A contention is worded in this surface's terms ([`contention`]); any
/// other error keeps the library's message, with the setting that opts out of a refusal
/// named as this surface spells it ([`option`]).
pub(crate) fn lease(e: &Error) -> Failure {
    match contention(e) {
        Some(message) => Failure::new(lease_code(e), message, e.holders()),
        None => Failure::new(lease_code(e), e.worded(option), e.holders()),
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
        RegistryError::Contended { holders } => Failure::new(
            NOT_AUTHORITY,
            format!(
                "registry is held by {}, its authority until it closes the registry or exits; refresh() takes over then (or open it with a timeoutMs to wait for it)",
                holders.who()
            ),
            Some(holders),
        ),
        RegistryError::StorageFailed { .. } => Failure::new(STORAGE_FAILED, e, None),
        RegistryError::InvalidRoot { path, reason } => Failure::new(
            INVALID_INPUT,
            format!(
                "{}: {reason}; pass the path of an existing directory",
                path.display()
            ),
            None,
        ),
        RegistryError::InvalidPrefix { .. } => Failure::new(INVALID_INPUT, e, None),
    }
}

/// A session-log error.
pub(crate) fn session(e: &SessionError) -> Failure {
    match e {
        SessionError::Lease(inner) => lease(inner),
        SessionError::Log(leasehold::patterns::append::AppendError::Lease(inner)) => lease(inner),
        SessionError::SessionAlreadyOwned { id, holders } => Failure::new(
            SESSION_OWNED,
            format!(
                "session {id} is owned by {}; one process writes a session at a time: append under another ID, or once that writer has closed the log (or exited), open it again",
                holders.who()
            ),
            Some(holders),
        ),
        SessionError::UnknownSession { id, dir } => Failure::new(
            NOT_FOUND,
            format!(
                "there is no session {id} in {}; check the ID and the directory (reading never creates a session)",
                dir.display()
            ),
            None,
        ),
        other => Failure::new(of_class(other.class()), other, None),
    }
}

/// A result-store error.
pub(crate) fn results(e: &ResultError) -> Failure {
    match e {
        ResultError::Lock(inner) => lease(inner),
        ResultError::Busy { holders, .. } => Failure::new(
            CONTENDED,
            format!(
                "{e}; retry once it has ended, or open the store with a larger timeoutMs to wait for it"
            ),
            Some(holders),
        ),
        ResultError::Unknown { id, root } => Failure::new(
            NOT_FOUND,
            format!(
                "no result {id:?} in {}; nothing was created (stage it first, or check the ID)",
                root.display()
            ),
            None,
        ),
        ResultError::Exists { id, root } => Failure::new(
            INVALID_INPUT,
            format!(
                "result {id:?} already exists in {}; discard it or choose another ID",
                root.display()
            ),
            None,
        ),
        // Not published because admission failed: the cause's code, the whole message.
        ResultError::NotPublished { source, .. } => Failure {
            message: e.to_string(),
            ..results(source)
        },
        ResultError::Corrupt { .. } => Failure::new(STORAGE_FAILED, e, None),
        other => Failure::new(of_class(other.class()), other, None),
    }
}
