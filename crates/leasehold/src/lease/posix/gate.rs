//! The gate of a lock file: the cross-process half of the turnstile that keeps shared holders
//! from starving an exclusive waiter (the in-process half is the claim queue, `claim.rs`).
//!
//! Why: `flock` grants `LOCK_SH` to a newcomer whenever only shared locks are held, even
//! while a `LOCK_EX` waiter is queued, so readers that overlap each other keep a writer out
//! for ever (util-linux `flock -s` readers do exactly that to a `flock -x` writer; BENCHMARKS.md
//! has the figure).
//!
//! The protocol, over three more lock files next to the lock file, the gate, the readers'
//! gate and the writers' queue:
//!
//! * An **exclusive waiter** (one that found the lock busy and waits) first passes the
//!   readers' gate (takes it exclusively, waiting while shared waiters hold it, and lets it
//!   go at once), then queues on the writers' queue (`LOCK_EX`: writers only), then holds
//!   the gate exclusively (`LOCK_EX`, waiting for it if need be) while it waits for the
//!   lock, and **keeps the queue and the gate with the lease**: its release closes the
//!   lock, then the gate and the queue ([`HeldGate`]: closed, never unlocked, so that a
//!   forked child's copy cannot free the parent's gate). An exclusive *try* never
//!   touches the gates (for the readers' gate, see the last point); an exclusive waiter
//!   never creates the gate or the readers' gate (shared acquirers do), and creates the
//!   writers' queue only next to a gate.
//! * A **shared acquirer** passes the gate: takes it shared (non-blocking on a try), tries
//!   `LOCK_SH` on the lock, and lets the gate go at once. A **shared waiter** (the try found
//!   the gate or the lock busy) holds the readers' gate shared for its whole wait. Where no
//!   writer has the gate, it passes it the same way and, the lock being held exclusively,
//!   waits for the lock *without* the gate, so it never blocks the next exclusive waiter
//!   for longer than one try. Where a writer has the gate, it probes the lock shared: held
//!   exclusively (normally by that writer, holding the lease), it waits on the lock itself,
//!   and the writer's release wakes it directly, before the next writer, which must take the
//!   gate and then the lock; held shared (the writer waits for those readers), it lets its
//!   probe go at once and queues on the gate behind the writer.
//! * An **exclusive acquisition that may wait** (not a try-once), in a process that has
//!   waited on this lock while it had a readers' gate, first tries the readers' gate
//!   exclusively (non-blocking): held by shared waiters, it does not try the lock but
//!   waits as above. A writer that releases and acquires again at once would otherwise
//!   take the lock back before the readers its release woke are scheduled (the kernel wakes
//!   `flock` waiters, it does not hand the lock over): measured, 18 % of the writers'
//!   acquisitions in the bench's mixed loop were such re-takes, and a reader's longest
//!   waits spanned 15–23 writer holds. Where no gate is known (every lock only exclusive
//!   users ever touched) the check costs one look-up in a process-wide list.
//!
//! So once an exclusive waiter holds the gate, no newcomer gets the lock shared: the waiter
//! gets it as soon as the shared holders present when it took the gate (plus any shared
//! waiter that had already passed it) have released, however they overlap — no writer
//! starvation. And once shared waiters wait, exclusive waiters that come after them wait at
//! the readers' gate until those have the lock: a writer that releases and queues again at
//! once cannot take the gate back ahead of the readers its release woke — no reader
//! starvation (measured: without the readers' gate two back-to-back writers made 65 % of
//! the acquisitions against two back-to-back readers and a reader's contended wait p99 was
//! 17× the plain-flock floor's; BENCHMARKS.md, "Shared mode"). A reader that waits on the
//! lock next to a waiting writer (the lock's holder was not the gate's: `flock(1)`, an
//! exclusive try) does not overtake it on Linux, whose queue puts a request behind the
//! conflicting one before it; elsewhere it may, once. Readers and writers thus
//! take turns in phases: the readers waiting when a writer releases go in before the next
//! writer that was not already in line. Exclusive waiters queue on the gate among
//! themselves, in the kernel's order. Everyone takes the readers' gate before the gate and
//! the gate before the lock, and nobody waits for a gate while holding the lock, so there
//! is no deadlock — given the next rule.
//!
//! **Nested shared leases.** A shared acquisition by a process that already holds the same
//! file shared never waits at a gate: neither the gate, nor the readers' gate (and its
//! wait, should the lock be busy, is on the lock alone). Otherwise the inner acquisition
//! would wait behind an exclusive waiter that holds the gate and waits for the outer lease
//! to go: a deadlock for good (util-linux `flock(1)`, which has no gate, completes the same
//! nesting). "Holds" means a shared lease of this process that holds the lock (the claim
//! table counts them, `claim::holds_shared`; the in-process queue grants such a claim at
//! once too), or an ancestor that said so: `leasehold run --shared` and `leasehold flock -s`
//! set [`INHERITED_SHARED`] (`LEASEHOLD_HELD_SHARED=dev:ino,…`) for a COMMAND that
//! inherits their descriptor, and every leasehold process reads it once. The process cannot
//! tell a nested acquisition from one of another thread, or from a descendant that no
//! longer has the descriptor, so they pass too: what that costs is fairness only (a writer
//! waits longer while such a process's shared leases keep overlapping), never exclusion,
//! and a forged or stale variable costs the same, no more. Why a variable and not a look at
//! `/proc/locks` for a shared lock an ancestor holds: it works on every POSIX system (the
//! BSDs and macOS have no `/proc/locks`), names the very inode without reading a table of
//! every lock on the machine on each shared acquisition, and needs no walk up a process
//! tree whose members may have exited or live in another PID namespace. What it does not
//! see: an ancestor that is not leasehold (util-linux `flock -s` around a nested
//! `leasehold flock -s` still deadlocks behind a leasehold writer).
//!
//! Why a writer keeps the gate with its lease, readers wait on the lock while a writer holds
//! it, and writers queue apart from readers: every wake-up on a hand-over's path costs, so
//! each hand-over takes one (the argument: docs/design.md, "Shared leases"; the figures:
//! BENCHMARKS.md).
//!
//! An abandoned exclusive wait (deadline, cancellation, dropped future) keeps its place on
//! the gate until the kernel grants its helper the lock, which it drops at once (see
//! [`KernelWait`](super::KernelWait)): new shared acquirers are held back for no longer
//! than the waiter itself would have waited, and a later waiter of the process that adopts
//! the helper keeps the place in line.
//!
//! Where they live and what they cost: `.<name>.leasehold-gate`,
//! `.<name>.leasehold-gate-readers` and `.<name>.leasehold-gate-writers` in the lock file's
//! directory (`.leasehold-gate-<sha256 of the name>` and so on when that would be too long a
//! file name), each opened
//! exactly like a lock file (relative to the same directory handle, never following a
//! symlink, never blocking, close-on-exec, created 0600, never written, truncated or
//! removed) and used only while it is a regular file (and trusted: see "Trust" below). A
//! shared acquisition pays one more
//! open, `fstat`, `flock` and close (BENCHMARKS.md: shared acquire vs the floor), a shared
//! wait the same again for the readers' gate (its two descriptors close with the lease,
//! after the lock file's: [`Spare`]); an exclusive try pays nothing (an
//! acquisition that may wait, where this process saw a readers' gate, one open, `flock` and
//! close), an exclusive wait three opens and up to five `flock`s, and its release
//! closes (never `flock(LOCK_UN)`: neither on the gates, see [`HeldGate`], nor on the lock, see
//! [`Held`](super::Held)). A lease
//! that waited keeps its gate descriptors while held:
//! two more for a shared one, three more for an exclusive one (count them against
//! `RLIMIT_NOFILE` when holding many leases at once). The gates only
//! ever cost fairness, never exclusion: where they cannot be opened or locked (a read-only
//! directory, a file system without locks) leases work as plain `flock` does, and lockers
//! that do not know them (util-linux `flock(1)`, other libraries) are excluded by the lock
//! itself as before. Descriptors locked with `lock_descriptor` have no path and no gates.
//!
//! Trust: a gate is used only where it passes the lock file's ownership rule
//! (`sys::fd_gate_usable`: this process's user's or root's, writable by neither group nor
//! others) and has exactly one link; any other gate is **ignored**, as if it could not be
//! opened. Not refused: refusing would let anyone who may create a file beside the lock —
//! every user, in a sticky `/tmp` — deny every shared lease and every exclusive wait on a
//! lock file they cannot even open, while ignoring costs this lock's fairness only, which
//! exclusion never depends on. Trusted, such a gate let its planter hold it and hang shared
//! acquirers on a free lock, and exclusive waiters behind it for ever.
//! `LeaseOptions::allow_shared_state` does not extend to gates: it would buy next to
//! nothing (gates are created 0600, so another user's gate cannot even be opened unless its
//! owner made it so) and would hand every acquirer that opts in — `leasehold flock` does,
//! for flock(1)'s sake — to whoever plants a gate. A gate hard-linked to another file is
//! ignored too: linked to the lock file, a waiter holding the gate would wait for itself.
//!
//! Waits at a gate honour the budget as every wait does (the helper thread blocks, the waiter
//! sleeps on its notifier, its deadline and its token), and one whose budget runs out while
//! it is held up at a gate (a trusted gate's holder that is stopped or stuck: the lock itself
//! may be free) says so: [`Error::GateHeld`](crate::Error::GateHeld) names the gate file and
//! its holders ([`Place`] tracks where a wait is blocked), not the lock's holders alone.
//!
//! Not a POSIX record lock on the lock file itself: Linux waiters already mark themselves
//! with whole-file POSIX read locks there (`sys::mark_waiting`), which a write lock would
//! collide with, and on the BSDs and macOS record locks and `flock` share one lock list.

