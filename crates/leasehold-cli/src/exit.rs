//! Exit statuses of the contract and the one-line error that goes with them.
//!
//! This is the one place where an error becomes an exit status: every error of the library
//! and the stores answers a [`leasehold::ErrorClass`] (the library's [`Classify`] trait), and
//! [`status`] maps the class. No verb
//! picks a status for an error itself (`run --conflict-exit-code` only replaces the
//! contended status, through [`Failure::conflict_code`]).

use std::fmt;

use leasehold::{Classify, ErrorClass};

/// Success.
pub const OK: u8 = 0;
/// Any failure that is neither a usage error nor contention (I/O, storage failure).
pub const FAILURE: u8 = 1;
/// Usage error, or an unusable path or input.
pub const USAGE: u8 = 2;
/// `run`: the lock file was moved away from its path while COMMAND ran (a directory above it
/// renamed, a symlink on the way re-pointed), and COMMAND's tree was stopped (POSIX).
#[cfg_attr(windows, allow(dead_code))]
pub const MOVED: u8 = 74;
/// EX_TEMPFAIL: a lease is held by another process and could not be had within the budget.
pub const CONTENDED: u8 = 75;

/// The contract's exit status for an error of `class`: usage 2, contended 75, failure 1,
/// cancelled 128 + the signal that cancelled the wait (130 SIGINT, 143 SIGTERM).
pub fn status(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Usage => USAGE,
        ErrorClass::Contended => CONTENDED,
        ErrorClass::Cancelled => crate::signals::exit_code(),
        ErrorClass::Failure => FAILURE,
    }
}

/// A command's failure: its exit status and the single line printed to stderr.
#[derive(Debug)]
pub struct Failure {
    /// How the failure is classed (decides the status unless a verb's own status applies).
    pub class: ErrorClass,
    /// Exit status.
    pub code: u8,
    /// The message, printed after `leasehold: `.
    pub message: String,
}

/// An I/O failure of the layers below (writing output, installing signal handlers): class
/// Failure, the message as they worded it.
impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::failed(e)
    }
}

/// A failure of the lab (`bench`, `torture`): its class's status and its own message.
impl From<leasehold_lab::exit::Failure> for Failure {
    fn from(f: leasehold_lab::exit::Failure) -> Failure {
        Failure::new(f.class, f.message)
    }
}

impl Failure {
    /// A failure of `class` with its contract status.
    pub fn new(class: ErrorClass, message: impl fmt::Display) -> Failure {
        Failure {
            class,
            code: status(class),
            message: message.to_string(),
        }
    }

    /// A library or store error, with its class's status and its own message.
    pub fn of(e: &impl Classify) -> Failure {
        Failure::new(e.class(), e)
    }

    /// A lease error, its message in this tool's terms: a setting that opts out of a refusal
    /// named as the environment variable that sets it ([`crate::env::opt_in`]).
    pub fn lease(e: &leasehold::Error) -> Failure {
        Failure::new(e.class(), e.worded(crate::env::opt_in))
    }

    /// A library or store error whose message gets `more` appended (for example how long the
    /// verb waited and which option waits longer).
    pub fn of_with(e: &impl Classify, more: &str) -> Failure {
        Failure::new(e.class(), format!("{e}{more}"))
    }

    /// A usage error or unusable input of the CLI's own (status 2).
    pub fn usage(message: impl fmt::Display) -> Failure {
        Failure::new(ErrorClass::Usage, message)
    }

    /// Any other failure of the CLI's own (status 1).
    pub fn failed(message: impl fmt::Display) -> Failure {
        Failure::new(ErrorClass::Failure, message)
    }

    /// A failure with a status of its own that is none of the contract's classes (`run`'s
    /// 126/127 when COMMAND cannot be started, as a shell reports them).
    pub fn with_status(code: u8, message: impl fmt::Display) -> Failure {
        Failure {
            class: ErrorClass::Failure,
            code,
            message: message.to_string(),
        }
    }

    /// `run --conflict-exit-code N`: contention exits with `code` instead of 75.
    pub fn conflict_code(mut self, code: u8) -> Failure {
        if self.class == ErrorClass::Contended {
            self.code = code;
        }
        self
    }

    /// Prints the message as exactly one line (embedded newlines are flattened). A
    /// cancelled wait prints nothing: the user asked for it (a signal), and the status says
    /// which signal.
    pub fn print(&self) {
        if self.class == ErrorClass::Cancelled {
            return;
        }
        crate::out::error_line(&self.message);
    }
}

/// What a command returns: its exit status, or a failure to print.
pub type Outcome = Result<u8, Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_map_to_the_contract_statuses_and_only_contention_takes_the_conflict_code() {
        assert_eq!(status(ErrorClass::Usage), 2);
        assert_eq!(status(ErrorClass::Contended), 75);
        assert_eq!(status(ErrorClass::Failure), 1);
        // No signal arrived in this test process: a cancelled wait reports SIGTERM's status.
        assert_eq!(status(ErrorClass::Cancelled), 143);
        for class in [
            ErrorClass::Usage,
            ErrorClass::Failure,
            ErrorClass::Cancelled,
        ] {
            let f = Failure::new(class, "x").conflict_code(9);
            assert_eq!(f.code, status(class), "{class:?}");
        }
        assert_eq!(
            Failure::new(ErrorClass::Contended, "x")
                .conflict_code(9)
                .code,
            9
        );
    }

    /// One generic path for every error type of the library and the stores (the library's
    /// `Classify`): each keeps its message and gets its class's status, wrapped errors
    /// their inner error's.
    #[test]
    fn every_error_type_goes_through_one_classify_path() {
        fn check(e: &impl Classify, code: u8) {
            let f = Failure::of(e);
            assert_eq!((f.code, f.message), (code, e.to_string()));
            assert_eq!(status(e.class()), code);
        }
        let lease = || leasehold::Error::Cancelled {
            path: "/x.lock".into(),
        };
        check(
            &leasehold::patterns::keyed::KeyError::EmptyKey { key: " ".into() },
            USAGE,
        );
        check(&leasehold::patterns::keyed::KeyError::Lease(lease()), 143);
        check(
            &leasehold_stores::registry::RegistryError::StorageFailed { reason: "x".into() },
            FAILURE,
        );
        check(
            &leasehold_stores::results::ResultError::InvalidId {
                id: "..".into(),
                reason: "unsafe",
            },
            USAGE,
        );
        check(&leasehold_stores::results::ResultError::Lock(lease()), 143);
        check(
            &leasehold_stores::session::SessionError::InvalidId {
                id: "..".into(),
                reason: "unsafe",
            },
            USAGE,
        );
        check(
            &leasehold_stores::session::SessionError::Lease(lease()),
            143,
        );
        check(
            &leasehold::patterns::authority::StoreFailure::new("x", "open", "y"),
            FAILURE,
        );
    }

    #[test]
    fn a_library_error_keeps_its_message_and_gets_its_class_status() {
        let e = leasehold::Error::PermissionDenied {
            path: "/x.lock".into(),
        };
        let f = Failure::of(&e);
        assert_eq!((f.code, f.message.as_str()), (2, e.to_string().as_str()));
    }
}
