//! The [`Authority`] itself: its state machine (acquire, open and load, publish, serve, drain,
//! close, release), its [`State`], errors and [`Event`]s.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::{Budget, Classify, Error, ErrorClass, HolderInfo};

use super::arbiter::{Arbiter, Grant};
use super::store::{Store, StoreFailure};
use crate::mutex::lock;

/// Where an authority stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// This process is the writer; the scope is published.
    Active,
    /// Another process is the writer (or this authority was torn down): empty scope.
    Contended,
    /// The lease may be held but the store cannot be used: empty scope.
    StorageFailed {
        /// What went wrong, for a human.
        reason: String,
    },
}

/// Why a mutation or an acquisition was refused. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    /// Another process is the authority (or this one was torn down).
    #[error("the store is held by {}", holders.who())]
    Contended {
        /// Holder pids, where the OS revealed them at the last attempt.
        holders: HolderInfo,
    },
    /// The store cannot be used; the scope is withdrawn until a successful refresh.
    #[error("storage failed: {reason}")]
    StorageFailed {
        /// What went wrong.
        reason: String,
    },
    /// The arbiter failed for another reason than contention (for example an unusable lock
    /// path); the authority is in `StorageFailed`.
    #[error(transparent)]
    Lease(Error),
}

impl Classify for AuthorityError {
    /// How a caller should treat this error: another authority is
    /// [`ErrorClass::Contended`], a failed store [`ErrorClass::Failure`], and an arbiter
    /// error the class of that error (an unusable lock path is `Usage`, a cancelled wait
    /// `Cancelled`).
    fn class(&self) -> ErrorClass {
        match self {
            AuthorityError::Contended { .. } => ErrorClass::Contended,
            AuthorityError::StorageFailed { .. } => ErrorClass::Failure,
            AuthorityError::Lease(e) => e.class(),
        }
    }
}

/// A step of the lifecycle, reported to an [`Observer`] as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The lease was acquired.
    LeaseAcquired,
    /// The lease is held by someone else.
    LeaseContended,
    /// The store was opened and its records loaded.
    StoreOpened,
    /// The scope was published: the authority is active.
    ScopePublished,
    /// The store failed (the reason).
    StorageFailed(String),
    /// A mutation was admitted.
    MutationBegin,
    /// A durable write starts.
    WriteBegin,
    /// A durable write ended (successfully or not).
    WriteEnd,
    /// An admitted mutation finished.
    MutationEnd,
    /// Teardown began: no acquisition or new mutation from now on.
    Disposed,
    /// Teardown waited until no mutation was running.
    Drained,
    /// The scope was withdrawn.
    ScopeWithdrawn,
    /// The store was closed.
    StoreClosed,
    /// The lease was released.
    LeaseReleased,
}

/// Receives every [`Event`], synchronously, on the thread where it happens.
pub type Observer = Arc<dyn Fn(&Event) + Send + Sync>;

struct Core<G, R> {
    state: State,
    lease: Option<G>,
    records: Arc<R>,
    holders: HolderInfo,
    inflight: usize,
    /// Bumped at every (re)publication: a mutation admitted under an older one never writes.
    epoch: u64,
}

struct Writer<S> {
    store: S,
    open: bool,
}

/// The single-writer authority over one store (see the module docs for its lifecycle).
///
/// Lock order: `queue` → `writer` → `core`; `core` is only ever held briefly, so
/// [`scope`](Self::scope) and [`state`](Self::state) never wait for a write.
pub struct Authority<A: Arbiter, S: Store> {
    pub(super) arbiter: A,
    observer: Option<Observer>,
    disposed: AtomicBool,
    /// The transition queue, shared by acquisition, refresh and teardown.
    queue: Mutex<()>,
    /// The store; held for a whole write, so that two keys never rewrite the file at once.
    writer: Mutex<Writer<S>>,
    core: Mutex<Core<A::Grant, S::Records>>,
    idle: Condvar,
    empty: Arc<S::Records>,
}

