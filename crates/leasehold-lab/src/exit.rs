//! A failure of the lab: its class (as the library classes its errors) and its message. The
//! CLI turns it into the contract's exit status and its one line on stderr; the lab picks no
//! status itself.

use std::fmt;

use leasehold::{Classify, ErrorClass};

/// Success.
pub const OK: u8 = 0;

/// A failure of `bench` or `torture`: how it is classed, and the message.
#[derive(Debug)]
pub struct Failure {
    /// How the failure is classed (the CLI's exit status follows from it).
    pub class: ErrorClass,
    /// The message, one line, without the tool's name.
    pub message: String,
}

/// An I/O failure of the layers below: class Failure, the message as they worded it.
impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::failed(e)
    }
}

impl Failure {
    /// A failure of `class`.
    pub fn new(class: ErrorClass, message: impl fmt::Display) -> Failure {
        Failure {
            class,
            message: message.to_string(),
        }
    }

    /// A library or store error, with its class and its own message.
    pub fn of(e: &impl Classify) -> Failure {
        Failure::new(e.class(), e)
    }

    /// A usage error or unusable input.
    pub fn usage(message: impl fmt::Display) -> Failure {
        Failure::new(ErrorClass::Usage, message)
    }

    /// Any other failure.
    pub fn failed(message: impl fmt::Display) -> Failure {
        Failure::new(ErrorClass::Failure, message)
    }
}

/// What a verb of the lab returns: its exit status, or a failure.
pub type Outcome = Result<u8, Failure>;
