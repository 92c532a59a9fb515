//! Keyed admission: [`KeyedLeases::acquire`] and its async twin, and the decisions they share
//! ([`Admission`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    COLLECTOR_LOCK, Dirs, Door, KeyError, KeyLease, KeyedLeases, Namespace, lock_name, normalize,
};
use crate::lease::claim::Mode;
use crate::{Budget, Error, Lease, LeaseOptions, LockDir};

/// However short the caller's budget (even "try once"), an acquisition waits this long for a
/// collection that holds the collector lock: a collection holds it for one batch (a
/// non-blocking lock, a listing of the live keys and unlinks), and "the key is busy" must
/// mean that a key holder has it, not that a collector was passing by.
const COLLECTOR_GRACE: Duration = Duration::from_secs(1);

impl KeyedLeases {
    /// Takes `key`'s lease if it is free right now. See [`acquire`](Self::acquire).
    pub fn try_acquire(
        &self,
        key: &str,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        self.acquire(key, &Budget::no_wait(), known)
    }

    /// Takes `key`'s lease, waiting within `budget` (and [`max_wait`](Self::max_wait)).
    ///
    /// `known` is asked, with the trimmed key, only when no lock file exists yet: `true`
    /// allows the lock file (and the namespace directory) to be created. When it answers
    /// `false`, nothing is created and the result is [`KeyError::Unknown`]. Whatever `known`
    /// answered, the caller must reinspect its record under the returned lease.
    pub fn acquire(
        &self,
        key: &str,
        budget: &Budget,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        let mut admission = Admission::new(self, key, budget, known)?;
        loop {
            match admission.next()? {
                Next::Admitted(lease) => return Ok(lease),
                Next::Wait(wait) => admission.waited(wait.run(self.options)),
            }
        }
    }

    /// [`acquire`](Self::acquire) for async code (feature `tokio`): the same admission
    /// (`Admission::next` decides; only the waits differ), but a wait never blocks an
    /// executor thread and costs no thread of its own (see
    /// [`LeaseOptions::acquire_at_async`]). Dropping the future abandons the wait and leaves
    /// the key free. `known` and the directory opens run inline: they are a few local,
    /// non-blocking metadata calls. The future owns the budget (pass it by value, or
    /// `&budget`), as for [`LeaseOptions::acquire_async`].
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(
        &self,
        key: &str,
        budget: impl Into<Budget>,
        known: impl FnOnce(&str) -> bool,
    ) -> Result<KeyLease, KeyError> {
        let mut admission = Admission::new(self, key, &budget.into(), known)?;
        loop {
            match admission.next()? {
                Next::Admitted(lease) => return Ok(lease),
                Next::Wait(wait) => admission.waited(wait.run_async(self.options).await),
            }
        }
    }
    /// The namespace for a key with no lock file yet: only a key `known` vouches for may
    /// create its lock file (and the namespace directory).
    fn allocate(
        &self,
        dirs: &Dirs,
        key: &str,
        vouch: &mut Vouch<impl FnOnce(&str) -> bool>,
    ) -> Result<Arc<Namespace>, KeyError> {
        if !vouch.ask(key) {
            return Err(KeyError::Unknown {
                key: key.to_string(),
                root: self.root.clone(),
            });
        }
        if let Some(ns) = &dirs.ns {
            return Ok(ns.clone());
        }
        let ns = dirs.root.child(&self.namespace, true)?;
        let kept = self.keep(dirs.root.clone(), Some(ns));
        kept.ns.clone().ok_or_else(|| {
            KeyError::Lease(Error::NotFound {
                path: self.root.join(&self.namespace),
            })
        })
    }

    /// The caller's budget, started now (its steps — the collector lock, the try, the wait
    /// in the key's queue — share it), cut to [`max_wait`](Self::max_wait).
    fn capped(&self, budget: &Budget) -> Budget {
        match self.max_wait {
            Some(cap) => budget.at_most(cap),
            None => budget.started(),
        }
    }
}

