//! The record lease ([`RecordLease`]): a lease for a directory shared between hosts whose
//! mount keeps the kernel's locks on each host ([`MountLocks::HostOnly`]), built only on
//! `rename` and exclusive creation. The protocol and the argument for it are in
//! docs/design.md ("The record lease"); `tests/record_model.rs` checks it exhaustively.
//!
//! In short: the lease directory `P.lease/` beside the lock path `P` holds one *baton*, an
//! empty file whose name is the whole state — `free.<token>`, or
//! `live.<token>.<seq>.<ttl ms>.<host>.<pid>.<start>` — and every step renames it from the
//! exact name observed to one that never existed, which the server does only if nobody moved
//! it since: a compare-and-swap. On one host, a waiter queued for the kernel lock on `P`
//! adopts its predecessor's grant through the host-local pass (`record/pass.rs`) with no
//! server operation at all.
//!
//! [`MountLocks::HostOnly`]: crate::MountLocks::HostOnly

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::holders::HolderInfo;
use crate::kind::{FileId, Holders};
use crate::mutex::lock;
use crate::sys;
use crate::{Lease, LeaseOptions};
use hint::Hint;
use pass::{K_LIMIT, Pass, PassRecord, TOKEN_SHIFT};

/// Who holds (or asks for) a record lease: the host identity (a hash of host name, boot ID,
/// PID namespace and the lock file's device and inode, 16 hex digits), the process and its
/// start time. The lock file's device and inode make the identity its *domain*'s — the
/// processes that share the kernel lock on that file — so that rule (a) (a holder of this
/// identity that is gone is taken over at once) is applied only by a process that holds the
/// very kernel lock every believer of that baton held: another mount of the directory on the
/// same host, or a replaced lock file, is another host (docs/design.md, "The host-local
/// pass").
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    host: String,
    pid: u32,
    /// `/proc/PID/stat`'s start time; 0 where it cannot be read (then no waiter calls the
    /// process gone: only the TTL ends its claim).
    start: u64,
}

impl Identity {
    /// The identity of this process in the domain of the lock file `domain` (`None`: no
    /// domain is known, the identity is the host's alone).
    fn with_host(host: &[u8], domain: Option<FileId>) -> Identity {
        Identity::with_start(host, domain, own_start(std::process::id()))
    }

    /// [`with_host`](Self::with_host) with this process's start time already read.
    fn with_start(host: &[u8], domain: Option<FileId>, start: u64) -> Identity {
        let mut hasher = Sha256::new();
        hasher.update(host);
        if let Some(id) = domain {
            hasher.update(format!("\0{}\0{}", id.dev, id.ino));
        }
        let digest = hasher.finalize();
        let host = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        Identity {
            host,
            pid: std::process::id(),
            start,
        }
    }
}

/// This process's start time, as a waiter of this host reads it; 0 where `/proc` is
/// another PID namespace's (it would read another process's).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn own_start(pid: u32) -> u64 {
    match sys::proc_is_own() {
        true => sys::process_start(pid).unwrap_or(0),
        false => 0,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn own_start(_pid: u32) -> u64 {
    0
}

/// Whether the process `pid` that started at `start` is gone, judged from this host; false
/// whenever that cannot be told for sure.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn gone(pid: u32, start: u64) -> bool {
    start != 0 && sys::proc_is_own() && sys::process_start(pid) != Some(start)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn gone(_pid: u32, _start: u64) -> bool {
    false
}

/// The baton's name, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Baton {
    Free {
        token: u64,
    },
    Live {
        token: u64,
        seq: u64,
        ttl: Duration,
        holder: Identity,
    },
}

impl Baton {
    fn parse(name: &str) -> Option<Baton> {
        let mut f = name.split('.');
        match f.next()? {
            "free" => {
                let token = f.next()?.parse().ok()?;
                f.next().is_none().then_some(Baton::Free { token })
            }
            "live" => {
                let token = f.next()?.parse().ok()?;
                let seq = f.next()?.parse().ok()?;
                let ttl = Duration::from_millis(f.next()?.parse().ok()?);
                let host = f.next()?;
                if host.len() != 16 || !host.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                let pid = f.next()?.parse().ok()?;
                let start = f.next()?.parse().ok()?;
                f.next().is_none().then(|| Baton::Live {
                    token,
                    seq,
                    ttl,
                    holder: Identity {
                        host: host.to_owned(),
                        pid,
                        start,
                    },
                })
            }
            _ => None,
        }
    }

    fn name(&self) -> String {
        match self {
            Baton::Free { token } => format!("free.{token}"),
            Baton::Live {
                token,
                seq,
                ttl,
                holder,
            } => format!(
                "live.{token}.{seq}.{}.{}.{}.{}",
                ttl.as_millis(),
                holder.host,
                holder.pid,
                holder.start
            ),
        }
    }
}

/// A lease held through the record protocol (see the module's and docs/design.md's
/// descriptions). A thread of its own renews it every third of the TTL; its validity is
/// measured on a clock that counts suspended time, and past it (the process was stopped, the
/// machine slept) [`verify`](Self::verify) renews before answering: a renewal that finds the
/// baton moved reports the lease lost ([`Error::LeaseLost`]) — it never panics. Released on
/// drop.
///
/// It belongs to the process that took it. A child forked without `exec` (Python's
/// `os.fork`, `multiprocessing`) inherits a copy, which there says it is not held, as an
/// inherited kernel lease does: [`is_held`](Self::is_held) false,
/// [`verify`](Self::verify) and [`renew`](Self::renew) [`Error::Released`], and
/// [`release`](Self::release) or a drop leave the baton and the lease directory untouched
/// (the parent still holds them) and wait for no renewing thread (it runs in the parent only).
#[derive(Debug)]
pub struct RecordLease {
    held: Arc<Held>,
    /// The process that took it ([`std::process::id`]); in any other (a forked child) the
    /// lease is not held, and its copy lets go without touching the baton.
    owner: u32,
    /// The renewing thread (stopped and joined on drop).
    keeper: Option<std::thread::JoinHandle<()>>,
    /// The kernel lease on the lock path, held for as long (released after the baton is
    /// given back: fields drop after [`Drop::drop`]).
    kernel: Lease,
}

