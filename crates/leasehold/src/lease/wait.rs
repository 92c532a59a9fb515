//! The decisions of a wait, made in one place; the blocking and the tokio drivers
//! (`blocking.rs`, `asynchronous.rs`) only carry them out.
//!
//! An acquisition is a small state machine. Each call of [`Acquisition::next`] does the
//! non-blocking work that is due (open, claim, try, accept a grant, follow a replaced file,
//! judge the budget) and answers either the lease or "wait until the notifier is poked, or at
//! most this long". The drivers differ only in how they sleep: a parked thread or a pending
//! task (the notifier, `sys/wake.rs`, unparks the one or wakes the other).
//!
//! The order of decisions, and why:
//!
//! 1. Cancelled before we start: stop, nothing was taken.
//! 2. Open the lock file (refusing anything but a regular file) and claim it in-process. A
//!    claim held by another lease of this process queues us behind it (first come, first
//!    served: see `claim.rs`); a try-once budget reports contention instead.
//! 3. Under the claim, one `LOCK_NB` try, then the inode check. A replaced file is reopened,
//!    at most [`MAX_REOPENS`](super::MAX_REOPENS) times in all.
//! 4. Busy: with a try-once budget, report contention. Otherwise wait in the kernel's own
//!    queue (`posix/kernel_wait.rs`, [`KernelWait`](super::imp::KernelWait)) — the kernel decides who is
//!    next, as fairly and as fast as for any blocking `flock` — where the platform has one;
//!    else (Windows) poll with back-off. (On WASI the claim is the whole lock: a try under
//!    it is never busy, and waiters wait in the claim queue, polling their budget.)
//! 5. On every wake-up: cancellation first (an explicit request), then a grant, then the
//!    deadline. Where a notifier wakes the waiter (POSIX: the kernel-wait helper on a
//!    grant, a releasing lease of this process for a queued one) the deadline is its only
//!    fast timer: nothing polls the lock or its path; once a second ([`ORPHAN_CHECK`]) a
//!    waiter queued in the kernel asks whether its file was unlinked, and if so follows the
//!    path (a blocking wait that only a grant can end, `lock_inline`, cannot ask: it stays
//!    queued until the grant). Where nothing can wake it
//!    (Windows, WASI) it polls with back-off, and on a slow timer also checks that the file
//!    it waits for is still the one at the path.
//!
//! Why no re-check of the path where the kernel wakes the waiter (waiters
//! looked at the path every 100 ms while the README said waits do not poll; one process's
//! CPU while 100 of its waiters wait 1 s, `leasehold bench`'s `crowd_waiting_cpu` on the
//! 2-vCPU reference VM: 1.36 % of a core for sync waiters and 0.42 % for async ones with the
//! re-check, 0.004 % and 0.011 % without): a waiter waits on the inode it opened, and the
//! kernel wakes it when that inode's lock is released, whereupon the grant's inode check
//! finds a file replaced meanwhile and the waiter follows the path. The re-check only made
//! it follow *earlier*, while the replaced file's holder still held it, and so take the
//! lease beside that holder, which a waiter queued behind it must not do
//! (`tests/replaced.rs`). A blocking wait that only a grant can end (`lock_inline`) never
//! re-checked; now no POSIX waiter does, and a wait costs no CPU until it ends. (A new
//! acquisition opens the path afresh, as every newcomer does; so a program that says after
//! a while what it waits for does so through its budget's notice, which the wait says on
//! its next step without leaving its file: the CLI's one-second notice.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::claim::{self, Claim, Mode, Queued, Taken};
use super::os::Imp;
use super::os::imp::{self, Held, Opened, Target};
use super::platform::{Attempt, Platform, PlatformOpened, PlatformOptions, PlatformTarget};
use crate::budget::{Budget, Exhausted, Subscription};
use crate::error::{Error, Result};
use crate::holders::HolderInfo;
use crate::kind::FileId;
use crate::sys::Notifier;

