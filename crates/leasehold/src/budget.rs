//! Wait budgets: how long, and until what, a waiter may wait for a lease.
//!
//! A wait that cannot time out or be cancelled is the most common complaint about lock
//! libraries. Every blocking call in leasehold takes a [`Budget`]: an optional deadline and an
//! optional [`CancelToken`]. Running out of budget abandons *the waiter only*: it never forces
//! an unlock, and nothing of ours holds the lease afterwards.

use std::fmt;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::NotWaited;
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
/// handler may set the token's `flag()` instead, which the polling waiters there
/// check at least every 16 ms.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Default)]
struct CancelInner {
    /// The flag. An `Arc` of its own, so that it can be handed to a signal handler on
    /// Windows and WASI (see `CancelToken::flag`).
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
    /// `flag()` raised). No system call: a load of the flag.
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
        lock(&self.inner.waiters)
    }
}

use crate::mutex::lock;

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

/// How long a waiter may wait, and what else ends its wait: a limit (none, a timeout or a
/// deadline) and an optional [`CancelToken`].
///
/// **A timeout is measured from each acquisition.** [`Budget::timeout`] gives every
/// acquisition that uses it the whole duration, counted from the moment that acquisition
/// starts — what a timeout means to users of fs4, of Python's filelock and of retry loops
/// around std's `File::try_lock` — however long ago the budget was made and however many
/// acquisitions use it. A budget kept in a configuration struct therefore means the same at
/// every use.
///
/// **A deadline is one instant for every step.** [`Budget::until`] ends every wait that uses
/// it at that instant. For one budget across several steps (this lock, then that one, all
/// within 5 s), use a deadline, or start a timeout once with [`started`](Self::started). An
/// acquisition that begins after its deadline has passed makes a single try, and its
/// contention error says so and by how much ([`NotWaited::Expired`]).
///
/// `Budget::default()` waits without limit (like `flock(LOCK_EX)`), but unlike a
/// kernel-blocked wait it can still be cancelled when a token is attached. Pass a budget by
/// value to the async acquisitions (`Lease::acquire_async(&path, Budget::unlimited())`): the
/// future then owns it, which a future built inside `tokio::select!` needs; `&budget` works
/// too, through `From<&Budget>`.
///
/// ```
/// use leasehold::{Budget, Error, Lease};
/// use std::time::{Duration, Instant};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("job.lock");
/// let _holder = Lease::try_acquire(&path).unwrap();
/// let budget = Budget::timeout(Duration::from_millis(20));
/// for _ in 0..2 {
///     // Each acquisition gets the whole 20 ms, the second as well as the first.
///     let began = Instant::now();
///     let err = Lease::acquire(&path, &budget).unwrap_err();
///     assert!(matches!(err, Error::TimedOut { .. }) && began.elapsed() >= Duration::from_millis(20));
/// }
/// // Started once, the same 20 ms are shared: the second step finds them spent.
/// let shared = budget.started();
/// assert!(matches!(Lease::acquire(&path, &shared).unwrap_err(), Error::TimedOut { .. }));
/// let err = Lease::acquire(&path, &shared).unwrap_err();
/// assert!(err.to_string().contains("the 20.0ms budget had already run out"), "{err}");
/// ```
#[derive(Clone, Debug, Default)]
pub struct Budget {
    limit: Limit,
    cancel: Option<CancelToken>,
    notice: Option<Notice>,
    interrupt: Option<Interrupt>,
}

/// What a wait says once when it is still waiting at `at` (see [`Budget::with_notice`]).
/// Clones of a budget share it: it is said once in all.
#[derive(Clone)]
struct Notice {
    at: Instant,
    say: Arc<Mutex<Option<NoticeFn>>>,
}

type NoticeFn = Box<dyn FnOnce(&crate::Error) + Send>;

impl fmt::Debug for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notice").field("at", &self.at).finish()
    }
}

/// What an inline wait asks after a signal interrupted it (see [`Budget::on_interrupt`]).
#[derive(Clone)]
struct Interrupt(Arc<dyn Fn() -> ControlFlow<()> + Send + Sync>);

impl fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Interrupt(..)")
    }
}

/// What limits a wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Limit {
    /// No deadline.
    #[default]
    Unlimited,
    /// This long from the start of each acquisition (zero: try once).
    Timeout(Duration),
    /// Until this instant; `of` is the timeout it was [started](Budget::started) from (for
    /// messages), `None` for a [`Budget::until`].
    Until {
        deadline: Instant,
        of: Option<Duration>,
    },
}

/// Why a budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exhausted {
    Cancelled,
    Deadline,
}

