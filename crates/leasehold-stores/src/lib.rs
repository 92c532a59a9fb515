//! Stores built on leasehold's patterns: the multi-root workspace registry, the session log
//! and the isolated result store.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod document;
pub mod registry;
pub mod results;
#[cfg(unix)] // the append-only log is POSIX-only (O_APPEND through directory handles)
pub mod session;
