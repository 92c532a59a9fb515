//! Waiting in the kernel's queue: [`KernelWait`] and the helper threads that block in
//! `flock` for it.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::io::Errno;

use super::error::lock_error;
use super::file::{Granted, Opened};
use super::gate;
use super::target::Target;
use crate::error::Result;
use crate::kind::FileId;
use crate::lease::claim::Mode;
use crate::lease::platform::PlatformTarget;
use crate::mutex::lock as guard;
#[cfg(all(target_os = "linux", not(leasehold_portable)))]
use crate::sys;
use crate::sys::Notifier;

/// A wait in the kernel's own `flock` queue, run by a helper thread, that the waiter can
/// abandon at any moment.
///
/// Why the kernel's queue: a waiter that sleeps on an event and then retries `LOCK_NB` loses
/// the race to a releaser that re-locks at once — the kernel wakes blocked lockers directly
/// when a lock is dropped, but an event reaches a poller only after the release, and the
/// poller must then be scheduled and retry (measured: 0.2 % owner changes with two processes
/// in a back-to-back loop where blocking `flock(LOCK_EX)` gives 52 %; see BENCHMARKS.md).
/// Blocking in `flock` cannot be cancelled without signals, so a helper thread blocks instead
/// of the waiter, and the waiter sleeps on its notifier (`sys/wake.rs`), which the helper, a
/// release in this process or a cancellation of its budget pokes.
///
/// The price, traced (per-step timestamps in a release build; 2 and 4 processes in the
/// uncued back-to-back loop of `leasehold bench`; the 2-vCPU VM at load 9–13): the grant
/// lands on the helper 3–4 µs after the release, as on any thread blocked in `flock`; the
/// helper must then wake the waiter, one more thread wake-up on the hand-over's path. Through
/// an eventfd the waiter `poll`ed (or tokio's reactor watched) that cost 3–5 µs p50 and 15–18
/// µs p90, plus 2–3 µs of descriptor work per wait (`sys/wake.rs` has the breakdown). Now the
/// helper stores the grant, unparks the waiting thread or wakes the task's waker, and only
/// then tidies its pending list; what is left on the waiter's side is the wake-up and the
/// inode check. The wake-up itself no helper can avoid: its floor, a futex wake between two
/// threads, is measured by `leasehold bench` beside the hand-over. Where the woken helper
/// runs also decides whether it beats a releaser that re-locks at once: on the loaded VM a
/// minimal helper (a thread blocked in `flock` handing the descriptor to a parked thread)
/// measured 2–94 % owner changes from one 2-second run to the next, where blocking `flock`
/// itself gave 16–90 %, which is why those figures are read against the floor of the same
/// run. The alternative — the waiting thread itself blocked in `flock`, a signal to end the
/// wait — needs a handler installed without `SA_RESTART`, and a library must not claim a
/// process-wide signal. Waits nothing but a grant can end (no deadline, no token) block the
/// calling thread inline (`lock_inline`) and pay one wake-up, as `flock` does; a caller whose
/// own handler already interrupts `flock` (an interpreter's SIGINT) ends such a wait through
/// [`Budget::on_interrupt`](crate::Budget::on_interrupt).
///
/// Abandoning (dropping) the wait leaves the helper blocked; when the kernel grants it the
/// lock nobody wants any more, it closes the descriptor at once, so the lease is held by
/// nobody of ours for more than the few microseconds that takes. A later waiter in this
/// process on the same inode adopts the abandoned wait instead of starting another, so a
/// process never has more than one helper per inode and mode.
pub(crate) struct KernelWait {
    slot: Arc<Slot>,
    id: FileId,
    /// A descriptor of the file waited on, for [`orphaned`](Self::orphaned) alone: a
    /// duplicate of the helper's (the same open file description, so closing it releases
    /// nothing), or an adopter's own. Closed with the wait, before the helper can find it
    /// abandoned; `None` where it could not be had (then the wait is never judged orphaned).
    watch: Option<OwnedFd>,
}

struct Slot {
    state: Mutex<SlotState>,
    /// Where the helper is blocked: at the lock or at one of its gates (see [`gate::Place`]).
    place: gate::Place,
}

enum SlotState {
    Waiting(Arc<Notifier>),
    Abandoned,
    /// The locked descriptor, and what the lease keeps of the gates.
    Granted(OwnedFd, gate::Passed),
    Failed(Errno),
    Taken,
}

/// Kernel waits in progress: (inode, shared?, slot).
static PENDING: Mutex<Vec<(FileId, bool, Arc<Slot>)>> = Mutex::new(Vec::new());

/// The kernel waits' and the parked helpers' locks, held across a `fork` ([`freeze`]).
pub(crate) struct Frozen(
    MutexGuard<'static, Vec<(FileId, bool, Arc<Slot>)>>,
    helpers::Frozen,
);

/// Takes the kernel waits' and the helpers' locks for a `fork` about to happen on this
/// thread (see `claim::freeze`).
pub(crate) fn freeze() -> Frozen {
    let pending = guard(&PENDING);
    Frozen(pending, helpers::freeze())
}

