//! A store-wide single-writer authority that fails closed.
//!
//! Several processes share one store file. Without an authority each reads the file at start
//! and rewrites the whole of it later, so the last writer silently drops the other's change,
//! and a process keeps granting from its stale memory what another has removed. [`Authority`]
//! makes exactly one process the writer of the whole store and makes every other process
//! grant nothing until it becomes the authority itself.
//!
//! The lifecycle is fixed, and each step is where it is for a reason:
//!
//! 1. **acquire the lease** ([`Arbiter`]) — nothing is opened without it, not even read-only:
//!    a snapshot read without the lease may already be stale when it is used;
//! 2. **open the store and load** its records ([`Store::open`]);
//! 3. **publish the scope** — only now does [`Authority::scope`] answer anything but empty;
//! 4. **serve** mutations, verifying the lease before each durable write;
//! 5. **drain** in-flight mutations, **withdraw** the scope, **close** the store;
//! 6. **release the lease last**, so that a successor never opens a snapshot missing this
//!    process's last write.
//!
//! Every transition (acquisition, refresh, teardown) runs on one queue, so an acquisition and
//! a teardown never interleave; teardown marks the authority disposed *before* it queues, so
//! an acquisition already running stops before opening the store and leaves what it took for
//! that teardown to release.
//!
//! The authority is generic over *what* arbitrates ([`Arbiter`], [`Grant`]) — the kernel
//! [`Lease`] through [`KernelArbiter`], or a distributed lease with a fencing token (the etcd
//! arbiter, feature `etcd`; [`Grant::fencing_token`] is handed to every [`Store::commit`]) —
//! and over the store.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::{Budget, Classify, Error, ErrorClass, HolderInfo, Lease, LeaseOptions};

#[cfg(feature = "tokio")]
mod asynchronous;
#[cfg(feature = "tokio")]
pub use asynchronous::AsyncArbiter;

/// A held right to be the single writer, as handed out by an [`Arbiter`].
///
/// Every method is required, [`fencing_token`](Self::fencing_token) and
/// [`is_lost`](Self::is_lost) included: each arbiter states what it can say about them, so
/// that a new arbiter cannot inherit "never lost" by omission — for a lease with a TTL that
/// default would fail open. An arbiter that has nothing to say states why (see the kernel
/// [`Lease`]'s implementation).
///
/// ```compile_fail
/// use leasehold::patterns::authority::Grant;
/// struct Mine;
/// impl Grant for Mine { // error: `fencing_token` and `is_lost` not given
///     fn verify(&self) -> leasehold::Result<()> { Ok(()) }
///     fn release(&mut self) {}
/// }
/// ```
pub trait Grant: Send {
    /// Whether the right is still held. Called before every durable write; an error makes
    /// the authority fail closed with `StorageFailed("lease lost")`.
    fn verify(&self) -> crate::Result<()>;
    /// Gives the right up. Idempotent.
    fn release(&mut self);
    /// A number that grows with every grant (an etcd revision, for example), which a store
    /// can write next to its data so that a deposed writer's late write is refused; `None`
    /// where the arbiter has none to give.
    fn fencing_token(&self) -> Option<u64>;
    /// Whether the right is known to be gone, decided without any I/O: a distributed lease
    /// past the deadline its last acknowledged keep-alive bought, or one its server reported
    /// gone. The authority asks this whenever its state or scope is read, so it withdraws
    /// the scope as soon as the lease may have run out, not only at the next write.
    fn is_lost(&self) -> bool;
}

/// Whatever decides which process is the authority.
pub trait Arbiter: Send + Sync {
    /// What a successful acquisition holds.
    type Grant: Grant;
    /// Tries to become the writer within `budget` ([`Budget::no_wait`] tries once).
    /// Contention must be reported as an error for which [`Error::is_contended`] is true.
    fn acquire(&self, budget: &Budget) -> crate::Result<Self::Grant>;
}