use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::io::Errno;

use super::target::Target;
use crate::kind::FileId;
use crate::lease::platform::PlatformTarget;
use crate::mutex::lock as guard;
use crate::sys;

/// The gate (and the writers' queue) an exclusive waiter holds with its lease.
///
/// Dropped right after the lease's descriptor closed (see [`Held`](super::Held)), it closes
/// the gate, then the writers' queue: the readers queued on the gate, then the next writer,
/// are woken. Closed, never unlocked with `flock(LOCK_UN)`: a process forked while it was held
/// (Python's `os.fork`, `multiprocessing`) shares the gate's open file description, and an
/// unlock through the child's copy would drop the parent's gate for both — readers let past
/// a writer that still holds the lock's queue. A close drops only this copy; the gate is
/// free once every copy is closed. What it costs: a `close` wakes the waiters only at its
/// end (measured 3–4 µs on the reference VM), and the writers' queue's waiters one `close`
/// later still. The lock itself is never unlocked through a duplicate either: its
/// description may be COMMAND's too (see [`Held`](super::Held)).
#[derive(Debug)]
pub(crate) struct HeldGate {
    // Field order is the close order: the gate, then the writers' queue (the readers that
    // queued while we held go before the next writer).
    _gate: OwnedFd,
    _writers: Option<OwnedFd>,
}

