//! The roles a bench worker plays, as the parent and the scenarios name them: how it waits
//! ([`Wait`]), how a `loop` worker takes the lease ([`Method`]), and what it holds ([`Held`],
//! with the kernel floor's own acquisition). A leaf the scenarios and the worker share: it
//! imports neither.

#[cfg(unix)]
use std::os::fd::OwnedFd;
#[cfg(unix)]
use std::path::Path;

use leasehold::AnyLease;
#[cfg(unix)]
use rustix::fs::{CWD, FlockOperation, Mode, OFlags};
#[cfg(unix)]
use rustix::io::Errno;

#[cfg(unix)]
use super::report::errno_fail;
#[cfg(unix)]
use crate::exit::Failure;

/// How a `loop` worker of the uncued scenario takes and releases the lease, once per turn
/// (exclusively, or shared with `--shared`: `LOCK_SH` and `SharedLease` in place of
/// `LOCK_EX` and `Lease`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Method {
    /// The kernel floor: open, blocking `flock(LOCK_EX)`, close.
    Floor,
    /// The floor plus the inode check a safe lease needs: open, `flock(LOCK_EX)`, `fstat`,
    /// `stat` of the path (same dev and inode), close.
    FloorVerify,
    /// The floor of a cancellable waiter's design, built the plainest way: open, try
    /// `LOCK_NB`; when busy, a helper thread (kept, parked between waits) blocks in `flock`
    /// and unparks the caller, which parks until then; verify as [`Method::FloorVerify`]
    /// does; close. A waiter that must stay cancellable cannot block in `flock` itself, so
    /// its hand-over pays the helper's wake-up of the caller, which on an idle CPU costs
    /// far more than a wake between two busy threads: this is what such waiters are read
    /// against.
    HelperFloor,
    /// Cold `Lease::acquire` with an unlimited budget, then drop.
    Lease,
    /// Cold `Lease::acquire` with a deadline and a `CancelToken`: what users with timeouts
    /// (and every CLI wait) get.
    LeaseBudget,
    /// Warm: `LeaseHandle::lock` (unlimited budget) and release, the file kept open
    /// (exclusive only: there is no shared handle).
    Handle,
    /// `Lease::acquire_async` (unlimited budget) on a current-thread tokio runtime.
    Async,
    /// `KeyedLeases::acquire` of one key with a deadline and a `CancelToken`, as every result
    /// store operation (and every `results` verb) takes it; the lock file is the key's in a
    /// namespace beside the lock path (`Keyed::root`).
    Keyed,
}

impl Method {
    /// Every method of this platform, the floors first.
    #[cfg(unix)]
    pub(crate) const ALL: &[Method] = &[
        Method::Floor,
        Method::FloorVerify,
        Method::HelperFloor,
        Method::Lease,
        Method::LeaseBudget,
        Method::Handle,
        Method::Async,
        Method::Keyed,
    ];
    /// Every method of this platform: Windows has no kernel wait for a named object to
    /// compare with (waiters poll), so no floors.
    #[cfg(windows)]
    pub(crate) const ALL: &[Method] = &[
        Method::Lease,
        Method::LeaseBudget,
        Method::Handle,
        Method::Async,
        Method::Keyed,
    ];

    /// Whether this is a kernel floor rather than leasehold.
    pub(crate) fn is_floor(self) -> bool {
        matches!(
            self,
            Method::Floor | Method::FloorVerify | Method::HelperFloor
        )
    }

    /// Whether a helper thread waits in the kernel for this method's waiter and hands the
    /// grant over with one more thread wake-up (a deadline or token, or an async waiter;
    /// a keyed wait is the lease's cancellable one): the uncued table reads its hand-over
    /// against [`Method::HelperFloor`]'s.
    pub(crate) fn hands_over(self) -> bool {
        matches!(self, Method::LeaseBudget | Method::Async | Method::Keyed)
    }