impl<A: Arbiter, S: Store> Authority<A, S> {
    /// An authority that has not tried to acquire yet (state `Contended`, empty scope).
    pub fn new(arbiter: A, store: S) -> Self {
        Authority {
            arbiter,
            observer: None,
            disposed: AtomicBool::new(false),
            queue: Mutex::new(()),
            writer: Mutex::new(Writer { store, open: false }),
            core: Mutex::new(Core {
                state: State::Contended,
                lease: None,
                records: Arc::default(),
                holders: HolderInfo::default(),
                inflight: 0,
                epoch: 0,
            }),
            idle: Condvar::new(),
            empty: Arc::default(),
        }
    }

    /// Reports every lifecycle [`Event`] to `observer` (tests assert on the order).
    #[must_use]
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    fn emit(&self, e: Event) {
        if let Some(o) = &self.observer {
            o(&e);
        }
    }

    /// Fails closed the moment the grant is known lost ([`Grant::is_lost`]): state
    /// `Contended` (someone else may hold the lock now), empty scope, every mutation refused
    /// until an acquisition or `refresh` takes a fresh grant.
    fn withdraw_if_lost(&self, core: &mut Core<A::Grant, S::Records>) {
        if core.state == State::Active && core.lease.as_ref().is_some_and(|g| g.is_lost()) {
            core.state = State::Contended;
            core.holders = HolderInfo::default();
            self.emit(Event::ScopeWithdrawn);
        }
    }