/// Gate descriptors a shared waiter already unlocked, kept with the lease so that they
/// close after the lock file's descriptor, off the hand-over's path (each `close` of a
/// file with waiters measured ~3.5 µs here, twice on every shared wait's grant).
#[derive(Debug, Default)]
pub(crate) struct Spare {
    _fds: [Option<OwnedFd>; 2],
}

/// What a wait keeps of the gates until the lease is released.
#[derive(Debug, Default)]
pub(crate) struct Passed {
    pub(crate) held: Option<HeldGate>,
    pub(crate) spare: Spare,
}

/// The suffix of a gate's name (and how an operator recognises one).
const SUFFIX: &str = ".leasehold-gate";
/// The suffix of a readers' gate's name.
const READERS_SUFFIX: &str = ".leasehold-gate-readers";
/// The suffix of the writers' queue's name.
const WRITERS_SUFFIX: &str = ".leasehold-gate-writers";
/// The longest file name the common file systems take (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// The gate's file name for the lock file named `lock`.
pub(crate) fn name(lock: &OsStr) -> std::ffi::OsString {
    named(lock, SUFFIX)
}

/// The readers' gate's file name for the lock file named `lock`.
pub(crate) fn readers_name(lock: &OsStr) -> std::ffi::OsString {
    named(lock, READERS_SUFFIX)
}