/// The holder of a record lease as its baton names it ([`RecordLease::holder`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordHolder {
    /// The holder's host identity: 16 hex digits of a hash of its host name, boot ID, PID
    /// namespace and lock file's device and inode (two containers on one host are two
    /// hosts, and so are two mounts of the directory on one machine).
    pub host: String,
    /// Whether that identity is the one this process has for this lock path (its host, and
    /// the lock file as seen through this path's mount).
    pub this_host: bool,
    /// The holder's process ID, in its own PID namespace.
    pub pid: u32,
    /// The fencing token of the grant that made its baton (the baton's server token T as
    /// `T·2^20`); a holder that took it over through its host's pass holds this plus its
    /// local count ([`RecordLease::fencing_token`]).
    pub token: u64,
    /// Its heartbeat: how many times it has renewed this grant.
    pub seq: u64,
    /// Its TTL.
    pub ttl: Duration,
}

/// What the holder and its renewing thread share.
#[derive(Debug)]
struct Held {
    path: PathBuf,
    dir: OwnedFd,
    /// Where a clean release leaves the baton's name for this host's next waiter.
    hint: Option<Hint>,
    /// The host-local pass's files (Linux, where the lease directory is known).
    pass: Option<Pass>,
    /// This process's handle on the pass's `.wait` file, for its test at release: the one
    /// it queued with (still holding its shared lock), or one opened when granted.
    wait: Option<OwnedFd>,
    /// The lease directory's device and inode, as a pass record names it.
    lease_dir: Option<FileId>,
    /// The lock file's status-change time, as a pass record names it.
    lock_file: Option<u64>,
    /// The server token T: the token in the baton's name.
    token: u64,
    /// The local count k of a grant adopted through the pass (0 for the server's grant).
    k: u64,
    ttl: Duration,
    me: Identity,
    state: Mutex<HeldState>,
    /// Wakes the renewing thread to stop.
    wake: Condvar,
}

#[derive(Debug)]
struct HeldState {
    /// The baton's name as believed: this holder's own, or the one it adopted.
    name: String,
    seq: u64,
    /// When (on [`sys::boot_clock`]) the last grant or renewal began.
    renewed_at: Duration,
    /// End of validity on [`sys::boot_clock`].
    valid_until: Duration,
    /// The pass record says what this state says (name, base, token, count).
    recorded: bool,
    /// Lost or released: the baton is no longer ours.
    done: bool,
    /// The renewing thread is to stop.
    stop: bool,
}

/// The shortest TTL granted (a shorter one is raised to it): below it, a renewal's round
/// trip could eat the validity it buys.
const MIN_TTL: Duration = Duration::from_millis(30);
/// The longest TTL granted (a longer one is lowered to it), which keeps every deadline
/// computed from it far from overflowing.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The part of the TTL kept back from the holder's validity: clock rates differ between
/// hosts, and a write takes time (see docs/design.md).
fn margin(ttl: Duration) -> Duration {
    ttl / 10
}

