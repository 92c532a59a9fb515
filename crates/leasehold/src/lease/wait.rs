//! The decisions of a wait, made in one place; the blocking and the tokio drivers
//! (`blocking.rs`, `asynchronous.rs`) only carry them out.
//!
//! An acquisition is a small state machine. Each call of [`Acquisition::next`] does the
//! non-blocking work that is due (open, claim, try, accept a grant, follow a replaced file,
//! judge the budget) and answers either the lease or "wait until the notifier or the
//! cancellation token is readable, or at most this long". The drivers differ only in how they
//! sleep: `poll(2)` or tokio's reactor.
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
//!    deadline; and, on a slow timer, whether the file we wait on is still the one at the
//!    path (a lock file replaced under us would make us wait on an orphan forever).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::MAX_REOPENS;
use super::claim::{self, Claim, Mode, Queued, Taken};
use super::imp::{self, Held, Opened, Target};
use super::{Attempt, Imp, Platform, PlatformOpened, PlatformTarget};
use crate::budget::{Budget, Exhausted};
use crate::error::{Error, Result};
use crate::holders::HolderInfo;
use crate::kind::FileId;
use crate::lease::LeaseOptions;
use crate::sys::Notifier;

/// How often a waiter checks that the file it waits on is still the one at the path: from
/// [`CHECK_MIN`], doubling up to [`CHECK_MAX`]. Costs one `fstatat` per check.
const CHECK_MIN: Duration = Duration::from_millis(5);
const CHECK_MAX: Duration = Duration::from_millis(100);
/// Back-off where no kernel queue exists (Windows): a release is noticed within this.
const POLL_MIN: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(16);

/// What the driver should do next.
pub(crate) enum Next {
    /// The lease is ours.
    Acquired(Held),
    /// Sleep until the notifier or the cancellation token is readable, or this long passes
    /// (`None`: no limit).
    Wait(Option<Duration>),
    /// Block this thread in the kernel's lock queue ([`Acquisition::block`]): nothing but a
    /// grant can end this wait, and only the blocking driver is ever told to.
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

/// One acquisition: open, claim, lock, verify, and wait within a budget.
pub(crate) struct Acquisition<'a> {
    opts: LeaseOptions,
    target: &'a Target,
    budget: &'a Budget,
    mode: Mode,
    started: Instant,
    reopens: u32,
    state: State,
    notifier: Option<Arc<Notifier>>,
    interval: Duration,
    next_check: Instant,
    /// The current back-off of a polling waiter (no notifier can wake it).
    poll: Duration,
    /// Whether the driver may block its thread in the kernel (the blocking driver).
    may_block: bool,
}

