//! Exit statuses of the contract and the one-line error that goes with them.

use std::fmt;

/// Success.
pub const OK: u8 = 0;
/// Any failure that is neither a usage error nor contention (I/O, storage failure).
pub const FAILURE: u8 = 1;
/// Usage error, or an unusable path or input.
pub const USAGE: u8 = 2;
/// EX_TEMPFAIL: a lease is held by another process and could not be had within the budget.
pub const CONTENDED: u8 = 75;

/// A command's failure: its exit status and the single line printed to stderr.
#[derive(Debug)]
pub struct Failure {
    /// Exit status.
    pub code: u8,
    /// The message, printed after `leasehold: `.
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl fmt::Display) -> Failure {
        Failure {
            code,
            message: message.to_string(),
        }
    }
    pub fn usage(message: impl fmt::Display) -> Failure {
        Failure::new(USAGE, message)
    }
    pub fn failed(message: impl fmt::Display) -> Failure {
        Failure::new(FAILURE, message)
    }
    pub fn contended(message: impl fmt::Display) -> Failure {
        Failure::new(CONTENDED, message)
    }

    /// Maps a lease error to the contract's status: unusable path 2, contention 75, else 1.
    pub fn from_lease(e: &leasehold::Error) -> Failure {
        let code = if e.is_unusable_path() {
            USAGE
        } else if e.is_contended() {
            CONTENDED
        } else {
            FAILURE
        };
        Failure::new(code, e)
    }

    /// Prints the message as exactly one line (embedded newlines are flattened).
    pub fn print(&self) {
        let line = self.message.replace('\n', " ");
        eprintln!("leasehold: {line}");
    }
}

/// What a command returns: its exit status, or a failure to print.
pub type Outcome = Result<u8, Failure>;