impl RecordLease {
    /// Acquires the record lease on the lock path `path` (its lease directory is
    /// `path` + `.lease`, created on first use), waiting within `budget`. It first takes the
    /// kernel lease on `path` itself (network file systems allowed; the ownership rule
    /// applies as to any [`Lease`]), so that this host's waiters queue in the kernel and a
    /// kernel lease on the same path excludes it; then, across hosts, a waiter polls
    /// with bounded, jittered back-off (no kernel wakes it across hosts), and takes over a
    /// live holder's claim only when it is on this host and its process is gone, or when its
    /// baton has stood unchanged for a whole TTL on this process's clock. `ttl` is this
    /// holder's (raised to 30 ms, lowered to a day): the validity each grant or renewal buys,
    /// and what waiters wait. On Linux a clean release leaves the baton's name for this
    /// host's next waiter in a file under `/dev/shm/leasehold-<euid>` (named after the lock
    /// file's device and inode), which that waiter tries before listing the lease directory:
    /// a guess that saves round trips to the server, never trusted (docs/design.md, "The
    /// release's hint"). There too, a waiter says it waits before it blocks, and a holder
    /// releasing with a waiter there and validity to spare *passes*: the waiter adopts its
    /// grant and what is left of its validity with no server operation, its token the next
    /// local count ([`fencing_token`](Self::fencing_token); docs/design.md, "The host-local
    /// pass").
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] (a single try) or [`Error::TimedOut`] when the budget ran out
    /// with the lease held; [`Error::Cancelled`]; [`Error::Io`] naming the path for file
    /// system failures.
    pub fn acquire(path: impl AsRef<Path>, ttl: Duration, budget: &Budget) -> Result<RecordLease> {
        Self::acquire_as(
            &LeaseOptions::new(),
            path.as_ref(),
            ttl,
            budget,
            sys::host_identity(),
        )
    }

    /// [`acquire`](Self::acquire) with the kernel lease on the lock path taken under `opts`
    /// (its ownership rule, parents; network file systems allowed whatever it says):
    /// [`LeaseOptions::acquire_mount_lease`]'s.
    pub(crate) fn acquire_with(
        opts: &LeaseOptions,
        path: &Path,
        ttl: Duration,
        budget: &Budget,
    ) -> Result<RecordLease> {
        Self::acquire_as(opts, path, ttl, budget, sys::host_identity())
    }

    /// Who holds the record lease on the lock path `path`, as its baton says, without
    /// taking or changing anything; `None` when it is free or has never been taken (no
    /// lease directory). A holder on another host that stopped renewing is named until a
    /// waiter takes its claim over (a TTL after its last renewal, as the waiter measures it).
    ///
    /// # Errors
    ///
    /// [`Error::Io`] naming the lease directory when it cannot be read.
    pub fn holder(path: impl AsRef<Path>) -> Result<Option<RecordHolder>> {
        let path = path.as_ref();
        let dir = lease_dir_of(path);
        let fd = match sys::open_dir_at(sys::cwd(), &dir, false) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io(&dir, "open lease directory", e)),
        };
        Ok(match list(&fd, path)?.1 {
            Some(Baton::Live {
                token,
                seq,
                ttl,
                holder,
            }) => Some(RecordHolder {
                this_host: holder.host
                    == Identity::with_host(&sys::host_identity(), lock_file_id(path)).host,
                host: holder.host,
                pid: holder.pid,
                token: token << TOKEN_SHIFT,
                seq,
                ttl,
            }),
            _ => None,
        })
    }

    /// The lock path, as given.
    pub fn path(&self) -> &Path {
        &self.held.path
    }

    /// The kernel lease on the lock path that this lease holds for as long as it lives.
    pub(crate) fn kernel(&self) -> &Lease {
        &self.kernel
    }

    /// Releases now, as [`release`](Self::release) does, for a holder that cannot give it
    /// up by value; a failure to give the baton back is ignored (a waiter then takes it over
    /// once the TTL has passed).
    pub(crate) fn release_in_place(&mut self) {
        let _ = self.let_go();
    }

    /// Whether it is still believed held: neither released nor found lost, and in the
    /// process that took it.
    pub fn is_held(&self) -> bool {
        !self.inherited() && !lock(&self.held.state).done
    }

    /// Whether this is a copy inherited through a `fork` (this process did not take it).
    /// Its state is then never touched: a thread of the parent's may have held its lock at
    /// the fork, and no thread exists in the child to release it.
    fn inherited(&self) -> bool {
        std::process::id() != self.owner
    }

    /// [`Error::Released`] for an inherited copy, as an inherited kernel lease answers.
    fn ours(&self) -> Result<()> {
        match self.inherited() {
            true => Err(Error::Released {
                path: self.held.path.clone(),
            }),
            false => Ok(()),
        }
    }

    /// [`acquire`](Self::acquire) as if this process ran on the host named `host`: how the
    /// library's own tests make two processes on one machine two hosts. Test builds only.
    #[cfg(test)]
    pub(crate) fn acquire_on_host(
        path: &Path,
        ttl: Duration,
        budget: &Budget,
        host: &str,
    ) -> Result<RecordLease> {
        Self::acquire_as(
            &LeaseOptions::new(),
            path,
            ttl,
            budget,
            host.as_bytes().to_vec(),
        )
    }

    fn acquire_as(
        opts: &LeaseOptions,
        path: &Path,
        ttl: Duration,
        budget: &Budget,
        host: Vec<u8>,
    ) -> Result<RecordLease> {
        let ttl = ttl.clamp(MIN_TTL, MAX_TTL);
        let started = Instant::now();
        let deadline = budget.deadline_from(started);
        // What a grant needs besides the baton is made ready before the wait, so that a
        // waiter woken by the kernel goes straight to the baton: the renewing thread, parked
        // until it is handed the grant (it ends when the sender is dropped unused), and the
        // lease directory's handle where it exists (opening it is a round trip to the server;
        // one that must be created is created once the lock path has been checked, below).
        let keeper = Parked::start(path)?;
        let ready = sys::open_dir_at(sys::cwd(), &lease_dir_of(path), false).ok();
        let ready_id = ready.as_ref().and_then(dir_id);
        let hints = hint::directory();
        // The host-local pass: this process says it waits before it blocks, so that the
        // holder it waits for leaves it the baton rather than give it back to the server.
        let looked = lock_file_of(path);
        let start = own_start(std::process::id());
        let queued_on = looked.map(|(id, _)| id);
        // What the hand-over needs of this process, for the lock file it queues on: its
        // identity (a hash) and the pass files' names, made again after the wait only if it
        // was granted another file's lock; and the boot clock read once, whose first read
        // sets up the vDSO (measured at 0.4–0.6 ms on the hand-over path, which it left
        // several times the kernel lease's).
        let expected = (
            Identity::with_start(&host, queued_on, start),
            hints
                .as_ref()
                .zip(queued_on)
                .map(|(d, id)| Pass::new(Arc::clone(d), id)),
        );
        let _ = sys::boot_clock();
        let waiting = match (&expected.1, deadline) {
            (_, Some(d)) if d <= started => None,
            (Some(pass), _) => pass.queue(),
            _ => None,
        };
        #[cfg(test)]
        if waiting.is_some() {
            tests::queued();
        }
        // This host's waiters queue in the kernel's lock on the lock path itself (on a mount
        // whose locks stay on each host, it reaches exactly this host's processes): only the
        // one at the head polls the baton, hand-over between them is the kernel's, and a
        // kernel lease on the same path excludes a record lease and the other way round.
        let kernel = opts.allow_network_filesystem(true).acquire(path, budget)?;
        let domain = kernel.file_id();
        // Its shared lock on `.wait` is kept: only the holder tests it, at its release, by
        // converting it (`Pass::waiter`). (Its flag on another file's `.wait`, if the lock
        // file was replaced meanwhile, goes here.)
        let waiting = waiting.filter(|_| queued_on == domain);
        let (me, expected_pass) = match queued_on == domain {
            true => expected,
            false => (Identity::with_start(&host, domain, start), None),
        };
        let (dir, lease_dir) = match ready {
            Some(fd) => (fd, ready_id),
            None => {
                let fd = open_lease_dir(path)?;
                let id = dir_id(&fd);
                (fd, id)
            }
        };
        let hint = hints
            .as_ref()
            .zip(domain)
            .map(|(d, id)| Hint::new(Arc::clone(d), id));
        // The pass files of the file whose kernel lock is held, where the lease directory and
        // the lock file's status-change time are known (a record names them; the time is
        // looked up again only if the look before the wait found another file, or none).
        let lock_file = match looked {
            Some((id, stamp)) if Some(id) == domain => stamp,
            _ => lock_file_of(path)
                .filter(|(id, _)| Some(*id) == domain)
                .and_then(|(_, stamp)| stamp),
        };
        let pass = match (hints, domain, lease_dir, lock_file) {
            (Some(d), Some(id), Some(_), Some(_)) => {
                Some(expected_pass.unwrap_or_else(|| Pass::new(d, id)))
            }
            _ => None,
        };
        let found = pass.as_ref().map(Pass::read);
        let recorded = found.as_ref().and_then(|f| f.record.clone());
        // A pass: the record of this domain's last holder, believed with no server operation
        // when everything in it is this process's own and validity is left. The count is
        // written first: a successor never reuses this token, even if this process dies.
        let adopted = recorded
            .as_ref()
            .filter(|r| adoptable(r, &me, ttl, lease_dir, lock_file))
            .map(|r| PassRecord {
                k: r.k + 1,
                ..r.clone()
            })
            .filter(|a| {
                found
                    .as_ref()
                    .and_then(|f| f.file.as_ref())
                    .is_some_and(|(fd, held)| Pass::rewrite(fd, Some(*held), a))
            });
        let grant =
            |dir: OwnedFd,
             hint: Option<Hint>,
             pass: Option<Pass>,
             me: Identity,
             wait: Option<OwnedFd>,
             (token, k, name, seq, base): (u64, u64, String, u64, Duration)| {
                let wait = wait.or_else(|| pass.as_ref().and_then(Pass::open_wait));
                Arc::new(Held {
                    path: path.to_path_buf(),
                    dir,
                    hint,
                    pass,
                    wait,
                    lease_dir,
                    lock_file,
                    token,
                    k,
                    ttl,
                    me,
                    state: Mutex::new(HeldState {
                        name,
                        seq,
                        renewed_at: base,
                        valid_until: base + ttl - margin(ttl),
                        recorded: k > 0,
                        done: false,
                        stop: false,
                    }),
                    wake: Condvar::new(),
                })
            };
        if let Some(a) = adopted {
            let seq = match Baton::parse(&a.name) {
                Some(Baton::Live { seq, .. }) => seq,
                _ => 0,
            };
            let held = grant(
                dir,
                hint,
                pass,
                me,
                waiting,
                (a.token, a.k, a.name, seq, a.base),
            );
            return Ok(RecordLease::started(held, keeper, kernel));
        }
        // Rule (a''): the name this domain's record gives (whatever its validity) was
        // believed only by processes that held the kernel lock now held here.
        let given = recorded
            .filter(|r| {
                r.host == me.host
                    && Some(r.lease_dir) == lease_dir
                    && Some(r.lock_file) == lock_file
            })
            .map(|r| r.name);
        // Not adopted: a record goes before any grant's or takeover's rename (it names a
        // baton about to be consumed, or none), so that no later waiter believes it.
        let mut clear = found.is_some_and(|f| f.present);
        // The name the last clean release on this host left: tried once before listing.
        let left = hint.as_ref().and_then(Hint::read);
        let hinted = left.is_some();
        let mut guess = left.and_then(|name| match Baton::parse(&name) {
            Some(free @ Baton::Free { .. }) => Some((name, Some(free))),
            _ => None,
        });
        // The baton being watched, and when (on the boot clock) it was first listed.
        let mut watch: Option<(String, Duration)> = None;
        let mut backoff = Duration::from_millis(1);
        let cap = Self::longest_poll(ttl);
        loop {
            if budget.cancelled() {
                return Err(Error::Cancelled {
                    path: path.to_path_buf(),
                });
            }
            let guessed = guess.is_some();
            let (name, baton) = match guess.take() {
                Some(g) => g,
                None => list(&dir, path)?,
            };
            let listed = now();
            let next = match &baton {
                Some(Baton::Free { token }) => next_token(*token),
                Some(Baton::Live {
                    token,
                    ttl: their_ttl,
                    holder,
                    ..
                }) => {
                    let dead = holder.host == me.host
                        && *holder != me
                        && holder.pid != me.pid
                        && gone(holder.pid, holder.start);
                    let passed = given.as_deref() == Some(name.as_str());
                    let since = match &watch {
                        Some((watched, since)) if *watched == name => *since,
                        _ => {
                            watch = Some((name.clone(), listed));
                            listed
                        }
                    };
                    let stale = listed.saturating_sub(since) >= *their_ttl;
                    (dead || passed || stale)
                        .then(|| next_token(*token))
                        .flatten()
                }
                None => None,
            };
            if let Some(token) = next {
                if clear {
                    if let Some(p) = &pass {
                        p.remove()
                            .map_err(|e| io(path, "remove the pass record of", e))?;
                    }
                    clear = false;
                }
                let begun = now();
                let mine = Baton::Live {
                    token,
                    seq: 0,
                    ttl,
                    holder: me.clone(),
                };
                let renamed = rename(&dir, path, &name, &mine.name())?;
                match renamed {
                    true => {
                        // What the hint said is the baton no more; a holder that dies leaves
                        // its successor nothing to try.
                        // (Only this host's holders write hints, under the kernel lease
                        // held here: none was written since the read.)
                        if let (true, Some(h)) = (hinted, &hint) {
                            h.clear();
                        }
                        let held = grant(
                            dir,
                            hint,
                            pass,
                            me,
                            waiting,
                            (token, 0, mine.name(), 0, begun),
                        );
                        return Ok(RecordLease::started(held, keeper, kernel));
                    }
                    // A wrong guess: list at once.
                    false if guessed => continue,
                    // Moved since the listing (or the listing was stale): look again after
                    // the shortest pause, so a listing served from a cache cannot spin.
                    false => backoff = Duration::from_millis(1),
                }
            }
            let at = Instant::now();
            if deadline.is_some_and(|d| at >= d) {
                let holders = HolderInfo::known(Holders::Unknown);
                return Err(match deadline.is_some_and(|d| d <= started) {
                    true => Error::Contended {
                        path: path.to_path_buf(),
                        holders,
                        why: budget.not_waited(started),
                    },
                    false => Error::TimedOut {
                        path: path.to_path_buf(),
                        holders,
                        waited: at.duration_since(started),
                    },
                });
            }
            // A wait that goes on says so once, when its budget asks (a CLI's "waiting for").
            budget.notice_due(|| Error::TimedOut {
                path: path.to_path_buf(),
                holders: HolderInfo::known(Holders::Unknown),
                waited: at.duration_since(started),
            });
            let mut pause = jitter(backoff);
            if let Some(d) = deadline {
                pause = pause.min(d.saturating_duration_since(at));
            }
            // Never sleep past the moment the watched baton turns stale.
            if let (Some((_, since)), Some(Baton::Live { ttl: their, .. })) = (&watch, &baton) {
                let stale_at = since.saturating_add(*their);
                pause = pause.min(stale_at.saturating_sub(now()));
            }
            std::thread::sleep(pause);
            backoff = (backoff * 2).min(cap);
        }
    }

    /// The longest pause between two looks at the baton of a waiter acquiring with TTL `ttl`
    /// (raised and lowered as [`acquire`](Self::acquire) does): a twentieth of it, at least
    /// 2 ms and at most 200 ms. A waiter backs off from 1 ms to it (jittered by a quarter
    /// either way), so a release on another host is noticed within about that long.
    ///
    /// ```
    /// # #[cfg(unix)] {
    /// use leasehold::RecordLease;
    /// use std::time::Duration;
    /// assert_eq!(RecordLease::longest_poll(Duration::from_secs(1)), Duration::from_millis(50));
    /// assert_eq!(RecordLease::longest_poll(Duration::from_secs(60)), Duration::from_millis(200));
    /// assert_eq!(RecordLease::longest_poll(Duration::ZERO), Duration::from_millis(2));
    /// # }
    /// ```
    pub fn longest_poll(ttl: Duration) -> Duration {
        (ttl.clamp(MIN_TTL, MAX_TTL) / 20)
            .clamp(Duration::from_millis(2), Duration::from_millis(200))
    }

    /// The fencing token: it grows with every grant of this lease, across hosts and
    /// through this host's pass. Its shape is `T·2^20 + k`: `T` is the server token (the
    /// one in the baton's name, raised by every grant from the lease directory), `k` counts
    /// the hand-overs on this host without a server operation since that grant (0 for the
    /// grant itself, below 2^20); compare tokens as numbers only.
    pub fn fencing_token(&self) -> u64 {
        self.held.token << TOKEN_SHIFT | self.held.k
    }

    /// The validity left (less the margin kept back), or `None` once it ran out or the lease
    /// was lost (or in a forked child: see [`RecordLease`]).
    pub fn remaining(&self) -> Option<Duration> {
        if self.inherited() {
            return None;
        }
        let st = lock(&self.held.state);
        let left = st.valid_until.checked_sub(now())?;
        (!st.done && !left.is_zero()).then_some(left)
    }

    /// Answers, before a write, whether the lease is still held with validity left: without
    /// I/O while two thirds of the TTL are left, else after a renewal — which is also how a
    /// holder that was paused or slept past its validity finds out, without crashing, whether
    /// it still holds.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the baton was taken over; [`Error::Io`];
    /// [`Error::Released`] in a forked child.
    pub fn verify(&self) -> Result<()> {
        self.ours()?;
        let ttl = self.held.ttl;
        match self.remaining() {
            Some(left) if left >= (ttl - margin(ttl)) * 2 / 3 => Ok(()),
            _ => self.held.renew(),
        }
    }

    /// [`verify`](Self::verify) for a durable write about to be made: also refuses, with
    /// [`Error::LeaseLost`] naming the lock path, when less than the write margin (a tenth
    /// of the TTL) of validity is left once verified — a write begun that close to the end
    /// could land after a waiter on another host took the lease over. The stores call it
    /// before their rename, then compare their fencing token, then apply the margin rule
    /// once more without I/O ([`validity_for_write`](Self::validity_for_write));
    /// docs/design.md ("Fencing the stores' writes") gives the argument and what remains.
    ///
    /// # Errors
    ///
    /// As [`verify`](Self::verify); [`Error::LeaseLost`] when too little validity is left.
    pub fn verify_for_write(&self) -> Result<()> {
        self.verify()?;
        self.validity_for_write()
    }

    /// The margin rule of [`verify_for_write`](Self::verify_for_write) alone, without I/O
    /// (no renewal): refuses ([`Error::LeaseLost`]) when less than the write margin of
    /// validity is left now. A store calls it last before its rename, after its other
    /// checks: a waiter takes the lease over only once this holder's validity has ended, so
    /// whatever paused the holder before this point cannot have let a successor in unseen.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when too little validity is left (or the lease was lost);
    /// [`Error::Released`] in a forked child.
    pub fn validity_for_write(&self) -> Result<()> {
        self.ours()?;
        match self.remaining() {
            Some(left) if left >= margin(self.held.ttl) => Ok(()),
            _ => Err(Error::LeaseLost {
                path: self.held.path.clone(),
            }),
        }
    }

    /// Renews now (the renewing thread does so every third of the TTL): renames the baton
    /// from this holder's name to the next heartbeat's, which succeeds only if nobody took it
    /// over; the validity then runs a TTL (less the margin) from the clock read before the
    /// rename.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the baton was moved; [`Error::Io`]; [`Error::Released`]
    /// in a forked child.
    pub fn renew(&self) -> Result<()> {
        self.ours()?;
        self.held.renew()
    }

    /// Releases: stops believing it holds, then renames the baton to `free.<token>` (if a
    /// waiter took it over meanwhile, there is nothing to give back). In a forked child,
    /// only lets go of the copy: the baton stays the parent's.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the rename failed otherwise.
    pub fn release(mut self) -> Result<()> {
        self.let_go()
    }

    /// The lease of a grant (`held`): its renewing thread, parked until now, handed it.
    fn started(held: Arc<Held>, mut keeper: Parked, kernel: Lease) -> RecordLease {
        let keeper = keeper.hand(&held);
        RecordLease {
            held,
            owner: std::process::id(),
            keeper,
            kernel,
        }
    }

    /// Lets go: tells the renewing thread to stop, gives the baton back (which waits for a
    /// renewal in flight: both hold the state's lock), releases the kernel lease, and only
    /// then wakes the thread and waits for it to end — after giving the baton back it
    /// renames nothing (it finds `stop` set, should it wake on its own meanwhile), and this
    /// host's next waiter, woken by the release, need not share the CPUs with a thread
    /// waking to exit (measured on the 2-vCPU bed: that wake-up, sent before the release,
    /// delayed the hand-over it began with). In a forked child only the
    /// copy goes: the baton is the parent's, and the thread, which does not exist here
    /// (joining it would wait forever), is forgotten.
    fn let_go(&mut self) -> Result<()> {
        if self.inherited() {
            std::mem::forget(self.keeper.take());
            self.kernel.release();
            return Ok(());
        }
        lock(&self.held.state).stop = true;
        let given = self.held.give_back();
        self.kernel.release();
        self.held.wake.notify_all();
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
        given
    }
}