impl Budget {
    /// Wait without a deadline.
    #[must_use]
    pub fn unlimited() -> Budget {
        Budget::default()
    }

    /// Try exactly once (the same as `Budget::timeout(Duration::ZERO)`).
    #[must_use]
    pub fn no_wait() -> Budget {
        Budget::timeout(Duration::ZERO)
    }

    /// Wait at most `timeout`, measured from the start of each acquisition that uses this
    /// budget (see [`Budget`]); zero tries once. Saturating: a timeout too large to add to
    /// the clock means no deadline.
    #[must_use]
    pub fn timeout(timeout: Duration) -> Budget {
        Budget {
            limit: Limit::Timeout(timeout),
            cancel: None,
            notice: None,
            interrupt: None,
        }
    }

    /// The budget of a timeout given as a number of seconds, as a binding's caller writes
    /// one (a float, or milliseconds converted): the one reading of such a number.
    /// `+∞` waits without limit, `0` tries once, a positive number waits at most that long
    /// (one too large for a [`Duration`] waits without limit too, as [`Budget::timeout`]
    /// saturates); NaN and every negative number are refused. A face with its own spelling of
    /// "no limit" (Python's filelock-compatible `-1`) maps it before asking: a negative
    /// timeout is otherwise a caller's arithmetic gone wrong (a deadline already past), not a
    /// wish to wait for ever.
    ///
    /// ```
    /// use leasehold::Budget;
    /// assert_eq!(Budget::from_timeout_secs(f64::INFINITY).unwrap().remaining(), None);
    /// assert_eq!(Budget::from_timeout_secs(1.5).unwrap().remaining(), Some(std::time::Duration::from_millis(1500)));
    /// assert!(Budget::from_timeout_secs(-1.0).is_err() && Budget::from_timeout_secs(f64::NAN).is_err());
    /// ```
    ///
    /// # Errors
    /// [`InvalidTimeout`] for NaN or a negative number (`-∞` too); each face words it in its
    /// own terms (its argument's name and unit).
    pub fn from_timeout_secs(secs: f64) -> Result<Budget, InvalidTimeout> {
        if secs.is_nan() || secs < 0.0 {
            return Err(InvalidTimeout { secs });
        }
        if secs == 0.0 {
            return Ok(Budget::no_wait());
        }
        Ok(match Duration::try_from_secs_f64(secs) {
            Ok(timeout) => Budget::timeout(timeout),
            // +∞, or more seconds than a `Duration` holds.
            Err(_) => Budget::unlimited(),
        })
    }

    /// Wait until `deadline`, the same instant for every acquisition that uses this budget:
    /// one budget across several steps. An acquisition that begins after it makes one try.
    #[must_use]
    pub fn until(deadline: Instant) -> Budget {
        Budget {
            limit: Limit::Until { deadline, of: None },
            cancel: None,
            notice: None,
            interrupt: None,
        }
    }

    /// Also stop waiting when `token` is cancelled.
    #[must_use]
    pub fn with_cancel(mut self, token: CancelToken) -> Budget {
        self.cancel = Some(token);
        self
    }

    /// Also say once, at `at`, what the wait is still waiting for: if a lock-file wait
    /// (an `acquire` of [`LeaseOptions`](crate::LeaseOptions), a
    /// [`LeaseHandle`](crate::LeaseHandle) lock, their async forms) has not ended by then, it
    /// calls `say` with the error a deadline at `at` would have ended it with
    /// ([`Error::TimedOut`](crate::Error::TimedOut) or
    /// [`Error::GateHeld`](crate::Error::GateHeld), naming the holders) and goes on waiting
    /// within the rest of the budget. An etcd wait says it too, keeping its key in the queue
    /// (its error names no holders: etcd's are looked up with
    /// `EtcdArbiter::owner`, from another thread than `say`'s). A single-process wait does
    /// not say it.
    ///
    /// Why not end the wait at `at` and start another: a new wait opens the path again, and
    /// if the lock file was replaced meanwhile it locks the new file while the old one's
    /// holder still holds the old, which a waiter queued behind that holder must not do
    /// (`tests/replaced.rs`). The wait said on stays on the file it opened, in its place in
    /// the queue. `say` runs on the waiting thread (or task), between two steps of the wait:
    /// keep it short.
    pub fn with_notice(
        mut self,
        at: Instant,
        say: impl FnOnce(&crate::Error) + Send + 'static,
    ) -> Budget {
        self.notice = Some(Notice {
            at,
            say: Arc::new(Mutex::new(Some(Box::new(say)))),
        });
        self
    }

