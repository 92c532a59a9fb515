//! Typed errors. Every variant names the path it is about and, where the user can act, says
//! what to do: a lock library is debugged from its error messages.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::holders::HolderInfo;
use crate::kind::FileKind;

/// Errors of the lease primitive.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another holder has the lease (another process, or another lease in this process),
    /// and the acquisition made a single try: the budget asked for one
    /// ([`Budget::no_wait`](crate::Budget::no_wait), a zero timeout, a `try_` method) or its
    /// deadline had already passed when the acquisition began (`why` tells which).
    ///
    /// The fields are the facts; the message words them for a Rust caller (what to change
    /// in the [`Budget`](crate::Budget)). A program that shows errors to its own users (a CLI
    /// with a `--timeout` flag, a binding with a `timeout` argument) words them in its own
    /// terms from these fields instead.
    #[error("{}; {}", self.situation().unwrap_or_default(), library_terms::not_waited(why))]
    Contended {
        /// The lock file.
        path: PathBuf,
        /// Holder pids where the OS reveals them (looked up when first asked for).
        holders: HolderInfo,
        /// Why the acquisition did not wait.
        why: NotWaited,
    },
    /// The wait budget's deadline passed before the lease could be had. The fields are the
    /// facts (see [`Error::Contended`] on wording them for other users).
    #[error("{}; {}", self.situation().unwrap_or_default(), library_terms::gave_up(*waited))]
    TimedOut {
        /// The lock file.
        path: PathBuf,
        /// Holder pids where the OS reveals them (looked up when first asked for).
        holders: HolderInfo,
        /// How long this acquisition waited.
        waited: Duration,
    },
    /// The lease could not be had within the budget (a try-once budget: right now) because
    /// the acquirer was held up at one of the lock's *gates* rather than at the lock itself:
    /// the files beside a lock file (`.<name>.leasehold-gate`, `-readers`, `-writers`) that
    /// keep shared holders from starving an exclusive waiter (see
    /// [`SharedLease`](crate::SharedLease)). A gate is normally held by an exclusive waiter
    /// ahead in line, which waits for the lock's holders; where the lock itself is free, the
    /// gate's holder is a waiter that is stopped or stuck, or a process holding the gate file
    /// by other means — resume or end it. Only gates this process trusts are ever waited at
    /// (the lock file's ownership rule); others are ignored, which costs fairness only.
    #[error("{}", gate_held(path, gate, holders, waited))]
    GateHeld {
        /// The lock file.
        path: PathBuf,
        /// The gate file the acquirer was held up at (its holders:
        /// [`gate_holders`](Error::gate_holders)). Boxed: it keeps [`Error`] small.
        gate: Box<std::path::Path>,
        /// The lock's holders where the OS reveals them (looked up when first asked for).
        holders: HolderInfo,
        /// How long the acquirer waited; `None` for a single try.
        waited: Option<Duration>,
    },
    /// The wait budget's cancellation token fired.
    #[error("{path}: wait for the lock was cancelled")]
    Cancelled {
        /// The lock file.
        path: PathBuf,
    },
    /// The lock path (or a data file opened as carefully, such as a session log) names
    /// something that is not a regular file; it is left untouched. The message does not call
    /// it a lock file: the same refusal guards data files.
    #[error(
        "{path}: is {kind}, not a regular file; refusing to open it (move it away or choose another path)"
    )]
    NotRegularFile {
        /// The lock path.
        path: PathBuf,
        /// What was found there.
        kind: FileKind,
    },
    /// A directory that leases are kept in is something else (a symlink is never followed
    /// inside a managed tree: it could redirect where locks are taken); it is left untouched.
    #[error(
        "{path}: is {kind}, not a directory; refusing to use it (symbolic links are not followed here; move it away)"
    )]
    NotDirectory {
        /// The directory path.
        path: PathBuf,
        /// What was found there.
        kind: FileKind,
    },
    /// A component of the lock path's parent exists but is not a directory.
    #[error("{path}: a parent component is not a directory")]
    ParentNotDirectory {
        /// The lock path.
        path: PathBuf,
    },
    /// The lock file or a parent directory may not be opened or created.
    #[error("{path}: permission denied (check the owner and mode of the file and its directories)")]
    PermissionDenied {
        /// The lock path.
        path: PathBuf,
    },
    /// The lock file does not exist and the caller asked not to create it.
    #[error("{path}: lock file does not exist")]
    NotFound {
        /// The lock path.
        path: PathBuf,
    },
    /// The path is too long (or a component's name is) for the operating system.
    #[error("{path}: path or file name too long for this system")]
    NameTooLong {
        /// The lock path.
        path: PathBuf,
    },
    /// The path can name no file at all: it is empty, or it holds a NUL byte (which no
    /// file name may). Refused before anything is opened or created.
    #[error("{path:?} is not a usable path: {reason}; give the path of the lock file")]
    InvalidPath {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The lock file lives on a network, FUSE or overlay file system, where flock may block
    /// forever even with LOCK_NB, or silently fail to exclude other machines or other paths
    /// (an overlay's merged path and its upper directory, a FUSE mount and its backing path).
    /// Refused before anything was created there. An overlay only where one of its layer
    /// directories can be reached, or that cannot be told (see
    /// [`LeaseOptions::allow_network_filesystem`](crate::LeaseOptions::allow_network_filesystem)).
    ///
    /// The message names the option in the library's terms; a face with options of its own
    /// names them with [`Error::worded`] ([`OptIn::NetworkFilesystem`]).
    #[error("{}", self.worded(library_terms::opt_in))]
    NetworkFilesystem {
        /// The lock path.
        path: PathBuf,
        /// The file-system type detected.
        fs: &'static str,
        /// How far the kernel's lock reaches on that mount, and why
        /// ([`MountLocks::of`](crate::MountLocks::of)).
        locks: crate::MountLocks,
    },
    /// An existing lock file (or a directory or file a store keeps its state in) belongs to
    /// another user or may be written by its group or others, so someone else could remove
    /// or replace it under a holder; it is left untouched.
    /// The message names the option in the library's terms ([`OptIn::SharedState`]; see
    /// [`Error::worded`]).
    #[error("{}", self.worded(library_terms::opt_in))]
    Untrusted {
        /// The file or directory.
        path: PathBuf,
        /// Who else could change it.
        reason: String,
    },
    /// The lock file kept being replaced between open and lock.
    #[error(
        "{path}: the lock file was replaced {attempts} times while locking; something is deleting or renaming it"
    )]
    Unstable {
        /// The lock path.
        path: PathBuf,
        /// How many times it was reopened.
        attempts: u32,
    },
    /// The held inode is no longer the file at the path (the lock file was unlinked,
    /// renamed or replaced, or a directory on the way renamed or a symlink on it re-pointed;
    /// `path` is then the lock path, or the directory of a [`LockDir`](crate::LockDir) chain
    /// that moved); or a [`RecordLease`](crate::RecordLease)'s baton was taken over (its
    /// holder did not renew it within its TTL); the lease proves nothing any more.
    #[error(
        "{path}: lease lost: the locked file is no longer the file at this path (it was removed or replaced, or a directory on the way moved), or, for a record lease, another holder took it over after it went unrenewed for its TTL"
    )]
    LeaseLost {
        /// The lock path.
        path: PathBuf,
    },
    /// The lease was already released.
    #[error("{path}: lease already released")]
    Released {
        /// The lock path.
        path: PathBuf,
    },
    /// The process ran out of file descriptors.
    #[error(
        "{path}: too many open files (descriptor limit {limit}); raise `ulimit -n` or hold fewer leases"
    )]
    TooManyOpenFiles {
        /// The lock path.
        path: PathBuf,
        /// The soft RLIMIT_NOFILE, if known (0 if not).
        limit: u64,
    },
    /// Any other I/O failure.
    #[error("{path}: {op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A shared lease was asked for where the platform has no shared mode (Windows, where a
    /// lease is a named kernel object whose existence is the lock). Nothing was taken.
    #[error(
        "{path}: shared leases are not available on this platform; take an exclusive lease instead"
    )]
    SharedUnsupported {
        /// The lock path.
        path: PathBuf,
    },
    /// The file system holding the lock file cannot lock files: `flock` answered `ENOLCK`,
    /// `EOPNOTSUPP`/`ENOTSUP` or `ENOSYS` (some FUSE and network mounts, some container
    /// overlays). Not contention — waiting would never help — and not a transient I/O error.
    #[error(
        "{path}: this file system cannot lock files (flock: {source}); put the lock file on a local file system"
    )]
    LockingUnsupported {
        /// The lock path.
        path: PathBuf,
        /// What `flock` answered.
        #[source]
        source: io::Error,
    },
    /// The platform has no lock that other processes honour (WebAssembly/WASI: no `flock`,
    /// and a host may preopen one directory into several instances), and the program did not
    /// declare itself the only user with
    /// [`LeaseOptions::single_process`](crate::LeaseOptions::single_process). Granting a
    /// lease anyway would fail open; nothing was taken.
    /// The message names the option in the library's terms ([`OptIn::SingleProcess`]; see
    /// [`Error::worded`]).
    #[error("{}", self.worded(library_terms::opt_in))]
    Unsupported {
        /// The lock path.
        path: PathBuf,
        /// The platform that has no inter-process lock (for example `WASI`).
        platform: &'static str,
    },
    /// A distributed arbiter (etcd) could not be reached or refused a request; nothing is held.
    #[error("etcd at {endpoints}: {reason}")]
    Unreachable {
        /// The endpoints tried, as given.
        endpoints: String,
        /// What failed, and what to check.
        reason: String,
    },
    /// A distributed arbiter's endpoint list is unusable as given (empty, or mixing `http://`
    /// and `https://`, which would send some requests in the clear); nothing was contacted.
    #[error("etcd endpoints {endpoints:?}: {reason}")]
    BadEndpoints {
        /// The endpoints, as given.
        endpoints: String,
        /// What is wrong with them, and what to write instead.
        reason: String,
    },
    /// A distributed lease's TTL leaves its keep-alives too little time at the round trip
    /// measured to the arbiter (with the holder's grace): a grant would be lost with the
    /// arbiter healthy. Nothing is held.
    #[error("etcd at {endpoints}: {reason}")]
    Unschedulable {
        /// The endpoints, as given.
        endpoints: String,
        /// The arithmetic, and what to change.
        reason: String,
    },
    /// A distributed lease may have expired (no keep-alive acknowledged in time, or the
    /// server says it is gone): the grant proves nothing any more, and a successor may
    /// already hold the lock.
    #[error("{name}: lease lost: {reason}")]
    Expired {
        /// The lock's name (its key in the arbiter).
        name: String,
        /// Why it is considered lost.
        reason: String,
    },
}

