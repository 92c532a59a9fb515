//! `Lease` and `holders`: the library's [`MountLease`] (the kernel's lease in the mode asked
//! for, or the record lease a mount whose locks stay on each host calls for when
//! `onSharedMount` chose one) behind one class.
//!
//! A wait is the library's tokio driver polled on the JS thread (`drive.rs`): no thread of
//! libuv's pool, no thread per waiter, and no runtime worker between the grant and the event
//! loop. An
//! `AbortSignal` reaches the wait through a [`Waiter`]'s [`CancelToken`], which ends the
//! kernel wait at once; napi's own signal support would only cancel a task not yet started.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use leasehold::{Budget, CancelToken, Holders, LeaseOptions, LockMode, MountLease, SharedMount};
use napi::bindgen_prelude::spawn_blocking;
use napi::{Either, Env, JsFunction};
use napi_derive::napi;

use crate::drive;
use crate::errors::{self, Failure};

/// The options of `Lease.acquire` and `Lease.tryAcquire` the native side sees (the
/// `AbortSignal` stays in JavaScript and reaches the wait through a [`Waiter`]).
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct NativeLeaseOptions {
    /// Absent: wait without limit; 0: try once.
    pub timeout_ms: Option<f64>,
    /// A shared (reader) lease.
    pub shared: Option<bool>,
    /// `LeaseOptions::allow_network_filesystem`.
    pub allow_network_fs: Option<bool>,
    /// `LeaseOptions::allow_shared_state`.
    pub allow_shared_state: Option<bool>,
    /// `onSharedMount: { record: { ttlMs } }`'s TTL: `LeaseOptions::on_shared_mount` with
    /// `SharedMount::Record` (absent: refuse, the default).
    pub record_ttl_ms: Option<f64>,
}

impl NativeLeaseOptions {
    /// The library's options; a record TTL that is no positive number of milliseconds is
    /// refused, naming the option.
    fn lease_options(&self) -> Result<LeaseOptions, Failure> {
        Ok(opt_ins(self.allow_network_fs, self.allow_shared_state)
            .on_shared_mount(shared_mount(self.record_ttl_ms)?))
    }

    /// Whether a record lease was chosen: the acquisition is then the library's
    /// `acquire_mount_lease`, which decides from the mount which lease to take.
    fn record(&self) -> bool {
        self.record_ttl_ms.is_some()
    }

    fn mode(&self) -> LockMode {
        match self.shared.unwrap_or(false) {
            true => LockMode::Shared,
            false => LockMode::Exclusive,
        }
    }
}

/// The library's options for the two opt-ins every face that opens a lock file takes:
/// `allowNetworkFs` and `allowSharedState` (absent: refused, as by default).
pub(crate) fn opt_ins(
    allow_network_fs: Option<bool>,
    allow_shared_state: Option<bool>,
) -> LeaseOptions {
    LeaseOptions::new()
        .allow_network_filesystem(allow_network_fs.unwrap_or(false))
        .allow_shared_state(allow_shared_state.unwrap_or(false))
}

/// What `onSharedMount` chose, as the JavaScript wrapper passes it (`recordTtlMs`, absent
/// for `'refuse'`): the library's [`SharedMount`]. A TTL that is no positive number of
/// milliseconds is refused, naming the option. The one reading of it for `Lease`, `Document`,
/// `Registry` and `SessionLog`.
pub(crate) fn shared_mount(record_ttl_ms: Option<f64>) -> Result<SharedMount, Failure> {
    let Some(ms) = record_ttl_ms else {
        return Ok(SharedMount::Refuse);
    };
    match Duration::try_from_secs_f64(ms / 1000.0) {
        Ok(ttl) if ms > 0.0 => Ok(SharedMount::Record { ttl }),
        _ => Err(Failure::invalid(format!(
            "onSharedMount.record.ttlMs {ms} is not a positive number of milliseconds; give the record lease's TTL (how long a holder that stopped renewing keeps waiters on other hosts out), or leave onSharedMount out to refuse such a mount"
        ))),
    }
}

