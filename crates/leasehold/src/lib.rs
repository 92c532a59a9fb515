//! # leasehold
//!
//! Cross-process leases over shared durable state. One process at a time holds the lease on a
//! lock file, arbitrated by the kernel: a holder that dies loses it with its process (no TTL, no
//! pid file, no stale-lock guessing), and a live holder is never expropriated. Waiters sleep in
//! the kernel's own lock queue, as fairly as a blocking `flock`, and give up at a deadline or on
//! a [`CancelToken`] without ever leaving the lock taken behind them. The lock file is opened
//! without following a symlink or blocking on a FIFO, and after every lock the locked inode is
//! checked against the path. For processes on several machines, etcd is the arbiter.
//!
//! ## One example per use
//!
//! **Guard a section**, waiting at most 5 s ([`Lease`], [`Budget`]). The timeout's error names
//! the holder (`held by another process (pid 4242)`); [`Lease::verify`] answers, before each
//! durable write, whether the lease is still held on the file at the path.
//!
//! ```
//! use leasehold::{Budget, Lease};
//! use std::time::Duration;
//!
//! fn main() -> leasehold::Result<()> {
//!     let dir = tempfile::tempdir().expect("a temporary directory");
//!     let lease = Lease::acquire(dir.path().join("store.lock"), &Budget::timeout(Duration::from_secs(5)))?;
//!     lease.verify()?; // still ours, on the file at the path: safe to write the store
//!     drop(lease); // released; the kernel releases it too if this process dies
//!     Ok(())
//! }
//! ```
//!
//! **Shared leases** ([`SharedLease`]): readers overlap; a waiting writer holds new readers
//! back, so it gets in once the readers it found have left; there is no upgrade (release, then
//! acquire exclusively).
//!
//! ```
//! use leasehold::{Lease, SharedLease};
//!
//! # #[cfg(not(unix))] fn main() {} // Windows has no shared leases (Error::SharedUnsupported)
//! # #[cfg(unix)]
//! fn main() -> leasehold::Result<()> {
//!     let dir = tempfile::tempdir().expect("a temporary directory");
//!     let path = dir.path().join("index.lock");
//!     let readers = (SharedLease::try_acquire(&path)?, SharedLease::try_acquire(&path)?);
//!     assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
//!     drop(readers);
//!     Lease::try_acquire(&path)?.verify()
//! }
//! ```
//!
//! **Wait asynchronously, cancellably** (feature `tokio`): the wait costs no thread, a
//! [`CancelToken`] ends it from any thread, and dropping the future abandons it as well.
//!
//! ```
//! use leasehold::{Budget, CancelToken, Classify, ErrorClass, Lease};
//!
//! # #[cfg(feature = "tokio")]
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> leasehold::Result<()> {
//!     let dir = tempfile::tempdir().expect("a temporary directory");
//!     let (path, token) = (dir.path().join("job.lock"), CancelToken::new());
//!     let _holder = Lease::try_acquire(&path)?;
//!     let budget = Budget::unlimited().with_cancel(token.clone());
//!     let (waited, ()) = tokio::join!(Lease::acquire_async(&path, &budget), async { token.cancel() });
//!     assert_eq!(waited.unwrap_err().class(), ErrorClass::Cancelled);
//!     Ok(())
//! }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```
//!
//! **One writer for a whole store** ([`patterns::authority`]): the [`Authority`] takes the
//! lease, then opens and loads the store, publishes its scope, serves mutations (each durable
//! before it returns), and on teardown drains them, closes the store and releases the lease
//! last. A process that is not the authority sees an empty scope and every mutation refused.
//!
//! [`Authority`]: patterns::authority::Authority
//!
//! ```
//! use leasehold::Budget;
//! use leasehold::patterns::authority::{Authority, KernelArbiter, Store, StoreFailure};
//! use leasehold::patterns::durable::replace_file;
//! use std::collections::BTreeSet;
//! use std::path::PathBuf;
//!
//! /// A store of names, one per line, rewritten whole and atomically.
//! struct Names(PathBuf);
//!
//! impl Store for Names {
//!     type Records = BTreeSet<String>;
//!     fn open(&mut self) -> Result<BTreeSet<String>, StoreFailure> {
//!         match std::fs::read_to_string(&self.0) {
//!             Ok(text) => Ok(text.lines().map(String::from).collect()),
//!             Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeSet::new()),
//!             Err(e) => Err(StoreFailure::new(self.0.display().to_string(), "cannot read", e)),
//!         }
//!     }
//!     fn commit(&mut self, names: &BTreeSet<String>, _fence: Option<u64>) -> Result<(), StoreFailure> {
//!         let text: String = names.iter().map(|n| format!("{n}\n")).collect();
//!         replace_file(&self.0, text.as_bytes())
//!             .map_err(|e| StoreFailure::new(self.0.display().to_string(), "cannot write", e))
//!     }
//!     fn close(&mut self) {}
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dir = tempfile::tempdir()?;
//!     let lock = KernelArbiter::new(dir.path().join("names.lock"));
//!     let authority = Authority::new(lock, Names(dir.path().join("names.txt")));
//!     authority.acquire(&Budget::no_wait())?; // Contended while another process is the writer
//!     authority.mutate(|names| names.insert("alice".to_string()))?; // durable when it returns
//!     assert!(authority.scope().contains("alice")); // empty whenever we are not the writer
//!     authority.teardown(); // drain, close the store, release the lease last
//!     Ok(())
//! }
//! ```
//!
//! **One owner per record** ([`patterns::keyed`]): a lease per ID, its lock file named by the
//! SHA-256 of the trimmed ID in a versioned namespace; an ID without a record allocates nothing.
//!
//! ```
//! use leasehold::Budget;
//! use leasehold::patterns::keyed::KeyedLeases;
//! use std::time::Duration;
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let root = tempfile::tempdir()?;
//!     let jobs = KeyedLeases::new(root.path(), ".job-locks-v1");
//!     assert!(jobs.try_acquire("job-9", |_| false).is_err()); // no record: nothing created
//!     let lease = jobs.acquire(" job-7 ", &Budget::timeout(Duration::from_secs(2)), |_| true)?;
//!     assert_eq!(lease.key(), "job-7"); // reinspect, change and clean up its record now
//!     Ok(())
//! }
//! ```
//!
//! **An append-only log** ([`patterns::append`]): one writer — the lease holder, verified before
//! every record — one `write` and one `fsync` per record, a torn tail cut away before the next
//! append, and readers that never touch the lock.
//!
//! ```
//! use leasehold::patterns::append::{AppendLog, Durability, LogReader};
//! use leasehold::{Lease, LockDir};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let tmp = tempfile::tempdir()?;
//!     let dir = LockDir::open(tmp.path())?;
//!     let lease = Lease::try_acquire(tmp.path().join("log.lock"))?;
//!     let (mut log, _torn) = AppendLog::open_at(&dir, "log.jsonl", &lease, Durability::EveryRecord)?;
//!     log.append(&lease, br#"{"n":1}"#)?;
//!     let reader = LogReader::open_at(&dir, "log.jsonl")?.expect("the log exists");
//!     assert_eq!(reader.collect::<Result<Vec<_>, _>>()?, [br#"{"n":1}"#.to_vec()]);
//!     Ok(())
//! }
//! ```
//!
//! **Replace a file durably** ([`patterns::durable`]): temporary file in the same directory →
//! write → `fsync` → rename → `fsync` of the directory, so a crash leaves the old or the new
//! content, never a torn one.
//!
//! ```
//! use leasehold::patterns::durable::replace_file;
//!
//! fn main() -> std::io::Result<()> {
//!     let dir = tempfile::tempdir()?;
//!     let path = dir.path().join("state.json");
//!     replace_file(&path, br#"{"version":1}"#)?;
//!     assert_eq!(std::fs::read(&path)?, br#"{"version":1}"#);
//!     Ok(())
//! }
//! ```
//!
//! **On several machines** (feature `etcd`, POSIX): the etcd arbiter plays the kernel's part —
//! it implements the authority's [`Arbiter`](patterns::authority::Arbiter) — and each grant
//! carries a fencing token (its lock key's create revision) that etcd checks in the same
//! transaction as a write, so a writer paused past its TTL is refused by etcd itself.
//!
//! ```no_run
//! # #[cfg(all(feature = "etcd", unix))]
//! # fn main() -> leasehold::Result<()> {
//! use leasehold::arbiters::etcd::{EtcdArbiter, Fenced};
//! use leasehold::{Budget, patterns::authority::Arbiter};
//! use std::time::Duration;
//!
//! let etcd = EtcdArbiter::connect("http://10.0.0.5:2379,http://10.0.0.6:2379", "app/lock", Duration::from_secs(10))?;
//! let grant = etcd.acquire(&Budget::timeout(Duration::from_secs(30)))?;
//! let written = etcd.put_fenced(grant.token(), "app/state", b"v2".to_vec())?;
//! assert_eq!(written, Fenced::Written); // Refused: the lock is someone else's now
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "etcd", unix)))]
//! # fn main() {}
//! ```
//!
//! The stores of `leasehold-stores` — a multi-root workspace registry under an authority, session
//! logs, an isolated result store under per-ID leases — are built of these patterns, and the
//! `leasehold` command-line tool drives them.
//!
//! ## Layers
//!
//! Each uses only those below it: the platform boundary (`sys`, the only code that makes
//! system calls); the primitive — [`Lease`], [`SharedLease`], [`LeaseHandle`] (a kept-open
//! lock file for cheap re-acquisition, whose lease is a [`HandleGuard`]), [`LockDir`],
//! [`holders`] — with its options ([`LeaseOptions`]), budgets ([`Budget`], [`CancelToken`])
//! and typed errors ([`Error`]; [`Classify::class`] tells contention, bad input,
//! cancellation and failure apart); the
//! [`patterns`] built on it; and the etcd arbiter (`arbiters`, feature `etcd`), which plugs
//! into the authority.
//!
//! ## Features
//!
//! * `tokio` (off by default, so the blocking library pulls in no runtime): `acquire_async`
//!   on [`Lease`], [`SharedLease`], [`LeaseOptions`] and `KeyedLeases`, and the authority's
//!   async faces over an `AsyncArbiter`. Waits never block an executor thread and cost no
//!   thread per waiter; dropping the future abandons the wait.
//! * `etcd` (POSIX): `arbiters::etcd`, the etcd v3 arbiter with fencing tokens; it runs its
//!   client on a small private runtime, so its blocking face needs no runtime of yours.
//!
//! ## Platforms
//!
//! Linux, macOS and the BSDs share the POSIX primitive (`flock` on a lock file; Linux adds
//! `/proc/locks` for holders and waiting marks for fair hand-over — both switched off by
//! `RUSTFLAGS="--cfg leasehold_portable"`, which runs the macOS/BSD code path on Linux). On Windows a lease is a named
//! kernel semaphore, `Local\leasehold-<hex sha256(real path, case-folded)>`, whose existence is
//! the lock: no lock file is created or held, the kernel destroys the object when its holder
//! closes it or dies, and [`holders`] answers [`Holders::Unknown`]. The public names are the
//! same; POSIX-only pieces (descriptor inheritance) are `cfg(unix)`. WASI (`wasm32-wasip1`)
//! has no inter-process lock at all: there a lease is a claim in this process's claim table,
//! granted only after [`LeaseOptions::single_process`] declares the program the only user of
//! its directories (else [`Error::Unsupported`]); `wasm32-unknown-unknown`, which has no file
//! system, is refused at compile time.
//!
//! ## `unsafe`
//!
//! Denied in every crate of the workspace (`#![deny(unsafe_code)]` at each crate root) and
//! allowed only in the few platform modules under `sys/` that cannot do without it (named
//! semaphores on Windows; letting go of descriptors by number in a forked child), each block
//! with a `// SAFETY:` argument; the policy and its list are stated once, in the repository's
//! `docs/design.md` ("`unsafe`").
//!