impl Drop for RecordLease {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

impl Held {
    fn baton(&self, seq: u64) -> Baton {
        Baton::Live {
            token: self.token,
            seq,
            ttl: self.ttl,
            holder: self.me.clone(),
        }
    }

    /// What the pass record says of `st` (none without a pass, or the lease directory
    /// unknown).
    fn record_of(&self, st: &HeldState) -> Option<PassRecord> {
        Some(PassRecord {
            name: st.name.clone(),
            base: st.renewed_at,
            token: self.token,
            k: self.k,
            ttl: self.ttl,
            host: self.me.host.clone(),
            lease_dir: self.lease_dir?,
            lock_file: self.lock_file?,
        })
    }

    /// Makes the pass record say what `st` says, if it does not yet (under the state's
    /// lock, with the kernel lock held); `false` if it could not be written.
    fn record(&self, st: &mut HeldState) -> bool {
        if !st.recorded
            && let (Some(pass), Some(rec)) = (&self.pass, self.record_of(st))
        {
            st.recorded = pass.write(&rec);
        }
        st.recorded
    }

    /// One renewal (see [`RecordLease::renew`]); under the state's lock, so the holder's
    /// and the renewing thread's never cross. The name renamed is the one believed, which
    /// for an adopted grant is its predecessor's: the renewal makes it this holder's own.
    fn renew(&self) -> Result<()> {
        let mut st = lock(&self.state);
        if st.done {
            return Err(Error::LeaseLost {
                path: self.path.clone(),
            });
        }
        let begun = now();
        let to = self.baton(st.seq + 1).name();
        let renewed = match rename(&self.dir, &self.path, &st.name, &to)? {
            true => Some((begun, st.seq + 1, to)),
            false => self.recover()?,
        };
        match renewed {
            Some((begun, seq, name)) => {
                #[cfg(test)]
                tests::renamed_for_renewal(&name);
                st.name = name;
                st.seq = seq;
                st.renewed_at = begun;
                st.valid_until = begun + self.ttl - margin(self.ttl);
                st.recorded = false;
                self.record(&mut st);
                Ok(())
            }
            None => {
                st.done = true;
                // What the record says is no longer the baton: no waiter is to believe it.
                if let Some(pass) = &self.pass {
                    let _ = pass.remove();
                }
                Err(Error::LeaseLost {
                    path: self.path.clone(),
                })
            }
        }
    }