    /// Lets a signal end a wait that blocks this very thread in the kernel's lock queue:
    /// after each `EINTR` of that wait, `hook` is called, on the waiting thread, and
    /// answers whether to stop. The library installs no signal handler and claims no
    /// signal: the program's own handler, installed without `SA_RESTART` (CPython installs
    /// its SIGINT handler so), is what makes the kernel end a blocked `flock` with `EINTR`
    /// when the signal is delivered to the waiting thread. This is how Python's
    /// `fcntl.flock` treats `EINTR` (PEP 475: retried after the signal handlers ran, unless
    /// one raised) and util-linux `flock --timeout` (a `SIGALRM` handler without
    /// `SA_RESTART`; `EINTR` ends the wait once its timer fired, else it is retried).
    ///
    /// * **Which waits ask it.** Only a blocking acquisition ([`Lease::acquire`] and the
    ///   other synchronous `acquire*` calls) on POSIX whose wait nothing else can end: this
    ///   budget has no limit and no [`CancelToken`]. Such a wait blocks the calling thread
    ///   itself in `flock` — one thread wake-up per hand-over, as a plain `flock(LOCK_EX)`
    ///   — instead of a helper thread that then wakes it. Every other wait (a deadline, a
    ///   token, an async acquisition, Windows and WASI) is ended by its deadline or token
    ///   as before and never calls `hook`.
    /// * **`ControlFlow::Break(())`** ends the acquisition with [`Error::Cancelled`]
    ///   naming the path, nothing held: the lock was not granted, the wait's descriptor
    ///   and every gate it took (see the shared-mode turnstile) are closed, and the next
    ///   acquirer of this process queued behind it goes on.
    /// * **`ControlFlow::Continue(())`** blocks again in the same place in line (the same
    ///   gate, or the lock), keeping what it already passed — which is also what happens
    ///   to an `EINTR` of an inline wait without a hook.
    /// * `hook` runs outside any signal handler (it may lock, allocate, call into an
    ///   interpreter) while this process's claim on the lock is held: it must not acquire
    ///   the same lock, which would queue behind the very wait that asks.
    /// * A signal that lands before the thread is blocked in `flock` interrupts nothing
    ///   (as for Python's own `fcntl.flock`): the hook is asked at the next interruption,
    ///   and the wait otherwise ends with the grant.
    /// * A wait queued behind another lease of this very process on the same lock (the
    ///   in-process claim queue, where the thread is parked, not in `flock`, so no signal
    ///   interrupts it) asks the hook every 20 ms instead, with the same answers: a
    ///   program's signal is then noticed within that period.
    ///
    /// [`Lease::acquire`]: crate::Lease::acquire
    /// [`Error::Cancelled`]: crate::Error::Cancelled
    #[must_use]
    pub fn on_interrupt<F>(mut self, hook: F) -> Budget
    where
        F: Fn() -> ControlFlow<()> + Send + Sync + 'static,
    {
        self.interrupt = Some(Interrupt(Arc::new(hook)));
        self
    }

    /// What an inline wait interrupted by a signal does next: the
    /// [`on_interrupt`](Self::on_interrupt) hook's answer, else go on waiting.
    pub(crate) fn interrupted(&self) -> ControlFlow<()> {
        match &self.interrupt {
            Some(Interrupt(hook)) => hook(),
            None => ControlFlow::Continue(()),
        }
    }

    /// Whether an [`on_interrupt`](Self::on_interrupt) hook is set.
    pub(crate) fn asks_on_interrupt(&self) -> bool {
        self.interrupt.is_some()
    }

    /// This budget with its timeout started now: the deadline `now + timeout`, shared by
    /// every acquisition that uses the result, so that several steps (a store operation that
    /// takes two locks, say) wait at most the timeout in all. A step that begins after that
    /// deadline tries once and its error names the timeout that ran out
    /// ([`NotWaited::Expired`]). Unlimited and deadline budgets are returned as they are; the
    /// cancellation token is kept.
    #[must_use]
    pub fn started(&self) -> Budget {
        let limit = match self.limit {
            Limit::Timeout(t) => match Instant::now().checked_add(t) {
                Some(deadline) => Limit::Until {
                    deadline,
                    of: Some(t),
                },
                None => Limit::Unlimited,
            },
            other => other,
        };
        Budget {
            limit,
            cancel: self.cancel.clone(),
            notice: self.notice.clone(),
            interrupt: self.interrupt.clone(),
        }
    }