/// The kernel lease as a grant ([`KernelArbiter`]). It has nothing to say about fencing or
/// expiry, and its answers say so always, for the reasons below.
impl Grant for Lease {
    fn verify(&self) -> crate::Result<()> {
        Lease::verify(self)
    }
    fn release(&mut self) {
        Lease::release(self)
    }
    /// Always `None`: the kernel never grants one lock twice at once, and a holder keeps it
    /// until it releases or its process dies (no TTL), so there is never a deposed holder
    /// still writing that a token would have to fence out.
    fn fencing_token(&self) -> Option<u64> {
        None
    }
    /// Always `false`: a kernel lease never runs out on its own. What can go wrong — the
    /// lock file removed or replaced under the holder — takes a look at the file system,
    /// and [`verify`](Grant::verify) does it ([`Error::LeaseLost`]) before every write.
    fn is_lost(&self) -> bool {
        false
    }
}

/// The kernel lease on one lock file as an [`Arbiter`]: one lock for the whole store.
#[derive(Debug, Clone)]
pub struct KernelArbiter {
    path: PathBuf,
    options: LeaseOptions,
}

impl KernelArbiter {
    /// Arbitrates with the lease on `path` (created 0600, parents 0700, when missing).
    pub fn new(path: impl Into<PathBuf>) -> KernelArbiter {
        KernelArbiter {
            path: path.into(),
            options: LeaseOptions::new(),
        }
    }