/// The writers' queue's file name for the lock file named `lock`.
pub(crate) fn writers_name(lock: &OsStr) -> std::ffi::OsString {
    named(lock, WRITERS_SUFFIX)
}

fn named(lock: &OsStr, suffix: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    let bytes = lock.as_bytes();
    if 1 + bytes.len() + suffix.len() <= NAME_MAX {
        let mut n = std::ffi::OsString::from(".");
        n.push(lock);
        n.push(suffix);
        return n;
    }
    let mut hashed = format!("{suffix}-");
    crate::sys::naming::push_sha256_hex(&mut hashed, bytes);
    std::ffi::OsString::from(hashed)
}

/// The gates' names of a lock (`None` for a lock without gates).
impl Target {
    /// The gate's name, relative to `dir` (computed when needed: only shared acquirers and
    /// waiters use it).
    pub(super) fn gate(&self) -> Option<PathBuf> {
        let lock = self.name.file_name().filter(|_| self.gated)?;
        Some(self.name.with_file_name(name(lock)))
    }

    /// The readers' gate's name, relative to `dir` (see this file; computed when needed, as
    /// [`gate`](Self::gate) is).
    pub(super) fn readers_gate(&self) -> Option<PathBuf> {
        let lock = self.name.file_name().filter(|_| self.gated)?;
        Some(self.name.with_file_name(readers_name(lock)))
    }

    /// The writers' queue's name, relative to `dir` (see this file; computed when needed).
    pub(super) fn writers_gate(&self) -> Option<PathBuf> {
        let lock = self.name.file_name().filter(|_| self.gated)?;
        Some(self.name.with_file_name(writers_name(lock)))
    }
}

/// The gates a wait goes through (either may be missing: fairness only).
pub(crate) struct Gates {
    gate: Option<OwnedFd>,
    readers: Option<OwnedFd>,
    /// Exclusive waits only, and only next to a gate.
    writers: Option<OwnedFd>,
}

/// Where a wait through the gates is blocked: on the lock itself or on one of its gates.
/// [`block`] sets it before each blocking `flock`; the waiter reads it when its budget runs
/// out ([`Place::held_up`]), so that a wait stuck at a gate says so instead of blaming the
/// lock's holders — who may be nobody ("held by another process" while
/// `status` said `free`).
#[derive(Debug, Default)]
pub(crate) struct Place {
    at: AtomicU8,
}

/// [`Place`]'s values: blocked on the lock (or not blocked), or on one of the gates.
const AT_LOCK: u8 = 0;
const AT_READERS: u8 = 1;
const AT_WRITERS: u8 = 2;
const AT_GATE: u8 = 3;

impl Place {
    /// Blocks in `flock` on `fd` (the file `at` names) and records that it does;
    /// `interrupted` is asked after each `EINTR` (see `sys::lock_blocking`).
    fn wait(
        &self,
        at: u8,
        fd: BorrowedFd<'_>,
        shared: bool,
        interrupted: Ask<'_>,
    ) -> std::result::Result<(), Errno> {
        self.at.store(at, Ordering::Relaxed);
        sys::lock_blocking(fd, shared, interrupted)
    }

    /// The gate file the wait is blocked on, as messages name it (beside the lock path);
    /// `None` while the wait is at the lock itself.
    pub(crate) fn held_up(&self, target: &Target) -> Option<PathBuf> {
        let suffix = match self.at.load(Ordering::Relaxed) {
            AT_READERS => READERS_SUFFIX,
            AT_WRITERS => WRITERS_SUFFIX,
            AT_GATE => SUFFIX,
            _ => return None,
        };
        held_up_at(target, suffix)
    }
}

/// What a wait asks when a signal interrupts one of its `flock`s (`EINTR`): `Break` ends the
/// whole wait with `Err(EINTR)`, every gate it holds closed and the lock not granted;
/// `Continue` blocks again where it was. Only an inline wait asks anyone
/// ([`Budget::on_interrupt`](crate::Budget::on_interrupt)); [`GO_ON`] for every other.
pub(crate) type Ask<'a> = &'a dyn Fn() -> ControlFlow<()>;