impl Classify for Error {
    /// How a caller should treat this error: contention and a run-out wait are
    /// [`ErrorClass::Contended`], a cancelled wait [`ErrorClass::Cancelled`], a path or
    /// endpoint list that cannot be used as given [`ErrorClass::Usage`], anything else
    /// [`ErrorClass::Failure`].
    fn class(&self) -> ErrorClass {
        match self {
            Error::Contended { .. } | Error::TimedOut { .. } | Error::GateHeld { .. } => {
                ErrorClass::Contended
            }
            Error::Cancelled { .. } => ErrorClass::Cancelled,
            Error::NotRegularFile { .. }
            | Error::NotDirectory { .. }
            | Error::ParentNotDirectory { .. }
            | Error::PermissionDenied { .. }
            | Error::NameTooLong { .. }
            | Error::InvalidPath { .. }
            | Error::NetworkFilesystem { .. }
            | Error::Untrusted { .. }
            | Error::SharedUnsupported { .. }
            | Error::BadEndpoints { .. }
            | Error::Unschedulable { .. } => ErrorClass::Usage,
            Error::NotFound { .. }
            | Error::Unstable { .. }
            | Error::LeaseLost { .. }
            | Error::Released { .. }
            | Error::TooManyOpenFiles { .. }
            | Error::Io { .. }
            | Error::LockingUnsupported { .. }
            | Error::Unsupported { .. }
            | Error::Unreachable { .. } => ErrorClass::Failure,
            // A lost distributed lease: someone else may hold it now (the CLI's `lease lost`).
            Error::Expired { .. } => ErrorClass::Failure,
        }
    }
}