    /// The same arbiter taking its lease with `options` (for example to accept a shared lock
    /// file, or a network file system).
    #[must_use]
    pub fn with_options(mut self, options: LeaseOptions) -> KernelArbiter {
        self.options = options;
        self
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Arbiter for KernelArbiter {
    type Grant = Lease;
    fn acquire(&self, budget: &Budget) -> crate::Result<Lease> {
        self.options.acquire(&self.path, budget)
    }
}

/// Why a store could not be opened or written: which store (its file, or its key where the
/// document lives in etcd), what was being done to it, and the error that stopped it — or
/// the primitive's own refusal of one of its files. Its message names the store and says
/// what to do, as every error here does; the [`Authority`] reports it as
/// [`AuthorityError::StorageFailed`] and leaves the document as it is.
///
/// ```
/// use leasehold::patterns::authority::StoreFailure;
///
/// let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
/// let failure = StoreFailure::new("/srv/names.txt", "cannot read", io)
///     .with_advice(" (check the file's owner and mode, then refresh)");
/// assert_eq!(
///     failure.to_string(),
///     "/srv/names.txt: cannot read: permission denied (check the file's owner and mode, then refresh)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreFailure {
    /// An operation on the store failed.
    #[error("{store}: {op}: {source}{advice}")]
    Op {
        /// The store as messages name it: a document's path, or `etcd key K at E`.
        store: String,
        /// What was being done ("cannot read", "does not parse", …), as the message says it.
        op: std::borrow::Cow<'static, str>,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// What the user can do, appended to the message as it stands ("" for nothing
        /// more), for example " (the file is left as it is; repair or move it away, then
        /// refresh)".
        advice: &'static str,
    },
    /// The primitive refused a file or directory of the store (one another user could have
    /// prepared, a symlink where a file should be, …); the error names it and says what to
    /// do.
    #[error(transparent)]
    Refused(#[from] Error),
}

impl StoreFailure {
    /// The failure of `op` on `store` (a path or key as messages name it), because of
    /// `source` (an error, or a message: `&str` and `String` convert).
    pub fn new(
        store: impl Into<String>,
        op: impl Into<std::borrow::Cow<'static, str>>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> StoreFailure {
        StoreFailure::Op {
            store: store.into(),
            op: op.into(),
            source: source.into(),
            advice: "",
        }
    }

    /// The same failure, its message ending with `advice` (what the user can do).
    pub fn with_advice(self, advice: &'static str) -> StoreFailure {
        match self {
            StoreFailure::Op {
                store, op, source, ..
            } => StoreFailure::Op {
                store,
                op,
                source,
                advice,
            },
            refused => refused,
        }
    }
}

impl Classify for StoreFailure {
    /// Always [`ErrorClass::Failure`]: the store, not the caller's input, is at fault.
    fn class(&self) -> ErrorClass {
        ErrorClass::Failure
    }
}

/// A store that an [`Authority`] opens, writes and closes — only while it holds the lease.
pub trait Store: Send {
    /// The loaded records; also the published scope. `Default` is the empty scope.
    type Records: Clone + Default + Send + Sync;
    /// Opens the store and loads its records from durable storage. A document that cannot
    /// be read must be reported, never replaced.
    fn open(&mut self) -> Result<Self::Records, StoreFailure>;
    /// Makes `records` durable before returning (an acknowledged write survives a crash).
    /// `fence` is the grant's [`Grant::fencing_token`].
    fn commit(&mut self, records: &Self::Records, fence: Option<u64>) -> Result<(), StoreFailure>;
    /// [`commit`](Self::commit), calling `check` once the new version is staged and only
    /// putting it in place remains — for a file, after the temporary file beside it was
    /// written and synced, before it is renamed over the file. An error from `check`
    /// abandons the write (the stored version untouched) and is returned. The authority
    /// passes its grant's [`Grant::verify`], so that a directory above the store moved away
    /// after the check before the write fails the write instead of letting it land in what
    /// now stands at the path, beside that path's next holder. The default calls `check`,
    /// then `commit`; a store that writes through a path overrides it.
    fn commit_checked(
        &mut self,
        records: &Self::Records,
        fence: Option<u64>,
        check: &mut dyn FnMut() -> Result<(), StoreFailure>,
    ) -> Result<(), StoreFailure> {
        check()?;
        self.commit(records, fence)
    }
    /// Closes the store; it will be opened again before any further use.
    fn close(&mut self);
}

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
    arbiter: A,
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
    fn acquire_with(
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

use crate::mutex::lock;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    #[cfg(not(target_os = "wasi"))]
    use std::sync::mpsc;
    #[cfg(not(target_os = "wasi"))]
    use std::thread;

    type Records = BTreeMap<String, u32>;

    /// Records the events of the fixture's stacks, each under a label, in order (the
    /// integration tests use `testkit::Recorder`, which cannot be linked into unit tests).
    #[derive(Clone, Default)]
    struct Recorder {
        events: Arc<Mutex<Vec<(String, Event)>>>,
    }

    impl Recorder {
        fn new() -> Recorder {
            Recorder::default()
        }

        fn observer(&self, label: &str) -> Observer {
            let events = self.events.clone();
            let label = label.to_string();
            Arc::new(move |e: &Event| lock(&events).push((label.clone(), e.clone())))
        }

        fn events(&self) -> Vec<(String, Event)> {
            lock(&self.events).clone()
        }
    }

    /// The "disk" both stacks share; `None` is a document that does not parse.
    #[derive(Clone, Default)]
    struct Disk(Arc<Mutex<Option<Records>>>);

    struct MemStore {
        disk: Disk,
    }

    impl Store for MemStore {
        type Records = Records;
        fn open(&mut self) -> Result<Records, StoreFailure> {
            lock(&self.disk.0)
                .clone()
                .ok_or_else(|| StoreFailure::new("memory", "open", "document does not parse"))
        }
        fn commit(&mut self, r: &Records, _: Option<u64>) -> Result<(), StoreFailure> {
            *lock(&self.disk.0) = Some(r.clone());
            Ok(())
        }
        fn close(&mut self) {}
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        lock: PathBuf,
        disk: Disk,
        rec: Recorder,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = crate::test_dir();
            let lock = dir.path().join("store.lock");
            let disk = Disk(Arc::new(Mutex::new(Some(Records::new()))));
            Fixture {
                _dir: dir,
                lock,
                disk,
                rec: Recorder::new(),
            }
        }
        fn stack(&self, label: &str) -> Authority<KernelArbiter, MemStore> {
            self.stack_observed(self.rec.observer(label))
        }
        fn stack_observed(&self, o: Observer) -> Authority<KernelArbiter, MemStore> {
            let store = MemStore {
                disk: self.disk.clone(),
            };
            // The only process here (WASI needs the opt-in; native targets lock as ever).
            let opts = LeaseOptions::new().single_process(true);
            Authority::new(KernelArbiter::new(&self.lock).with_options(opts), store)
                .with_observer(o)
        }
        fn events(&self, label: &str) -> Vec<Event> {
            let all = self.rec.events();
            all.into_iter()
                .filter(|(l, _)| l == label)
                .map(|(_, e)| e)
                .collect()
        }
    }

    fn set(k: &str, v: u32) -> impl FnOnce(&mut Records) {
        let k = k.to_string();
        move |r: &mut Records| {
            r.insert(k, v);
        }
    }

    #[cfg_attr(target_os = "wasi", allow(dead_code))] // its users need threads
    fn pos(events: &[(String, Event)], label: &str, e: &Event) -> usize {
        events
            .iter()
            .position(|(l, x)| l == label && x == e)
            .unwrap_or_else(|| panic!("{label}: {e:?} not in {events:?}"))
    }

    #[test]
    fn second_stack_is_contended_fails_closed_and_takes_over_by_refresh() {
        let fx = Fixture::new();
        let first = fx.stack("first");
        first.acquire(&Budget::no_wait()).unwrap();
        first.mutate(set("a", 1)).unwrap();

        let second = fx.stack("second");
        let err = second.acquire(&Budget::no_wait()).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        assert_eq!(err.class(), ErrorClass::Contended);
        assert_eq!(second.state(), State::Contended);
        assert!(second.scope().is_empty());
        let err = second.mutate(set("b", 2)).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        assert!(
            !fx.events("second").contains(&Event::StoreOpened),
            "a contended stack must never open the store"
        );
        assert!(second.refresh().is_err(), "still held");

        first.mutate(set("a", 3)).unwrap();
        first.teardown();
        assert!(first.scope().is_empty());
        second.refresh().unwrap();
        assert_eq!(second.state(), State::Active);
        assert_eq!(second.scope().get("a"), Some(&3), "the first's last write");
        assert_eq!(
            second.scope().get("b"),
            None,
            "the rejected mutation wrote nothing"
        );
    }

    #[cfg(not(target_os = "wasi"))] // threads race here: wasm32-wasip1 has one
    #[test]
    fn teardown_drains_then_closes_then_releases_and_a_successor_follows() {
        let fx = Fixture::new();
        let (disposed_tx, disposed_rx) = mpsc::channel();
        let disposed_tx = Mutex::new(disposed_tx);
        let rec = fx.rec.observer("first");
        let observer: Observer = Arc::new(move |e: &Event| {
            rec(e);
            if *e == Event::Disposed {
                let _ = lock(&disposed_tx).send(());
            }
        });
        let first = Arc::new(fx.stack_observed(observer));
        first.acquire(&Budget::no_wait()).unwrap();

        let (inside_tx, inside_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let writer = {
            let first = first.clone();
            thread::spawn(move || {
                first.mutate(move |r: &mut Records| {
                    inside_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    r.insert("a".into(), 7);
                })
            })
        };
        inside_rx.recv().unwrap(); // the mutation is running
        let closer = {
            let first = first.clone();
            thread::spawn(move || first.teardown())
        };
        disposed_rx.recv().unwrap(); // teardown has begun
        let err = first.mutate(set("b", 1)).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        go_tx.send(()).unwrap();
        writer.join().unwrap().unwrap();
        closer.join().unwrap();

        let second = fx.stack("second");
        second.acquire(&Budget::no_wait()).unwrap();
        assert_eq!(second.scope().get("a"), Some(&7));
        assert_eq!(second.scope().get("b"), None);

        let ev = fx.rec.events();
        let write_end = pos(&ev, "first", &Event::WriteEnd);
        let mutation_end = pos(&ev, "first", &Event::MutationEnd);
        let close = pos(&ev, "first", &Event::StoreClosed);
        let release = pos(&ev, "first", &Event::LeaseReleased);
        assert!(pos(&ev, "first", &Event::Disposed) < write_end, "{ev:?}");
        assert!(write_end < close, "the write ends before close: {ev:?}");
        assert!(
            mutation_end < close,
            "no close while a mutation runs: {ev:?}"
        );
        assert!(close < release, "close before release: {ev:?}");
        assert!(
            release < pos(&ev, "second", &Event::LeaseAcquired),
            "{ev:?}"
        );
    }

    #[cfg(not(target_os = "wasi"))] // threads race here: wasm32-wasip1 has one
    #[test]
    fn acquisition_overlapping_teardown_is_finished_by_it() {
        let fx = Fixture::new();
        let (acquired_tx, acquired_rx) = mpsc::channel();
        let (disposed_tx, disposed_rx) = mpsc::channel();
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let (acquired_tx, disposed_tx, gate_rx) = (
            Mutex::new(acquired_tx),
            Mutex::new(disposed_tx),
            Mutex::new(gate_rx),
        );
        let rec = fx.rec.observer("first");
        let observer: Observer = Arc::new(move |e: &Event| {
            rec(e);
            match e {
                Event::LeaseAcquired => {
                    lock(&acquired_tx).send(()).unwrap();
                    lock(&gate_rx).recv().unwrap(); // park the acquisition here
                }
                Event::Disposed => lock(&disposed_tx).send(()).unwrap(),
                _ => {}
            }
        });
        let first = Arc::new(fx.stack_observed(observer));
        let acquirer = {
            let first = first.clone();
            thread::spawn(move || first.acquire(&Budget::no_wait()))
        };
        acquired_rx.recv().unwrap(); // the acquisition holds the lease, store not yet open
        let closer = {
            let first = first.clone();
            thread::spawn(move || first.teardown())
        };
        disposed_rx.recv().unwrap(); // teardown began and queues behind the acquisition
        gate_tx.send(()).unwrap();
        let got = acquirer.join().unwrap();
        closer.join().unwrap();
        assert!(
            matches!(got, Err(AuthorityError::Contended { .. })),
            "{got:?}"
        );
        assert_eq!(first.state(), State::Contended);
        assert!(first.scope().is_empty());
        let ev = fx.events("first");
        assert!(!ev.contains(&Event::StoreOpened), "{ev:?}");
        assert!(ev.contains(&Event::LeaseReleased), "{ev:?}");
        drop(Lease::try_acquire(&fx.lock).expect("nothing leaked: a successor gets the lease"));
    }

    #[test]
    #[cfg(unix)] // removing the lock file loses the lease only where the file is the lock
    fn lost_lease_fails_closed_before_writing() {
        let fx = Fixture::new();
        let a = fx.stack("a");
        a.acquire(&Budget::no_wait()).unwrap();
        a.mutate(set("k", 1)).unwrap();
        std::fs::remove_file(&fx.lock).unwrap();
        let err = a.mutate(set("k", 2)).unwrap_err();
        assert!(
            matches!(&err, AuthorityError::StorageFailed { reason } if reason == "lease lost"),
            "{err:?}"
        );
        assert_eq!(
            a.state(),
            State::StorageFailed {
                reason: "lease lost".into()
            }
        );
        assert!(a.scope().is_empty());
        assert_eq!(lock(&fx.disk.0).as_ref().unwrap().get("k"), Some(&1));
        // A refresh takes a fresh lease on the new lock file and reopens.
        a.refresh().unwrap();
        assert_eq!(a.scope().get("k"), Some(&1));
    }

    #[test]
    fn unloadable_store_keeps_the_lease_and_refresh_recovers() {
        let fx = Fixture::new();
        *lock(&fx.disk.0) = None;
        let a = fx.stack("a");
        let err = a.acquire(&Budget::no_wait()).unwrap_err();
        assert!(
            matches!(err, AuthorityError::StorageFailed { .. }),
            "{err:?}"
        );
        assert!(a.scope().is_empty());
        assert!(matches!(
            a.mutate(set("k", 1)),
            Err(AuthorityError::StorageFailed { .. })
        ));
        assert!(lock(&fx.disk.0).is_none(), "never overwritten");
        let b = fx.stack("b");
        assert!(matches!(
            b.acquire(&Budget::no_wait()),
            Err(AuthorityError::Contended { .. })
        ));
        *lock(&fx.disk.0) = Some(Records::from([("k".into(), 9)]));
        a.refresh().unwrap();
        assert_eq!(a.scope().get("k"), Some(&9));
    }

    /// A grant that a test (or the store) can declare lost, as a distributed lease is once
    /// its deadline passes or its store refused its token.
    struct Fragile(Arc<AtomicBool>);

    impl Grant for Fragile {
        fn verify(&self) -> crate::Result<()> {
            if self.0.load(Ordering::SeqCst) {
                Err(Error::Expired {
                    name: "test".into(),
                    reason: "lost".into(),
                })
            } else {
                Ok(())
            }
        }
        fn release(&mut self) {}
        fn fencing_token(&self) -> Option<u64> {
            Some(7)
        }
        fn is_lost(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    struct FragileArbiter(Arc<AtomicBool>);

    impl Arbiter for FragileArbiter {
        type Grant = Fragile;
        fn acquire(&self, _: &Budget) -> crate::Result<Fragile> {
            self.0.store(false, Ordering::SeqCst);
            Ok(Fragile(self.0.clone()))
        }
    }

    /// Refuses every write under a token, declaring the grant lost (what the etcd store does
    /// when etcd's fencing check fails).
    struct FencingStore(Arc<AtomicBool>, Disk);

    impl Store for FencingStore {
        type Records = Records;
        fn open(&mut self) -> Result<Records, StoreFailure> {
            Ok(lock(&self.1.0).clone().unwrap_or_default())
        }
        fn commit(&mut self, _: &Records, fence: Option<u64>) -> Result<(), StoreFailure> {
            assert_eq!(fence, Some(7), "the grant's token reaches the store");
            self.0.store(true, Ordering::SeqCst);
            Err(StoreFailure::new(
                "memory",
                "commit",
                "fencing token refused",
            ))
        }
        fn close(&mut self) {}
    }

    #[test]
    fn a_grant_known_lost_withdraws_the_scope_at_once_and_refresh_takes_a_new_one() {
        let lost = Arc::new(AtomicBool::new(false));
        let disk = Disk(Arc::new(Mutex::new(Some(Records::from([("k".into(), 1)])))));
        let a = Authority::new(FragileArbiter(lost.clone()), MemStore { disk });
        a.acquire(&Budget::no_wait()).unwrap();
        assert_eq!(a.scope().get("k"), Some(&1));
        lost.store(true, Ordering::SeqCst);
        // No write needed: reading the scope or the state already fails closed.
        assert!(a.scope().is_empty());
        assert_eq!(a.state(), State::Contended);
        assert!(matches!(
            a.mutate(set("k", 2)),
            Err(AuthorityError::Contended { .. })
        ));
        a.refresh().unwrap();
        assert_eq!(a.scope().get("k"), Some(&1));
    }

    #[test]
    fn a_write_refused_for_its_token_is_contention_not_a_storage_failure() {
        let lost = Arc::new(AtomicBool::new(false));
        let disk = Disk(Arc::new(Mutex::new(Some(Records::new()))));
        let a = Authority::new(
            FragileArbiter(lost.clone()),
            FencingStore(lost, disk.clone()),
        );
        a.acquire(&Budget::no_wait()).unwrap();
        let err = a.mutate(set("k", 1)).unwrap_err();
        assert!(matches!(err, AuthorityError::Contended { .. }), "{err:?}");
        assert_eq!(a.state(), State::Contended);
        assert!(a.scope().is_empty());
        assert_eq!(lock(&disk.0).as_ref().unwrap().get("k"), None);
    }

    #[cfg(not(target_os = "wasi"))] // threads race here: wasm32-wasip1 has one
    #[test]
    fn concurrent_mutations_lose_no_update() {
        let fx = Fixture::new();
        let a = Arc::new(fx.stack("a"));
        a.acquire(&Budget::no_wait()).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let a = a.clone();
                thread::spawn(move || {
                    let key = format!("k{}", i % 2);
                    for _ in 0..50 {
                        a.mutate(|r: &mut Records| *r.entry(key.clone()).or_default() += 1)
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let disk = lock(&fx.disk.0).clone().unwrap();
        assert_eq!(disk.get("k0"), Some(&200));
        assert_eq!(disk.get("k1"), Some(&200));
    }
}
