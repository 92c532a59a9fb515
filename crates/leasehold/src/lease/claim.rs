//! The in-process claim table: two leases on one lock in one process exclude each other on
//! every file system, and in-process waiters are served first come, first served.
//!
//! Why a table at all: where `flock` is emulated with per-process POSIX locks (NFS, some FUSE
//! file systems) the kernel would grant a second lock on the same file to the same process,
//! and on every platform it is the cheapest way to tell "this process holds it" from
//! "another process holds it".
//!
//! Why a queue: a thread that releases and re-acquires at once would otherwise take the
//! claim back before a woken waiter runs (barging). A release therefore hands the claim
//! straight to the first queued waiter — it is never free in between — and pokes that
//! waiter's notifier. Only the claim's holder ever waits in the kernel, so a process has at
//! most one kernel wait per lock.
//!
//! Shared claims coexist; an exclusive claim excludes everything. A newcomer is granted at
//! once only when nobody is queued, so a queued exclusive waiter is never starved by shared
//! claims that keep overlapping (the in-process half of the turnstile) — bar one: a shared
//! claim while a shared lease of this process *holds* the lock ([`Claim::hold`]) is granted
//! at once, queue or not. A nested shared acquisition (the outer lease held by the same
//! caller) would otherwise wait behind an exclusive waiter that waits for the outer lease:
//! a deadlock. The process cannot tell a nested acquisition from another thread's, so the
//! rule is per process, as the gate's is (`posix/gate.rs`, "Nested shared leases").

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sys::Notifier;

/// What a claim is keyed by: the identity of the lock (POSIX: `(dev, ino)`; Windows: the
/// leading bytes of the kernel object's name hash).
pub(crate) type Key = (u64, u64);

/// Whether a lease excludes everyone (`Exclusive`) or only exclusive holders (`Shared`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exclusive,
    Shared,
}

#[derive(Default)]
struct Entry {
    exclusive: bool,
    shared: usize,
    /// Shared claims whose lease holds the lock (a subset of `shared`; [`Claim::hold`]).
    holding: usize,
    queue: VecDeque<Arc<Ticket>>,
}

impl Entry {
    /// Whether a newcomer in `mode` is granted at once: nobody queued and admitted, or a
    /// shared claim while a shared lease of this process holds the lock (see the module
    /// documentation).
    fn admits_now(&self, mode: Mode) -> bool {
        (self.queue.is_empty() && self.admits(mode))
            || (mode == Mode::Shared && self.holding > 0 && !self.exclusive)
    }

    fn admits(&self, mode: Mode) -> bool {
        match mode {
            Mode::Exclusive => !self.exclusive && self.shared == 0,
            Mode::Shared => !self.exclusive,
        }
    }

    fn grant(&mut self, mode: Mode) {
        match mode {
            Mode::Exclusive => self.exclusive = true,
            Mode::Shared => self.shared += 1,
        }
    }

    fn is_idle(&self) -> bool {
        !self.exclusive && self.shared == 0 && self.queue.is_empty()
    }
}

struct Ticket {
    mode: Mode,
    state: Mutex<TicketState>,
    notifier: Arc<Notifier>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TicketState {
    Waiting,
    Granted,
    Taken,
}

/// The table's hasher. Keys are identities the kernel assigned to this process's own leases,
/// so SipHash's resistance to chosen keys buys nothing here; perf put it at ~1.5 % of an
/// uncontended cycle (two lookups per lease). A multiply-rotate mix (FxHash's) instead.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

type Table = HashMap<Key, Entry, std::hash::BuildHasherDefault<KeyHasher>>;

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    lock(&TABLE)
}

use crate::mutex::lock;

/// A granted claim; dropping it releases it (and hands it to the next queued waiter).
#[derive(Debug)]
pub(crate) struct Claim {
    key: Key,
    mode: Mode,
    /// The table's generation it was granted in ([`forget_all`]).
    generation: u64,
    /// Whether it counts as a shared lease that holds the lock ([`Claim::hold`]).
    holding: bool,
}

/// A place in the queue for a claim; dropping it leaves the queue (or passes on a claim that
/// was granted but never taken).
pub(crate) struct Queued {
    key: Key,
    ticket: Arc<Ticket>,
    generation: u64,
}

/// The outcome of [`take`].
pub(crate) enum Taken {
    Claim(Claim),
    Queued(Queued),
    Busy,
}

/// Claims `key` in `mode` if nobody in this process is in the way; otherwise queues behind
/// them when `queue_with` gives a notifier to poke on grant, or answers `Busy`.
pub(crate) fn take(key: Key, mode: Mode, queue_with: Option<&Arc<Notifier>>) -> Taken {
    let mut guard = table();
    let entry = guard
        .get_or_insert_with(Table::default)
        .entry(key)
        .or_default();
    if entry.admits_now(mode) {
        entry.grant(mode);
        return Taken::Claim(Claim {
            key,
            mode,
            generation: generation(),
            holding: false,
        });
    }
    match queue_with {
        Some(notifier) => {
            let ticket = Arc::new(Ticket {
                mode,
                state: Mutex::new(TicketState::Waiting),
                notifier: notifier.clone(),
            });
            entry.queue.push_back(ticket.clone());
            Taken::Queued(Queued {
                key,
                ticket,
                generation: generation(),
            })
        }
        None => {
            if entry.is_idle() {
                guard.as_mut().map(|t| t.remove(&key));
            }
            Taken::Busy
        }
    }
}