/// In a forked child: the kernel waits in progress, and the parked helpers, are the
/// parent's threads, none of which exists here; a wait of the child that adopted one of
/// those slots, or handed its job to one of those helpers, would never end. Both lists
/// start empty (their descriptors were let go by `fork::after_fork_in_child`), leaked, not
/// dropped (what they hold belongs to threads that are gone). `frozen`: the locks this
/// thread took before the fork; without them, `false` where a list's lock was held at the
/// fork by a thread that is gone.
pub(crate) fn forget_all(frozen: Option<Frozen>) -> bool {
    if let Some(Frozen(mut pending, idle)) = frozen {
        std::mem::forget(std::mem::take(&mut *pending));
        return helpers::forget_all(Some(idle));
    }
    let pending = match PENDING.try_lock() {
        Ok(mut p) => {
            std::mem::forget(std::mem::take(&mut *p));
            true
        }
        Err(std::sync::TryLockError::Poisoned(p)) => {
            std::mem::forget(std::mem::take(&mut *p.into_inner()));
            true
        }
        Err(std::sync::TryLockError::WouldBlock) => false,
    };
    helpers::forget_all(None) && pending
}

impl KernelWait {
    /// Starts (or adopts) a kernel wait for `opened` in `mode`; `notifier` is poked on grant.
    /// (`Err` gives the file back where no kernel queue exists: never on POSIX.)
    pub(crate) fn start(
        target: &Target,
        opened: Opened,
        mode: Mode,
        notifier: Arc<Notifier>,
    ) -> std::result::Result<KernelWait, Opened> {
        let shared = mode == Mode::Shared;
        let mut pending = guard(&PENDING);
        for (id, sh, slot) in pending.iter() {
            if *id == opened.id && *sh == shared {
                let mut state = guard(&slot.state);
                if matches!(*state, SlotState::Abandoned) {
                    *state = SlotState::Waiting(notifier);
                    return Ok(KernelWait {
                        slot: slot.clone(),
                        id: opened.id,
                        watch: Some(opened.fd),
                    });
                }
            }
        }
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Waiting(notifier)),
            place: gate::Place::default(),
        });
        pending.push((opened.id, shared, slot.clone()));
        drop(pending);
        let (id, job_slot) = (opened.id, slot.clone());
        let watch = crate::sys::dup_cloexec(opened.fd.as_fd()).ok();
        // A copy a forked child inherits would keep the description, and so a grant the
        // parent abandons, locked: the child lets it go with the others (`fork.rs`).
        if let Some(watch) = &watch {
            super::descriptors::register(watch.as_fd(), opened.id);
        }
        // Opened here, by the waiter, so the helper needs nothing of the target.
        let gates = gate::open_for_wait(target, opened.id, shared);
        let started = helpers::run(Box::new(move || {
            let fd = opened.fd;
            #[cfg(all(target_os = "linux", not(leasehold_portable)))]
            sys::mark_waiting(fd.as_fd());
            // The mark stays with the lease (see `lock_inline`).
            let res = gate::block(fd.as_fd(), gates, shared, &job_slot.place, gate::GO_ON);
            let mut res = Some(res.map(|passed| (fd, passed)));
            // The waiter first: hand it the grant and wake it, then tidy the pending list
            // (off the hand-over's path). A slot it waits on cannot be adopted meanwhile
            // (only an abandoned one can), so nobody sees the slot half-way.
            if !hand_over(&job_slot, &mut res) {
                // Abandoned: an adopter may be taking the slot over right now under the
                // pending list's lock; take that lock first (the adopters' order) and look
                // again, so that a wait adopted meanwhile still gets its grant.
                let mut pending = guard(&PENDING);
                pending.retain(|(_, _, s)| !Arc::ptr_eq(s, &job_slot));
                hand_over(&job_slot, &mut res);
                drop(pending);
                // Still abandoned: `res` (the descriptor in it) drops here, releasing a lock
                // nobody wants.
                drop(res);
                return;
            }
            guard(&PENDING).retain(|(_, _, s)| !Arc::ptr_eq(s, &job_slot));
        }));
        if !started {
            // No helper thread (the process is at its thread limit): the wait fails at once
            // instead of never ending. The job, and the descriptor in it, are gone.
            guard(&PENDING).retain(|(_, _, s)| !Arc::ptr_eq(s, &slot));
            *guard(&slot.state) = SlotState::Failed(Errno::AGAIN);
        }
        Ok(KernelWait { slot, id, watch })
    }

    /// Whether the file waited on has no name left (see `Platform::orphaned`). One `fstat`.
    pub(crate) fn orphaned(&self) -> bool {
        self.watch
            .as_ref()
            .is_some_and(|fd| crate::sys::fd_unlinked(fd.as_fd()).unwrap_or(false))
    }

    /// The gate file this wait is blocked at; `None` while it is at the lock.
    pub(crate) fn held_up(&self, target: &Target) -> Option<std::path::PathBuf> {
        self.slot.place.held_up(target)
    }

    /// The locked descriptor once the kernel granted it; the error if `flock` failed.
    pub(crate) fn poll(&self, target: &Target) -> Option<Result<Granted>> {
        let mut state = guard(&self.slot.state);
        match std::mem::replace(&mut *state, SlotState::Taken) {
            SlotState::Granted(fd, passed) => Some(Ok(Granted {
                fd,
                id: self.id,
                marked: true,
                passed,
            })),
            SlotState::Failed(e) => Some(Err(lock_error(target.display(), e))),
            other => {
                *state = other;
                None
            }
        }
    }
}

