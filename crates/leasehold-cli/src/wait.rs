//! Notice-then-wait: the one way a verb (`run`, `run --etcd`, `registry`, `results`) waits
//! for a lease.
//!
//! A verb waits quietly for up to [`NOTICE_AFTER`]; if the resource is still held then, the
//! wait says once on stderr what it waits for and who holds it — users otherwise cannot tell
//! a wait from a hang — and goes on, in its place, within what is left of the user's budget
//! (one acquisition: the budget's notice, [`Wait::budget_saying`]).
//! Every wait is cancellable by SIGINT/SIGTERM (the [`Interrupts`](crate::signals) token).
//! When the wait ends without the lease, [`Wait::gave_up`] says how long it waited in all
//! (the quiet first second included) and which option waits longer.

use std::time::{Duration, Instant};

use leasehold::{Budget, CancelToken};

/// After this long, a waiting verb says once on stderr what it waits for and who holds it.
pub const NOTICE_AFTER: Duration = Duration::from_secs(1);

/// One verb's wait: when it started, when it must give up, and the token that cancels it.
pub struct Wait {
    started: Instant,
    /// `None`: wait without limit.
    deadline: Option<Instant>,
    token: CancelToken,
}

impl Wait {
    /// A wait that gives up `timeout` from now (`Duration::ZERO`: try once).
    pub fn up_to(timeout: Duration, token: &CancelToken) -> Wait {
        let started = Instant::now();
        Wait {
            started,
            // A timeout too large to represent is no limit at all.
            deadline: started.checked_add(timeout),
            token: token.clone(),
        }
    }

    /// A wait without limit (only a signal ends it).
    pub fn unlimited(token: &CancelToken) -> Wait {
        Wait {
            started: Instant::now(),
            deadline: None,
            token: token.clone(),
        }
    }

    /// A single try.
    pub fn no_wait(token: &CancelToken) -> Wait {
        Wait::up_to(Duration::ZERO, token)
    }

    /// The wait `run`'s options ask for (with or without `--etcd`): `--no-wait` tries once,
    /// `--timeout SECS` gives up after SECS, neither waits without limit.
    pub fn of(no_wait: bool, timeout: Option<Duration>, token: &CancelToken) -> Wait {
        match (no_wait, timeout) {
            (true, _) => Wait::no_wait(token),
            (false, Some(timeout)) => Wait::up_to(timeout, token),
            (false, None) => Wait::unlimited(token),
        }
    }

    fn budget(&self, until: Option<Instant>) -> Budget {
        match until {
            // A single try is asked for as one: the library then knows it was not a deadline
            // that passed (its error says which).
            Some(d) if d == self.started => Budget::no_wait(),
            Some(d) => Budget::until(d),
            None => Budget::unlimited(),
        }
        .with_cancel(self.token.clone())
    }

    /// The whole wait's budget, which calls `say` once with the contention if the wait is
    /// still on after [`NOTICE_AFTER`] ([`Budget::with_notice`]) and goes on waiting: the
    /// acquisition keeps its place — the lock file it opened, the etcd key it queued — so
    /// there is never a second acquisition after the notice (which would open the path
    /// again, and lock a lock file replaced meanwhile beside the old file's holder; or queue
    /// a new etcd key behind everyone who came in the meantime). `say` runs on the waiting
    /// thread or task, between two steps of the wait: it must not block on the lock's arbiter.
    /// A wait shorter than the notice says nothing.
    pub fn budget_saying(&self, say: impl FnOnce(&leasehold::Error) + Send + 'static) -> Budget {
        let budget = self.budget(self.deadline);
        let notice_at = self.started + NOTICE_AFTER;
        if self.deadline.is_some_and(|d| d <= notice_at) {
            return budget;
        }
        budget.with_notice(notice_at, say)
    }

    /// [`budget_saying`](Self::budget_saying) a line on stderr, "waiting for WHAT", where
    /// `waiting_for` tells from the contention what is waited for and who holds it ("the
    /// registry, held by another process (pid 7)"); `None` says nothing.
    pub fn lease_budget(
        &self,
        waiting_for: impl Fn(&leasehold::Error) -> Option<String> + Send + 'static,
    ) -> Budget {
        self.budget_saying(move |e| {
            if let Some(what) = waiting_for(e) {
                crate::out::error_line(&format!("waiting for {what}"));
            }
        })
    }

    /// What to append to a contention message once the wait ended without the lease: how
    /// long it waited since it started (the quiet first second included) and the option
    /// that waits longer.
    pub fn gave_up(&self) -> String {
        // A single try did not wait, however long the try itself took on a loaded machine
        // (seen: over 1 ms under CI load, which then read "gave up after 0.0s").
        if self.deadline == Some(self.started) {
            return gave_up_after(Duration::ZERO);
        }
        gave_up_after(self.started.elapsed())
    }
}

/// The contention message's tail for a wait of `waited` (zero: a single try): the CLI face's
/// one wording of what to change, `--timeout SECS` (the library's errors carry the facts and
/// speak of its `Budget`, which a CLI user cannot set).
pub fn gave_up_after(waited: Duration) -> String {
    if waited.is_zero() {
        "; did not wait (wait for it with --timeout SECS)".to_string()
    } else {
        // In seconds, the unit of --timeout.
        let secs = waited.as_secs_f64();
        format!("; gave up after {secs:.1}s; wait longer with --timeout SECS")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_names_the_option_and_the_whole_wait() {
        assert_eq!(
            gave_up_after(Duration::from_millis(3004)),
            "; gave up after 3.0s; wait longer with --timeout SECS"
        );
        assert_eq!(
            gave_up_after(Duration::from_millis(200)),
            "; gave up after 0.2s; wait longer with --timeout SECS"
        );
        assert!(gave_up_after(Duration::ZERO).contains("--timeout SECS"));
        let token = CancelToken::new();
        // A single try that took 5 ms (a slow try and holder look-up) still did not wait.
        let started = Instant::now() - Duration::from_millis(5);
        let once = Wait {
            started,
            deadline: Some(started),
            token: token.clone(),
        };
        assert!(
            once.gave_up().contains("did not wait"),
            "{}",
            once.gave_up()
        );
    }

    #[test]
    fn a_budget_shorter_than_the_notice_says_nothing_and_a_longer_one_says_it_at_a_second() {
        let token = CancelToken::new();
        let short = Wait::up_to(Duration::from_millis(10), &token);
        let budget = short.budget_saying(|_| panic!("a short wait says nothing"));
        assert_eq!(budget.deadline(), short.deadline);
        let long = Wait::unlimited(&token);
        let budget = long.budget_saying(|_| {});
        assert_eq!(budget.deadline(), None, "the notice does not end the wait");
    }
}
