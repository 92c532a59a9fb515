//! What a grant knows of its own validity: the deadline its last acknowledged keep-alive
//! bought, or why it is lost; it wakes whoever waits on either (threads and tasks).

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use super::timing::{nanos, now};
use crate::mutex::lock;

/// Whether a grant still holds: the deadline its keep-alives bought, and a reason once lost.
pub(super) struct Liveness {
    pub(super) name: String,
    pub(super) state: Mutex<LiveState>,
    pub(super) changed: Condvar,
    pub(super) notify: Notify,
}

pub(super) struct LiveState {
    pub(super) deadline: u64,
    pub(super) lost: Option<String>,
}

impl Liveness {
    pub(super) fn new(name: String, deadline: u64) -> Liveness {
        Liveness {
            name,
            state: Mutex::new(LiveState {
                deadline,
                lost: None,
            }),
            changed: Condvar::new(),
            notify: Notify::new(),
        }
    }

    /// Why the grant is lost, if it is (a passed deadline makes it lost for good).
    pub(super) fn check(&self) -> Option<String> {
        let mut st = lock(&self.state);
        Self::check_locked(&mut st)
    }

    pub(super) fn check_locked(st: &mut LiveState) -> Option<String> {
        if st.lost.is_none() && now() >= st.deadline {
            st.lost =
                Some("no keep-alive was acknowledged in time; the lease may have expired".into());
        }
        st.lost.clone()
    }

    pub(super) fn extend(&self, until: u64) {
        let mut st = lock(&self.state);
        if Self::check_locked(&mut st).is_none() && until > st.deadline {
            st.deadline = until;
        }
        drop(st);
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    pub(super) fn lose(&self, why: String) {
        let mut st = lock(&self.state);
        if st.lost.is_none() {
            st.lost = Some(why);
        }
        drop(st);
        self.changed.notify_all();
        self.notify.notify_waiters();
    }

    /// Blocks until the grant is lost (returning why) or `timeout` passes (`None`).
    pub(super) fn wait_lost(&self, timeout: Option<Duration>) -> Option<String> {
        self.wait_for(timeout, Self::check_locked)
    }

    /// Blocks until the deadline moves (a keep-alive was acknowledged), the grant is lost, or
    /// `timeout` passes.
    pub(super) fn wait_renewed(&self, timeout: Option<Duration>) {
        let seen = lock(&self.state).deadline;
        self.wait_for(timeout, |st| {
            (Self::check_locked(st).is_some() || st.deadline != seen).then_some(())
        });
    }

    /// Blocks until `done` answers, or `timeout` passes (`None`); woken by every change of
    /// the state, and at the deadline (when the grant turns lost by itself).
    fn wait_for<R>(
        &self,
        timeout: Option<Duration>,
        mut done: impl FnMut(&mut LiveState) -> Option<R>,
    ) -> Option<R> {
        let end = timeout.map(|t| now().saturating_add(nanos(t)));
        let mut st = lock(&self.state);
        loop {
            if let Some(r) = done(&mut st) {
                return Some(r);
            }
            let t = now();
            if end.is_some_and(|e| t >= e) {
                return None;
            }
            let until = end.map_or(st.deadline, |e| e.min(st.deadline));
            let nap = Duration::from_nanos(until.saturating_sub(t).max(1_000_000));
            st = self
                .changed
                .wait_timeout(st, nap)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Time left before the deadline, `None` once lost.
    pub(super) fn remaining(&self) -> Option<Duration> {
        let mut st = lock(&self.state);
        match Self::check_locked(&mut st) {
            Some(_) => None,
            None => Some(Duration::from_nanos(st.deadline.saturating_sub(now()))),
        }
    }

    /// Resolves when the grant is lost, with why.
    pub(super) async fn lost(&self) -> String {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let mut st = lock(&self.state);
                if let Some(why) = Self::check_locked(&mut st) {
                    return why;
                }
                st.deadline
            };
            let nap = Duration::from_nanos(deadline.saturating_sub(now()).max(1_000_000));
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(nap) => {}
            }
        }
    }
}