/// The opt-ins of a store's `open` (`SessionLog.open`, `ResultStore.open`): what its leases
/// and its checks of the store's directories accept (`opt_ins`).
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct NativeOptIns {
    /// `LeaseOptions::allow_network_filesystem`.
    pub allow_network_fs: Option<bool>,
    /// `LeaseOptions::allow_shared_state`.
    pub allow_shared_state: Option<bool>,
    /// `onSharedMount: { record: { ttlMs } }`'s TTL (`shared_mount`; absent: refuse).
    pub record_ttl_ms: Option<f64>,
}

impl NativeOptIns {
    pub(crate) fn lease_options(options: Option<&NativeOptIns>) -> Result<LeaseOptions, Failure> {
        match options {
            None => Ok(LeaseOptions::new()),
            Some(o) => Ok(opt_ins(o.allow_network_fs, o.allow_shared_state)
                .on_shared_mount(shared_mount(o.record_ttl_ms)?)),
        }
    }
}

/// The wait budget of a `timeoutMs` (absent or `Infinity`: unlimited; 0: try once), with
/// `cancel` attached: the library's reading of a timeout ([`Budget::from_timeout_secs`]), in
/// milliseconds, its refusal worded with this option's name.
pub(crate) fn budget(
    timeout_ms: Option<f64>,
    cancel: Option<&CancelToken>,
) -> Result<Budget, Failure> {
    let budget = match timeout_ms {
        None => Budget::unlimited(),
        Some(ms) => Budget::from_timeout_secs(ms / 1000.0).map_err(|_| {
            // Spelled as JavaScript spells it (Rust writes -inf).
            let ms = match ms {
                f64::NEG_INFINITY => "-Infinity".to_string(),
                ms => ms.to_string(),
            };
            Failure::invalid(format!(
                "timeoutMs {ms} is not a number of milliseconds ≥ 0; leave it out, or pass Infinity, to wait without limit"
            ))
        })?,
    };
    Ok(match cancel {
        Some(token) => budget.with_cancel(token.clone()),
        None => budget,
    })
}

/// A held lease, exclusive or shared. Dropping it (`release()`, `Symbol.dispose`, or the
/// garbage collector finalizing the object) releases the lease; the kernel releases it when
/// the process dies. A kernel lease never expires; a record lease ends a TTL after its
/// holder stopped renewing it (at once for a successor on this host once the holder died).
#[napi]
pub struct NativeLease {
    held: Arc<Mutex<MountLease>>,
    path: String,
    shared: bool,
    fencing_token: Option<i64>,
}

impl NativeLease {
    fn new(lease: MountLease) -> NativeLease {
        NativeLease {
            path: lease.path().to_string_lossy().into_owned(),
            shared: lease.mode() == LockMode::Shared,
            // Tokens count grants: far below 2^53, where a JavaScript number stops being exact.
            fencing_token: lease.fencing_token().and_then(|t| i64::try_from(t).ok()),
            held: kept(lease),
        }
    }

    fn held(&self) -> MutexGuard<'_, MountLease> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

thread_local! {
    /// The leases made on this JS thread (always the one whose environment gets them: a
    /// wait is polled there, `drive.rs`), for [`release_all`].
    static MADE: RefCell<Vec<Weak<Mutex<MountLease>>>> = const { RefCell::new(Vec::new()) };
}

/// `held`, remembered for [`release_all`] (entries of leases gone since are dropped here).
fn kept(held: MountLease) -> Arc<Mutex<MountLease>> {
    drive::at_teardown(release_all);
    let held = Arc::new(Mutex::new(held));
    MADE.with(|made| {
        let mut made = made.borrow_mut();
        made.retain(|w| w.strong_count() > 0);
        made.push(Arc::downgrade(&held));
    });
    held
}

/// This thread's environment is being torn down (a worker terminated, the process exiting):
/// every lease made on it is released now. Its object's finalizer would release it too —
/// but a worker terminated while a lease was being handed to JavaScript can lose the object
/// half-made, and the lease with it, which then stayed held by this process for good.
pub(crate) fn release_all() {
    let made = MADE.with(|made| std::mem::take(&mut *made.borrow_mut()));
    for held in made.iter().filter_map(Weak::upgrade) {
        held.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .release();
    }
}

#[napi]
impl NativeLease {
    /// The lock file's path, as given.
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.path.clone()
    }