    /// Its `--method` value.
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Method::Floor => "floor",
            Method::FloorVerify => "floor-verify",
            Method::HelperFloor => "helper-floor",
            Method::Lease => "lease",
            Method::LeaseBudget => "lease-budget",
            Method::Handle => "handle",
            Method::Async => "async",
            Method::Keyed => "keyed",
        }
    }

    /// The methods of the mixed (shared + exclusive workers) runs: those with a shared
    /// form, the floors first.
    #[cfg(unix)] // Windows has no shared leases
    pub(crate) const MIXED: [Method; 5] = [
        Method::Floor,
        Method::FloorVerify,
        Method::HelperFloor,
        Method::Lease,
        Method::LeaseBudget,
    ];

    /// What it is in a mixed run, for the report.
    pub(crate) fn mixed_label(self) -> &'static str {
        match self {
            Method::Floor => "kernel floor: open + flock(LOCK_SH or LOCK_EX) + close",
            Method::FloorVerify => "floor + inode verify (fstat + stat)",
            Method::HelperFloor => "helper-thread floor: LOCK_NB, else a helper's flock + unpark",
            Method::Lease => "SharedLease / Lease::acquire, unlimited budget",
            Method::LeaseBudget => "SharedLease / Lease::acquire, deadline + CancelToken",
            Method::Handle => "LeaseHandle::lock (warm; exclusive only)",
            Method::Async => "acquire_shared_async / acquire_async, current-thread runtime",
            Method::Keyed => "KeyedLeases::acquire (exclusive only)",
        }
    }

    /// What it is, for the report.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Method::Floor => "kernel floor: open + flock(LOCK_EX) + close",
            Method::FloorVerify => "floor + inode verify (fstat + stat)",
            Method::HelperFloor => "helper-thread floor: LOCK_NB, else a helper's flock + unpark",
            Method::Lease => "Lease::acquire, unlimited budget",
            Method::LeaseBudget => "Lease::acquire, deadline + CancelToken",
            Method::Handle => "LeaseHandle::lock (warm)",
            Method::Async => "Lease::acquire_async, current-thread runtime",
            Method::Keyed => "KeyedLeases::acquire, deadline + CancelToken",
        }
    }
}

/// How a worker waits for the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A blocking `flock(LOCK_EX)` on a freshly opened file: the floor (not cancellable).
    Kernel,
    /// `Lease::acquire` with an unlimited budget, on a thread of its own.
    Lease,
    /// A `Lease::acquire_async` task on the worker's one current-thread tokio runtime.
    Async,
}

impl Wait {
    /// The worker flag selecting this way of waiting.
    pub(crate) fn flag(self) -> Option<&'static str> {
        match self {
            Wait::Kernel => Some("--kernel"),
            Wait::Lease => None,
            Wait::Async => Some("--async"),
        }
    }
}

/// A lease held either by the library (exclusive or shared: [`AnyLease`]) or by a bare
/// descriptor locked with `flock`; dropping it releases.
pub(crate) enum Held {
    Lease(#[allow(dead_code)] AnyLease),
    #[cfg(unix)]
    Kernel(#[allow(dead_code)] OwnedFd),
}

/// The kernel floor's acquisition: open `path` (created 0600 if missing) and block in
/// `flock(LOCK_SH)` or `flock(LOCK_EX)` until granted.
#[cfg(unix)]
pub(crate) fn lock_kernel(path: &Path, shared: bool) -> Result<OwnedFd, Failure> {
    let fd = open_kernel(path)?;
    let op = match shared {
        true => FlockOperation::LockShared,
        false => FlockOperation::LockExclusive,
    };
    loop {
        match rustix::fs::flock(&fd, op) {
            Ok(()) => return Ok(fd),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(errno_fail("flock")(e)),
        }
    }
}

#[cfg(unix)]
pub(crate) fn open_kernel(path: &Path) -> Result<OwnedFd, Failure> {
    rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(errno_fail("open lock file"))
}