/// Never stops a wait: `EINTR` is retried (helper threads, and inline waits without a hook).
pub(crate) const GO_ON: Ask<'static> = &|| ControlFlow::Continue(());

/// A wait at a gate: its failure costs fairness only and is ignored, but a wait the caller
/// stopped (`EINTR`, see [`Ask`]) ends there.
fn at_gate(res: std::result::Result<(), Errno>) -> std::result::Result<(), Errno> {
    match res {
        Err(Errno::INTR) => Err(Errno::INTR),
        _ => Ok(()),
    }
}

/// The gate with `suffix` of `target`'s lock, as messages name it (beside the lock path).
fn held_up_at(target: &Target, suffix: &str) -> Option<PathBuf> {
    if !target.gated {
        return None;
    }
    let display = target.display();
    Some(display.with_file_name(named(display.file_name()?, suffix)))
}

/// The gate of `target`'s lock, where a shared try found it held (see [`Place::held_up`]).
pub(crate) fn held_up_at_gate(target: &Target) -> Option<PathBuf> {
    held_up_at(target, SUFFIX)
}

/// The inodes whose readers' gate a wait of this process has opened (gates are never
/// removed): where an exclusive acquisition checks for waiting readers first.
static READERS_GATED: Mutex<Vec<FileId>> = Mutex::new(Vec::new());

/// Opens the gates of `target` (the inode `id`) for a wait in `shared` or exclusive mode,
/// and remembers a readers' gate found. The gate and the readers' gate are created by
/// shared waiters only, as [`open`] does; the writers' queue, which only exclusive waits
/// use, by an exclusive wait that found a gate (so a lock only exclusive users ever
/// touched still gets no gate file at all).
pub(crate) fn open_for_wait(target: &Target, id: FileId, shared: bool) -> Gates {
    if shared && nested(id) {
        // A nested shared wait goes straight to the lock (see "Nested shared leases").
        return Gates {
            gate: None,
            readers: None,
            writers: None,
        };
    }
    let readers = open_file(target, target.readers_gate(), shared);
    if readers.is_some() {
        let mut known = guard(&READERS_GATED);
        if !known.contains(&id) {
            known.push(id);
        }
    }
    let gate = open(target, shared);
    let writers = match (shared, &gate) {
        (false, Some(_)) => open_file(target, target.writers_gate(), true),
        _ => None,
    };
    Gates {
        gate,
        readers,
        writers,
    }
}

/// The environment variable through which a process that holds lock files shared tells the
/// children that inherit its descriptors so: `dev:ino` pairs (decimal), separated by commas
/// (see "Nested shared leases" in the module documentation).
pub(crate) const INHERITED_SHARED: &str = "LEASEHOLD_HELD_SHARED";

/// The lock files [`INHERITED_SHARED`] names in this process's environment, read once (the
/// first shared acquisition); malformed entries are ignored.
fn inherited() -> &'static [FileId] {
    static INHERITED: std::sync::OnceLock<Vec<FileId>> = std::sync::OnceLock::new();
    INHERITED.get_or_init(|| {
        std::env::var(INHERITED_SHARED)
            .unwrap_or_default()
            .split(',')
            .filter_map(parse_id)
            .collect()
    })
}

/// One `dev:ino` of [`INHERITED_SHARED`].
fn parse_id(s: &str) -> Option<FileId> {
    let (dev, ino) = s.trim().split_once(':')?;
    Some(FileId {
        dev: dev.parse().ok()?,
        ino: ino.parse().ok()?,
    })
}

/// The value of [`INHERITED_SHARED`] for children of this process that inherit a shared
/// lease on `id`: what this process inherited, plus `id`.
pub(crate) fn inherited_value(id: FileId) -> String {
    let mut ids: Vec<FileId> = inherited().to_vec();
    if !ids.contains(&id) {
        ids.push(id);
    }
    let parts: Vec<String> = ids.iter().map(|i| format!("{}:{}", i.dev, i.ino)).collect();
    parts.join(",")
}