    /// Whether this is a shared lease.
    #[napi(getter)]
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// The fencing token of a record lease's grant (it grows with every grant); `null` for a
    /// kernel lease. It is `T·2^20 + k`: `T` the server's grant, `k` the hand-overs on one host
    /// since; compare tokens as numbers only.
    #[napi(getter)]
    pub fn fencing_token(&self) -> Option<i64> {
        self.fencing_token
    }

    /// The library's `verify()`: `LOST` when the lock file was removed or replaced, or after
    /// release; for a record lease, when its validity ran out and a renewal found the record
    /// taken over (it reads the record once a third of the TTL is spent).
    #[napi]
    pub fn verify(&self) -> Option<Failure> {
        self.held().verify().err().map(|e| errors::lease(&e))
    }

    /// Releases the lease (closes its descriptor). Idempotent.
    #[napi]
    pub fn release(&mut self) {
        self.held().release();
    }
}

/// Takes the lease on `path` if it can be had right now: the lease, `null` when another
/// holder has it (no holder look-up: `tryAcquire` answers `null`, and `acquire` goes on to
/// wait), or a failure.
#[napi]
pub fn try_acquire(
    env: Env,
    path: String,
    options: Option<NativeLeaseOptions>,
) -> napi::Result<Option<Either<NativeLease, Failure>>> {
    drive::hook(&env)?;
    Ok(try_acquire_hooked(path, options))
}

fn try_acquire_hooked(
    path: String,
    options: Option<NativeLeaseOptions>,
) -> Option<Either<NativeLease, Failure>> {
    let options = options.unwrap_or_default();
    // `Lease.acquire` tries here first: an unusable timeout must not take the lease.
    if let Err(f) = budget(options.timeout_ms, None) {
        return Some(Either::B(f));
    }
    let opts = match options.lease_options() {
        Ok(opts) => opts,
        Err(f) => return Some(Either::B(f)),
    };
    let got = match options.record() {
        true => opts.try_acquire_mount_lease(&path, options.mode()),
        false => opts
            .try_acquire_mode(&path, options.mode())
            .map(MountLease::Kernel),
    };
    match got {
        Ok(lease) => Some(Either::A(NativeLease::new(lease))),
        Err(e) if e.is_contended() => None,
        Err(e) => Some(Either::B(errors::lease(&e))),
    }
}

/// One cancellable wait (or several): what an `AbortSignal` cancels. Without a signal no token
/// is made (it costs a pipe).
#[napi]
pub struct Waiter {
    token: Option<CancelToken>,
}

#[napi]
impl Waiter {
    /// A waiter; `cancellable`: whether it gets a cancellation token (an `AbortSignal` was
    /// given).
    #[napi(constructor)]
    pub fn new(cancellable: bool) -> napi::Result<Waiter> {
        let token = match cancellable {
            true => Some(CancelToken::new()),
            false => None,
        };
        Ok(Waiter { token })
    }

    /// Ends every wait of this waiter promptly with `CANCELLED` (the signal's 'abort'); a wait
    /// started after it ends at once. Nothing is held afterwards.
    #[napi]
    pub fn cancel(&self) {
        if let Some(token) = &self.token {
            token.cancel();
        }
    }