impl Error {
    /// True for [`Error::Contended`] and [`Error::TimedOut`]: somebody else has the lease
    /// (the class [`ErrorClass::Contended`]).
    pub fn is_contended(&self) -> bool {
        self.class() == ErrorClass::Contended
    }

    /// True when the path itself is unusable (the caller's input is at fault, nothing was
    /// changed): not a regular file, parent not a directory, permission denied, name too
    /// long, a network file system not opted into (the class [`ErrorClass::Usage`]).
    pub fn is_unusable_path(&self) -> bool {
        self.class() == ErrorClass::Usage
    }

    /// The error for a failed `flock` on the lock file at `path`: the lease code's one
    /// mapping of lock-call errno values. `ENOLCK`, `EOPNOTSUPP`/`ENOTSUP` and `ENOSYS` mean
    /// the file system cannot lock ([`Error::LockingUnsupported`]); anything else is an
    /// [`Error::Io`] of the `lock` operation. Contention (`EWOULDBLOCK`) and `EINTR` are not
    /// errors and must be handled by the caller before this is asked.
    #[cfg(unix)]
    pub(crate) fn from_lock_errno(path: &std::path::Path, errno: rustix::io::Errno) -> Error {
        use rustix::io::Errno;
        let source = io::Error::from(errno);
        let path = path.to_path_buf();
        if errno == Errno::NOLCK
            || errno == Errno::OPNOTSUPP
            || errno == Errno::NOTSUP
            || errno == Errno::NOSYS
        {
            Error::LockingUnsupported { path, source }
        } else {
            Error::Io {
                op: "lock",
                path,
                source,
            }
        }
    }

    /// A failure to create or reach a lock file's parent directory, restated for the lock
    /// path itself: the user asked about the lock file, so the message names it.
    pub(crate) fn for_lock_path(self, path: &std::path::Path) -> Error {
        match self {
            Error::ParentNotDirectory { .. } => Error::ParentNotDirectory {
                path: path.to_path_buf(),
            },
            Error::PermissionDenied { .. } => Error::PermissionDenied {
                path: path.to_path_buf(),
            },
            other => other,
        }
    }

    /// For [`Error::GateHeld`], who holds the gate the acquirer was held up at, looked up
    /// now (from the gate's path: gates are never removed); `None` for any other error.
    pub fn gate_holders(&self) -> Option<HolderInfo> {
        match self {
            Error::GateHeld { gate, .. } => Some(HolderInfo::of_path(gate)),
            _ => None,
        }
    }

    /// True for [`Error::Expired`]: a distributed lease that may have run out. Another
    /// process may hold the lock now, so callers treat it like contention, not like a
    /// storage failure.
    pub fn is_expired(&self) -> bool {
        matches!(self, Error::Expired { .. })
    }