/// Whether a shared acquisition of the inode `id` is nested: a shared lease of this process
/// holds it, or an ancestor whose descriptor this process inherited said it holds it shared
/// ([`INHERITED_SHARED`]). Such an acquisition skips the gates (see "Nested shared leases").
pub(crate) fn nested(id: FileId) -> bool {
    inherited().contains(&id) || crate::lease::claim::holds_shared((id.dev, id.ino))
}

/// Whether shared waiters hold the readers' gate of `target` (inode `id`) right now; only
/// looked at where a wait of this process found one.
pub(crate) fn readers_waiting(target: &Target, id: FileId) -> bool {
    if !guard(&READERS_GATED).contains(&id) {
        return false;
    }
    let Some(readers) = open_file(target, target.readers_gate(), false) else {
        return false;
    };
    matches!(sys::try_lock(readers.as_fd(), false), Ok(false))
}

/// Opens the gate of `target`, or `None` where it has none or it cannot be used (see the
/// module documentation: fairness only). With `create` (shared acquirers) a missing gate
/// is created 0600; exclusive waiters never create one, so a lock that only ever had
/// exclusive users never gets a gate (and keyed leases' namespaces none at all). Where
/// no gate exists no shared lease of ours is held or was ever taken, bar one created at
/// this very moment, whose first holder then goes unqueued.
pub(crate) fn open(target: &Target, create: bool) -> Option<OwnedFd> {
    open_file(target, target.gate(), create)
}

/// Opens the gate file `name` of `target` as a lock file is opened, and keeps it only where
/// it may be used (`sys::fd_gate_usable`: a regular file with one link that passes the
/// ownership rule; see the module documentation, "Trust").
fn open_file(target: &Target, name: Option<PathBuf>, create: bool) -> Option<OwnedFd> {
    let fd = sys::open_lock_file(target.dir(), &name?, create).ok()?;
    let id = sys::fd_gate_usable(fd.as_fd()).ok()??;
    super::descriptors::register(fd.as_fd(), id);
    Some(fd)
}

/// A shared acquirer's non-blocking pass: `false` while an exclusive waiter holds the gate.
/// A gate that cannot be locked at all lets everyone pass.
pub(crate) fn pass_now(gate: &OwnedFd) -> bool {
    sys::try_lock(gate.as_fd(), true).unwrap_or(true)
}

/// Blocks until the lock on `fd` is granted in `shared` or exclusive mode, through the
/// gates there are (see the module documentation for the protocol), and answers what the
/// lease keeps of them; `place` tells the waiter where it is blocked meanwhile. A gate that
/// cannot be locked costs fairness only: the wait goes on to the lock. `interrupted` is
/// asked after each `EINTR` ([`Ask`]); a wait it stops returns `Err(EINTR)` having closed
/// or unlocked every gate it took (they are dropped here), the lock not granted.
pub(crate) fn block(
    fd: BorrowedFd<'_>,
    gates: Gates,
    shared: bool,
    place: &Place,
    interrupted: Ask<'_>,
) -> std::result::Result<Passed, Errno> {
    match shared {
        true => block_shared(fd, gates, place, interrupted),
        false => block_exclusive(fd, gates, place, interrupted),
    }
}

fn block_exclusive(
    fd: BorrowedFd<'_>,
    gates: Gates,
    place: &Place,
    ask: Ask<'_>,
) -> std::result::Result<Passed, Errno> {
    let Gates {
        gate,
        readers,
        writers,
    } = gates;
    if let Some(r) = readers {
        // Wait until the readers already waiting have the lock, then let the readers'
        // gate go (it closes here, before this wait is in line: off every hand-over).
        at_gate(place.wait(AT_READERS, r.as_fd(), false, ask))?;
    }
    let Some(gate) = gate else {
        return place
            .wait(AT_LOCK, fd, false, ask)
            .map(|()| Passed::default());
    };
    // Stopped from here on, the gates held so far close as this returns (unlocking them).
    if let Some(w) = &writers {
        // Behind the writer ahead of us, on a file no reader queues on.
        at_gate(place.wait(AT_WRITERS, w.as_fd(), false, ask))?;
    }
    at_gate(place.wait(AT_GATE, gate.as_fd(), false, ask))?;
    place.wait(AT_LOCK, fd, false, ask)?;
    // The lock is ours: the gate stays held with the lease (see the module
    // documentation), and the readers behind it pass when the lease is released.
    Ok(Passed {
        held: Some(HeldGate {
            _gate: gate,
            _writers: writers,
        }),
        spare: Spare::default(),
    })
}

