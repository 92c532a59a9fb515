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
//!   [`Budget`], release (and, on POSIX, `LeaseHandle` for cheap re-acquisition of one file);
//! * [`patterns`] built on it: durable files, the store-wide authority, keyed leases and the
//!   append-only log — the stores of `leasehold-stores` are made of these.
//!
//! With the `tokio` feature (off by default, so the blocking library pulls in no runtime),
//! `Lease::acquire_async`, `LeaseOptions::acquire_async`, `KeyedLeases::acquire_async` and
//! the authority's async faces (`Authority::acquire_async`, `mutate_async`, `teardown_async`,
//! over an `AsyncArbiter`) wait without blocking an executor thread and without a thread per
//! waiter.
//!
//! ## Platforms
//!
//! Linux, macOS and the BSDs share the POSIX primitive (`flock` on a lock file; Linux adds
//! `/proc/locks` for holders and waiting marks for fair hand-over — both switched off by
//! `RUSTFLAGS="--cfg leasehold_portable"`, which runs the macOS/BSD code path on Linux). On Windows a lease is a named
//! kernel semaphore, `Local\leasehold-<hex sha256(real path, case-folded)>`, whose existence is
//! the lock: no lock file is created or held, the kernel destroys the object when its holder
//! closes it or dies, and [`holders`] answers [`Holders::Unknown`]. The public names are the
//! same; POSIX-only pieces (descriptor inheritance) are `cfg(unix)`. WASI (`wasm32-wasip1`)
//! has no inter-process lock at all: there a lease is a claim in this process's claim table,
//! granted only after [`LeaseOptions::single_process`] declares the program the only user of
//! its directories (else [`Error::Unsupported`]); `wasm32-unknown-unknown`, which has no file
//! system, is refused at compile time.
//!
//! ## `unsafe`
//!
//! Denied in every crate of the workspace (`#![deny(unsafe_code)]` at each crate root), and
//! allowed only on the platform modules under `sys/` that cannot do without it, with an
//! `#[allow(unsafe_code)]` on that module's declaration in `sys/mod.rs` naming why:
//! `sys/windows.rs` (`CreateSemaphoreW` through `windows-sys`: no safe wrapper exists for
//! named semaphores). Every other system call goes through `rustix` or `std` (waiters are
//! woken by `Thread::unpark` or a task's `Waker`, so nothing is registered with tokio's
//! reactor). Each `unsafe` block carries a
//! `// SAFETY:` argument that the contract of the call holds, and the workspace lints
//! enforce it (`clippy::undocumented_unsafe_blocks`; `unsafe_op_in_unsafe_fn`, so that an
//! `unsafe fn`'s body states its unsafe calls the same way). `deny` rather than `forbid`, as
//! rustix and cargo do: `forbid` cannot be relaxed for the one module that needs it, which
//! bent the code (a deprecated, unsound constructor kept only to avoid the keyword).
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

#![deny(unsafe_code)]
#![deny(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Layers, lowest first; each module imports only from the ones before it:
// kind (FileId, FileKind, Holders: nothing) → sys (the platform boundary: kind) →
// holders (HolderInfo, look-ups: kind, sys) → error (kind, holders) → budget (sys, error) →
// lease (the primitive and its options: all of these) → patterns (built on the primitive) →
// arbiters (the etcd arbiter, behind the authority's `Arbiter`/`AsyncArbiter`). Checked with
// `modgraph.py crates/leasehold/src` (no cycle).
#[cfg(all(feature = "etcd", unix))]
pub mod arbiters;
mod budget;
mod error;
mod holders;
mod kind;
mod lease;
pub mod patterns;
mod sys;

pub use budget::{Budget, CancelToken};
pub use error::{Classify, Error, ErrorClass, Result};
pub use holders::HolderInfo;
pub use kind::{FileId, FileKind, Holders};
#[cfg(unix)]
pub use lease::unlock_descriptor;
pub use lease::{
    HandleLease, Lease, LeaseHandle, LeaseOptions, LockDir, LockMode, MAX_REOPENS, SharedLease,
    check_trusted, holders,
};

/// A fresh temporary directory for unit tests. WASI has no system temporary directory
/// (`std::env::temp_dir` panics there), so on `wasm32-wasip1` it is made under `TMPDIR`,
/// which the test runner (`.ci/wasi-run.mjs`) preopens.
#[cfg(test)]
pub(crate) fn test_dir() -> tempfile::TempDir {
    #[cfg(target_os = "wasi")]
    let dir = tempfile::tempdir_in(std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into()));
    #[cfg(not(target_os = "wasi"))]
    let dir = tempfile::tempdir();
    dir.expect("a temporary directory")
}