#![deny(unsafe_code)]
#![deny(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly) marks each item with the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Layers, lowest first; each module imports only from the ones before it:
// mutex (the one mutex lock: nothing) → kind (FileId, FileKind, Holders: nothing) → sys (the platform boundary: kind) →
// holders (HolderInfo, look-ups: kind, sys) → error (kind, holders) → budget (sys, error) →
// lease (the primitive and its options: all of these) → record (the record lease: lease) →
// mount_lease (MountLease, the lease a mount calls for: lease, record) → patterns (built on the primitive) →
// arbiters (the etcd arbiter, behind the authority's `Arbiter`/`AsyncArbiter`). CONTRIBUTING.md
// says how the layering is checked (no import cycle between modules).
#[cfg(all(feature = "etcd", unix))]
pub mod arbiters;
mod budget;
mod error;
mod holders;
mod kind;
mod lease;
mod mount;
mod mount_lease;
mod mutex;
pub mod patterns;
#[cfg(unix)]
mod record;
mod sys;

pub use budget::{Budget, CancelToken, InvalidTimeout};
pub use error::{Classify, Error, ErrorClass, NotWaited, OptIn, Result};
pub use holders::HolderInfo;
pub use kind::{FileId, FileKind, Holders};
#[cfg(unix)]
pub use lease::unlock_descriptor;
pub use lease::{
    AnyLease, HandleGuard, Lease, LeaseHandle, LeaseOptions, LockDir, LockMode, MAX_REOPENS,
    SharedLease, SharedMount, check_trusted, holders,
};
#[cfg(unix)]
pub use lease::{after_fork_in_child, after_fork_in_parent, before_fork};
pub use mount::MountLocks;
pub use mount_lease::MountLease;
#[cfg(unix)]
pub use record::{RecordHolder, RecordLease};

/// A fresh temporary directory for unit tests. WASI has no system temporary directory
/// (`std::env::temp_dir` panics there), so on `wasm32-wasip1` it is made under `TMPDIR`,
/// which the test runner (`.ci/wasi-run.mjs`) preopens.
#[cfg(test)]
pub(crate) fn test_dir() -> tempfile::TempDir {
    #[cfg(target_os = "wasi")]
    let dir = tempfile::tempdir_in(std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into()));
    #[cfg(not(target_os = "wasi"))]
    let dir = tempfile::tempdir();
    dir.expect("a temporary directory")
}