/// One keyed admission: all its decisions, made by [`next`](Self::next), which never
/// blocks; the blocking and the async face carry out the waits it asks for ([`Wait`]) and
/// hand back what came of them ([`waited`](Self::waited)).
///
/// The order of decisions, and why:
///
/// 1. Before anything: the trimmed key, its lock name, the budget capped by
///    [`KeyedLeases::max_wait`], the root and namespace (kept or opened afresh; nothing is
///    created); a namespace that does not exist yet is created only for a key `known`
///    vouches for.
/// 2. One non-blocking try of the key's lock file (created only where allowed), safe by the
///    lease's post-lock check alone; a missing file makes the key allocated now (if `known`
///    vouches) and tried again.
/// 3. Busy: was it a collection passing by? Enter the collector lock, shared, on a kept
///    descriptor, without waiting; held by a collection: wait for it (at least
///    [`COLLECTOR_GRACE`], whatever the budget). Under it, try the key once more, and leave.
/// 4. Still busy: wait in the key's queue, outside the collector lock. A wait that woke on a
///    file the collector removed meanwhile goes back to 2 (it never reopens the path by
///    itself); a key whose file is gone is allocated again only if `known` vouches.
/// 5. Held: admitted, unless the budget was cancelled meanwhile.
struct Admission<'a, 'k, F> {
    leases: &'a KeyedLeases,
    key: &'k str,
    name: String,
    budget: Budget,
    /// "Try once" for the non-blocking tries (made once: a clock read each time measured
    /// a few percent of an acquisition).
    once: Budget,
    /// The budget of a wait for the collector lock (set when a collection is first met).
    grace: Option<Budget>,
    vouch: Vouch<F>,
    dirs: Arc<Dirs>,
    /// Where the next try goes.
    at: At,
    /// The collector-lock handle in use (back to its namespace when the admission ends).
    door: Option<(Arc<Namespace>, Door)>,
    /// What the last wait came to, for the next step.
    got: Option<Waited>,
}

/// Where the next try goes: the namespace, and whether a missing lock file may be created.
struct At {
    ns: Arc<Namespace>,
    create: bool,
}

/// What [`Admission::next`] came to.
enum Next {
    Admitted(KeyLease),
    /// Carry out this wait and hand its outcome to [`Admission::waited`].
    Wait(Wait),
}

/// A wait an admission asks its face to carry out.
enum Wait {
    /// For a collection to release the collector lock: take it shared.
    Collector { dir: LockDir, budget: Budget },
    /// In a key's queue.
    Key {
        dir: LockDir,
        name: String,
        create: bool,
        budget: Budget,
    },
}

/// What a [`Wait`] came to.
enum Waited {
    Collector(crate::Result<Lease>),
    Key(crate::Result<Lease>),
}

impl Wait {
    fn run(self, options: LeaseOptions) -> Waited {
        match self {
            Wait::Collector { dir, budget } => Waited::Collector(
                options
                    .create(true)
                    .acquire_at_mode(&dir, COLLECTOR_LOCK, &budget, Mode::Shared),
            ),
            Wait::Key {
                dir,
                name,
                create,
                budget,
            } => Waited::Key(
                (options.create(create).follow_replaced(false)).acquire_at(&dir, &name, &budget),
            ),
        }
    }

    #[cfg(feature = "tokio")]
    async fn run_async(self, options: LeaseOptions) -> Waited {
        match self {
            Wait::Collector { dir, budget } => Waited::Collector(
                options
                    .create(true)
                    .acquire_at_mode_async(&dir, COLLECTOR_LOCK, &budget, Mode::Shared)
                    .await,
            ),
            Wait::Key {
                dir,
                name,
                create,
                budget,
            } => Waited::Key(
                options
                    .create(create)
                    .follow_replaced(false)
                    .acquire_at_async(&dir, &name, &budget)
                    .await,
            ),
        }
    }
}

/// What one try of the key came to.
enum Try {
    Held(Lease),
    /// Try again at once (the lock file was missing and may now be created).
    Again,
    /// The key is busy: wait in its queue.
    Busy(Error),
    /// A collection holds the collector lock: wait for it.
    Collecting,
}