impl<'a> Acquisition<'a> {
    /// Starts an acquisition; `reuse` is a file a handle keeps open, tried first.
    pub(crate) fn new(
        opts: LeaseOptions,
        target: &'a Target,
        budget: &'a Budget,
        mode: Mode,
        reuse: Option<Opened>,
    ) -> Acquisition<'a> {
        let started = Instant::now();
        Acquisition {
            opts,
            target,
            budget,
            mode,
            started,
            reopens: 0,
            state: State::Fresh(reuse),
            notifier: None,
            interval: CHECK_MIN,
            next_check: started,
            poll: Duration::ZERO,
            may_block: false,
        }
    }

    /// Lets this acquisition block its thread in the kernel's queue when nothing but a grant
    /// could end the wait (no deadline, no token): the blocking driver's choice.
    pub(crate) fn may_block(mut self) -> Self {
        self.may_block = true;
        self
    }

    /// Blocks in the kernel's queue as [`Next::Block`] asked; `Ok(Some)` is the lease,
    /// `Ok(None)` means go on with [`next`](Self::next) (the file was replaced).
    pub(crate) fn block(&mut self) -> Result<Option<Held>> {
        let State::Inline(opened, claim) = std::mem::replace(&mut self.state, State::Done) else {
            return Ok(None);
        };
        let granted = Imp::lock_inline(self.target, opened, self.mode)?;
        match Imp::accept(self.target, granted, claim)? {
            Some(held) => Ok(Some(held)),
            None => {
                self.reopen()?;
                Ok(None)
            }
        }
    }

    /// The budget this acquisition waits within.
    #[cfg_attr(not(unix), allow(dead_code))] // Windows and WASI waiters poll
    pub(crate) fn budget(&self) -> &Budget {
        self.budget
    }

    /// What wakes this waiter besides its budget's token (created on the first wait).
    #[cfg_attr(windows, allow(dead_code))] // Windows waiters poll
    pub(crate) fn notifier(&self) -> Option<&Notifier> {
        self.notifier.as_deref()
    }

    fn try_once(&self) -> bool {
        self.budget.deadline().is_some_and(|d| d <= self.started)
    }

    /// The lock path (for messages).
    pub(crate) fn path(&self) -> &std::path::Path {
        self.target.display()
    }

    fn ensure_notifier(&mut self) -> Result<Arc<Notifier>> {
        if let Some(n) = &self.notifier {
            return Ok(n.clone());
        }
        let n = Arc::new(Notifier::new().map_err(|e| Imp::wait_error(self.target.display(), e))?);
        self.notifier = Some(n.clone());
        Ok(n)
    }

    /// Does what is due and says what the driver should do next.
    pub(crate) fn next(&mut self) -> Result<Next> {
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Fresh(reuse) => {
                    if self.budget.flagged() {
                        return Err(self.cancelled());
                    }
                    let opened = match reuse {
                        Some(o) => o,
                        None => Imp::open(&self.opts, self.target)?,
                    };
                    // First without a place in the queue: the uncontended path creates no
                    // notifier (an eventfd and its close measured ~15 % of a cold cycle).
                    let mut taken = claim::take(opened.key(), self.mode, None);
                    if matches!(taken, Taken::Busy) && !self.try_once() {
                        let n = self.ensure_notifier()?;
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
                        if self.check_due() && !Imp::still_at_path(self.target, opened.file_id()) {
                            drop(q);
                            self.reopen()?;
                            continue;
                        }
                        self.state = State::Queued(opened, q);
                        return Ok(self.sleep());
                    }
                },
                State::Kernel(kw, claim, id) => {
                    if self.budget.flagged() {
                        return Err(self.cancelled());
                    }
                    match Imp::poll_wait(&kw, self.target) {
                        Some(Ok(granted)) => {
                            drop(kw);
                            match Imp::accept(self.target, granted, claim)? {
                                Some(held) => return Ok(Next::Acquired(held)),
                                None => self.reopen()?,
                            }
                        }
                        Some(Err(e)) => return Err(e),
                        None => {
                            self.judge_budget(id)?;
                            if self.check_due() && !Imp::still_at_path(self.target, id) {
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
                    self.judge_budget(opened.file_id())?;
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
                if self.try_once() {
                    return Err(self.contended(opened.file_id()));
                }
                self.judge_budget(opened.file_id())?;
                if self.may_block
                    && Imp::NOTIFIES
                    && self.budget.deadline().is_none()
                    && self.budget.cancel_token().is_none()
                {
                    self.state = State::Inline(opened, claim);
                    return Ok(Some(Next::Block));
                }
                let id = opened.file_id();
                let n = self.ensure_notifier()?;
                match Imp::start_wait(self.target, opened, self.mode, n) {
                    Ok(kw) => {
                        self.state = State::Kernel(kw, claim, id);
                        self.interval = CHECK_MIN;
                        self.next_check = Instant::now() + CHECK_MIN;
                    }
                    Err(opened) => {
                        self.state = State::Polling(opened, claim);
                        self.poll = (self.poll * 2).clamp(POLL_MIN, POLL_MAX);
                    }
                }
                Ok(Some(self.sleep()))
            }
        }
    }

    fn reopen(&mut self) -> Result<()> {
        self.reopens += 1;
        if self.reopens >= MAX_REOPENS || !self.opts.follow_replaced {
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

    /// How long the driver may sleep: until the next check (or poll), cut by the deadline.
    fn sleep(&mut self) -> Next {
        let mut nap = self
            .next_check
            .saturating_duration_since(Instant::now())
            .max(Duration::from_micros(100));
        if !Imp::NOTIFIES || matches!(self.state, State::Polling(..)) {
            if !matches!(self.state, State::Polling(..)) {
                self.poll = (self.poll * 2).clamp(POLL_MIN, POLL_MAX);
            }
            nap = nap.min(self.poll);
        }
        Next::Wait(Some(match self.budget.remaining() {
            Some(left) => left.min(nap),
            None => nap,
        }))
    }

    /// Ends a wait whose budget ran out: cancellation first, then the deadline.
    fn judge_budget(&self, id: Option<FileId>) -> Result<()> {
        match self.budget.exhausted() {
            Some(Exhausted::Cancelled) => Err(self.cancelled()),
            Some(Exhausted::Deadline) => Err(self.contended(id)),
            None => Ok(()),
        }
    }

    /// [`judge_budget`](Self::judge_budget) for a waiter queued behind another lease of this
    /// process: a passed deadline names this process as the holder.
    fn judge_budget_here(&self, id: Option<FileId>) -> Result<()> {
        match self.budget.exhausted() {
            Some(Exhausted::Cancelled) => Err(self.cancelled()),
            Some(Exhausted::Deadline) => Err(self.contended_with(HolderInfo::held_here(id))),
            None => Ok(()),
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

    /// Contention (try-once) or a passed deadline, with these holders.
    fn contended_with(&self, holders: HolderInfo) -> Error {
        if self.try_once() {
            return Error::Contended {
                path: self.path().to_path_buf(),
                holders,
            };
        }
        Error::TimedOut {
            path: self.path().to_path_buf(),
            holders,
            waited: self.started.elapsed(),
        }
    }
}
