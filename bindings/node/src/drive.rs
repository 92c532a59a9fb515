//! How a wait's completion reaches JavaScript: the library's future is polled on the JS
//! thread itself, and its waker schedules the next poll there through a threadsafe function
//! (libuv's async handle), so a grant wakes the event loop directly.
//!
//! Why not `#[napi] async fn`: that runs the future as a task of napi's tokio runtime, so a
//! grant woke a tokio worker (the kernel-wait helper pokes the task's waker), which polled
//! the future and then woke the event loop through the promise's threadsafe function — one
//! thread wake-up more on every handoff than the event loop needs, and on a loaded machine
//! each wake-up waits its turn for a core. Polled here, the path is: the kernel wakes the
//! library's helper blocked in `flock`, the helper wakes the event loop, the loop polls and
//! resolves. Measured in one run of `leasehold bench --only uncued` with both as contenders
//! (release build, the 2-core VM at load 12–13): handoff p50 67 µs → 26 µs with 2 workers
//! (16.0× → 6.2× floor + verify), 87 µs → 56 µs with 4.
//!
//! What is left, traced per step (temporary timestamps here and in the bench worker; the
//! uncued loop, 2 and 4 workers, load 7–10), p50: the event loop runs the poll 8–9 µs after
//! the helper's wake (the loop's wake-up descriptor, then libuv's dispatch), the poll takes
//! 3 µs (the library's grant and inode check), turning the outcome into a `NativeLease`
//! object and calling back takes 7 µs (then including the threadsafe function's release,
//! since moved off this path: see `retired`), and the caller's `await` resumes 6 µs later
//! (8 µs before the wait's promise settled with the `Lease` itself). The two wake-ups (kernel →
//! helper → event loop) are the least a wait that must not block the event loop can take:
//! nothing lets epoll watch for a `flock` grant.
//!
//! A wait ends with its environment: a worker_thread terminated (or a process exiting) while
//! a wait of its is in progress never polls it again, and the wait would live on — its
//! future holds the library's acquisition (a claim on the lock, or a place in its queue),
//! and the library's wake-up holds the future — so every other thread of the process would
//! find the lock "held by this process". Each JS thread's environment gets one clean-up
//! hook (napi's `add_env_cleanup_hook`), which drops every wait of that thread still in
//! progress: the library's acquisition ends as a dropped future does, nothing held or
//! queued; and it releases every lease made on that thread (`lease.rs`): their objects'
//! finalizers would too, but a worker terminated while a lease was being handed to
//! JavaScript can lose the object half-made.
//!
//! Timers (a `timeoutMs`) are tokio's: each poll runs inside napi's runtime context, whose
//! workers drive the timer and wake the same waker. Nothing else of the wait changes: its
//! decisions, its kernel-queue wait and its cancellation are the library's.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};

use napi::bindgen_prelude::{ToNapiValue, within_runtime_if_available};
use napi::threadsafe_function::{ErrorStrategy, ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, JsFunction};

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One future driven on the JS thread; `done` is called with its output when it ends.
struct Task<T: 'static> {
    /// Its key in this thread's [`LIVE`] list.
    id: u64,
    /// The future, until it has ended.
    fut: Mutex<Option<Boxed<T>>>,
    /// Whether a poll is already scheduled (wake-ups before it coalesce into it).
    scheduled: AtomicBool,
    /// Schedules a poll on the JS thread; dropped (released) when the future has ended, which
    /// lets the event loop exit and frees this task.
    poll: Mutex<Option<ThreadsafeFunction<(), ErrorStrategy::Fatal>>>,
}

impl<T: Send + 'static> Wake for Task<T> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(tsfn) = &*self.poll.lock().unwrap_or_else(PoisonError::into_inner) {
            tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }
}

impl<T: Send + 'static> Task<T> {
    /// Polls the future once (on the JS thread): its output when it has ended.
    fn step(self: &Arc<Self>, env: &Env) -> Option<T> {
        self.scheduled.store(false, Ordering::Release);
        let mut slot = self.fut.lock().unwrap_or_else(PoisonError::into_inner);
        let fut = slot.as_mut()?;
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        match within_runtime_if_available(|| fut.as_mut().poll(&mut cx)) {
            Poll::Pending => None,
            Poll::Ready(out) => {
                *slot = None;
                drop(slot);
                LIVE.with(|live| live.borrow_mut().retain(|(id, _)| *id != self.id));
                let done = self
                    .poll
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(mut done) = done {
                    // The event loop no longer waits for us (no system call). Releasing it
                    // would write to the loop's wake-up descriptor right now, on the way to
                    // the caller: it is released when the next wait starts instead.
                    let _ = done.unref(env);
                    retired().push(done);
                }
                Some(out)
            }
        }
    }
}