impl<'a, 'k, F: FnOnce(&str) -> bool> Admission<'a, 'k, F> {
    fn new(
        leases: &'a KeyedLeases,
        key: &'k str,
        budget: &Budget,
        known: F,
    ) -> Result<Self, KeyError> {
        let key = normalize(key)?;
        if budget.cancel_token().is_some_and(|t| t.is_cancelled()) {
            // Cancelled before it started: nothing is taken, not even for an instant.
            return Err(KeyError::Lease(Error::Cancelled {
                path: leases.lock_path(key),
            }));
        }
        let name = lock_name(key);
        let now = Instant::now();
        let Some(dirs) = leases.dirs(now)? else {
            return Err(KeyError::Unknown {
                key: key.to_string(),
                root: leases.root.clone(),
            });
        };
        let mut vouch = Vouch::new(known);
        // The namespace, when it exists, is tried first with `create(false)`: the open itself
        // answers whether the key's lock file exists, which saves a lookup in a directory
        // that may hold a lock file for every key ever seen. (On Windows, which keeps no lock
        // files, that answer is "no" unless someone left a file of that name.)
        let at = match &dirs.ns {
            Some(ns) => At {
                ns: ns.clone(),
                create: false,
            },
            None => At {
                ns: leases.allocate(&dirs, key, &mut vouch)?,
                create: true,
            },
        };
        Ok(Admission {
            leases,
            key,
            name,
            budget: leases.capped(budget),
            // Started here, so that a busy try reads as a single try (not a passed deadline).
            once: Budget::no_wait().started(),
            grace: None,
            vouch,
            dirs,
            at,
            door: None,
            got: None,
        })
    }

    /// Does what is due without blocking, and says what the face should do next.
    fn next(&mut self) -> Result<Next, KeyError> {
        loop {
            let tried = match self.got.take() {
                Some(Waited::Key(waited)) => self.after_wait(waited)?,
                Some(Waited::Collector(entered)) => {
                    let _entered = entered?;
                    self.try_key()?
                }
                None => self.first_try()?,
            };
            match tried {
                Try::Held(lease) => return self.admit(lease).map(Next::Admitted),
                Try::Again => {}
                Try::Busy(e) => {
                    // Try-once: the try was the whole wait.
                    if self.budget.deadline().is_some_and(|d| d <= Instant::now()) {
                        return Err(e.into());
                    }
                    return Ok(Next::Wait(Wait::Key {
                        dir: self.at.ns.dir.clone(),
                        name: self.name.clone(),
                        create: self.at.create,
                        budget: self.budget.clone(),
                    }));
                }
                Try::Collecting => {
                    let grace = self.grace.get_or_insert_with(|| graced(&self.budget));
                    return Ok(Next::Wait(Wait::Collector {
                        dir: self.at.ns.dir.clone(),
                        budget: grace.clone(),
                    }));
                }
            }
        }
    }

    /// Takes in what a [`Wait`] came to; [`next`](Self::next) goes on from there.
    fn waited(&mut self, waited: Waited) {
        self.got = Some(waited);
    }

    /// The try of steps 2 and 3: the key once, and if it is busy, once more under the
    /// collector lock.
    fn first_try(&mut self) -> Result<Try, KeyError> {
        match self.try_key()? {
            // Windows keeps no lock files to collect, and its named objects have no shared
            // mode.
            Try::Busy(busy) if !cfg!(windows) => self.confirm_busy(busy),
            tried => Ok(tried),
        }
    }

    /// Enters the collector lock on a kept descriptor (never waiting), tries the key once
    /// more under it, and leaves: a key a collection's batch held a moment ago is then
    /// either free or gone (and known or not), and one still busy has a holder.
    ///
    /// Where the namespace has no collector lock, `busy` stands as it is and nothing is
    /// created (an operation that only waited changes nothing on disk): a collection
    /// creates the collector lock before it locks any key, and it is never removed, so a
    /// key a collection held at the first try would have found it there.
    fn confirm_busy(&mut self, busy: Error) -> Result<Try, KeyError> {
        let mut door = match self.door.take() {
            Some((ns, door)) if Arc::ptr_eq(&ns, &self.at.ns) => (ns, door),
            other => {
                if let Some((ns, door)) = other {
                    ns.keep(door);
                }
                let door = self.at.ns.door(&self.leases.options)?;
                (self.at.ns.clone(), door)
            }
        };
        let tried = match door.1.handle.lock(&self.once) {
            Ok(entered) => {
                let tried = self.try_key();
                drop(entered);
                tried
            }
            Err(e) if e.is_contended() => Ok(Try::Collecting),
            // No collector lock: no collection has begun. The handle is not kept.
            Err(Error::NotFound { .. }) => return Ok(Try::Busy(busy)),
            Err(e) => Err(e.into()),
        };
        self.door = Some(door);
        tried
    }