    /// The state as of now: an active authority verifies its grant first (for the kernel
    /// lease one `fstatat`), so that a lease lost — the lock file replaced by a rename, say —
    /// is reported as `StorageFailed("lease lost")` at once, not only at the next write; a
    /// grant its arbiter knows lost (an expired etcd lease) withdraws to `Contended` first.
    ///
    /// Why reads verify too: once the lock file has been replaced, a newcomer locks the new
    /// file and becomes the authority; a deposed one that kept answering "active" from
    /// memory would go on granting what the newcomer has removed (fail closed on reads).
    fn current(&self) -> MutexGuard<'_, Core<A::Grant, S::Records>> {
        let mut core = lock(&self.core);
        self.withdraw_if_lost(&mut core);
        if core.state == State::Active && core.lease.as_ref().is_none_or(|g| g.verify().is_err()) {
            self.fail(&mut core, "lease lost".into());
        }
        core
    }

    /// The current state (verifying the lease of an active authority first; see `current`).
    pub fn state(&self) -> State {
        self.current().state.clone()
    }

    /// The published scope: the loaded records while active — the lease verified first —
    /// empty otherwise (fail closed: nothing read earlier is ever used to grant).
    pub fn scope(&self) -> Arc<S::Records> {
        let core = self.current();
        if core.state == State::Active {
            core.records.clone()
        } else {
            self.empty.clone()
        }
    }

    /// `Ok` while active (the lease verified); otherwise the typed error every mutation would
    /// get now (`StorageFailed` takes precedence over `Contended`).
    pub fn ensure_active(&self) -> Result<(), AuthorityError> {
        let core = self.current();
        if core.state == State::Active && !self.is_disposed() {
            Ok(())
        } else {
            Err(state_error(&core))
        }
    }

    /// Whether [`teardown`](Self::teardown) has begun.
    pub fn is_disposed(&self) -> bool {
        self.disposed.load(Ordering::SeqCst)
    }

    /// Becomes the authority if it is not already: takes the lease within `budget` (kept if
    /// already held and still valid), reopens the store from disk, loads and publishes.
    ///
    /// Used for the first acquisition and for `refresh` alike, so a contended process takes
    /// over without a restart and sees the last durable write of its predecessor. A store
    /// that fails to load leaves the authority in `StorageFailed` *holding the lease*.
    pub fn acquire(&self, budget: &Budget) -> Result<(), AuthorityError> {
        self.acquire_with(|| self.arbiter.acquire(budget))
    }

    /// The acquisition state machine; `take` gets a fresh grant when none is held (called at
    /// most once, on the transition queue). A grant `take` would have handed over is dropped
    /// — released — when it is not needed, so an authority never holds two.
    pub(super) fn acquire_with(
        &self,
        take: impl FnOnce() -> crate::Result<A::Grant>,
    ) -> Result<(), AuthorityError> {
        let _queue = lock(&self.queue);
        if self.is_disposed() {
            return Err(self.disposed_error());
        }
        let mut core = lock(&self.core);
        if core.state == State::Active {
            return Ok(());
        }
        // Mutations admitted under an earlier publication finish before the store reopens.
        core = self.wait_idle(core);
        let valid = core.lease.as_ref().is_some_and(|g| g.verify().is_ok());
        if !valid {
            let stale = core.lease.take();
            drop(core);
            if let Some(mut g) = stale {
                g.release();
                self.emit(Event::LeaseReleased);
            }
            match take() {
                Ok(g) => {
                    lock(&self.core).lease = Some(g);
                    self.emit(Event::LeaseAcquired);
                }
                Err(e) if e.is_contended() => {
                    let holders = e.holders().cloned().unwrap_or_default();
                    let mut core = lock(&self.core);
                    core.state = State::Contended;
                    core.holders = holders.clone();
                    drop(core);
                    self.emit(Event::LeaseContended);
                    return Err(AuthorityError::Contended { holders });
                }
                Err(e) => {
                    self.fail(&mut lock(&self.core), e.to_string());
                    return Err(AuthorityError::Lease(e));
                }
            }
        } else {
            drop(core);
        }
        // A teardown that began meanwhile is queued behind us and releases what we took.
        if self.is_disposed() {
            return Err(self.disposed_error());
        }
        let mut w = lock(&self.writer);
        if w.open {
            w.store.close();
            w.open = false;
            self.emit(Event::StoreClosed);
        }
        let opened = w.store.open();
        let mut core = lock(&self.core);
        match opened {
            Ok(records) => {
                w.open = true;
                self.emit(Event::StoreOpened);
                core.records = Arc::new(records);
                core.epoch += 1;
                core.state = State::Active;
                self.emit(Event::ScopePublished);
                Ok(())
            }
            Err(failure) => {
                let reason = failure.to_string();
                self.fail(&mut core, reason.clone());
                Err(AuthorityError::StorageFailed { reason })
            }
        }
    }

    /// Tries once more to become the authority ([`acquire`](Self::acquire) without waiting).
    pub fn refresh(&self) -> Result<(), AuthorityError> {
        self.acquire(&Budget::no_wait())
    }

    /// Applies `f` to a copy of the records and makes the result durable, then publishes it.
    ///
    /// Refused with a typed error, writing nothing, unless active. Inside the process,
    /// mutations run one at a time from reading the records to the end of the durable write
    /// — per key and across keys alike, because every key rewrites the one document (the
    /// lease does the same across processes; both are needed). The lease is verified right
    /// before the write; if it is lost the authority goes to `StorageFailed("lease lost")`.
    pub fn mutate<T>(&self, f: impl FnOnce(&mut S::Records) -> T) -> Result<T, AuthorityError> {
        let epoch = {
            let mut core = lock(&self.core);
            if self.is_disposed() {
                return Err(self.disposed_error());
            }
            if core.state != State::Active {
                return Err(state_error(&core));
            }
            core.inflight += 1;
            core.epoch
        };
        let _admitted = Admitted(self);
        self.emit(Event::MutationBegin);
        let mut w = lock(&self.writer);
        let mut next = {
            let core = lock(&self.core);
            if core.epoch != epoch || core.state != State::Active {
                return Err(state_error(&core));
            }
            (*core.records).clone()
        };
        let out = f(&mut next);
        let fence = {
            let mut core = lock(&self.core);
            let verified = match core.lease.as_ref() {
                Some(g) => g.verify().map(|()| g.fencing_token()),
                None => Err(Error::Released {
                    path: PathBuf::new(),
                }),
            };
            match verified {
                Ok(fence) => fence,
                Err(e) if e.is_expired() => {
                    // A distributed lease that may have run out: someone else may hold it.
                    self.withdraw_if_lost(&mut core);
                    core.state = State::Contended;
                    return Err(AuthorityError::Contended {
                        holders: HolderInfo::default(),
                    });
                }
                Err(_) => {
                    self.fail(&mut core, "lease lost".into());
                    return Err(AuthorityError::StorageFailed {
                        reason: "lease lost".into(),
                    });
                }
            }
        };
        self.emit(Event::WriteBegin);
        // Verified again once the write is staged (`Store::commit_checked`): the path may
        // have been moved away since the check above.
        let lost = std::cell::Cell::new(false);
        let mut check = || -> Result<(), StoreFailure> {
            let verified = match lock(&self.core).lease.as_ref() {
                Some(g) => g.verify(),
                None => Err(Error::Released {
                    path: PathBuf::new(),
                }),
            };
            verified.map_err(|e| {
                lost.set(true);
                StoreFailure::new(
                    "the lease",
                    "lease lost before the write was put in place",
                    e,
                )
            })
        };
        let written = w.store.commit_checked(&next, fence, &mut check);
        self.emit(Event::WriteEnd);
        let mut core = lock(&self.core);
        match written {
            Ok(()) => {
                core.records = Arc::new(next);
                Ok(out)
            }
            Err(_) if core.lease.as_ref().is_some_and(|g| g.is_lost()) => {
                // The store refused the write because the grant is gone (an etcd
                // transaction whose fencing check failed): contention, not a broken store.
                self.withdraw_if_lost(&mut core);
                core.state = State::Contended;
                Err(AuthorityError::Contended {
                    holders: HolderInfo::default(),
                })
            }
            // The lease was lost before the write was put in place, or (a directory above a
            // file store moved after that last check) the rename found the staged file gone.
            Err(_) if lost.get() || core.lease.as_ref().is_some_and(|g| g.verify().is_err()) => {
                self.fail(&mut core, "lease lost".into());
                Err(AuthorityError::StorageFailed {
                    reason: "lease lost".into(),
                })
            }
            Err(failure) => {
                let reason = failure.to_string();
                self.fail(&mut core, reason.clone());
                Err(AuthorityError::StorageFailed { reason })
            }
        }
    }

    /// Ends the authority: marks it disposed (no acquisition or new mutation after this),
    /// drains every admitted mutation, withdraws the scope, closes the store and releases the
    /// lease — last, so a successor never misses a write. Finishes an acquisition that
    /// overlapped it. Idempotent; `Drop` calls it.
    pub fn teardown(&self) {
        if !self.disposed.swap(true, Ordering::SeqCst) {
            self.emit(Event::Disposed);
        }
        let _queue = lock(&self.queue);
        let core = lock(&self.core);
        let had_work = core.inflight > 0;
        let mut core = self.wait_idle(core);
        if had_work {
            self.emit(Event::Drained);
        }
        let was_active = core.state == State::Active;
        core.state = State::Contended;
        core.holders = HolderInfo::default();
        core.records = self.empty.clone();
        drop(core);
        if was_active {
            self.emit(Event::ScopeWithdrawn);
        }
        let mut w = lock(&self.writer);
        if w.open {
            w.store.close();
            w.open = false;
            self.emit(Event::StoreClosed);
        }
        drop(w);
        let lease = lock(&self.core).lease.take();
        if let Some(mut g) = lease {
            g.release();
            self.emit(Event::LeaseReleased);
        }
    }

    fn fail(&self, core: &mut Core<A::Grant, S::Records>, reason: String) {
        core.state = State::StorageFailed {
            reason: reason.clone(),
        };
        self.emit(Event::StorageFailed(reason));
    }

    fn disposed_error(&self) -> AuthorityError {
        AuthorityError::Contended {
            holders: HolderInfo::default(),
        }
    }

    fn wait_idle<'a>(
        &self,
        core: MutexGuard<'a, Core<A::Grant, S::Records>>,
    ) -> MutexGuard<'a, Core<A::Grant, S::Records>> {
        self.idle
            .wait_while(core, |c| c.inflight > 0)
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<A: Arbiter, S: Store> Drop for Authority<A, S> {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// An admitted mutation; dropping it (however the mutation ends) lets teardown proceed.
struct Admitted<'a, A: Arbiter, S: Store>(&'a Authority<A, S>);

impl<A: Arbiter, S: Store> Drop for Admitted<'_, A, S> {
    fn drop(&mut self) {
        // Report the end before teardown can see the count reach zero, so that observers
        // never see the store closed while a mutation is still reported running.
        self.0.emit(Event::MutationEnd);
        lock(&self.0.core).inflight -= 1;
        self.0.idle.notify_all();
    }
}

fn state_error<G, R>(core: &Core<G, R>) -> AuthorityError {
    match &core.state {
        State::StorageFailed { reason } => AuthorityError::StorageFailed {
            reason: reason.clone(),
        },
        _ => AuthorityError::Contended {
            holders: core.holders.clone(),
        },
    }
}