/// Runs `fut` on the JS thread: its output at once when it ends in the first poll (`done` is
/// then never called), else `None`, and `done(output)` is called on the JS thread when it
/// ends. `done` may also be called with no argument (a poll that found the wait still going
/// on): it ignores such calls.
pub(crate) fn drive<T>(
    env: &Env,
    done: &JsFunction,
    fut: impl Future<Output = T> + Send + 'static,
) -> napi::Result<Option<T>>
where
    T: ToNapiValue + Send + 'static,
{
    // Off any hand-over's path: this wait has not started yet.
    let ended = std::mem::take(&mut *retired());
    drop(ended);
    hook(env)?;
    static IDS: AtomicU64 = AtomicU64::new(0);
    let task = Arc::new(Task {
        id: IDS.fetch_add(1, Ordering::Relaxed),
        fut: Mutex::new(Some(Box::pin(fut))),
        scheduled: AtomicBool::new(false),
        poll: Mutex::new(None),
    });
    let weak: Weak<dyn Abandon> = Arc::downgrade(&task) as Weak<dyn Abandon>;
    LIVE.with(|live| live.borrow_mut().push((task.id, weak)));
    // Made before the first poll, so that a wake-up during it is not lost.
    let stepped = task.clone();
    let tsfn: ThreadsafeFunction<(), ErrorStrategy::Fatal> = done
        .create_threadsafe_function(0, move |ctx| {
            Ok(stepped.step(&ctx.env).into_iter().collect())
        })?;
    *task.poll.lock().unwrap_or_else(PoisonError::into_inner) = Some(tsfn);
    Ok(task.step(env))
}

/// Gives this JS thread's environment its clean-up hook ([`abandon_all`]), once. Before the
/// first threadsafe function of this thread: Node runs clean-up hooks in the reverse order
/// of their registration, so every wait's function is finalized first.
pub(crate) fn hook(env: &Env) -> napi::Result<()> {
    if !HOOKED.get() {
        let mut env = *env;
        env.add_env_cleanup_hook((), |()| abandon_all())?;
        HOOKED.set(true);
    }
    Ok(())
}

/// The threadsafe functions of waits that have ended, unreferenced, until the next wait
/// starts and releases them. (Any left at exit Node finalizes with its environment; a
/// static is never dropped, so nothing releases them twice.)
fn retired() -> MutexGuard<'static, Vec<ThreadsafeFunction<(), ErrorStrategy::Fatal>>> {
    static RETIRED: Mutex<Vec<ThreadsafeFunction<(), ErrorStrategy::Fatal>>> =
        Mutex::new(Vec::new());
    RETIRED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A wait in progress that its environment's end abandons.
trait Abandon: Send + Sync {
    /// Drops the future (the library's acquisition ends as a dropped future does: nothing
    /// held or queued); its function is left to Node, which has finalized it already.
    fn abandon(&self);
}

impl<T: Send + 'static> Abandon for Task<T> {
    fn abandon(&self) {
        let fut = self
            .fut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(fut);
        let poll = self
            .poll
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Finalized with the environment: never released again.
        std::mem::forget(poll);
    }
}

thread_local! {
    /// The waits of this JS thread's environment still in progress (by [`Task::id`]).
    static LIVE: RefCell<Vec<(u64, Weak<dyn Abandon>)>> = const { RefCell::new(Vec::new()) };
    /// Whether this thread's environment has its clean-up hook ([`abandon_all`]).
    static HOOKED: Cell<bool> = const { Cell::new(false) };
    /// What [`abandon_all`] runs after the waits ([`at_teardown`]).
    static THEN: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// The environment of this thread is being torn down (a worker terminated or ended, the
/// process exiting): every wait still in progress ends here, then what [`at_teardown`] set
/// (the leases made on this thread).
fn abandon_all() {
    HOOKED.set(false);
    let live = LIVE.with(|live| std::mem::take(&mut *live.borrow_mut()));
    for (_, task) in live {
        if let Some(task) = task.upgrade() {
            task.abandon();
        }
    }
    if let Some(then) = THEN.get() {
        then();
    }
}

/// What this thread's environment also ends at its teardown, after its waits: set by the
/// module that makes leases (above this one), which releases them.
pub(crate) fn at_teardown(then: fn()) {
    THEN.set(Some(then));
}