    /// What held a contended acquisition up, without advice: "PATH: lock is " and its
    /// [`hold_up`](Self::hold_up) ("PATH: lock is held by another process (pid N)", or for
    /// [`Error::GateHeld`] the gate, its holders and what the lock itself is); `None` for an
    /// error that is not contention. The library's message is this and what to change in the
    /// [`Budget`](crate::Budget); a program that shows errors to its own users (a CLI, a
    /// binding) adds its own advice to this (its flag, its `timeout` argument) from the
    /// variant's facts (`why`, `waited`), so that the situation is worded once, here, for
    /// every face. Looks the holders up, as the message does.
    pub fn situation(&self) -> Option<String> {
        let path = self.contended_path()?.display();
        Some(format!("{path}: lock is {}", self.hold_up()?))
    }

    /// The [situation](Self::situation) without the lock file's path: what follows
    /// "PATH: lock is " — "held by another process (pid N)", or, for [`Error::GateHeld`],
    /// "held up at its gate GATE, held by WHO (WHY)", WHY saying what the lock itself is (held
    /// by whom, free — the gate's holder then stopped or stuck — or not known). For a face
    /// that names the path its own way (a notice "waiting for PATH held by ..."). `None` for
    /// an error that is not contention. Looks the holders up.
    pub fn hold_up(&self) -> Option<String> {
        match self {
            Error::Contended { holders, .. } | Error::TimedOut { holders, .. } => {
                Some(format!("held by {}", holders.who()))
            }
            Error::GateHeld { gate, holders, .. } => Some(gate_hold_up(gate, holders)),
            _ => None,
        }
    }