/// How often a polling waiter (no notifier wakes it: Windows, WASI) checks that the file it
/// waits on is still the one at the path: from [`CHECK_MIN`], doubling up to [`CHECK_MAX`].
/// Costs one `fstatat` per check. Waiters a notifier wakes never check (module
/// documentation, step 5).
const CHECK_MIN: Duration = Duration::from_millis(5);
const CHECK_MAX: Duration = Duration::from_millis(100);
/// Back-off where no kernel queue exists (Windows): a release is noticed within this.
const POLL_MIN: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(16);
/// How often a blocking wait parked in the claim queue asks its budget's interrupt hook
/// ([`Budget::on_interrupt`](crate::Budget::on_interrupt)): no signal interrupts a park,
/// and a program that stops on Ctrl-C expects to within a tenth of a second.
const INTERRUPT_CHECK: Duration = Duration::from_millis(20);
/// How often a waiter queued in the kernel (POSIX) asks whether the file it waits on still
/// has a name ([`Platform::orphaned`](super::Platform::orphaned): one `fstat`): a lock file
/// unlinked under its holder — by hand, or by a program that knows nothing of leases —
/// would keep its waiters queued until that holder lets go, while every newcomer locks the
/// file now at the path. So this long at most after the unlink they leave and follow the
/// path, as a newcomer would. One wake-up a second per waiter: for 100 waiters, a few
/// hundred microseconds of CPU a second.
const ORPHAN_CHECK: Duration = Duration::from_secs(1);

/// A polling waiter's next back-off after `poll` (zero before its first): [`POLL_MIN`],
/// doubling up to [`POLL_MAX`].
fn backoff(poll: Duration) -> Duration {
    (poll * 2).clamp(POLL_MIN, POLL_MAX)
}

/// How long a waiter that no notifier wakes sleeps, with back-off `poll` and the next
/// "still the file at the path?" check `until_check` away.
///
/// A polling waiter (no kernel queue: Windows) sleeps its whole back-off: each of its polls
/// is a try whose lock is checked against the path, so it has no check to schedule. (Its
/// nap was cut by a `next_check` that nothing advances in that state — 100 µs — instead of
/// the documented 1 → 16 ms back-off, so it tried about ten thousand times a second.) A
/// waiter queued in this process's claim table (WASI; Windows behind another lease here)
/// sleeps until its next check, at least 100 µs and at most its back-off.
fn nap(polling: bool, poll: Duration, until_check: Duration) -> Duration {
    match polling {
        true => poll,
        false => until_check.max(Duration::from_micros(100)).min(poll),
    }
}

/// What the driver should do next.
pub(crate) enum Next {
    /// The lease is ours.
    Acquired(Held),
    /// Sleep until the notifier is poked (a grant, a claim handed over, a cancellation), or
    /// this long passes (`None`: no limit).
    Wait(Option<Duration>),
    /// Block this thread in the kernel's lock queue ([`Acquisition::block`]): nothing but a
    /// grant — or a signal the budget's interrupt hook stops at — can end this wait, and
    /// only the blocking driver is ever told to.
    Block,
}

enum State {
    /// About to open (or reuse a file a handle keeps open).
    Fresh(Option<Opened>),
    /// Queued behind another lease of this process.
    Queued(Opened, Queued),
    /// Waiting in the kernel's queue under our claim.
    Kernel(imp::KernelWait, Claim, Option<FileId>),
    /// Polling (no kernel queue) under our claim.
    Polling(Opened, Claim),
    /// About to block this very thread in the kernel's queue, under our claim.
    Inline(Opened, Claim),
    /// Transient, while a step runs.
    Done,
}

/// How many times a lock file replaced between open and lock is reopened before giving up.
pub const MAX_REOPENS: u32 = 3;

