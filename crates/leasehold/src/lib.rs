//! # leasehold
//!
//! Cross-process leases over local durable state, arbitrated by the operating-system kernel.
//!
//! Several processes of one product — a desktop app, a headless server, a CLI, agents — share
//! one home directory. leasehold makes sure exactly one of them writes a given store at a time,
//! that a crashed holder never blocks a successor, and that a process which is not the
//! authority grants nothing from a stale snapshot.
//!
//! Layers, each using only those below it:
//!
//! * [`sys`](crate) — the platform boundary (flock, `/proc/locks`, inotify);
//! * [`Lease`] — the primitive: open safely, lock, verify the inode, wait within a
//!   [`Budget`], release;
//! * patterns built on it (store-wide authority, keyed leases, durable files).
//!
//! With the `tokio` feature (off by default, so the blocking library pulls in no runtime),
//! `Lease::acquire_async`, `LeaseOptions::acquire_async`, `KeyedLeases::acquire_async` and
//! the authority's async faces (`Authority::acquire_async`, `mutate_async`, `teardown_async`,
//! over an `AsyncArbiter`) wait without blocking an executor thread and without a thread per
//! waiter.
//!
//! ```
//! use leasehold::{Budget, Lease};
//! use std::time::Duration;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let lease = Lease::acquire(dir.path().join("store.lock"), &Budget::timeout(Duration::from_secs(5)))
//!     .expect("lease");
//! lease.verify().expect("still the file at the path");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod budget;
mod error;
mod lease;
pub mod patterns;
mod sys;

pub use budget::{Budget, CancelToken};
pub use error::{Error, FileKind, HolderInfo, Holders, Result};
pub use lease::{
    FileId, HandleLease, Lease, LeaseHandle, LeaseOptions, LockDir, MAX_REOPENS, holders,
};