    /// When a wait that starts now must give up: a deadline budget's deadline, now plus the
    /// timeout of a timeout budget; `None` without a limit.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline_from(Instant::now())
    }

    /// The cancellation token, if any.
    pub fn cancel_token(&self) -> Option<&CancelToken> {
        self.cancel.as_ref()
    }

    /// How long a wait that starts now may last: the whole timeout of a timeout budget, the
    /// time left before a deadline budget's deadline (zero once it passed); `None`:
    /// unlimited.
    pub fn remaining(&self) -> Option<Duration> {
        match self.limit {
            Limit::Unlimited => None,
            Limit::Timeout(t) => Some(t),
            Limit::Until { deadline, .. } => {
                Some(deadline.saturating_duration_since(Instant::now()))
            }
        }
    }

    /// How long a waiter whose acquisition resolved `deadline` from this budget may sleep
    /// before the budget asks something of it: the deadline or a notice not yet said,
    /// whichever comes first (`None`: neither).
    pub(crate) fn wake_in(&self, deadline: Option<Instant>) -> Option<Duration> {
        let pending = self.notice.as_ref().filter(|n| lock(&n.say).is_some());
        let next = match (deadline, pending.map(|n| n.at)) {
            (Some(d), Some(n)) => Some(d.min(n)),
            (d, n) => d.or(n),
        };
        next.map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Says the notice if it is due and not yet said, with the error `contention` makes.
    pub(crate) fn notice_due(&self, contention: impl FnOnce() -> crate::Error) {
        let Some(notice) = &self.notice else { return };
        if Instant::now() < notice.at {
            return;
        }
        // Taken out first: `say` runs without the lock held.
        let say = lock(&notice.say).take();
        if let Some(say) = say {
            say(&contention());
        }
    }

    /// This budget [started](Self::started) now, its deadline cut to at most `cap` from now
    /// (a store's own cap on every wait); the token and a single try's nature are kept.
    pub(crate) fn at_most(&self, cap: Duration) -> Budget {
        let started = self.started();
        let Some(bound) = Instant::now().checked_add(cap) else {
            return started;
        };
        let limit = match started.limit {
            Limit::Until { deadline, of } if deadline <= bound => Limit::Until { deadline, of },
            _ => Limit::Until {
                deadline: bound,
                of: Some(cap),
            },
        };
        Budget { limit, ..started }
    }

    /// This budget [started](Self::started) now, its deadline moved to at least `floor` from
    /// now (a short internal wait that even a single try must allow); the token is kept.
    pub(crate) fn at_least(&self, floor: Duration) -> Budget {
        let started = self.started();
        let limit = match (started.limit, Instant::now().checked_add(floor)) {
            (Limit::Until { deadline, of }, Some(bound)) if deadline < bound => Limit::Until {
                deadline: bound,
                of: of.map(|t| t.max(floor)),
            },
            (limit, _) => limit,
        };
        Budget { limit, ..started }
    }

    /// The deadline of an acquisition that began at `start`.
    pub(crate) fn deadline_from(&self, start: Instant) -> Option<Instant> {
        match self.limit {
            Limit::Unlimited => None,
            Limit::Timeout(t) => start.checked_add(t),
            Limit::Until { deadline, .. } => Some(deadline),
        }
    }

    /// Why an acquisition that began at `start` with this budget made a single try (its
    /// deadline was not after `start`): it was asked to, or its deadline had passed.
    pub(crate) fn not_waited(&self, start: Instant) -> NotWaited {
        match self.limit {
            Limit::Until { deadline, of } if of != Some(Duration::ZERO) => NotWaited::Expired {
                late: start.saturating_duration_since(deadline),
                timeout: of,
            },
            _ => NotWaited::SingleTry,
        }
    }

    /// Checks the budget against the deadline an acquisition resolved from it: cancellation
    /// first (it is an explicit request), then the deadline.
    pub(crate) fn exhausted(&self, deadline: Option<Instant>) -> Option<Exhausted> {
        if self.cancelled() {
            return Some(Exhausted::Cancelled);
        }
        match deadline {
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

    /// A notice wakes the waiter before its deadline, is said once (by any clone of the
    /// budget), and then leaves the deadline as the only timer.
    #[test]
    fn a_notice_is_said_once_and_then_the_deadline_is_the_timer() {
        let said = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let now = Instant::now();
        let counter = said.clone();
        let budget = Budget::until(now + Duration::from_secs(60)).with_notice(now, move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(budget.wake_in(budget.deadline()), Some(Duration::ZERO));
        let path = || crate::Error::Cancelled {
            path: "x.lock".into(),
        };
        budget.clone().notice_due(path);
        budget.notice_due(path);
        assert_eq!(said.load(Ordering::SeqCst), 1);
        assert!(
            budget
                .wake_in(budget.deadline())
                .is_some_and(|d| d > Duration::from_secs(50))
        );
        assert_eq!(Budget::unlimited().wake_in(None), None);
    }

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

/// A timeout that [`Budget::from_timeout_secs`] refuses: NaN or a negative number of
/// seconds. The message is the library's (in seconds); a face words the refusal with its own
/// argument's name and unit from [`secs`](Self::secs).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "timeout {secs} s is not a number of seconds ≥ 0; give 0 to try once, a positive number to wait at most that long, or infinity to wait without limit"
)]
pub struct InvalidTimeout {
    secs: f64,
}

impl InvalidTimeout {
    /// The refused number of seconds.
    pub fn secs(&self) -> f64 {
        self.secs
    }
}

impl crate::error::Classify for InvalidTimeout {
    /// Always [`ErrorClass::Usage`](crate::ErrorClass::Usage): the caller's input.
    fn class(&self) -> crate::error::ErrorClass {
        crate::error::ErrorClass::Usage
    }
}

/// A copy of the budget: what lets `&budget` be passed where a budget is taken by value (the
/// async acquisitions), so that a caller keeps its own. Cheap: the token is shared.
impl From<&Budget> for Budget {
    fn from(budget: &Budget) -> Budget {
        budget.clone()
    }
}

/// The limits of a budget: what a timeout, a deadline and a single try mean to an
/// acquisition. Apart from `tests`, which needs threads: these run on WASI too.
#[cfg(test)]
mod limits {
    use super::*;

    #[test]
    fn a_timeout_starts_with_each_acquisition_and_a_started_one_is_shared() {
        let t = Duration::from_secs(2);
        let budget = Budget::timeout(t);
        let start = Instant::now() + Duration::from_secs(60);
        // However old the budget, an acquisition gets the whole timeout from its start.
        assert_eq!(budget.deadline_from(start), Some(start + t));
        assert_eq!(budget.remaining(), Some(t));
        let started = budget.started();
        let deadline = started.deadline().expect("a deadline");
        assert_eq!(started.deadline_from(start), Some(deadline));
        assert_eq!(
            started.not_waited(deadline + Duration::from_millis(500)),
            NotWaited::Expired {
                late: Duration::from_millis(500),
                timeout: Some(t)
            }
        );
        // A single try stays one when started (the CLI and the stores start budgets).
        assert_eq!(
            Budget::no_wait().started().not_waited(start),
            NotWaited::SingleTry
        );
        assert_eq!(Budget::no_wait().not_waited(start), NotWaited::SingleTry);
        let until = Budget::until(deadline);
        assert!(matches!(
            until.not_waited(start),
            NotWaited::Expired { timeout: None, .. }
        ));
        // Too large to add to the clock: no deadline, started or not.
        let huge = Budget::timeout(Duration::MAX);
        assert_eq!(huge.deadline(), None);
        assert_eq!(huge.started().deadline(), None);
        assert_eq!(Budget::unlimited().started().remaining(), None);
    }

    /// A binding's timeout in seconds, read once for every face: infinity and a number too
    /// large for a `Duration` wait without limit, zero tries once, NaN and every negative
    /// number (the `-1` of Python's filelock spelling too: Python maps it first) are refused.
    #[test]
    fn a_timeout_in_seconds_is_read_one_way_and_nan_or_negatives_are_refused() {
        let limit = |secs: f64| Budget::from_timeout_secs(secs).map(|b| b.limit);
        assert_eq!(limit(f64::INFINITY), Ok(Limit::Unlimited));
        assert_eq!(limit(1e300), Ok(Limit::Unlimited));
        assert_eq!(limit(f64::MAX), Ok(Limit::Unlimited));
        assert_eq!(limit(0.0), Ok(Limit::Timeout(Duration::ZERO)));
        assert_eq!(limit(-0.0), Ok(Limit::Timeout(Duration::ZERO)));
        assert_eq!(limit(2.5), Ok(Limit::Timeout(Duration::from_millis(2500))));
        assert_eq!(
            Budget::from_timeout_secs(0.0).map(|b| b.not_waited(Instant::now())),
            Ok(NotWaited::SingleTry)
        );
        for bad in [f64::NAN, -1.0, -0.5, -1e-9, f64::NEG_INFINITY] {
            let refused = Budget::from_timeout_secs(bad).expect_err("refused");
            assert!(
                refused.secs().to_bits() == bad.to_bits(),
                "{bad}: {refused:?}"
            );
            assert_eq!(
                crate::error::Classify::class(&refused),
                crate::error::ErrorClass::Usage
            );
            assert!(
                refused.to_string().contains("not a number of seconds ≥ 0"),
                "{refused}"
            );
        }
    }
}