    /// One non-blocking try of the key's lock file. A missing file is created only for a
    /// key `known` vouches for.
    fn try_key(&mut self) -> Result<Try, KeyError> {
        let tried = (self.leases.options).create(self.at.create).acquire_at(
            &self.at.ns.dir,
            &self.name,
            &self.once,
        );
        match tried {
            Ok(lease) => Ok(Try::Held(lease)),
            Err(e) if e.is_contended() => Ok(Try::Busy(e)),
            // A collection removed the file under the try again and again (each time between
            // the open and the lock): with no collector lock on the way in, that is the
            // collector passing by, not someone else deleting lock files — try afresh.
            Err(Error::Unstable { .. }) => Ok(Try::Again),
            Err(e) => self.missing(e),
        }
    }

    /// The outcome of a wait in the key's queue. A wait does not follow a lock file replaced
    /// under it (`follow_replaced(false)`): the file it waited on was collected, or a
    /// newcomer's replaced it — the admission starts again, and a file a collection's batch
    /// holds sends it to the collector lock (step 3), where the batch ends before the next
    /// try. (A wait that reopened the path by itself could be woken on a collected file
    /// again and again, and give up as "replaced 3 times while locking".)
    fn after_wait(&mut self, waited: crate::Result<Lease>) -> Result<Try, KeyError> {
        match waited {
            Ok(lease) => Ok(Try::Held(lease)),
            Err(Error::Unstable { .. }) => Ok(Try::Again),
            Err(e) => self.missing(e),
        }
    }

    /// A lock file that was not there (never created, or removed by the collector while a
    /// waiter slept on it): the key is allocated now if `known` vouches for it, else it is
    /// unknown. Any other error stands.
    fn missing(&mut self, e: Error) -> Result<Try, KeyError> {
        match e {
            Error::NotFound { .. } if !self.at.create => {
                self.at = At {
                    ns: self
                        .leases
                        .allocate(&self.dirs, self.key, &mut self.vouch)?,
                    create: true,
                };
                Ok(Try::Again)
            }
            e => Err(e.into()),
        }
    }

    /// Admits the operation holding `lease`, unless the budget was cancelled meanwhile: a
    /// cancellation that raced with the lock being granted must still stop the operation
    /// from starting (the lease is then released by the drop).
    fn admit(&self, lease: Lease) -> Result<KeyLease, KeyError> {
        if self.budget.cancel_token().is_some_and(|t| t.is_cancelled()) {
            return Err(Error::Cancelled {
                path: lease.path().to_path_buf(),
            }
            .into());
        }
        Ok(KeyLease {
            key: self.key.to_string(),
            lease,
            ns: self.at.ns.clone(),
        })
    }
}

impl<F> Drop for Admission<'_, '_, F> {
    fn drop(&mut self) {
        if let Some((ns, door)) = self.door.take() {
            ns.keep(door);
        }
    }
}

/// The budget of the wait for the collector lock: the caller's, but at least
/// [`COLLECTOR_GRACE`] (a cancellation still ends it at once).
fn graced(budget: &Budget) -> Budget {
    budget.at_least(COLLECTOR_GRACE)
}

/// The caller's `known`, asked at most once (a key may be found missing twice: before its
/// first try and after a wait that woke on a collected inode).
struct Vouch<F> {
    known: Option<F>,
    answer: bool,
}

impl<F: FnOnce(&str) -> bool> Vouch<F> {
    fn new(known: F) -> Vouch<F> {
        Vouch {
            known: Some(known),
            answer: false,
        }
    }
    fn ask(&mut self, key: &str) -> bool {
        if let Some(known) = self.known.take() {
            self.answer = known(key);
        }
        self.answer
    }
}