/// Hands a finished kernel wait's outcome to the waiter of `slot`, if one waits, and wakes it
/// (`true`); `false` when the slot is abandoned (the outcome stays in `res`).
fn hand_over(
    slot: &Slot,
    res: &mut Option<std::result::Result<(OwnedFd, gate::Passed), Errno>>,
) -> bool {
    let mut state = guard(&slot.state);
    let SlotState::Waiting(n) = &*state else {
        return false;
    };
    let n = n.clone();
    *state = match res.take() {
        Some(Ok((fd, passed))) => SlotState::Granted(fd, passed),
        Some(Err(e)) => SlotState::Failed(e),
        None => return false,
    };
    drop(state);
    n.poke();
    true
}

impl Drop for KernelWait {
    fn drop(&mut self) {
        // The slot's lock alone: an adopter takes a slot only once it is abandoned (under
        // this lock), and a helper that finds it abandoned looks again under the pending
        // list's lock before it lets the grant go. Not the pending list's lock too: the
        // waiter drops this right after the helper handed the grant over and went on to
        // tidy that list, and waiting for it there could put a second wake-up on the
        // hand-over.
        let mut state = guard(&self.slot.state);
        if matches!(*state, SlotState::Waiting(_)) {
            *state = SlotState::Abandoned;
        } else if matches!(*state, SlotState::Granted(..)) {
            *state = SlotState::Taken; // drops the descriptor: releases at once
        }
    }
}

/// Helper threads that block in `flock` on behalf of waiters, kept for reuse.
///
/// A thread is spawned only when no idle one is parked; an idle thread exits after
/// [`IDLE_FOR`](helpers::IDLE_FOR). Each parked thread has its own channel, so a job is
/// handed to exactly one thread, which is then no longer idle: a second wait never queues
/// behind a first one that may block for good.
mod helpers {
    use super::*;
    use std::sync::mpsc::{self, RecvTimeoutError, Sender};

    pub(super) const IDLE_FOR: Duration = Duration::from_secs(10);

    pub(super) type Job = Box<dyn FnOnce() + Send>;

    /// Parked helpers, each by the sending end of its channel and an ID.
    static IDLE: Mutex<Vec<(u64, Sender<Job>)>> = Mutex::new(Vec::new());
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// The parked helpers' lock, held across a `fork` (see [`super::freeze`]).
    pub(crate) struct Frozen(std::sync::MutexGuard<'static, Vec<(u64, Sender<Job>)>>);

    pub(super) fn freeze() -> Frozen {
        Frozen(guard(&IDLE))
    }

    /// See [`super::forget_all`]: the parked helpers' channels are leaked, not dropped (their
    /// receivers live on threads that are gone).
    pub(super) fn forget_all(frozen: Option<Frozen>) -> bool {
        if let Some(Frozen(mut idle)) = frozen {
            std::mem::forget(std::mem::take(&mut *idle));
            return true;
        }
        match IDLE.try_lock() {
            Ok(mut idle) => std::mem::forget(std::mem::take(&mut *idle)),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                std::mem::forget(std::mem::take(&mut *p.into_inner()))
            }
            Err(std::sync::TryLockError::WouldBlock) => return false,
        }
        true
    }

    /// Hands `job` to a parked helper or a new one; `false` when no thread could be had.
    pub(super) fn run(mut job: Job) -> bool {
        loop {
            let parked = guard(&IDLE).pop();
            let Some((_, tx)) = parked else { break };
            match tx.send(job) {
                Ok(()) => return true,
                Err(mpsc::SendError(back)) => job = back, // that helper has exited
            }
        }
        let (tx, rx) = mpsc::channel::<Job>();
        let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("leasehold-wait".into())
            .spawn(move || worker(id, tx, rx, job));
        spawned.is_ok()
    }

    fn worker(id: u64, tx: Sender<Job>, rx: mpsc::Receiver<Job>, first: Job) {
        first();
        loop {
            guard(&IDLE).push((id, tx.clone()));
            match rx.recv_timeout(IDLE_FOR) {
                Ok(job) => job(),
                Err(RecvTimeoutError::Timeout) => {
                    let mut idle = guard(&IDLE);
                    if let Some(pos) = idle.iter().position(|(i, _)| *i == id) {
                        idle.remove(pos);
                        return;
                    }
                    drop(idle);
                    // Someone took our sender and is handing us a job.
                    match rx.recv() {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}
