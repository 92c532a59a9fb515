//! Wait budgets: how long, and until what, a waiter may wait for a lease.
//!
//! A wait that cannot time out or be cancelled is the most common complaint about lock
//! libraries. Every blocking call in leasehold takes a [`Budget`]: an optional deadline and an
//! optional [`CancelToken`]. Running out of budget abandons *the waiter only*: it never forces
//! an unlock, and nothing of ours holds the lease afterwards.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::sys::Notifier;

/// A cancellation signal that any thread can trigger.
///
/// Cloning shares the token. Once cancelled it stays cancelled. It is a flag and the list of
/// the waits using it right now: [`cancel`](Self::cancel) raises the flag and wakes each of
/// them — a parked thread is unparked, an async task's waker is woken — so cancellation takes
/// effect in microseconds, and creating a token costs one allocation and no descriptor.
///
/// A signal handler cannot call [`cancel`](Self::cancel) (it takes a mutex): a program that
/// cancels on a signal does so from a thread that receives it (for example
/// `signal_hook::iterator::Signals`, as the `leasehold` CLI does). On Windows and WASI a
/// handler may set the token's [`flag`](Self::flag) instead, which the polling waiters there
/// check at least every 16 ms.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Default)]
struct CancelInner {
    /// The flag. An `Arc` of its own, so that it can be handed to a signal handler on
    /// Windows and WASI (see [`CancelToken::flag`]).
    cancelled: Arc<AtomicBool>,
    /// The waits using this token now, each by its waiter's notifier (see [`Subscription`]).
    waiters: Mutex<Vec<Arc<Notifier>>>,
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// Creates a token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every wait using this token, now and later: raises the flag, then wakes the
    /// waiters that wait with it now.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        for n in self.waiters().iter() {
            n.poke();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called (or, on Windows and WASI, the
    /// [`flag`](Self::flag) raised). No system call: a load of the flag.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// The token's flag (Windows and WASI): setting it to `true` cancels the token without
    /// waking anyone, which is all a signal or console-control handler may do
    /// (`signal_hook::flag::register(SIGINT, token.flag())`); waiters there poll, and notice
    /// it within 16 ms.
    #[cfg(not(unix))]
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.inner.cancelled.clone()
    }

    /// Makes [`cancel`](Self::cancel) poke `notifier` until the returned subscription is
    /// dropped. Poked at once if the token is already cancelled, so that a cancellation that
    /// lands between a waiter's last check and its subscription still ends its sleep.
    pub(crate) fn subscribe(&self, notifier: &Arc<Notifier>) -> Subscription {
        self.waiters().push(notifier.clone());
        if self.is_cancelled() {
            notifier.poke();
        }
        Subscription {
            token: self.clone(),
            notifier: notifier.clone(),
        }
    }

    /// Resolves once the token is cancelled (the etcd arbiter's waits select on it). Costs a
    /// notifier, subscribed while the future lives; no descriptor, no thread.
    #[cfg(all(feature = "etcd", unix))]
    pub(crate) async fn cancelled(&self) {
        let notifier = Arc::new(Notifier::new());
        let _subscribed = self.subscribe(&notifier);
        std::future::poll_fn(|cx| {
            loop {
                if self.is_cancelled() {
                    return std::task::Poll::Ready(());
                }
                if notifier.poll_poked(cx).is_pending() {
                    return std::task::Poll::Pending;
                }
            }
        })
        .await
    }

    fn waiters(&self) -> MutexGuard<'_, Vec<Arc<Notifier>>> {
        // Plain data: a panic elsewhere cannot leave it inconsistent.
        self.inner
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// A wait's place in its token's list of waiters (see [`CancelToken::subscribe`]); dropping
/// it leaves the list.
pub(crate) struct Subscription {
    token: CancelToken,
    notifier: Arc<Notifier>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut waiters = self.token.waiters();
        if let Some(i) = waiters.iter().position(|n| Arc::ptr_eq(n, &self.notifier)) {
            waiters.swap_remove(i);
        }
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
        if self.cancelled() {
            return Some(Exhausted::Cancelled);
        }
        match self.deadline {
            Some(d) if Instant::now() >= d => Some(Exhausted::Deadline),
            _ => None,
        }
    }

    /// Whether the budget's token is cancelled.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancelToken::is_cancelled)
    }
}

#[cfg(all(test, not(target_os = "wasi")))]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_cheap_to_share_across_threads() {
        fn shareable<T: Clone + Send + Sync + Default + 'static>() {}
        shareable::<CancelToken>();
        let token = CancelToken::new();
        let clone = token.clone();
        assert!(!token.is_cancelled());
        clone.cancel();
        assert!(token.is_cancelled(), "clones share one flag");
    }

    /// A thread asleep on a notifier subscribed to the token, with no timeout: only the
    /// cancellation's poke can wake it (the bound below only turns a hang into a failure).
    #[test]
    fn a_cancellation_from_another_thread_wakes_a_subscribed_sleeper() {
        let token = CancelToken::new();
        let n = Arc::new(Notifier::new());
        let subscribed = token.subscribe(&n);
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = {
            let n = n.clone();
            std::thread::spawn(move || {
                n.wait(None);
                tx.send(()).unwrap();
            })
        };
        let canceller = {
            let token = token.clone();
            std::thread::spawn(move || token.cancel())
        };
        canceller.join().unwrap();
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the cancellation woke the sleeper");
        sleeper.join().unwrap();
        drop(subscribed);
        assert!(token.waiters().is_empty(), "the subscription left the list");
    }

    #[test]
    fn a_subscription_after_the_cancellation_is_poked_at_once_and_a_dropped_one_never() {
        let token = CancelToken::new();
        let (early, late) = (Arc::new(Notifier::new()), Arc::new(Notifier::new()));
        drop(token.subscribe(&early));
        token.cancel();
        assert!(!early.is_poked(), "a dropped subscription is not poked");
        let _late = token.subscribe(&late);
        assert!(
            late.is_poked(),
            "subscribed after the cancellation: poked at once"
        );
    }
}