impl Queued {
    /// The claim, once a release handed it to this waiter.
    pub(crate) fn granted(&self) -> Option<Claim> {
        let mut state = lock(&self.ticket.state);
        if *state != TicketState::Granted {
            return None;
        }
        *state = TicketState::Taken;
        Some(Claim {
            key: self.key,
            mode: self.ticket.mode,
            generation: self.generation,
            holding: false,
        })
    }
}

impl Claim {
    /// Records that this claim's lease now holds the lock: where it is shared, later shared
    /// claims on the key are granted at once and pass the lock's gate
    /// ([`holds_shared`]). Idempotent; nothing for an exclusive claim.
    #[cfg_attr(not(unix), allow(dead_code))] // POSIX only (`posix/`)
    pub(crate) fn hold(&mut self) {
        if self.mode != Mode::Shared || self.holding || self.forgotten() {
            return;
        }
        if let Some(entry) = table().as_mut().and_then(|t| t.get_mut(&self.key)) {
            entry.holding += 1;
            self.holding = true;
        }
    }

    /// Whether this claim was granted before [`forget_all`]: a forked child's copy of a
    /// lease of its parent, which the child let go.
    pub(crate) fn forgotten(&self) -> bool {
        self.generation != generation()
    }
}

/// How many times [`forget_all`] has run in this process (a forked child's copy counts on
/// from its parent's).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The table's generation (see [`forget_all`]).
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The claim table's lock, held across a `fork` ([`freeze`]).
#[cfg_attr(not(unix), allow(dead_code))] // POSIX only (`posix/`)
pub(crate) struct Frozen(MutexGuard<'static, Option<Table>>);

/// Takes the table's lock for a `fork` about to happen on this thread, so that the child
/// finds the table whole and its lock held by its one thread (`after_fork_in_child`).
#[cfg_attr(not(unix), allow(dead_code))] // POSIX only (`posix/`)
pub(crate) fn freeze() -> Frozen {
    Frozen(table())
}

/// In a forked child: every claim, queue place and waiter of the table belongs to the
/// parent's leases and threads (only the forking thread exists in the child), so the child
/// starts an empty table, and every claim granted before says it is forgotten (its drop
/// does nothing). `frozen`: the lock this thread took before the fork; without it, `false`
/// where the lock was held at the fork by a thread that is gone (it can never be taken
/// again): the old table stays, and this process's later acquisitions would wait for ever.
#[cfg_attr(not(unix), allow(dead_code))] // POSIX only (`posix/`)
pub(crate) fn forget_all(frozen: Option<Frozen>) -> bool {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    if let Some(Frozen(mut t)) = frozen {
        std::mem::forget(t.take());
        return true;
    }
    match TABLE.try_lock() {
        Ok(mut t) => std::mem::forget(t.take()),
        Err(std::sync::TryLockError::Poisoned(p)) => std::mem::forget(p.into_inner().take()),
        Err(std::sync::TryLockError::WouldBlock) => return false,
    }
    true
}

/// Whether a shared lease of this process holds the lock `key` right now.
#[cfg_attr(not(unix), allow(dead_code))] // POSIX only (`posix/`)
pub(crate) fn holds_shared(key: Key) -> bool {
    table()
        .as_ref()
        .and_then(|t| t.get(&key))
        .is_some_and(|e| e.holding > 0)
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.generation != generation() {
            return; // the table it queued in is gone (`forget_all`)
        }
        let mut guard = table();
        let Some(entry) = guard.as_mut().and_then(|t| t.get_mut(&self.key)) else {
            return;
        };
        let state = *lock(&self.ticket.state);
        match state {
            TicketState::Waiting => entry.queue.retain(|t| !Arc::ptr_eq(t, &self.ticket)),
            // Granted while we gave up: pass the claim on as its holder would.
            TicketState::Granted => release(&mut guard, self.key, self.ticket.mode, false),
            TicketState::Taken => {}
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.forgotten() {
            return; // the table it was granted in is gone (`forget_all`)
        }
        release(&mut table(), self.key, self.mode, self.holding);
    }
}

/// Releases one claim and grants queued waiters in order for as long as they are admitted.
fn release(guard: &mut MutexGuard<'static, Option<Table>>, key: Key, mode: Mode, holding: bool) {
    let Some(map) = guard.as_mut() else { return };
    let Some(entry) = map.get_mut(&key) else {
        return;
    };
    match mode {
        Mode::Exclusive => entry.exclusive = false,
        Mode::Shared => entry.shared = entry.shared.saturating_sub(1),
    }
    if holding {
        entry.holding = entry.holding.saturating_sub(1);
    }
    while let Some(next) = entry.queue.front() {
        if !entry.admits(next.mode) {
            break;
        }
        let next = entry.queue.pop_front().expect("front exists");
        entry.grant(next.mode);
        *lock(&next.state) = TicketState::Granted;
        next.notifier.poke();
    }
    if entry.is_idle() {
        map.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notifier() -> Arc<Notifier> {
        Arc::new(Notifier::new())
    }

    #[test]
    fn a_second_exclusive_claim_is_refused_until_the_first_is_dropped() {
        let key = (u64::MAX, 42);
        let Taken::Claim(first) = take(key, Mode::Exclusive, None) else {
            panic!("first claim")
        };
        assert!(matches!(take(key, Mode::Exclusive, None), Taken::Busy));
        assert!(matches!(take(key, Mode::Shared, None), Taken::Busy));
        drop(first);
        assert!(matches!(take(key, Mode::Exclusive, None), Taken::Claim(_)));
    }

    #[test]
    fn a_release_hands_the_claim_to_the_queued_waiter_before_a_newcomer() {
        let key = (u64::MAX, 43);
        let Taken::Claim(first) = take(key, Mode::Exclusive, None) else {
            panic!("first claim")
        };
        let n = notifier();
        let Taken::Queued(queued) = take(key, Mode::Exclusive, Some(&n)) else {
            panic!("queued")
        };
        assert!(queued.granted().is_none());
        drop(first);
        // The claim went to the waiter: a newcomer (the releaser coming back) is refused.
        assert!(matches!(take(key, Mode::Exclusive, None), Taken::Busy));
        assert!(n.is_poked(), "the waiter was poked");
        let claim = queued.granted().expect("granted");
        drop(queued);
        assert!(matches!(take(key, Mode::Exclusive, None), Taken::Busy));
        drop(claim);
        assert!(matches!(take(key, Mode::Exclusive, None), Taken::Claim(_)));
    }

    #[test]
    fn shared_claims_coexist_but_queue_behind_a_waiting_exclusive_one() {
        let key = (u64::MAX, 44);
        let Taken::Claim(s1) = take(key, Mode::Shared, None) else {
            panic!("s1")
        };
        let Taken::Claim(s2) = take(key, Mode::Shared, None) else {
            panic!("s2")
        };
        let n = notifier();
        let Taken::Queued(x) = take(key, Mode::Exclusive, Some(&n)) else {
            panic!("exclusive queues")
        };
        // A newcomer in shared mode waits behind the exclusive waiter (turnstile).
        assert!(matches!(take(key, Mode::Shared, None), Taken::Busy));
        let n2 = notifier();
        let Taken::Queued(s3) = take(key, Mode::Shared, Some(&n2)) else {
            panic!("shared queues")
        };
        drop(s1);
        assert!(x.granted().is_none());
        drop(s2);
        let xc = x
            .granted()
            .expect("exclusive granted once the shared holders left");
        assert!(s3.granted().is_none());
        drop(xc);
        assert!(s3.granted().is_some());
    }

    #[test]
    fn a_shared_claim_while_a_shared_lease_holds_is_granted_past_a_queued_exclusive_one() {
        let key = (u64::MAX, 46);
        let Taken::Claim(mut outer) = take(key, Mode::Shared, None) else {
            panic!("outer")
        };
        let n = notifier();
        let Taken::Queued(x) = take(key, Mode::Exclusive, Some(&n)) else {
            panic!("exclusive queues")
        };
        // Granted but not holding (still waiting in the kernel): the turnstile holds.
        assert!(matches!(take(key, Mode::Shared, None), Taken::Busy));
        assert!(!holds_shared(key));
        outer.hold();
        assert!(holds_shared(key));
        // Held: a nested shared claim is granted at once, not queued behind the writer
        // that waits for the outer one.
        let Taken::Claim(inner) = take(key, Mode::Shared, None) else {
            panic!("nested shared claim queued behind the exclusive waiter")
        };
        assert!(matches!(take(key, Mode::Exclusive, None), Taken::Busy));
        drop(inner);
        drop(outer);
        assert!(!holds_shared(key));
        assert!(x.granted().is_some(), "the writer goes next");
    }

    #[test]
    fn an_abandoned_grant_is_passed_on() {
        let key = (u64::MAX, 45);
        let Taken::Claim(first) = take(key, Mode::Exclusive, None) else {
            panic!("first")
        };
        let (n1, n2) = (notifier(), notifier());
        let Taken::Queued(a) = take(key, Mode::Exclusive, Some(&n1)) else {
            panic!("a")
        };
        let Taken::Queued(b) = take(key, Mode::Exclusive, Some(&n2)) else {
            panic!("b")
        };
        drop(first); // granted to a
        drop(a); // a gave up without taking it: b gets it
        assert!(b.granted().is_some());
    }
}