fn block_shared(
    fd: BorrowedFd<'_>,
    gates: Gates,
    place: &Place,
    ask: Ask<'_>,
) -> std::result::Result<Passed, Errno> {
    let Gates { gate, readers, .. } = gates;
    if let Some(r) = &readers {
        // Reserve this reader's turn for the whole wait.
        at_gate(place.wait(AT_READERS, r.as_fd(), true, ask))?;
    }
    let res = match &gate {
        Some(g) => pass_then_lock(fd, g, place, ask),
        None => place.wait(AT_LOCK, fd, true, ask),
    };
    // The lock is ours (or the wait failed): writers behind us may queue. Unlocked, not
    // closed: the descriptors close with the lease (see `Spare`).
    if let Some(r) = &readers {
        let _ = sys::unlock(r.as_fd());
    }
    res.map(|()| Passed {
        held: None,
        spare: Spare {
            _fds: [gate, readers],
        },
    })
}

/// A shared waiter's way through `gate` to the lock on `fd`.
fn pass_then_lock(
    fd: BorrowedFd<'_>,
    gate: &OwnedFd,
    place: &Place,
    ask: Ask<'_>,
) -> std::result::Result<(), Errno> {
    if !pass_now(gate) {
        // A writer has the gate. Holding the lock, it lets the readers queued on the
        // lock in when it releases, before the next writer: wait on the lock itself, so
        // that the release wakes us directly (through the gate took a second wake-up:
        // measured 29–34 µs from release to grant against 14–15 µs). Waiting for the
        // readers that hold the lock, it must not be overtaken: let our probe go and
        // queue on the gate behind it.
        if !sys::try_lock(fd, true)? {
            return place.wait(AT_LOCK, fd, true, ask);
        }
        let _ = sys::unlock(fd);
        at_gate(place.wait(AT_GATE, gate.as_fd(), true, ask))?;
    }
    // Through the gate (held shared): try the lock and let the gate go before waiting
    // for the lock, so that no writer waits for the gate behind a reader's wait.
    let now = sys::try_lock(fd, true);
    let _ = sys::unlock(gate.as_fd());
    match now? {
        true => Ok(()),
        false => place.wait(AT_LOCK, fd, true, ask),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Whether another open file description could lock `path` exclusively right now.
    fn free(path: &std::path::Path) -> bool {
        let other = OwnedFd::from(std::fs::File::open(path).unwrap());
        sys::try_lock(other.as_fd(), false).unwrap()
    }

    /// A child forked while an exclusive waiter holds its gate (the parent's lease) drops
    /// its copy of the lease's gate — released, or gone with the child — and the parent's
    /// gate stays held: the release closes, never unlocks the shared description.
    #[test]
    fn a_forked_childs_release_leaves_the_parents_gate_held() {
        let dir = tempfile::tempdir().unwrap();
        let (gate, writers) = (dir.path().join("gate"), dir.path().join("writers"));
        let open = |p: &std::path::Path| OwnedFd::from(std::fs::File::create(p).unwrap());
        let (g, w) = (open(&gate), open(&writers));
        assert!(sys::try_lock(g.as_fd(), false).unwrap());
        assert!(sys::try_lock(w.as_fd(), false).unwrap());
        let mut held = Some(HeldGate {
            _gate: g,
            _writers: Some(w),
        });
        // Only the child runs this: the parent's `held` is untouched by the fork.
        let status = crate::sys::test_fork::in_child(&mut || drop(held.take()));
        assert_eq!(status, Some(0), "the child released its copy and exited");
        assert!(!free(&gate), "the parent's gate is still held");
        assert!(!free(&writers), "and its writers' queue");
        drop(held.take());
        assert!(
            free(&gate) && free(&writers),
            "released by the parent's own release"
        );
    }
}
