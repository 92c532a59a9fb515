//! Wait budgets: how long, and until what, a waiter may wait for a lease.
//!
//! A wait that cannot time out or be cancelled is the most common complaint about lock
//! libraries. Every blocking call in leasehold takes a [`Budget`]: an optional deadline and an
//! optional [`CancelToken`]. Running out of budget abandons *the waiter only*: it never forces
//! an unlock, and nothing of ours holds the lease afterwards.

use std::fmt;
#[cfg(unix)]
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::Result;
#[cfg(unix)]
use crate::{error::Error, sys};

/// A cancellation signal that any thread (or a signal handler) can trigger.
///
/// Cloning shares the token. Once cancelled it stays cancelled. Internally it is a flag plus a
/// self-pipe, so a waiter blocked in the kernel wakes at once instead of noticing on its next
/// poll: cancellation takes effect in microseconds. On Windows and WASI it is the flag alone,
/// which the polling waiter checks at least every 16 ms.
#[derive(Clone)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

struct CancelInner {
    #[cfg(unix)]
    cancelled: AtomicBool,
    /// Shared with signal handlers on Windows (see [`CancelToken::flag`]), and with other
    /// threads on WASI.
    #[cfg(not(unix))]
    cancelled: Arc<AtomicBool>,
    #[cfg(unix)]
    read: OwnedFd,
    #[cfg(unix)]
    write: OwnedFd,
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// Creates a token. Fails only when the process is out of file descriptors.
    #[cfg(unix)]
    pub fn new() -> Result<CancelToken> {
        let (read, write) = sys::pipe().map_err(|e| Error::Io {
            op: "create cancellation pipe",
            path: "<cancel token>".into(),
            source: e.into(),
        })?;
        Ok(CancelToken {
            inner: Arc::new(CancelInner {
                cancelled: AtomicBool::new(false),
                read,
                write,
            }),
        })
    }

    /// Creates a token (on Windows and WASI it cannot fail; the `Result` keeps one
    /// signature).
    #[cfg(not(unix))]
    pub fn new() -> Result<CancelToken> {
        Ok(CancelToken {
            inner: Arc::new(CancelInner {
                cancelled: Arc::new(AtomicBool::new(false)),
            }),
        })
    }

    /// Cancels every wait using this token, now and later.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        #[cfg(unix)]
        sys::poke(self.inner.write.as_fd());
    }

    /// Whether [`cancel`](Self::cancel) was called, or (POSIX) a byte was written to the pipe
    /// returned by [`write_end`](Self::write_end) (for example by a signal handler).
    pub fn is_cancelled(&self) -> bool {
        let cancelled = self.inner.cancelled.load(Ordering::SeqCst);
        #[cfg(unix)]
        let cancelled = cancelled || sys::is_readable(self.inner.read.as_fd());
        cancelled
    }

    /// A duplicate of the token's write end. Writing any byte to it cancels the token; this is
    /// how an async-signal-safe handler (such as `signal_hook::low_level::pipe`) cancels a wait.
    #[cfg(unix)]
    pub fn write_end(&self) -> Result<OwnedFd> {
        self.inner.write.try_clone().map_err(|source| Error::Io {
            op: "duplicate cancellation pipe",
            path: "<cancel token>".into(),
            source,
        })
    }

    /// The token's flag (Windows, where there is no pipe to write to): setting it to `true`
    /// cancels the token. This is how a signal or console-control handler cancels a wait
    /// (`signal_hook::flag::register(SIGINT, token.flag())`); waiters notice it on their next
    /// poll, within 16 ms. The same on WASI, which has no pipes.
    #[cfg(not(unix))]
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.inner.cancelled.clone()
    }

    #[cfg(unix)]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.inner.read.as_fd()
    }

    /// Cheap check of the flag alone (no system call), for tight retry loops.
    pub(crate) fn flagged(&self) -> bool {
        self.inner.cancelled.load(Ordering::Relaxed)
    }
}

/// How long a waiter may wait: an optional deadline and an optional cancellation token.
///
/// `Budget::default()` waits without limit (like `flock(LOCK_EX)`), but unlike a kernel-blocked
/// wait it can still be cancelled when a token is attached.
#[derive(Clone, Debug, Default)]
pub struct Budget {
    deadline: Option<Instant>,
    cancel: Option<CancelToken>,
}

/// Why a budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exhausted {
    Cancelled,
    Deadline,
}

impl Budget {
    /// Wait without a deadline.
    pub fn unlimited() -> Budget {
        Budget::default()
    }

    /// Try exactly once: a budget whose deadline has already passed.
    pub fn no_wait() -> Budget {
        Budget {
            deadline: Some(Instant::now()),
            cancel: None,
        }
    }

    /// Wait at most `timeout` from now (saturating: a huge timeout means no deadline).
    pub fn timeout(timeout: Duration) -> Budget {
        Budget {
            deadline: Instant::now().checked_add(timeout),
            cancel: None,
        }
    }

    /// Wait until `deadline`.
    pub fn until(deadline: Instant) -> Budget {
        Budget {
            deadline: Some(deadline),
            cancel: None,
        }
    }

    /// Also stop waiting when `token` is cancelled.
    pub fn with_cancel(mut self, token: CancelToken) -> Budget {
        self.cancel = Some(token);
        self
    }

    /// The deadline, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The cancellation token, if any.
    pub fn cancel_token(&self) -> Option<&CancelToken> {
        self.cancel.as_ref()
    }

    /// Time left before the deadline (`None`: unlimited).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Checks the budget: cancellation first (it is an explicit request), then the deadline.
    pub(crate) fn exhausted(&self) -> Option<Exhausted> {
        if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return Some(Exhausted::Cancelled);
        }
        match self.deadline {
            Some(d) if Instant::now() >= d => Some(Exhausted::Deadline),
            _ => None,
        }
    }

    /// Whether the cancel flag is raised (no system call).
    pub(crate) fn flagged(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::flagged)
    }
}