/// One acquisition: open, claim, lock, verify, and wait within a budget.
pub(crate) struct Acquisition<'a> {
    opts: PlatformOptions,
    /// Whether a lock file replaced under the try or the wait is reopened (see
    /// `LeaseOptions::follow_replaced`).
    follow_replaced: bool,
    target: &'a Target,
    budget: &'a Budget,
    /// The budget's deadline for this acquisition, resolved once as it starts: a timeout is
    /// measured from here (see [`Budget`]).
    deadline: Option<Instant>,
    mode: Mode,
    started: Instant,
    reopens: u32,
    state: State,
    notifier: Option<Arc<Notifier>>,
    /// The notifier's place among the budget token's waiters (with the notifier).
    _subscribed: Option<Subscription>,
    interval: Duration,
    next_check: Instant,
    /// The current back-off of a polling waiter (no notifier can wake it).
    poll: Duration,
    /// Whether the driver may block its thread in the kernel (the blocking driver).
    may_block: bool,
    /// When a kernel wait next asks whether its file was unlinked ([`ORPHAN_CHECK`]).
    orphan_check: Instant,
}

impl<'a> Acquisition<'a> {
    /// Starts an acquisition; `reuse` is a file a handle keeps open, tried first.
    pub(crate) fn new(
        opts: PlatformOptions,
        follow_replaced: bool,
        target: &'a Target,
        budget: &'a Budget,
        mode: Mode,
        reuse: Option<Opened>,
    ) -> Acquisition<'a> {
        let started = Instant::now();
        Acquisition {
            opts,
            follow_replaced,
            target,
            budget,
            deadline: budget.deadline_from(started),
            mode,
            started,
            reopens: 0,
            state: State::Fresh(reuse),
            notifier: None,
            _subscribed: None,
            interval: CHECK_MIN,
            next_check: started,
            poll: Duration::ZERO,
            may_block: false,
            orphan_check: started,
        }
    }

    /// Lets this acquisition block its thread in the kernel's queue when nothing but a grant
    /// could end the wait (no deadline, no token): the blocking driver's choice.
    pub(crate) fn may_block(mut self) -> Self {
        self.may_block = true;
        self
    }

    /// Blocks in the kernel's queue as [`Next::Block`] asked; `Ok(Some)` is the lease,
    /// `Ok(None)` means go on with [`next`](Self::next) (the file was replaced). A signal
    /// that interrupts the wait asks the budget's hook ([`Budget::on_interrupt`]); one it
    /// stops at is a cancellation, and the claim leaves with this acquisition.
    pub(crate) fn block(&mut self) -> Result<Option<Held>> {
        let State::Inline(opened, claim) = std::mem::replace(&mut self.state, State::Done) else {
            return Ok(None);
        };
        let budget = self.budget;
        let Some(granted) =
            Imp::lock_inline(self.target, opened, self.mode, &|| budget.interrupted())?
        else {
            return Err(self.cancelled());
        };
        match Imp::accept(self.target, granted, claim)? {
            Some(held) => Ok(Some(held)),
            None => {
                self.reopen()?;
                Ok(None)
            }
        }
    }

    /// What wakes this waiter (created on the first wait): a grant, a claim handed over by
    /// a release in this process, or its budget's cancellation all poke it.
    pub(crate) fn notifier(&self) -> Option<&Arc<Notifier>> {
        self.notifier.as_ref()
    }

    fn try_once(&self) -> bool {
        self.deadline.is_some_and(|d| d <= self.started)
    }

    /// The lock path (for messages).
    pub(crate) fn path(&self) -> &std::path::Path {
        self.target.display()
    }

    /// The waiter's notifier, created (and subscribed to the budget's token) on the first
    /// wait: the uncontended path creates none.
    fn ensure_notifier(&mut self) -> Arc<Notifier> {
        if let Some(n) = &self.notifier {
            return n.clone();
        }
        let n = Arc::new(Notifier::new());
        self._subscribed = self.budget.cancel_token().map(|t| t.subscribe(&n));
        self.notifier = Some(n.clone());
        n
    }

    /// Does what is due and says what the driver should do next.
    pub(crate) fn next(&mut self) -> Result<Next> {
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Fresh(reuse) => {
                    if self.budget.cancelled() {
                        return Err(self.cancelled());
                    }
                    let opened = match reuse {
                        Some(o) => o,
                        None => Imp::open(&self.opts, self.target)?,
                    };
                    // First without a place in the queue: the uncontended path creates no
                    // notifier.
                    let mut taken = claim::take(opened.key(), self.mode, None);
                    if matches!(taken, Taken::Busy) && !self.try_once() {
                        let n = self.ensure_notifier();
                        taken = claim::take(opened.key(), self.mode, Some(&n));
                    }
                    match taken {
                        Taken::Claim(claim) => {
                            if let Some(next) = self.locked_try(opened, claim)? {
                                return Ok(next);
                            }
                        }
                        Taken::Queued(q) => {
                            self.state = State::Queued(opened, q);
                            return Ok(self.sleep());
                        }
                        // Another lease of this very process has it: that is known on every
                        // platform (the claim table), whatever the OS reveals of holders.
                        Taken::Busy => {
                            let here = HolderInfo::held_here(opened.file_id());
                            return Err(self.contended_with(here));
                        }
                    }
                }
                State::Queued(opened, q) => match q.granted() {
                    Some(claim) => {
                        drop(q);
                        if let Some(n) = &self.notifier {
                            n.drain();
                        }
                        if let Some(next) = self.locked_try(opened, claim)? {
                            return Ok(next);
                        }
                    }
                    None => {
                        // Queued behind another lease of this process: it holds the lease,
                        // whatever the OS reveals of holders.
                        self.judge_budget_here(opened.file_id())?;
                        if self.asks_on_interrupt() && self.budget.interrupted().is_break() {
                            return Err(self.cancelled());
                        }
                        if !Imp::NOTIFIES
                            && self.check_due()
                            && !Imp::still_at_path(self.target, opened.file_id())
                        {
                            drop(q);
                            self.reopen()?;
                            continue;
                        }
                        self.state = State::Queued(opened, q);
                        return Ok(self.sleep());
                    }
                },
                State::Kernel(kw, claim, id) => {
                    if self.budget.cancelled() {
                        return Err(self.cancelled());
                    }
                    match Imp::poll_wait(&kw, self.target) {
                        Some(Ok(granted)) => {
                            drop(kw);
                            // The grant's poke is consumed: a wait that follows (the file
                            // was replaced) must sleep, not find the notifier still ready.
                            if let Some(n) = &self.notifier {
                                n.drain();
                            }
                            match Imp::accept(self.target, granted, claim)? {
                                Some(held) => return Ok(Next::Acquired(held)),
                                None => self.reopen()?,
                            }
                        }
                        Some(Err(e)) => return Err(e),
                        None => {
                            self.judge_budget(id, || Imp::waiting_at(self.target, &kw))?;
                            if Instant::now() >= self.orphan_check {
                                self.orphan_check = Instant::now() + ORPHAN_CHECK;
                                if Imp::orphaned(&kw) {
                                    drop(kw);
                                    drop(claim);
                                    self.reopen()?;
                                    continue;
                                }
                            }
                            if !Imp::NOTIFIES
                                && self.check_due()
                                && !Imp::still_at_path(self.target, id)
                            {
                                drop(kw);
                                drop(claim);
                                self.reopen()?;
                                continue;
                            }
                            self.state = State::Kernel(kw, claim, id);
                            return Ok(self.sleep());
                        }
                    }
                }
                State::Polling(opened, claim) => {
                    self.judge_budget(opened.file_id(), || None)?;
                    if let Some(next) = self.locked_try(opened, claim)? {
                        return Ok(next);
                    }
                }
                State::Inline(opened, claim) => {
                    self.state = State::Inline(opened, claim);
                    return Ok(Next::Block);
                }
                State::Done => unreachable!("an acquisition is never re-entered mid-step"),
            }
        }
    }

    /// One non-blocking try under a granted claim. `Ok(None)`: go round again (the file was
    /// replaced and is to be reopened); `Ok(Some(Wait))`: the state was set to wait.
    fn locked_try(&mut self, opened: Opened, claim: Claim) -> Result<Option<Next>> {
        let may_wait = !self.try_once();
        match Imp::try_lock(self.target, opened, claim, self.mode, may_wait)? {
            Attempt::Acquired(held) => Ok(Some(Next::Acquired(held))),
            Attempt::Replaced => {
                self.reopen()?;
                Ok(None)
            }
            Attempt::Busy(opened, claim) => {
                let at = || Imp::busy_at(self.target, &opened);
                if self.try_once() {
                    return Err(self.contended_at(opened.file_id(), at()));
                }
                self.judge_budget(opened.file_id(), at)?;
                if self.may_block
                    && Imp::NOTIFIES
                    && self.budget.wake_in(self.deadline).is_none()
                    && self.budget.cancel_token().is_none()
                {
                    self.state = State::Inline(opened, claim);
                    return Ok(Some(Next::Block));
                }
                let id = opened.file_id();
                let n = self.ensure_notifier();
                match Imp::start_wait(self.target, opened, self.mode, n) {
                    Ok(kw) => {
                        self.state = State::Kernel(kw, claim, id);
                        self.interval = CHECK_MIN;
                        self.next_check = Instant::now() + CHECK_MIN;
                        self.orphan_check = Instant::now() + ORPHAN_CHECK;
                    }
                    Err(opened) => {
                        self.state = State::Polling(opened, claim);
                        self.poll = backoff(self.poll);
                    }
                }
                Ok(Some(self.sleep()))
            }
        }
    }

    /// Whether this wait asks its budget's interrupt hook while parked (a blocking driver
    /// only: see [`Budget::on_interrupt`](crate::Budget::on_interrupt)).
    fn asks_on_interrupt(&self) -> bool {
        self.may_block && self.budget.asks_on_interrupt()
    }

    fn reopen(&mut self) -> Result<()> {
        self.reopens += 1;
        if self.reopens >= MAX_REOPENS || !self.follow_replaced {
            return Err(Error::Unstable {
                path: self.path().to_path_buf(),
                attempts: self.reopens,
            });
        }
        self.state = State::Fresh(None);
        Ok(())
    }

    /// Whether the slow "still the file at the path?" check is due (and schedules the next).
    fn check_due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next_check {
            return false;
        }
        self.interval = (self.interval * 2).min(CHECK_MAX);
        self.next_check = now + self.interval;
        true
    }

    /// How long the driver may sleep: until the deadline (or the budget's notice) where a
    /// notifier wakes the waiter; else the [`nap`] of its schedule, cut by them.
    fn sleep(&mut self) -> Next {
        let polling = matches!(self.state, State::Polling(..));
        if self.asks_on_interrupt() && matches!(self.state, State::Queued(..)) {
            let check = self
                .budget
                .wake_in(self.deadline)
                .map_or(INTERRUPT_CHECK, |w| w.min(INTERRUPT_CHECK));
            return Next::Wait(Some(check));
        }
        if Imp::NOTIFIES && !polling {
            let wake = self.budget.wake_in(self.deadline);
            if matches!(self.state, State::Kernel(..)) {
                let orphan = self.orphan_check.saturating_duration_since(Instant::now());
                return Next::Wait(Some(wake.map_or(orphan, |w| w.min(orphan))));
            }
            return Next::Wait(wake);
        }
        if !polling {
            self.poll = backoff(self.poll);
        }
        let until_check = self.next_check.saturating_duration_since(Instant::now());
        let nap = nap(polling, self.poll, until_check);
        Next::Wait(Some(match self.budget.wake_in(self.deadline) {
            Some(left) => left.min(nap),
            None => nap,
        }))
    }

    /// Ends a wait whose budget ran out: cancellation first, then the deadline. `at`: the
    /// gate the wait is held up at, if it is not at the lock (asked only when it ends).
    fn judge_budget(&self, id: Option<FileId>, at: impl FnOnce() -> Option<PathBuf>) -> Result<()> {
        match self.budget.exhausted(self.deadline) {
            Some(Exhausted::Cancelled) => Err(self.cancelled()),
            Some(Exhausted::Deadline) => Err(self.contended_at(id, at())),
            None => {
                self.budget.notice_due(|| self.contended_at(id, at()));
                Ok(())
            }
        }
    }

    /// [`judge_budget`](Self::judge_budget) for a waiter queued behind another lease of this
    /// process: a passed deadline names this process as the holder.
    fn judge_budget_here(&self, id: Option<FileId>) -> Result<()> {
        match self.budget.exhausted(self.deadline) {
            Some(Exhausted::Cancelled) => Err(self.cancelled()),
            Some(Exhausted::Deadline) => Err(self.contended_with(HolderInfo::held_here(id))),
            None => {
                let here = || self.contended_with(HolderInfo::held_here(id));
                self.budget.notice_due(here);
                Ok(())
            }
        }
    }

    fn cancelled(&self) -> Error {
        Error::Cancelled {
            path: self.path().to_path_buf(),
        }
    }

    /// Contention (try-once) or a passed deadline, naming the inode waited on; its holders
    /// are looked up only if someone asks (see [`HolderInfo`]).
    fn contended(&self, id: Option<FileId>) -> Error {
        // Without an inode to look up (Windows), what is known is that it is held.
        let holders = match id {
            Some(_) => HolderInfo::of_inode(id),
            None => HolderInfo::known(crate::kind::Holders::Held { pids: Vec::new() }),
        };
        self.contended_with(holders)
    }

    /// Contention (try-once) or a passed deadline, naming the inode waited on — or, where
    /// the acquirer was held up at a gate of the lock (`at`: that file and its inode), that
    /// gate and its holders besides ([`Error::GateHeld`]): the lock itself may be free.
    fn contended_at(&self, id: Option<FileId>, at: Option<PathBuf>) -> Error {
        let Some(gate) = at else {
            return self.contended(id);
        };
        Error::GateHeld {
            path: self.path().to_path_buf(),
            gate: gate.into_boxed_path(),
            holders: HolderInfo::of_inode(id),
            waited: (!self.try_once()).then(|| self.started.elapsed()),
        }
    }

    /// Contention (try-once) or a passed deadline, with these holders.
    fn contended_with(&self, holders: HolderInfo) -> Error {
        if self.try_once() {
            return Error::Contended {
                path: self.path().to_path_buf(),
                holders,
                why: self.budget.not_waited(self.started),
            };
        }
        Error::TimedOut {
            path: self.path().to_path_buf(),
            holders,
            waited: self.started.elapsed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schedule a polling waiter keeps while the lock stays busy: each busy try moves
    /// the back-off on ([`Acquisition::locked_try`]), and the driver sleeps the [`nap`].
    #[test]
    fn a_polling_waiter_backs_off_from_one_to_sixteen_milliseconds() {
        let mut poll = Duration::ZERO;
        let naps: Vec<u64> = (0..7)
            .map(|_| {
                poll = backoff(poll);
                // The next path check is long due (it is never scheduled while polling).
                nap(true, poll, Duration::ZERO).as_millis() as u64
            })
            .collect();
        assert_eq!(naps, [1, 2, 4, 8, 16, 16, 16]);
        // A waiter queued in the claim table still wakes for its next check, within its
        // back-off.
        assert_eq!(
            nap(false, POLL_MAX, Duration::from_millis(3)),
            Duration::from_millis(3)
        );
        assert_eq!(
            nap(false, POLL_MIN, Duration::from_millis(3)),
            Duration::from_millis(1)
        );
        assert_eq!(
            nap(false, POLL_MAX, Duration::ZERO),
            Duration::from_micros(100)
        );
    }
}
