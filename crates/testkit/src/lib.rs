//! Helpers the leasehold test suites share (`publish = false`; a dev-dependency only).
//!
//! Every multi-process test in the workspace spawns real OS processes and synchronises with
//! them through pipes — a child's line on stdout is the handshake, never a sleep. This crate
//! holds the pieces more than one suite needs, so each exists once:
//!
//! * [`quiet`]: keeps this test binary from spawning while a test checks lock states (a child
//!   shares the parent's lock descriptors from fork until exec).
//! * [`FlockHolder`] (Unix): a real holder process — util-linux `flock` holding the same kind of
//!   lock the library takes.
//! * [`Proc`] (Unix): a child in its own process group with piped stdin/stdout, SIGKILLed with
//!   its group when dropped; [`run`] and [`Out`] for commands run to completion, and
//!   [`assert_one_line_error`] for the CLI's error contract.
//! * [`Canary`]: a tokio task whose ticks prove that no executor thread was blocked.
//! * [`Recorder`]: the labelled, ordered events of one or more authorities.
//! * [`assert_free`]: nothing holds a lock, asserted the way the build can tell; and
//!   [`reveals_holders`]: whether it can (Linux) or not (macOS/BSD, the portable build).
//! * [`blocked_on`], [`holds`] and [`until`] (Unix): a process queued for a lock or holding it,
//!   per `/proc/locks`, and waiting for a state by looking at it; [`stopped`]: a SIGSTOP has
//!   taken effect.
//! * [`assert_abandoned_grant_let_go`] (Unix): a wait given up while queued in the kernel
//!   never ends up holding the lock once it is granted.
//! * [`Bindfs`] (Linux): the two-mount bed — two bindfs (FUSE) mounts of one directory that
//!   a kernel lock does not cross, as two NFS clients with `local_lock=all`.
//! * [`assert_broken_exclusion_found`]: the torture's self-check found what it must.
//!
//! Helpers that need one crate's own binary (`CARGO_BIN_EXE_*` exists only while that crate's
//! tests compile) stay in that crate's `tests/common`.
#![deny(unsafe_code)]
#![deny(missing_docs)]

#[cfg(target_os = "linux")]
mod bindfs;
mod canary;
#[cfg(unix)]
pub mod etcd;
pub mod faces;
mod free;
#[cfg(unix)]
mod locks;
#[cfg(unix)]
mod process;
mod recorder;
mod spawns;
mod torture;

#[cfg(target_os = "linux")]
pub use bindfs::Bindfs;
pub use canary::Canary;
pub use free::{assert_free, reveals_holders};
#[cfg(unix)]
pub use locks::{blocked_on, holds, proc_locks, until};
#[cfg(unix)]
pub use process::{
    FlockHolder, Out, Proc, assert_abandoned_grant_let_go, assert_one_line_error, run, run_within,
    stopped,
};
pub use recorder::Recorder;
pub use spawns::quiet;
pub use torture::{assert_broken_exclusion_found, violation_details};
