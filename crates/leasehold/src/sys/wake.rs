//! A waiter's wake-up, the same on every platform: a flag and whom to wake — a parked thread
//! (`Thread::unpark`, a futex on Linux) or an async task (its `std::task::Waker`).
//!
//! Why not a descriptor (the eventfd or self-pipe a waiter used to `poll`, or register with
//! tokio's reactor): a hand-over traced with per-step timestamps (2 and 4 processes in the
//! uncued back-to-back loop, release build, load 12–13 on the 2-core VM) spent, after the
//! kernel woke the helper blocked in `flock` (3.1–3.8 µs, as for any blocked `flock`): 1.1–1.5
//! µs in the helper's bookkeeping and its eventfd write, 3.0–5.0 µs p50 (15–18 µs p90) until
//! the waiter's `poll` returned (async: 4.6 µs, through tokio's reactor), then 2.4–3.4 µs in
//! the waiter before the lease was returned, of which only the 0.4 µs `fstatat` of the inode
//! check is the contract's — the rest was reading, deregistering and closing the eventfd
//! (async: `epoll_ctl` and `close` of the duplicates registered with the reactor), creating
//! one per wait, and a zero-timeout `poll` of the cancellation pipe at every budget check.
//! A flag with a thread to unpark or a waker to wake needs no system call but the wake
//! itself, and nothing to set up or tear down per wait: the same trace now shows 1.4–2.0 µs in
//! the waiter after its wake-up (async: 1.9–2.7 µs). `leasehold bench --only uncued`
//! measures the hand-over beside its floors, a futex wake between two threads among them.
//!
//! Pokes are sticky: a poke that lands before the waiter sleeps ends its next sleep at once,
//! so no wake-up is ever lost between a waiter's last check and its sleep. A waiter re-checks
//! whatever it waits for after every wake-up (a poke only says "look again"), so spurious
//! wake-ups are harmless.
//!
//! Everything that wakes a waiter pokes its notifier: the kernel-wait helper on a grant
//! (`lease/posix/kernel_wait.rs`), a releasing lease of this process handing it the claim
//! (`lease/claim.rs`) and a cancelled [`CancelToken`](crate::CancelToken) (`budget.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// One waiter's wake-up (see the module documentation). Shared (`Arc`) by the waiter and
/// everyone who may wake it.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    /// Set by [`poke`](Self::poke), cleared by the wait that sees it (or by
    /// [`drain`](Self::drain)).
    poked: AtomicBool,
    /// Whom a poke wakes: set by the waiter before it checks `poked` and sleeps.
    sleeper: Mutex<Sleeper>,
}

#[derive(Debug, Default)]
enum Sleeper {
    /// Nobody sleeps on it yet (a poke is kept until someone looks).
    #[default]
    Nobody,
    /// A thread parked in [`Notifier::wait`].
    Thread(Thread),
    /// A task that polled [`Notifier::poll_poked`].
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // only async waits have tasks
    Task(Waker),
}

impl Notifier {
    /// A notifier nobody has poked yet. Costs one allocation when shared; no descriptor.
    pub(crate) fn new() -> Notifier {
        Notifier::default()
    }

    /// Wakes the waiter, or makes its next wait return at once. Never blocks beyond a
    /// mutex held only for the moment it takes to read whom to wake.
    pub(crate) fn poke(&self) {
        self.poked.store(true, Ordering::SeqCst);
        match &*self.sleeper() {
            Sleeper::Nobody => {}
            Sleeper::Thread(t) => t.unpark(),
            Sleeper::Task(w) => w.wake_by_ref(),
        }
    }

    /// Forgets past pokes (a waiter that just took what it was poked for).
    pub(crate) fn drain(&self) {
        self.poked.store(false, Ordering::SeqCst);
    }