    /// After a renewal found the name it believed gone: the record it adopted named an
    /// older name than the baton's (its writer died between a renewal's rename and the
    /// record's write). If the baton is now of this grant's server token and of this
    /// domain, and its holder is gone, nobody else believes it (every believer held the
    /// kernel lock held here): it is renamed to this holder's own next name, the token kept.
    /// `None` when the lease is lost.
    fn recover(&self) -> Result<Option<(Duration, u64, String)>> {
        if self.pass.is_none() {
            return Ok(None);
        }
        let (name, baton) = list(&self.dir, &self.path)?;
        let seq = match baton {
            Some(Baton::Live {
                token, seq, holder, ..
            }) if token == self.token
                && holder.host == self.me.host
                && holder != self.me
                && holder.pid != self.me.pid
                && gone(holder.pid, holder.start) =>
            {
                seq
            }
            _ => return Ok(None),
        };
        let Some(next) = seq.checked_add(1) else {
            return Ok(None);
        };
        let begun = now();
        let to = self.baton(next).name();
        Ok(rename(&self.dir, &self.path, &name, &to)?.then_some((begun, next, to)))
    }

    /// Stops believing it holds, then either passes the lease to a waiter of this domain or
    /// gives the baton back (`free.<token>`).
    fn give_back(&self) -> Result<()> {
        let mut st = lock(&self.state);
        if std::mem::replace(&mut st.done, true) {
            return Ok(());
        }
        // The pass: with a waiter queued for the kernel lock, validity to spare and counts
        // left, the baton stays as it is and the record says so; the kernel lock's release
        // is the whole hand-over.
        if let Some(pass) = &self.pass {
            let spare = st
                .valid_until
                .checked_sub(now())
                .is_some_and(|left| left >= self.ttl / 3);
            if spare
                && self.k + 1 < K_LIMIT
                && pass.waiter(self.wait.as_ref())
                && self.record(&mut st)
            {
                return Ok(());
            }
            // A release to free: the record goes first, so that no waiter believes a name
            // the server may grant meanwhile to another host. If it cannot go, the baton
            // stays (a waiter takes it over once its TTL has passed).
            pass.remove()
                .map_err(|e| io(&self.path, "remove the pass record of", e))?;
        }
        let free = Baton::Free { token: self.token };
        let given = rename(&self.dir, &self.path, &st.name, &free.name())?;
        // Still under the kernel lease: the next waiter of this host reads it once granted
        // that lease, and tries this name before listing.
        if let (true, Some(hint)) = (given, &self.hint) {
            hint.write(&free.name());
        }
        Ok(())
    }
}

/// A renewing thread started before the wait for a grant, parked until it is handed one
/// ([`hand`](Self::hand)); an acquisition that ends without a grant drops it, which ends the
/// thread and waits for it, so that a failed acquisition leaves no thread behind.
struct Parked {
    grant: Option<std::sync::mpsc::SyncSender<Arc<Held>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Parked {
    fn start(path: &Path) -> Result<Parked> {
        let (grant, granted) = std::sync::mpsc::sync_channel::<Arc<Held>>(1);
        let thread = std::thread::Builder::new()
            .name("leasehold-record".into())
            .spawn(move || {
                if let Ok(held) = granted.recv() {
                    keep(&held);
                }
            })
            .map_err(|e| Error::Io {
                op: "start the renewing thread of",
                path: path.to_path_buf(),
                source: e,
            })?;
        Ok(Parked {
            grant: Some(grant),
            thread: Some(thread),
        })
    }

    /// Hands the thread its grant (the channel has room for exactly this one, so the send
    /// never blocks) and gives up its handle, for the lease to stop and join.
    fn hand(&mut self, held: &Arc<Held>) -> Option<std::thread::JoinHandle<()>> {
        if let Some(grant) = self.grant.take() {
            let _ = grant.try_send(Arc::clone(held));
        }
        self.thread.take()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        drop(self.grant.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The renewing thread: renews a third of the TTL after the last grant or renewal began,
/// until told to stop or the lease is lost; after a failed attempt (I/O), tries again a
/// thirtieth of the TTL later.
fn keep(held: &Held) {
    let third = held.ttl / 3;
    let mut st = lock(&held.state);
    // The pass record of a new grant, off the acquirer's path.
    if !st.done && !st.stop {
        held.record(&mut st);
    }
    loop {
        if st.stop || st.done {
            return;
        }
        let now = now();
        let due = st.renewed_at + third;
        if now < due {
            st = held
                .wake
                .wait_timeout(st, due - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        }
        drop(st);
        let failed = held.renew().is_err();
        st = lock(&held.state);
        if failed && !st.done && !st.stop {
            st = held
                .wake
                .wait_timeout(st, held.ttl / 30)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The clock validity and watches are measured on ([`sys::boot_clock`]); in test builds,
/// plus a jump the calling thread may set ([`tests`]' simulated suspend).
fn now() -> Duration {
    #[cfg(test)]
    return sys::boot_clock() + tests::CLOCK_JUMP.with(|j| j.get());
    #[cfg(not(test))]
    sys::boot_clock()
}

/// The server token after `token`, if the fencing token it makes fits in 64 bits.
fn next_token(token: u64) -> Option<u64> {
    token
        .checked_add(1)
        .filter(|t| t >> (64 - TOKEN_SHIFT) == 0)
}

/// The lock file's device and inode, as a look at the path finds them (a symlink is not
/// followed: it is no lock file).
fn lock_file_id(path: &Path) -> Option<FileId> {
    lock_file_of(path).map(|(id, _)| id)
}

/// The lock file's device and inode, and its status-change time in nanoseconds (`None` for
/// one before 1970).
fn lock_file_of(path: &Path) -> Option<(FileId, Option<u64>)> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(path).ok()?;
    let id = FileId {
        dev: md.dev(),
        ino: md.ino(),
    };
    let stamp = u64::try_from(md.ctime())
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .and_then(|ns| ns.checked_add(u64::try_from(md.ctime_nsec()).ok()?));
    Some((id, stamp))
}

/// A directory's device and inode.
fn dir_id(fd: &OwnedFd) -> Option<FileId> {
    let st = rustix::fs::fstat(fd).ok()?;
    Some(FileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
    })
}

/// Whether the pass record `rec` may be adopted by `me`, acquiring with `ttl` in the lease
/// directory `lease_dir` of the lock file changed last at `lock_file`: written in this domain
/// for this lease directory and lock file, with this TTL, counts left, and validity left now
/// (its base not in the future).
fn adoptable(
    rec: &PassRecord,
    me: &Identity,
    ttl: Duration,
    lease_dir: Option<FileId>,
    lock_file: Option<u64>,
) -> bool {
    let now = now();
    names_its_baton(rec)
        && rec.host == me.host
        && Some(rec.lease_dir) == lease_dir
        && Some(rec.lock_file) == lock_file
        && rec.ttl == ttl
        && rec.k + 1 < K_LIMIT
        && next_token(rec.token).is_some()
        && rec.base <= now
        && now < rec.base + ttl - margin(ttl)
}

/// Whether the record's name is a live baton of the record's own token and TTL.
fn names_its_baton(rec: &PassRecord) -> bool {
    matches!(
        Baton::parse(&rec.name),
        Some(Baton::Live { token, ttl, ref holder, .. })
            if token == rec.token && ttl == rec.ttl && holder.host.len() == 16
    )
}

/// `P.lease` for the lock path `P`.
fn lease_dir_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lease");
    PathBuf::from(name)
}

fn io(path: &Path, op: &'static str, e: Errno) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// Opens the lease directory, creating it complete if it is missing: a directory holding
/// `free.0`, prepared under a unique name and renamed into place (a rename onto a directory
/// that exists and is not empty fails), so there is never a lease directory without a baton,
/// nor two batons.
fn open_lease_dir(path: &Path) -> Result<OwnedFd> {
    let dir = lease_dir_of(path);
    match sys::open_dir_at(sys::cwd(), &dir, false) {
        Ok(fd) => return Ok(fd),
        Err(Errno::NOENT) => {}
        Err(e) => return Err(io(&dir, "open lease directory", e)),
    }
    let mut tmp = dir.as_os_str().to_owned();
    tmp.push(format!(".tmp.{}", unique()));
    let tmp = PathBuf::from(tmp);
    sys::mkdir_at(sys::cwd(), &tmp, 0o700).map_err(|e| io(&tmp, "create lease directory", e))?;
    let made = (|| {
        let fd = sys::open_dir_at(sys::cwd(), &tmp, false)?;
        drop(sys::create_new_at(fd.as_fd(), Path::new("free.0"), 0o600)?);
        sys::rename_at(sys::cwd(), &tmp, sys::cwd(), &dir)
    })();
    match made {
        Ok(()) => {}
        Err(Errno::EXIST | Errno::NOTEMPTY) => {
            // Another process made it first: ours goes.
            let _ = sys::unlink_at(sys::cwd(), &tmp.join("free.0"));
            let _ = sys::remove_dir_at(sys::cwd(), &tmp);
        }
        Err(e) => return Err(io(&dir, "create lease directory", e)),
    }
    sys::open_dir_at(sys::cwd(), &dir, false).map_err(|e| io(&dir, "open lease directory", e))
}

/// Lists the lease directory: the baton's name and what it says. Names that are not
/// batons are skipped; a listing that shows no baton, or two (one read across a rename), is
/// read again.
fn list(dir: &OwnedFd, path: &Path) -> Result<(String, Option<Baton>)> {
    for _ in 0..100 {
        let names: Vec<OsString> =
            sys::dir_names(dir.as_fd()).map_err(|e| io(path, "list lease directory", e))?;
        let batons: Vec<(String, Baton)> = names
            .iter()
            .filter_map(|n| n.to_str())
            .filter_map(|n| Baton::parse(n).map(|b| (n.to_owned(), b)))
            .collect();
        if let [(name, baton)] = batons.as_slice() {
            return Ok((name.clone(), Some(baton.clone())));
        }
    }
    Ok((String::new(), None))
}

/// Renames the baton `from` → `to`: `true` if done, `false` if `from` was no longer there
/// (someone moved it first). After an ambiguous failure (the server may have done it and
/// its reply been lost) the target is looked for.
fn rename(dir: &OwnedFd, path: &Path, from: &str, to: &str) -> Result<bool> {
    if from.is_empty() {
        return Ok(false);
    }
    match sys::rename_at(dir.as_fd(), Path::new(from), dir.as_fd(), Path::new(to)) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => {
            let names =
                sys::dir_names(dir.as_fd()).map_err(|e| io(path, "list lease directory", e))?;
            match names.iter().any(|n| n.to_str() == Some(to)) {
                true => Ok(true),
                false => Err(io(path, "rename lease baton", e)),
            }
        }
    }
}

/// A name no other process uses: this process's ID, the clock and a counter.
fn unique() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}.{}.{}",
        std::process::id(),
        sys::boot_clock().as_nanos(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `d` give or take a quarter, so that waiters on several hosts do not poll in step.
fn jitter(d: Duration) -> Duration {
    let noise = sys::boot_clock().subsec_nanos() ^ std::process::id().wrapping_mul(2_654_435_761);
    let quarter = d / 4;
    let spread = quarter.as_nanos() as u64;
    let offset = match spread {
        0 => 0,
        s => u64::from(noise) % (2 * s),
    };
    d - quarter + Duration::from_nanos(offset)
}

mod hint;
mod pass;
#[cfg(test)]
mod tests;