    /// The lock file of a contention error.
    fn contended_path(&self) -> Option<&std::path::Path> {
        match self {
            Error::Contended { path, .. }
            | Error::TimedOut { path, .. }
            | Error::GateHeld { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The setting that would have let this error's refusal through, for an error a caller
    /// may opt out of ([`Error::NetworkFilesystem`], [`Error::Untrusted`],
    /// [`Error::Unsupported`]); `None` for any other. Each face names the setting in its own
    /// terms ([`Error::worded`]).
    pub fn opt_in(&self) -> Option<OptIn> {
        match self {
            Error::NetworkFilesystem { .. } => Some(OptIn::NetworkFilesystem),
            Error::Untrusted { .. } => Some(OptIn::SharedState),
            Error::Unsupported { .. } => Some(OptIn::SingleProcess),
            _ => None,
        }
    }

    /// The message, with the setting that opts out of a refusal ([`Error::opt_in`]) named by
    /// `name` — how the caller's face writes it (a binding's keyword, a CLI's flag or
    /// environment variable). The message is the library's; the face supplies only the name.
    /// For an error with no such setting, the message as [`Display`](std::fmt::Display)
    /// gives it.
    pub fn worded(&self, name: impl Fn(OptIn) -> String) -> String {
        match self {
            Error::NetworkFilesystem { path, fs, locks } => match locks {
                crate::MountLocks::HostOnly { .. } => format!(
                    "{}: lock file is on a network, FUSE or overlay file system ({fs}), where flock can hang or fail to exclude; its locks are {locks}; put it on a local file system, take a record lease there, which excludes across hosts (exclusive leases; {}), or opt in with {} to take the kernel's lock anyway",
                    path.display(),
                    name(OptIn::RecordLease),
                    name(OptIn::NetworkFilesystem)
                ),
                _ => format!(
                    "{}: lock file is on a network, FUSE or overlay file system ({fs}), where flock can hang or fail to exclude; its locks are {locks}; put it on a local file system, or opt in with {}",
                    path.display(),
                    name(OptIn::NetworkFilesystem)
                ),
            },
            Error::Untrusted { path, reason } => format!(
                "{}: {reason}; refusing to trust it, since another user could remove or replace it (make it yours and not group/other-writable, e.g. chmod go-w, or where sharing is intended opt in with {})",
                path.display(),
                name(OptIn::SharedState)
            ),
            Error::Unsupported { path, platform } => format!(
                "{}: {platform} has no lock that other processes or instances honour, so a lease here would exclude only this program's own leases; if this program is truly the only one using this directory, opt in with {}",
                path.display(),
                name(OptIn::SingleProcess)
            ),
            other => other.to_string(),
        }
    }

    /// The holders recorded in a contention error: the lock's (for [`Error::GateHeld`] too;
    /// the gate's are [`gate_holders`](Self::gate_holders)).
    pub fn holders(&self) -> Option<&HolderInfo> {
        match self {
            Error::Contended { holders, .. }
            | Error::TimedOut { holders, .. }
            | Error::GateHeld { holders, .. } => Some(holders),
            _ => None,
        }
    }
}

/// An [`Error`] as an I/O error, for code that speaks `std::io` (a store's file steps, a
/// `Read`/`Write` adapter): the message is the error's own, which names the path and says
/// what to do, and the kind says what happened where std has a word for it (`NotFound`,
/// `PermissionDenied`, `InvalidInput` for an unusable path, the source's kind for
/// [`Error::Io`]); the typed error stays reachable as the I/O error's inner error.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::NotFound { .. } => io::ErrorKind::NotFound,
            Error::PermissionDenied { .. } => io::ErrorKind::PermissionDenied,
            Error::Io { source, .. } => source.kind(),
            Error::TimedOut { .. } => io::ErrorKind::TimedOut,
            Error::Contended { .. } | Error::GateHeld { waited: None, .. } => {
                io::ErrorKind::WouldBlock
            }
            Error::GateHeld { .. } => io::ErrorKind::TimedOut,
            Error::Cancelled { .. } => io::ErrorKind::Interrupted,
            _ if e.is_unusable_path() => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// [`Error::GateHeld`]'s message: its [situation](Error::situation), and how the wait ended
/// in the library's terms.
fn gate_held(
    path: &std::path::Path,
    gate: &std::path::Path,
    holders: &HolderInfo,
    waited: &Option<Duration>,
) -> String {
    let tail = match waited {
        None => library_terms::not_waited_at_gate(),
        Some(w) => library_terms::gave_up(*w),
    };
    let hold_up = gate_hold_up(gate, holders);
    format!("{}: lock is {hold_up}; {tail}", path.display())
}

/// What held up an acquisition at a gate, after "lock is ": the gate and who holds it, then
/// why that holds the acquirer up — the lock's state (held by whom, free, or not known).
fn gate_hold_up(gate: &std::path::Path, holders: &HolderInfo) -> String {
    let by = HolderInfo::of_path(gate).who();
    let why = match holders.get().is_held() {
        Some(true) => format!(
            "an exclusive waiter ahead in line; the lock itself is held by {}",
            holders.who()
        ),
        Some(false) => "a waiter ahead in line; the lock itself is free, so that waiter is stopped or stuck: resume or end it".into(),
        None => "an exclusive waiter ahead in line, or one stopped or stuck there".into(),
    };
    format!(
        "held up at its gate {}, held by {by} ({why})",
        gate.display()
    )
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an acquisition that found the lease held did not wait for it ([`Error::Contended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotWaited {
    /// A single try was asked for: [`Budget::no_wait`](crate::Budget::no_wait), a zero
    /// [`Budget::timeout`](crate::Budget::timeout), or a `try_` method.
    SingleTry,
    /// The budget's deadline had already passed when the acquisition began, by `late`: a
    /// [`Budget::until`](crate::Budget::until) deadline (`timeout: None`), or a timeout
    /// [started](crate::Budget::started) earlier and spent by the steps before this one.
    Expired {
        /// How long before the acquisition began the deadline passed.
        late: Duration,
        /// The timeout the deadline was started from, if it was.
        timeout: Option<Duration>,
    },
}

/// A rule a caller may opt out of, as [`Error::opt_in`] names it: the setting's identity,
/// which each face (the Rust [`LeaseOptions`](crate::LeaseOptions), the CLI, the bindings)
/// names in its own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OptIn {
    /// Accept a lock file on a network, FUSE or overlay file system
    /// ([`LeaseOptions::allow_network_filesystem`](crate::LeaseOptions::allow_network_filesystem)).
    NetworkFilesystem,
    /// Accept a lock file (or store state) another user owns or may write
    /// ([`LeaseOptions::allow_shared_state`](crate::LeaseOptions::allow_shared_state)).
    SharedState,
    /// Grant leases where the platform has no inter-process lock, this program being its
    /// only user ([`LeaseOptions::single_process`](crate::LeaseOptions::single_process)).
    SingleProcess,
    /// Take a record lease where the mount's locks stay on each host
    /// ([`MountLocks::HostOnly`](crate::MountLocks::HostOnly)):
    /// [`LeaseOptions::on_shared_mount`](crate::LeaseOptions::on_shared_mount) with
    /// [`SharedMount::Record`](crate::SharedMount::Record). Named beside
    /// [`OptIn::NetworkFilesystem`] in such a mount's refusal; [`Error::opt_in`] answers the
    /// latter.
    RecordLease,
}

/// The library's face: contention worded for a Rust caller, whose setting is the
/// [`Budget`](crate::Budget). The one place these messages are worded; the CLI and the
/// bindings word the same facts in their own terms (a flag, a `timeout` argument).
mod library_terms {
    use super::NotWaited;
    use std::time::Duration;

    pub(super) fn not_waited(why: &NotWaited) -> String {
        match why {
            NotWaited::SingleTry => {
                "not waited for (a single try; to wait, acquire with a Budget::timeout)".into()
            }
            NotWaited::Expired {
                late,
                timeout: Some(t),
            } => format!(
                "not waited for: the {t:.1?} budget had already run out {late:.1?} before this acquisition began (give it a Budget::timeout of its own: each acquisition gets a timeout's whole duration)"
            ),
            NotWaited::Expired {
                late,
                timeout: None,
            } => format!(
                "not waited for: the Budget::until deadline had passed {late:.1?} before this acquisition began (set a later deadline, or give it a Budget::timeout: each acquisition gets a timeout's whole duration)"
            ),
        }
    }

    /// A wait held up at a gate that did not wait: a single try, or a budget spent before
    /// the acquisition began (the error does not tell which; both are mended the same way).
    pub(super) fn not_waited_at_gate() -> String {
        "not waited for (a single try, or a budget already spent when this acquisition began; to wait, give it a Budget::timeout of its own)".into()
    }

    /// A setting named for a Rust caller, with the CLI's environment variable where it
    /// has one (the CLI prints the library's message).
    pub(super) fn opt_in(setting: super::OptIn) -> String {
        match setting {
            super::OptIn::NetworkFilesystem => {
                "LeaseOptions::allow_network_filesystem (CLI: LEASEHOLD_ALLOW_NETWORK_FS=1)".into()
            }
            super::OptIn::SharedState => {
                "LeaseOptions::allow_shared_state; CLI: LEASEHOLD_ALLOW_SHARED=1".into()
            }
            super::OptIn::SingleProcess => "LeaseOptions::single_process(true)".into(),
            super::OptIn::RecordLease => {
                "LeaseOptions::on_shared_mount(SharedMount::Record { ttl }) and LeaseOptions::acquire_mount_lease; CLI: --ttl SECS or LEASEHOLD_SHARED_MOUNT=record:SECS".into()
            }
        }
    }

    pub(super) fn gave_up(waited: Duration) -> String {
        format!(
            "gave up after {waited:.1?}; allow a longer wait with a larger Budget::timeout (or a later Budget::until deadline)"
        )
    }
}

/// An error that says how a caller should treat it: its [`ErrorClass`].
///
/// Every error type of leasehold and `leasehold-stores` implements it — [`Error`], the
/// patterns' `KeyError`, `AppendError`, `AuthorityError` and `StoreFailure`, the stores'
/// `RegistryError`, `ResultError` and `SessionError` — and an error that wraps another
/// answers the wrapped one's class unless it knows better. So a program decides what to do
/// with any of them (retry later, report bad input, stop quietly) in one place, generic
/// over `impl Classify`, instead of per type or per variant: the `leasehold` CLI maps a
/// class to its exit status this way (`exit.rs`). It is a trait, not a method on each type,
/// so that such a place needs no list of the types and no forwarding code per type.
pub trait Classify: std::error::Error {
    /// How a caller should treat this error; see [`ErrorClass`].
    fn class(&self) -> ErrorClass;
}

/// How a caller should treat an error, whatever the layer it comes from: every error type of
/// leasehold and `leasehold-stores` answers one [`Classify::class`], so that a program
/// decides what to do (retry later, report bad input, stop quietly) in one place instead of
/// per variant. The `leasehold` CLI maps each class to one exit status (its `exit.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// The caller's input is unusable (a path that is not a regular file or directory where
    /// one is needed, permission denied, an invalid or unknown ID, ...); nothing was changed,
    /// and retrying the same input will fail the same way. CLI exit status 2.
    Usage,
    /// Another process holds the lease and it could not be had within the wait budget;
    /// nothing was changed. Retrying later, or with a longer wait, may succeed. CLI exit
    /// status 75 (EX_TEMPFAIL), or `run --conflict-exit-code N`.
    Contended,
    /// The wait was cancelled by the caller (a [`CancelToken`](crate::CancelToken), in the
    /// CLI a signal); nothing was changed and nothing is held. CLI exit status 128 + the
    /// signal (130 for SIGINT, 143 for SIGTERM).
    Cancelled,
    /// Anything else: an I/O or storage failure, a lost lease, a file system that cannot
    /// lock. CLI exit status 1.
    Failure,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::Holders;

    #[test]
    fn as_an_io_error_it_keeps_its_message_and_says_its_kind() {
        let path = PathBuf::from("/srv/results/r1");
        let cases = [
            (
                Error::NotFound { path: path.clone() },
                io::ErrorKind::NotFound,
            ),
            (
                Error::PermissionDenied { path: path.clone() },
                io::ErrorKind::PermissionDenied,
            ),
            (
                Error::NotDirectory {
                    path: path.clone(),
                    kind: FileKind::Symlink,
                },
                io::ErrorKind::InvalidInput,
            ),
            (
                Error::Io {
                    op: "rename",
                    path: path.clone(),
                    source: io::Error::from(io::ErrorKind::StorageFull),
                },
                io::ErrorKind::StorageFull,
            ),
            (
                Error::LeaseLost { path: path.clone() },
                io::ErrorKind::Other,
            ),
        ];
        for (e, kind) in cases {
            let message = e.to_string();
            let io = io::Error::from(e);
            assert_eq!((io.kind(), io.to_string()), (kind, message));
            assert!(io.get_ref().is_some_and(|inner| inner.is::<Error>()));
        }
    }

    #[cfg(unix)]
    #[test]
    fn lock_errnos_that_mean_no_locking_here_are_typed_apart_from_io_and_contention() {
        use rustix::io::Errno;
        let path = std::path::Path::new("/mnt/fuse/app.lock");
        for errno in [Errno::NOLCK, Errno::OPNOTSUPP, Errno::NOTSUP, Errno::NOSYS] {
            let e = Error::from_lock_errno(path, errno);
            assert!(
                matches!(&e, Error::LockingUnsupported { path: p, .. } if p == path),
                "{errno:?}: {e:?}"
            );
            assert_eq!(e.class(), ErrorClass::Failure);
            assert!(!e.is_contended() && !e.is_unusable_path());
            let msg = e.to_string();
            assert!(msg.starts_with("/mnt/fuse/app.lock: "), "{msg}");
            assert!(
                msg.contains("put the lock file on a local file system"),
                "{msg}"
            );
            let raw = io::Error::from(errno).raw_os_error();
            let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<io::Error>());
            assert_eq!(source.and_then(io::Error::raw_os_error), raw);
        }
        for errno in [Errno::BADF, Errno::INVAL, Errno::IO] {
            let e = Error::from_lock_errno(path, errno);
            assert!(
                matches!(e, Error::Io { op: "lock", .. }),
                "{errno:?}: {e:?}"
            );
            assert_eq!(e.class(), ErrorClass::Failure);
        }
    }

    #[test]
    fn every_variant_has_the_class_its_helpers_report() {
        let path = PathBuf::from("/x.lock");
        let holders = || HolderInfo::known(Holders::Held { pids: vec![42] });
        let cases = [
            (
                Error::Contended {
                    path: path.clone(),
                    holders: holders(),
                    why: NotWaited::SingleTry,
                },
                ErrorClass::Contended,
            ),
            (
                Error::TimedOut {
                    path: path.clone(),
                    holders: holders(),
                    waited: Duration::from_millis(2000),
                },
                ErrorClass::Contended,
            ),
            (
                Error::Cancelled { path: path.clone() },
                ErrorClass::Cancelled,
            ),
            (
                Error::NotRegularFile {
                    path: path.clone(),
                    kind: FileKind::Fifo,
                },
                ErrorClass::Usage,
            ),
            (
                Error::PermissionDenied { path: path.clone() },
                ErrorClass::Usage,
            ),
            (
                Error::NetworkFilesystem {
                    path: path.clone(),
                    fs: "nfs",
                    locks: crate::MountLocks::HostOnly {
                        fs: "nfs".into(),
                        reason: "nfs mounted with local_lock=all".into(),
                    },
                },
                ErrorClass::Usage,
            ),
            (Error::LeaseLost { path: path.clone() }, ErrorClass::Failure),
            (Error::NotFound { path: path.clone() }, ErrorClass::Failure),
            (
                Error::Unsupported {
                    path: path.clone(),
                    platform: "WASI",
                },
                ErrorClass::Failure,
            ),
        ];
        for (e, class) in cases {
            assert_eq!(e.class(), class, "{e:?}");
            assert_eq!(e.is_contended(), class == ErrorClass::Contended, "{e:?}");
            assert_eq!(e.is_unusable_path(), class == ErrorClass::Usage, "{e:?}");
        }
    }

    /// A refusal a caller may opt out of names its setting through `worded`: the library's
    /// message names the Rust option (and the CLI's variable), a face's names its own, and
    /// nothing else of the message changes.
    #[test]
    fn an_opt_in_is_named_by_the_face_and_the_message_is_the_librarys() {
        let path = PathBuf::from("/mnt/nfs/app.lock");
        let cases = [
            (
                Error::NetworkFilesystem {
                    path: path.clone(),
                    fs: "nfs",
                    locks: crate::MountLocks::CrossHost {
                        fs: "nfs4".into(),
                        reason: "local_lock=none".into(),
                    },
                },
                OptIn::NetworkFilesystem,
                "LeaseOptions::allow_network_filesystem (CLI: LEASEHOLD_ALLOW_NETWORK_FS=1)",
            ),
            (
                Error::Untrusted {
                    path: path.clone(),
                    reason: "owned by uid 7".into(),
                },
                OptIn::SharedState,
                "LeaseOptions::allow_shared_state; CLI: LEASEHOLD_ALLOW_SHARED=1",
            ),
            (
                Error::Unsupported {
                    path: path.clone(),
                    platform: "WASI",
                },
                OptIn::SingleProcess,
                "LeaseOptions::single_process(true)",
            ),
        ];
        for (e, setting, rust) in cases {
            assert_eq!(e.opt_in(), Some(setting));
            let message = e.to_string();
            assert!(message.starts_with("/mnt/nfs/app.lock: "), "{message}");
            assert!(
                message.contains(&format!("opt in with {rust}")),
                "{message}"
            );
            let ours = e.worded(|o| format!("<{o:?}>"));
            assert_eq!(ours, message.replace(rust, &format!("<{setting:?}>")));
        }
        let lost = Error::LeaseLost { path };
        assert_eq!(lost.opt_in(), None);
        assert_eq!(lost.worded(|_| unreachable!()), lost.to_string());
    }

    /// On a mount whose locks stay on each host the refusal names the record lease too, in
    /// the face's words, before the kernel lock's opt-in; on a cross-host mount (above) it
    /// does not, since the kernel's lock reaches the other hosts there.
    #[test]
    fn a_host_only_mount_names_the_record_lease_beside_the_network_opt_in() {
        let e = Error::NetworkFilesystem {
            path: PathBuf::from("/home/ana/app.lock"),
            fs: "nfs",
            locks: crate::MountLocks::HostOnly {
                fs: "nfs".into(),
                reason: "local_lock=all".into(),
            },
        };
        assert_eq!(e.opt_in(), Some(OptIn::NetworkFilesystem));
        let ours = e.worded(|o| format!("<{o:?}>"));
        assert!(
            ours.contains("take a record lease there, which excludes across hosts (exclusive leases; <RecordLease>), or opt in with <NetworkFilesystem> to take the kernel's lock anyway"),
            "{ours}"
        );
        let message = e.to_string();
        assert!(
            message.contains("LeaseOptions::on_shared_mount(SharedMount::Record { ttl })"),
            "{message}"
        );
    }

    #[test]
    fn contention_messages_name_the_path_the_holder_and_the_budget_setting() {
        let path = PathBuf::from("/var/lib/app/store.lock");
        let holders = HolderInfo::known(Holders::Held { pids: vec![42] });
        let timed_out = Error::TimedOut {
            path: path.clone(),
            holders: holders.clone(),
            waited: Duration::from_millis(2000),
        }
        .to_string();
        assert_eq!(
            timed_out,
            "/var/lib/app/store.lock: lock is held by another process (pid 42); gave up after 2.0s; allow a longer wait with a larger Budget::timeout (or a later Budget::until deadline)"
        );
        let contended = |why| {
            Error::Contended {
                path: path.clone(),
                holders: holders.clone(),
                why,
            }
            .to_string()
        };
        assert_eq!(
            contended(NotWaited::SingleTry),
            "/var/lib/app/store.lock: lock is held by another process (pid 42); not waited for (a single try; to wait, acquire with a Budget::timeout)"
        );
        // A budget that had a timeout is not told to get one: it is told
        // that it was spent before this acquisition began.
        let spent = contended(NotWaited::Expired {
            late: Duration::from_millis(500),
            timeout: Some(Duration::from_secs(2)),
        });
        assert!(
            spent.ends_with(
                "not waited for: the 2.0s budget had already run out 500.0ms before this acquisition began (give it a Budget::timeout of its own: each acquisition gets a timeout's whole duration)"
            ),
            "{spent}"
        );
        let passed = contended(NotWaited::Expired {
            late: Duration::from_millis(500),
            timeout: None,
        });
        assert!(
            passed.contains("the Budget::until deadline had passed 500.0ms before"),
            "{passed}"
        );
    }

    /// A wait held up at a gate is told what is true of it in the Budget's terms, never to
    /// "acquire with a Budget that has a timeout" when it had one; the
    /// situation alone, for the other faces, is the message without the advice.
    #[test]
    fn a_wait_held_up_at_a_gate_is_worded_in_the_budgets_terms_and_its_situation_has_no_advice() {
        let path = PathBuf::from("/var/lib/app/store.lock");
        let gated = |waited| Error::GateHeld {
            path: path.clone(),
            gate: std::path::Path::new("/var/lib/app/.store.lock.leasehold-gate").into(),
            holders: HolderInfo::known(Holders::Held { pids: vec![42] }),
            waited,
        };
        let once = gated(None);
        let situation = once.situation().expect("contention has a situation");
        assert!(
            situation.starts_with("/var/lib/app/store.lock: lock is held up at its gate /var/lib/app/.store.lock.leasehold-gate, held by "),
            "{situation}"
        );
        assert!(
            situation.ends_with(
                " (an exclusive waiter ahead in line; the lock itself is held by another process (pid 42))"
            ),
            "{situation}"
        );
        assert_eq!(
            situation,
            format!(
                "/var/lib/app/store.lock: lock is {}",
                once.hold_up().unwrap()
            )
        );
        assert!(!situation.contains("Budget"), "{situation}");
        let message = once.to_string();
        assert!(
            message.starts_with(&format!("{situation}; not waited for")),
            "{message}"
        );
        assert!(
            message.contains("give it a Budget::timeout of its own")
                && !message.contains("Budget that has a timeout"),
            "{message}"
        );
        let timed_out = gated(Some(Duration::from_secs(2))).to_string();
        assert!(
            timed_out.ends_with("; gave up after 2.0s; allow a longer wait with a larger Budget::timeout (or a later Budget::until deadline)"),
            "{timed_out}"
        );
        let contended = Error::Contended {
            path: path.clone(),
            holders: HolderInfo::known(Holders::Held { pids: vec![42] }),
            why: NotWaited::SingleTry,
        };
        assert_eq!(
            contended.situation().as_deref(),
            Some("/var/lib/app/store.lock: lock is held by another process (pid 42)")
        );
        assert_eq!(
            contended.hold_up().as_deref(),
            Some("held by another process (pid 42)")
        );
        // The lock free behind a held gate: its holder is a waiter stopped or stuck.
        let free = Error::GateHeld {
            path: path.clone(),
            gate: std::path::Path::new("/var/lib/app/.store.lock.leasehold-gate").into(),
            holders: HolderInfo::known(Holders::Free),
            waited: None,
        };
        let hold_up = free.hold_up().unwrap_or_default();
        assert!(
            hold_up.ends_with(
                " (a waiter ahead in line; the lock itself is free, so that waiter is stopped or stuck: resume or end it)"
            ),
            "{hold_up}"
        );
        assert_eq!(Error::Cancelled { path: path.clone() }.situation(), None);
        assert_eq!(Error::Cancelled { path }.hold_up(), None);
    }
}