    /// Takes the lease on `path` within `timeoutMs` on the library's tokio driver, polled on
    /// the JS thread (`drive.rs`): the outcome at once when the first poll settles it, else
    /// `null`, and `done(outcome)` is called when the wait ends.
    #[napi]
    pub fn acquire(
        &self,
        env: Env,
        path: String,
        options: Option<NativeLeaseOptions>,
        done: JsFunction,
    ) -> napi::Result<Option<Either<NativeLease, Failure>>> {
        let options = options.unwrap_or_default();
        let opts = match options.lease_options() {
            Ok(opts) => opts,
            Err(f) => return Ok(Some(Either::B(f))),
        };
        let mode = options.mode();
        if options.record() {
            return self.acquire_mount_lease(&env, path, opts, &options, done);
        }
        let budget = match budget(options.timeout_ms, self.token.as_ref()) {
            Ok(b) => b,
            Err(f) => return Ok(Some(Either::B(f))),
        };
        drive::drive(&env, &done, async move {
            match opts.acquire_mode_async(&path, mode, budget).await {
                Ok(lease) => Either::A(NativeLease::new(MountLease::Kernel(lease))),
                Err(e) => Either::B(errors::lease(&e)),
            }
        })
    }

    /// `acquire` with a record lease chosen: the library's `acquire_mount_lease`, whose wait
    /// across hosts polls and sleeps, on a thread of napi's blocking pool (never the JS
    /// thread, never libuv's pool); its outcome reaches JavaScript as any wait's does. The
    /// wait has a cancellation token of its own when no signal gave one, so that the end of
    /// its environment (a worker terminated) ends it as it ends a kernel wait.
    fn acquire_mount_lease(
        &self,
        env: &Env,
        path: String,
        opts: LeaseOptions,
        options: &NativeLeaseOptions,
        done: JsFunction,
    ) -> napi::Result<Option<Either<NativeLease, Failure>>> {
        let token = self.token.clone().unwrap_or_default();
        let budget = match budget(options.timeout_ms, Some(&token)) {
            Ok(b) => b,
            Err(f) => return Ok(Some(Either::B(f))),
        };
        let mode = options.mode();
        let mut ends = EndsWith(Some(token));
        let wait = spawn_blocking(move || opts.acquire_mount_lease(&path, mode, &budget));
        drive::drive(env, &done, async move {
            let got = wait.await;
            ends.disarm(); // the wait is over: nothing to end
            match got {
                Ok(Ok(lease)) => Either::A(NativeLease::new(lease)),
                Ok(Err(e)) => Either::B(errors::lease(&e)),
                Err(e) => Either::B(Failure::new(
                    errors::IO,
                    format!("the record lease's wait ended without an outcome: {e}"),
                    None,
                )),
            }
        })
    }

    /// The cancellation token, for the stores' waits.
    pub(crate) fn token(&self) -> Option<&CancelToken> {
        self.token.as_ref()
    }
}

/// Cancels a wait's token when dropped before the wait ended (its future abandoned with its
/// environment).
struct EndsWith(Option<CancelToken>);

impl EndsWith {
    /// The wait has ended: nothing is cancelled on drop.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for EndsWith {
    fn drop(&mut self) {
        if let Some(token) = self.0.take() {
            token.cancel();
        }
    }
}

/// Who holds the lock at `path` (never takes, creates or disturbs a lock): the state
/// (`free`, `held`, `unknown`) and the pids the OS revealed.
#[napi(object)]
pub struct NativeHolders {
    /// `free`, `held` or `unknown`.
    pub state: String,
    /// The holders' pids (for `held`).
    pub pids: Vec<u32>,
}

/// The library's `holders(path)`.
#[napi]
pub fn holders(path: String) -> Either<NativeHolders, Failure> {
    match leasehold::holders(PathBuf::from(path)) {
        Ok(h) => Either::A(NativeHolders {
            state: match &h {
                Holders::Free => "free",
                Holders::Held { .. } => "held",
                Holders::Unknown => "unknown",
            }
            .into(),
            pids: h.pids().to_vec(),
        }),
        Err(e) => Either::B(errors::lease(&e)),
    }
}