    /// Sleeps this thread until poked or `timeout` has passed (`None`: no limit); a poke
    /// since the last wait returns at once. Consumes the poke.
    pub(crate) fn wait(&self, timeout: Option<Duration>) {
        {
            let mut sleeper = self.sleeper();
            if !matches!(&*sleeper, Sleeper::Thread(t) if t.id() == std::thread::current().id()) {
                *sleeper = Sleeper::Thread(std::thread::current());
            }
        }
        let until = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if self.poked.swap(false, Ordering::SeqCst) {
                return;
            }
            match until {
                None => park(None),
                Some(until) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    park(Some(left));
                }
            }
        }
    }

    /// `Ready` once poked (consuming the poke); otherwise `Pending`, and the task of `cx` is
    /// woken by the next poke.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // only async waits poll
    pub(crate) fn poll_poked(&self, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut sleeper = self.sleeper();
            if !matches!(&*sleeper, Sleeper::Task(w) if w.will_wake(cx.waker())) {
                *sleeper = Sleeper::Task(cx.waker().clone());
            }
        }
        match self.poked.swap(false, Ordering::SeqCst) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }

    /// Whether a poke is pending (nobody has consumed it yet).
    #[cfg(test)]
    pub(crate) fn is_poked(&self) -> bool {
        self.poked.load(Ordering::SeqCst)
    }

    fn sleeper(&self) -> MutexGuard<'_, Sleeper> {
        crate::mutex::lock(&self.sleeper)
    }
}

/// Parks this thread until unparked or `timeout` passed (spurious returns allowed).
#[cfg(not(target_os = "wasi"))]
fn park(timeout: Option<Duration>) {
    match timeout {
        Some(t) => std::thread::park_timeout(t),
        None => std::thread::park(),
    }
}

/// `wasm32-wasip1` has one thread, so nobody can poke a sleeper: a wait sleeps out its
/// timeout (a poke that landed before it was seen above). Without a timeout it would sleep
/// forever; waiters there always have one (they poll their budget).
#[cfg(target_os = "wasi")]
fn park(timeout: Option<Duration>) {
    std::thread::sleep(timeout.unwrap_or(Duration::from_millis(16)));
}

#[cfg(all(test, not(target_os = "wasi")))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    #[test]
    fn a_poke_before_the_wait_ends_it_at_once_and_is_consumed() {
        let n = Notifier::new();
        n.poke();
        n.wait(None);
        assert!(!n.is_poked(), "the wait consumed the poke");
        let started = Instant::now();
        n.wait(Some(Duration::from_millis(20)));
        assert!(
            started.elapsed() >= Duration::from_millis(20),
            "no poke: timed out"
        );
    }

    #[test]
    fn a_poke_from_another_thread_wakes_a_parked_thread() {
        let n = Arc::new(Notifier::new());
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let n = n.clone();
            std::thread::spawn(move || {
                tx.send(std::fs::read_link("/proc/thread-self").ok())
                    .unwrap();
                n.wait(None);
            })
        };
        // Linux: asleep in the kernel (parked on its futex) before the poke, so the poke
        // must wake it. Elsewhere the poke may land first, which ends the wait too.
        let me = rx.recv().unwrap();
        #[cfg(target_os = "linux")]
        if let Some(me) = me {
            let stat = std::path::Path::new("/proc").join(me).join("stat");
            testkit::until("the waiter is parked", || {
                std::fs::read_to_string(&stat)
                    .is_ok_and(|s| s.rsplit(") ").next().is_some_and(|r| r.starts_with('S')))
            });
        }
        #[cfg(not(target_os = "linux"))]
        let _ = me;
        n.poke();
        waiter.join().unwrap();
    }

    struct Count(std::sync::atomic::AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_poke_wakes_the_task_that_polled_last() {
        let n = Notifier::new();
        let (first, second) = (
            Arc::new(Count(Default::default())),
            Arc::new(Count(Default::default())),
        );
        let (w1, w2) = (Waker::from(first.clone()), Waker::from(second.clone()));
        assert!(n.poll_poked(&mut Context::from_waker(&w1)).is_pending());
        assert!(n.poll_poked(&mut Context::from_waker(&w2)).is_pending());
        n.poke();
        assert_eq!(
            first.0.load(Ordering::SeqCst),
            0,
            "replaced by the later poll"
        );
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
        assert!(n.poll_poked(&mut Context::from_waker(&w2)).is_ready());
        assert!(
            n.poll_poked(&mut Context::from_waker(&w2)).is_pending(),
            "consumed"
        );
    }
}
