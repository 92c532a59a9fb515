//! Shared leases with real processes: shared holders coexist, shared and exclusive
//! exclude each other across processes and across implementations (util-linux `flock(1)`,
//! Python's `fcntl.flock`, std's `File::lock`/`File::lock_shared`), and an exclusive waiter
//! is not starved by shared holders of other processes that overlap each other without a gap.
//!
//! Other processes are util-linux `flock`, `python3`, or this test binary re-executed as a
//! helper (the [`helper`] test, a no-op in a normal run; its role comes from [`ROLE`]).
//! Every handshake is a line on a pipe or a state read from `/proc/locks`, never a sleep.
#![cfg(target_os = "linux")]

use std::io::{BufRead, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leasehold::{
    Budget, Holders, Lease, LeaseHandle, LeaseOptions, LockMode, SharedLease, holders,
};
use testkit::{Proc, blocked_on, run, until};

/// The environment variable naming a helper's role: `readers`, `std-shared`, `std-exclusive`,
/// `try-shared` (its argument, the lock path, is in [`LOCK`]).
const ROLE: &str = "LEASEHOLD_SHARED_TEST_ROLE";
const LOCK: &str = "LEASEHOLD_SHARED_TEST_LOCK";
/// A `readers` helper's phase: it starts after this many quarters of [`READER_HOLD`].
const PHASE: &str = "LEASEHOLD_SHARED_TEST_PHASE";

/// How long each looping reader holds its shared lease per turn.
const READER_HOLD: Duration = Duration::from_millis(50);

/// Not a test of its own: the body of the helper processes (a no-op in a normal run).
///
/// * `readers`: after its [`PHASE`], loops `SharedLease::acquire` → hold [`READER_HOLD`] →
///   release → again at once; prints `S` once it first holds; stops at stdin EOF.
/// * `std-shared` / `std-exclusive`: `File::lock_shared` / `File::lock`, prints `locked`,
///   holds until stdin EOF.
/// * `std-try-shared` / `std-try-exclusive`: `File::try_lock_shared` / `File::try_lock`;
///   exits 0 when it got the lock, 1 when it would block.
/// * `try-shared`: one `SharedLease::try_acquire`; prints `ok` or `contended`.
/// * `hand-to-child` / `hand-to-child-timeout`: `Lease::acquire` (unlimited / a 30 s
///   budget), `share_with_children`, spawns `sleep 600`, releases, prints the child's pid
///   and exits.
/// * `wait-shared` / `wait-exclusive`: `SharedLease::acquire` (a 30 s budget: the
///   cancellable waiter) / `Lease::acquire` (unlimited: the inline waiter); prints `got`,
///   holds until stdin EOF.
#[test]
#[allow(clippy::incompatible_msrv)] // File::lock (1.89) only in this helper, as the interop peer
fn helper() {
    let (Some(role), Some(lock)) = (std::env::var_os(ROLE), std::env::var_os(LOCK)) else {
        return;
    };
    let lock = PathBuf::from(lock);
    let mut out = std::io::stdout();
    let stdin_eof = || {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            for _ in std::io::stdin().lock().lines() {}
            d.store(true, Ordering::SeqCst);
        });
        done
    };
    match role.to_str().unwrap() {
        "readers" => {
            let done = stdin_eof();
            // Out of phase with the other readers (a quarter hold each), so that their
            // short gaps between holds never coincide: the lock is never free.
            let phase: u32 = std::env::var(PHASE).map_or(0, |p| p.parse().unwrap());
            std::thread::sleep(READER_HOLD / 4 * phase);
            let mut first = true;
            while !done.load(Ordering::SeqCst) {
                let lease = SharedLease::acquire(&lock, &Budget::unlimited()).unwrap();
                if first {
                    writeln!(out, "@S").unwrap();
                    out.flush().unwrap();
                    first = false;
                }
                std::thread::sleep(READER_HOLD);
                drop(lease);
            }
        }
        "std-shared" | "std-exclusive" => {
            let f = std::fs::File::open(&lock).unwrap();
            if role == "std-shared" {
                f.lock_shared().unwrap();
            } else {
                f.lock().unwrap();
            }
            writeln!(out, "@locked").unwrap();
            out.flush().unwrap();
            for _ in std::io::stdin().lock().lines() {}
        }
        "std-try-shared" | "std-try-exclusive" => {
            let f = std::fs::File::open(&lock).unwrap();
            let got = if role == "std-try-shared" {
                f.try_lock_shared()
            } else {
                f.try_lock()
            };
            match got {
                Ok(()) => std::process::exit(0),
                Err(std::fs::TryLockError::WouldBlock) => std::process::exit(1),
                Err(e) => panic!("{e:?}"),
            }
        }
        "wait-shared" => {
            let lease = SharedLease::acquire(&lock, &generous()).unwrap();
            writeln!(out, "@got").unwrap();
            out.flush().unwrap();
            for _ in std::io::stdin().lock().lines() {}
            drop(lease);
        }
        "wait-exclusive" => {
            let lease = Lease::acquire(&lock, &Budget::unlimited()).unwrap();
            writeln!(out, "@got").unwrap();
            out.flush().unwrap();
            for _ in std::io::stdin().lock().lines() {}
            drop(lease);
        }
        "hand-to-child" | "hand-to-child-timeout" => {
            // Waits (inline, or through the helper with a deadline), hands the lease to a
            // background child, prints the child's pid and exits: the child holds it now.
            let budget = match role == "hand-to-child" {
                true => Budget::unlimited(),
                false => generous(),
            };
            let lease = Lease::acquire(&lock, &budget).unwrap();
            lease.share_with_children(true).unwrap();
            // Never waited for: this helper exits at once and the child, holding the lease,
            // outlives it (the test kills it by its pid).
            #[allow(clippy::zombie_processes)]
            let child = Command::new("sleep")
                .arg("600")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            lease.share_with_children(false).unwrap();
            drop(lease);
            writeln!(out, "@{}", child.id()).unwrap();
            out.flush().unwrap();
        }
        "try-shared" => {
            let answer = match SharedLease::try_acquire(&lock) {
                Ok(_) => "ok",
                Err(e) if e.is_contended() => "contended",
                Err(e) => panic!("{e}"),
            };
            writeln!(out, "@{answer}").unwrap();
        }
        other => panic!("unknown helper role {other}"),
    }
    std::process::exit(0);
}

/// This test binary re-executed as the helper `role` on `lock`.
fn helper_cmd(role: &str, lock: &Path) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "helper", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(LOCK, lock);
    cmd
}

/// The next line a helper or holder printed, after its `@` (libtest prints its own lines
/// around a helper's, on the same stream); empty at EOF.
fn said(p: &mut Proc) -> String {
    for _ in 0..8 {
        let line = p.line();
        if let Some((_, mine)) = line.rsplit_once('@') {
            return mine.to_string();
        }
    }
    String::new()
}

/// A holder from another implementation, holding until its stdin closes.
#[derive(Clone, Copy, Debug)]
enum Foreign {
    UtilLinux,
    Python,
    Std,
}

const FOREIGN: [Foreign; 3] = [Foreign::UtilLinux, Foreign::Python, Foreign::Std];

impl Foreign {
    fn command(self, lock: &Path, shared: bool) -> Command {
        match self {
            Foreign::UtilLinux => {
                let mut c = Command::new("flock");
                c.arg(if shared { "-s" } else { "-x" })
                    .arg(lock)
                    .args(["-c", "echo @locked; read -r _ || true"]);
                c
            }
            Foreign::Python => {
                let op = if shared { "LOCK_SH" } else { "LOCK_EX" };
                let mut c = Command::new("python3");
                c.arg("-c").arg(format!(
                    "import fcntl, sys\nf = open(sys.argv[1], 'rb')\nfcntl.flock(f, fcntl.{op})\nprint('@locked', flush=True)\nsys.stdin.read()"
                ));
                c.arg(lock);
                c
            }
            Foreign::Std => helper_cmd(
                if shared {
                    "std-shared"
                } else {
                    "std-exclusive"
                },
                lock,
            ),
        }
    }

    fn hold(self, lock: &Path, shared: bool) -> Proc {
        let mut p = Proc::spawn(&mut self.command(lock, shared));
        assert_eq!(said(&mut p), "locked", "{self:?} did not take the lock");
        p
    }

    /// One non-blocking try from this implementation: whether it got the lock.
    fn try_once(self, lock: &Path, shared: bool) -> bool {
        let mode = if shared { "shared" } else { "exclusive" };
        let out = match self {
            Foreign::UtilLinux => run(Command::new("flock")
                .args(["-n", if shared { "-s" } else { "-x" }])
                .arg(lock)
                .arg("true")),
            Foreign::Python => {
                let op = if shared { "LOCK_SH" } else { "LOCK_EX" };
                run(Command::new("python3")
                    .arg("-c")
                    .arg(format!(
                        "import fcntl, sys\nf = open(sys.argv[1], 'rb')\ntry:\n    fcntl.flock(f, fcntl.{op} | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(1)"
                    ))
                    .arg(lock))
            }
            Foreign::Std => {
                let role = if shared {
                    "std-try-shared"
                } else {
                    "std-try-exclusive"
                };
                run(&mut helper_cmd(role, lock))
            }
        };
        assert!(out.code == 0 || out.code == 1, "{self:?} {mode}: {out:?}");
        out.code == 0
    }
}

fn generous() -> Budget {
    Budget::timeout(Duration::from_secs(30))
}

/// Pids holding the lock file (shared or exclusive), per `/proc/locks`.
fn pids(path: &Path) -> Vec<u32> {
    match holders(path).unwrap() {
        Holders::Held { pids } => pids,
        Holders::Free => Vec::new(),
        other => panic!("{other:?}"),
    }
}

fn gate_of(lock: &Path) -> PathBuf {
    let name = lock.file_name().unwrap().to_str().unwrap();
    lock.with_file_name(format!(".{name}.leasehold-gate"))
}

fn writers_queue_of(lock: &Path) -> PathBuf {
    let name = lock.file_name().unwrap().to_str().unwrap();
    lock.with_file_name(format!(".{name}.leasehold-gate-writers"))
}

fn readers_gate_of(lock: &Path) -> PathBuf {
    let name = lock.file_name().unwrap().to_str().unwrap();
    lock.with_file_name(format!(".{name}.leasehold-gate-readers"))
}

#[test]
fn foreign_shared_holders_coexist_with_ours_and_foreign_exclusive_ones_exclude_ours() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: foreign_shared_holders_coexist_with_ours_and_foreign_exclusive_ones_exclude_ours: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for foreign in FOREIGN {
        let lock = dir.path().join(format!("{foreign:?}.lock"));
        std::fs::File::create(&lock).unwrap();
        // A shared holder elsewhere: our shared lease coexists, our exclusive one is refused.
        let mut holder = foreign.hold(&lock, true);
        let ours = SharedLease::try_acquire(&lock).expect("shared coexists with shared");
        ours.verify().unwrap();
        let err = Lease::try_acquire(&lock).unwrap_err();
        assert!(err.is_contended(), "{foreign:?}: {err:?}");
        drop(ours);
        // ... and our exclusive waiter gets in once that holder releases.
        let p = lock.clone();
        let waiter = std::thread::spawn(move || Lease::acquire(&p, &generous()));
        until("our exclusive waiter waits", || {
            blocked_on(std::process::id(), &lock)
        });
        holder.close_stdin();
        holder.wait();
        let lease = waiter
            .join()
            .unwrap()
            .expect("granted after the foreign release");
        assert_eq!(pids(&lock), vec![std::process::id()]);
        drop(lease);

        // An exclusive holder elsewhere excludes our shared and exclusive leases alike,
        // and our shared waiter gets in when it goes.
        let mut holder = foreign.hold(&lock, false);
        assert!(SharedLease::try_acquire(&lock).unwrap_err().is_contended());
        assert!(Lease::try_acquire(&lock).unwrap_err().is_contended());
        let p = lock.clone();
        let waiter = std::thread::spawn(move || SharedLease::acquire(&p, &generous()));
        holder.close_stdin();
        holder.wait();
        let lease = waiter.join().unwrap().expect("shared waiter granted");
        lease.verify().unwrap();
    }
}

#[test]
fn our_leases_exclude_foreign_lockers_as_flock_does() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("ours.lock");
    for foreign in FOREIGN {
        let shared = SharedLease::try_acquire(&lock).unwrap();
        assert!(
            foreign.try_once(&lock, true),
            "{foreign:?}: shared with ours"
        );
        assert!(
            !foreign.try_once(&lock, false),
            "{foreign:?}: exclusive vs our shared"
        );
        drop(shared);
        let exclusive = Lease::try_acquire(&lock).unwrap();
        assert!(
            !foreign.try_once(&lock, true),
            "{foreign:?}: shared vs our exclusive"
        );
        assert!(
            !foreign.try_once(&lock, false),
            "{foreign:?}: exclusive vs ours"
        );
        drop(exclusive);
        assert!(foreign.try_once(&lock, false), "{foreign:?}: free again");
    }
    // std's blocking File::lock waits while we hold, and gets it when we release.
    let shared = SharedLease::try_acquire(&lock).unwrap();
    let mut peer = Foreign::Std.hold(&lock, true); // returns only once std got it, shared
    let mut blocked = Proc::spawn(&mut Foreign::Std.command(&lock, false));
    until("std's exclusive locker waits", || {
        blocked_on(blocked.pid(), &lock)
    });
    drop(shared);
    peer.close_stdin();
    peer.wait();
    assert_eq!(
        said(&mut blocked),
        "locked",
        "std's File::lock got it after we released"
    );
    assert!(SharedLease::try_acquire(&lock).unwrap_err().is_contended());
    blocked.close_stdin();
    blocked.wait();
}

/// The turnstile across processes: four processes hold shared leases in loops that overlap
/// each other continuously, so the lock is never free; an exclusive waiter still gets in,
/// as soon as the shared holders present when it started have released (one hold, 50 ms),
/// and while it holds, nobody else does. Without the gate it would wait until the readers
/// stop (the bench's figure for util-linux `flock -s` readers).
#[test]
fn an_exclusive_waiter_gets_in_while_four_processes_overlap_shared_holds() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: an_exclusive_waiter_gets_in_while_four_processes_overlap_shared_holds: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("readers.lock");
    let mut readers: Vec<Proc> = (0..4)
        .map(|i| Proc::spawn(helper_cmd("readers", &lock).env(PHASE, i.to_string())))
        .collect();
    for r in &mut readers {
        assert_eq!(said(r), "S");
    }
    for round in 0..5 {
        let started = Instant::now();
        // One 50 ms hold of the readers present, with room for a loaded 2-core machine;
        // without the gate the writer waits until the readers' phases drift into a common
        // gap (seconds to minutes: the bench's `flock -s` figure).
        let lease = Lease::acquire(&lock, &Budget::timeout(Duration::from_secs(1)))
            .unwrap_or_else(|e| panic!("round {round}: the writer was starved: {e}"));
        let waited = started.elapsed();
        let _quiet = testkit::quiet();
        assert_eq!(
            pids(&lock),
            vec![std::process::id()],
            "round {round}: {waited:?}"
        );
        drop(lease);
    }
    // The async writer too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    #[cfg(feature = "tokio")]
    {
        let lease = rt
            .block_on(Lease::acquire_async(
                &lock,
                &Budget::timeout(Duration::from_secs(1)),
            ))
            .expect("the async writer was starved");
        drop(lease);
    }
    drop(rt);
    // The readers go on after the writer.
    let after = SharedLease::acquire(&lock, &generous()).unwrap();
    drop(after);
    for r in &mut readers {
        r.close_stdin();
        r.wait();
    }
}

/// While an exclusive waiter of ours waits (holding the gate), a shared try from another
/// leasehold process is refused although only shared holders hold the lock — it would get
/// in with plain flock, and does with util-linux `flock -s`, which knows no gate. When the
/// holder goes, the waiter is granted, then shared acquirers get in again.
#[test]
fn shared_newcomers_queue_behind_a_waiting_exclusive_one() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: shared_newcomers_queue_behind_a_waiting_exclusive_one: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("turnstile.lock");
    // A leasehold shared acquisition creates the gate; exclusive use alone never does.
    drop(Lease::try_acquire(&lock).unwrap());
    assert!(!gate_of(&lock).exists(), "exclusive use creates no gate");
    drop(SharedLease::try_acquire(&lock).unwrap());
    let gate = gate_of(&lock);
    assert_eq!(
        std::fs::metadata(&gate).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The readers' gate is made by the first shared *wait* (a try never waits).
    assert!(!readers_gate_of(&lock).exists());

    let mut reader = Foreign::UtilLinux.hold(&lock, true);
    let p = lock.clone();
    let writer = std::thread::spawn(move || Lease::acquire(&p, &generous()));
    until("the exclusive waiter holds the gate", || {
        pids(&gate) == vec![std::process::id()]
    });
    let try_shared = |lock: &Path| {
        let mut p = Proc::spawn(&mut helper_cmd("try-shared", lock));
        said(&mut p)
    };
    assert_eq!(
        try_shared(&lock),
        "contended",
        "a newcomer must queue behind the writer"
    );
    assert!(
        Foreign::UtilLinux.try_once(&lock, true),
        "plain flock -s knows no gate and still gets in"
    );
    reader.close_stdin();
    reader.wait();
    let lease = writer.join().unwrap().expect("the writer is granted");
    assert_eq!(try_shared(&lock), "contended", "held exclusively now");
    drop(lease);
    assert_eq!(try_shared(&lock), "ok");
    assert!(gate.exists(), "the gate is never removed");
}

/// A shared acquisition nested in a shared lease of this process is granted at once
/// although a writer of another process queues between them, holding the gate and waiting
/// for the outer lease: waiting behind that writer would be a deadlock for good (util-linux
/// `flock -s` nests so without one). Both a try and a wait; the wait's budget only bounds the
/// test should it hang.
#[test]
fn a_nested_shared_lease_is_not_held_up_by_a_writer_waiting_for_the_outer_one() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("nested.lock");
    let outer = SharedLease::try_acquire(&lock).unwrap();
    let mut writer = Proc::spawn(&mut helper_cmd("wait-exclusive", &lock));
    // Blocked on the lock itself: it took the gate first (see `lease/posix/gate.rs`).
    until(
        "the writer waits for the outer lease, holding the gate",
        || blocked_on(writer.pid(), &lock),
    );
    let tried = SharedLease::try_acquire(&lock);
    assert!(tried.is_ok(), "a nested try: {tried:?}");
    let waited = SharedLease::acquire(&lock, &Budget::timeout(Duration::from_secs(10)));
    assert!(waited.is_ok(), "a nested wait: {waited:?}");
    // From another thread of the process too: the process holds the file shared.
    let p = lock.clone();
    let other = std::thread::spawn(move || SharedLease::try_acquire(&p).map(drop));
    assert!(other.join().unwrap().is_ok());
    drop((tried, waited, outer));
    assert_eq!(
        said(&mut writer),
        "got",
        "the writer goes once they are gone"
    );
}

/// Whether every thread of process `pid` is stopped (SIGSTOP has taken effect: state `T`).
fn stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|st| st.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
    })
}

/// Whether process `pid` is blocked in the kernel's queue for any lock, and not for the lock
/// of `path`'s inode.
fn blocked_elsewhere(pid: u32, path: &Path) -> bool {
    let anywhere = testkit::proc_locks()
        .lines()
        .any(|l| l.contains("->") && l.split_whitespace().nth(5) == Some(&pid.to_string()));
    anywhere && !blocked_on(pid, path)
}

/// Readers are not starved by a queue of writers either (the same fairness as
/// exclusive waits): a shared waiter queued behind an exclusive waiter gets the lease before
/// exclusive waiters that queue after it — a reader phase between writer phases. The
/// reader is stopped (SIGSTOP) while the first writer gets the lock, so that the later
/// writer is the first to run: without a readers' reservation it takes the gate the reader
/// queued for and gets the lock first (what a writer that loops back to back does to woken
/// readers, measured in the bench's shared-mode table).
#[test]
fn a_waiting_reader_goes_before_writers_that_queue_after_it() {
    // It observes waiters through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: a_waiting_reader_goes_before_writers_that_queue_after_it: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    use rustix::process::Signal;
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("phases.lock");
    drop(SharedLease::try_acquire(&lock).unwrap()); // a shared user: the gates exist
    let gate = gate_of(&lock);
    let holder = testkit::FlockHolder::hold(&lock);
    let mut first = Proc::spawn(&mut helper_cmd("wait-exclusive", &lock));
    until("the first writer waits, holding the gate", || {
        blocked_on(first.pid(), &lock) && pids(&gate) == vec![first.pid()]
    });
    let mut reader = Proc::spawn(&mut helper_cmd("wait-shared", &lock));
    // (On the lock itself, the holder being exclusive: see `lease/posix/gate.rs`.)
    until("the reader waits behind the first writer", || {
        blocked_on(reader.pid(), &lock) || blocked_on(reader.pid(), &gate)
    });
    reader.signal(Signal::STOP);
    until("the reader is stopped", || stopped(reader.pid()));
    let mut second = Proc::spawn(&mut helper_cmd("wait-exclusive", &lock));
    until("the second writer waits", || {
        blocked_on(second.pid(), &gate) || blocked_elsewhere(second.pid(), &gate)
    });
    holder.kill();
    assert_eq!(said(&mut first), "got");
    // The second writer, the only one running, moves on as far as it may: past the gate's
    // queue (it waits at the readers' gate while the reader holds its reservation; without
    // one, it would queue on the gate and then on the lock, next to the reader).
    until("the second writer is past the gate's queue", || {
        blocked_elsewhere(second.pid(), &gate)
    });
    reader.signal(Signal::CONT);
    until("the reader waits again", || {
        blocked_on(reader.pid(), &lock) || blocked_on(reader.pid(), &gate)
    });
    first.close_stdin();
    first.wait();
    until("someone holds the lease after the first writer", || {
        !pids(&lock).is_empty()
    });
    assert_eq!(
        pids(&lock),
        vec![reader.pid()],
        "the reader, queued before the second writer, goes first"
    );
    assert_eq!(said(&mut reader), "got");
    reader.close_stdin();
    reader.wait();
    assert_eq!(said(&mut second), "got", "then the second writer");
    second.close_stdin();
    second.wait();
    assert_eq!(
        std::fs::metadata(readers_gate_of(&lock))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600,
        "the first shared wait made the readers' gate, 0600"
    );
}

/// A writer that releases and acquires again at once does not barge in ahead of a reader
/// its release woke (readers are not starved by writers): once this process has
/// waited where shared waiters queue, its next `Lease::acquire` defers to the shared waiters
/// (it finds the readers' gate held) instead of taking the lock back with its first try. The
/// waiting reader is stopped (SIGSTOP) while the writer releases, so without deferring the
/// writer's try would find the lock free and take it.
#[test]
fn a_writer_that_acquires_again_at_once_lets_a_waiting_reader_go_first() {
    // It observes waiters through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: a_writer_that_acquires_again_at_once_lets_a_waiting_reader_go_first: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    use rustix::process::Signal;
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("barge.lock");
    let me = std::process::id();
    // This process waits once where a shared waiter queues: it learns the readers' gate.
    let holder = testkit::FlockHolder::hold(&lock);
    let mut first = Proc::spawn(&mut helper_cmd("wait-shared", &lock));
    until("the first reader waits", || blocked_on(first.pid(), &lock));
    let p = lock.clone();
    let writer = std::thread::spawn(move || Lease::acquire(&p, &generous()));
    until("the writer waits", || {
        blocked_elsewhere(me, &gate_of(&lock))
    });
    holder.kill();
    assert_eq!(said(&mut first), "got");
    first.close_stdin();
    first.wait();
    let lease = writer.join().unwrap().expect("the writer is granted");
    // A reader queues while the writer holds, and is stopped.
    let mut reader = Proc::spawn(&mut helper_cmd("wait-shared", &lock));
    until("the reader waits", || blocked_on(reader.pid(), &lock));
    reader.signal(Signal::STOP);
    until("the reader is stopped", || stopped(reader.pid()));
    // Release, and acquire again at once: the lock is free, but a reader waits.
    drop(lease);
    let p = lock.clone();
    let again = std::thread::spawn(move || Lease::acquire(&p, &generous()));
    until("the writer waits again, behind the reader", || {
        blocked_elsewhere(me, &lock) || !pids(&lock).is_empty()
    });
    assert!(
        pids(&lock).is_empty(),
        "the writer took the lock back ahead of the waiting reader: holders {:?} (this process {me}, the reader {})",
        pids(&lock),
        reader.pid()
    );
    reader.signal(Signal::CONT);
    assert_eq!(said(&mut reader), "got");
    assert_eq!(pids(&lock), vec![reader.pid()]);
    reader.close_stdin();
    reader.wait();
    drop(again.join().unwrap().expect("then the writer"));
}

/// A hand-over takes one wake-up (BENCHMARKS.md, "Shared mode": one wake-up per hand-over):
/// a writer that waited keeps the gate and the writers' queue with its lease; a reader that
/// comes while it holds waits on the lock itself (not on the gate, which took a second
/// wake-up after the release) and goes in at the release before a writer queued after it;
/// the next writer queues on the writers' queue, apart from readers (queued on the gate,
/// readers behind it were woken when it was granted); and a release leaves nothing of the
/// gates locked — for a lease and for a `LeaseHandle`.
#[test]
fn a_writer_keeps_the_gate_with_its_lease_and_readers_wait_for_it_on_the_lock() {
    // It observes waiters through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: a_writer_keeps_the_gate_with_its_lease_and_readers_wait_for_it_on_the_lock: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("kept.lock");
    drop(SharedLease::try_acquire(&lock).unwrap()); // a shared user: the gates exist
    let (gate, readers, writers) = (
        gate_of(&lock),
        readers_gate_of(&lock),
        writers_queue_of(&lock),
    );
    let holder = testkit::FlockHolder::hold(&lock);
    let mut writer = Proc::spawn(&mut helper_cmd("wait-exclusive", &lock));
    until("the writer waits, holding the gate", || {
        blocked_on(writer.pid(), &lock) && pids(&gate) == vec![writer.pid()]
    });
    holder.kill();
    assert_eq!(said(&mut writer), "got");
    assert_eq!(pids(&lock), vec![writer.pid()]);
    assert_eq!(
        pids(&gate),
        vec![writer.pid()],
        "the writer keeps the gate while it holds the lease"
    );
    assert_eq!(pids(&writers), vec![writer.pid()], "and the writers' queue");
    let mut next = Proc::spawn(&mut helper_cmd("wait-exclusive", &lock));
    until("the next writer waits", || {
        blocked_on(next.pid(), &writers) || blocked_on(next.pid(), &gate)
    });
    assert!(
        blocked_on(next.pid(), &writers),
        "the next writer queued on the gate, where readers queue"
    );
    writer.close_stdin();
    writer.wait();
    assert_eq!(said(&mut next), "got");
    let mut writer = next;
    let mut reader = Proc::spawn(&mut helper_cmd("wait-shared", &lock));
    until("the reader waits", || {
        blocked_on(reader.pid(), &lock) || blocked_on(reader.pid(), &gate)
    });
    assert!(
        !blocked_on(reader.pid(), &gate),
        "the reader queued on the gate, not on the lock"
    );
    let mut second = Proc::spawn(&mut helper_cmd("wait-exclusive", &lock));
    until("a second writer waits, at the readers' gate", || {
        blocked_on(second.pid(), &readers)
    });
    writer.close_stdin();
    writer.wait();
    assert_eq!(said(&mut reader), "got");
    assert_eq!(pids(&lock), vec![reader.pid()], "the reader goes first");
    until("the second writer waits for the reader", || {
        blocked_on(second.pid(), &lock) && pids(&gate) == vec![second.pid()]
    });
    reader.close_stdin();
    reader.wait();
    assert_eq!(said(&mut second), "got");
    second.close_stdin();
    second.wait();
    assert!(pids(&gate).is_empty() && pids(&readers).is_empty() && pids(&writers).is_empty());

    // A handle that waited keeps the gate while it holds, and lets it go when it unlocks.
    let holder = testkit::FlockHolder::hold(&lock);
    let me = std::process::id();
    let p = lock.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        let mut handle = leasehold::LeaseHandle::open(&p).unwrap();
        let held = handle.lock(&generous()).unwrap();
        held_tx.send(()).unwrap();
        let _ = go_rx.recv();
        drop(held);
        handle
    });
    until("the handle waits", || blocked_on(me, &lock));
    holder.kill();
    held_rx.recv().unwrap();
    // No child of this binary may share our descriptors while we look (see testkit::quiet).
    let quiet = testkit::quiet();
    assert_eq!(
        pids(&gate),
        vec![me],
        "the handle keeps the gate while it holds"
    );
    go_tx.send(()).unwrap();
    let handle = handle.join().unwrap();
    assert!(pids(&lock).is_empty(), "unlocked");
    assert!(pids(&gate).is_empty(), "and the gate with it");
    assert!(pids(&writers).is_empty(), "and the writers' queue");
    drop(quiet);
    drop(handle);
}

/// A lease handed to a child with `share_with_children` lasts until the child exits, also
/// when the acquisition waited next to the shared-mode gates and so kept the gate with its
/// lease (the gate's hand-back unlocked the lock through a duplicate of the
/// lease's descriptor — the child's open file description — and a second holder got in
/// beside the child). Both waits: inline (unlimited) and through the helper (a deadline).
#[test]
fn a_lease_handed_to_a_child_outlives_the_gated_wait_that_took_it() {
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: a_lease_handed_to_a_child_outlives_the_gated_wait_that_took_it: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    for role in ["hand-to-child", "hand-to-child-timeout"] {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("handed.lock");
        drop(SharedLease::try_acquire(&lock).unwrap()); // a shared user: the gates exist
        let holder = testkit::FlockHolder::hold(&lock);
        let mut waiter = Proc::spawn(&mut helper_cmd(role, &lock));
        until("the waiter waits, holding the gate", || {
            blocked_on(waiter.pid(), &lock) && pids(&gate_of(&lock)) == vec![waiter.pid()]
        });
        holder.kill();
        let child: i32 = said(&mut waiter).parse().unwrap();
        let child = rustix::process::Pid::from_raw(child).unwrap();
        assert!(waiter.wait().success());
        let kill_child = Defer(move || {
            let _ = rustix::process::kill_process(child, rustix::process::Signal::KILL);
        });
        let try_flock = || run(Command::new("flock").args(["-n"]).arg(&lock).arg("true")).code;
        assert_eq!(try_flock(), 1, "{role}: the child holds the lease");
        assert!(
            Lease::try_acquire(&lock).unwrap_err().is_contended(),
            "{role}"
        );
        drop(kill_child);
        let free = Lease::acquire(&lock, &generous());
        assert!(
            free.is_ok(),
            "{role}: free once the child is gone: {free:?}"
        );
    }
}

/// Runs its closure when dropped (a test's clean-up on every path).
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Exclusive use alone — tries and waits — never creates a gate (keyed leases' namespaces stay
/// free of them): only a shared acquisition does.
#[test]
fn exclusive_waits_create_no_gate() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("exclusive-only.lock");
    let holder = testkit::FlockHolder::hold(&lock);
    let err = Lease::acquire(&lock, &Budget::timeout(Duration::from_millis(20))).unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    drop(holder);
    drop(Lease::acquire(&lock, &generous()).unwrap());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("exclusive-only.lock")]);
}

/// A timed-out exclusive waiter leaves nothing holding the lock or the gate once the shared
/// holders it waited for are gone: shared newcomers get in again.
#[test]
fn an_abandoned_exclusive_wait_lets_shared_acquirers_through_after_the_holders_go() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: an_abandoned_exclusive_wait_lets_shared_acquirers_through_after_the_holders_go: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("abandoned.lock");
    drop(SharedLease::try_acquire(&lock).unwrap());
    let mut reader = Foreign::UtilLinux.hold(&lock, true);
    let err = Lease::acquire(&lock, &Budget::timeout(Duration::from_millis(50))).unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    reader.close_stdin();
    reader.wait();
    let gate = gate_of(&lock);
    until("the abandoned helper let go of lock and gate", || {
        pids(&lock).is_empty() && pids(&gate).is_empty()
    });
    let mut p = Proc::spawn(&mut helper_cmd("try-shared", &lock));
    assert_eq!(said(&mut p), "ok");
}

#[test]
fn shared_leases_open_like_leases_and_a_hostile_gate_costs_only_fairness() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = dir.path().join("link.lock");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let err = SharedLease::try_acquire(&link).unwrap_err();
    assert!(err.is_unusable_path(), "{err:?}");
    // Gates replaced by symlinks are never followed; the lease still excludes, and waits
    // (which go through both gates) still end.
    let lock = dir.path().join("g.lock");
    std::os::unix::fs::symlink(&victim, gate_of(&lock)).unwrap();
    std::os::unix::fs::symlink(&victim, readers_gate_of(&lock)).unwrap();
    let a = SharedLease::try_acquire(&lock).unwrap();
    let b = SharedLease::acquire(&lock, &generous()).unwrap();
    assert!(Lease::try_acquire(&lock).unwrap_err().is_contended());
    drop((a, b));
    drop(Lease::acquire(&lock, &generous()).unwrap());
    for shared in [true, false] {
        let holder = testkit::FlockHolder::hold(&lock);
        let p = lock.clone();
        let waiter = std::thread::spawn(move || match shared {
            true => SharedLease::acquire(&p, &generous()).map(drop),
            false => Lease::acquire(&p, &generous()).map(drop),
        });
        if !cfg!(leasehold_portable) {
            until("the waiter waits", || blocked_on(std::process::id(), &lock));
        }
        holder.kill();
        waiter.join().unwrap().unwrap();
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // New lock files are 0600, parents 0700, as for exclusive leases.
    let deep = dir.path().join("a/b/s.lock");
    let s = SharedLease::try_acquire(&deep).unwrap();
    assert_eq!(
        std::fs::metadata(&deep).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(dir.path().join("a"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    // A replaced lock file is detected.
    std::fs::remove_file(&deep).unwrap();
    assert!(s.verify().is_err());
}

/// `lock_descriptor` locks the open file description the caller holds (as `flock -n 9`):
/// the lock stays after the call, for every process sharing the description, until
/// `unlock_descriptor`; directories and FIFOs can be locked, as with `flock(1)`.
#[test]
fn a_descriptor_lock_belongs_to_the_description() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("fd.lock");
    let file = std::fs::File::create(&lock).unwrap();
    let opts = LeaseOptions::new();
    opts.lock_descriptor(file.as_fd(), LockMode::Exclusive, &Budget::no_wait())
        .unwrap();
    assert!(
        !Foreign::UtilLinux.try_once(&lock, true),
        "held after the call returned"
    );
    assert!(Lease::try_acquire(&lock).unwrap_err().is_contended());
    leasehold::unlock_descriptor(file.as_fd()).unwrap();
    assert!(Foreign::UtilLinux.try_once(&lock, false));
    // Shared, next to a foreign shared holder; an exclusive try is contended.
    let mut holder = Foreign::Python.hold(&lock, true);
    opts.lock_descriptor(file.as_fd(), LockMode::Shared, &Budget::no_wait())
        .unwrap();
    let err = opts
        .lock_descriptor(file.as_fd(), LockMode::Exclusive, &Budget::no_wait())
        .unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    holder.close_stdin();
    holder.wait();
    // A wait within a budget is granted when the holder goes.
    let mut holder = Foreign::Python.hold(&lock, false);
    let fd2 = std::fs::File::open(&lock).unwrap();
    let waiter = std::thread::spawn(move || {
        LeaseOptions::new()
            .lock_descriptor(fd2.as_fd(), LockMode::Exclusive, &generous())
            .map(|()| fd2)
    });
    holder.close_stdin();
    holder.wait();
    let fd2 = waiter.join().unwrap().unwrap();
    assert!(!Foreign::UtilLinux.try_once(&lock, true));
    drop(fd2); // the last descriptor of the description: the lock goes
    // Looked at until it has gone, not once: a process another test forks at this moment
    // shares every descriptor of ours until it execs (close-on-exec acts only then), and
    // the lock goes with that copy. A lock that outlived its last descriptor never would.
    until(
        "the lock goes with the description's last descriptor",
        || Foreign::UtilLinux.try_once(&lock, false),
    );
    // A directory is a lockable description, and so is a FIFO (the caller opened it: no open
    // of ours can block on it); a second description of the FIFO is excluded.
    let d = std::fs::File::open(dir.path()).unwrap();
    opts.lock_descriptor(d.as_fd(), LockMode::Exclusive, &Budget::no_wait())
        .unwrap();
    assert!(!Foreign::UtilLinux.try_once(dir.path(), false));
    let fifo = dir.path().join("fifo");
    assert!(run(Command::new("mkfifo").arg(&fifo)).code == 0);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    opts.lock_descriptor(f.as_fd(), LockMode::Shared, &Budget::no_wait())
        .unwrap();
    let other = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let err = opts
        .lock_descriptor(other.as_fd(), LockMode::Exclusive, &Budget::no_wait())
        .unwrap_err();
    assert!(err.is_contended(), "{err:?}");
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn an_async_shared_waiter_is_granted_when_the_exclusive_holder_goes() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("async.lock");
    std::fs::File::create(&lock).unwrap();
    let mut holder = Foreign::UtilLinux.hold(&lock, false);
    let canary = testkit::Canary::start();
    let p = lock.clone();
    let waiter = tokio::spawn(async move { SharedLease::acquire_async(&p, &generous()).await });
    let before = canary.ticks();
    while canary.ticks() < before + 3 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    holder.close_stdin();
    holder.wait();
    let lease = waiter.await.unwrap().expect("granted");
    lease.verify().unwrap();
    assert!(SharedLease::try_acquire(&lock).is_ok(), "shared coexists");
}

/// Where this process's descriptor `fd` leads (`None`: it is closed).
fn fd_target(fd: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
}

/// A lease taken from a [`LeaseHandle`] as a value of its own (`lock_lease`) excludes like
/// any lease, and its release into the handle keeps the locked descriptor open there, so
/// the next `lock_lease` locks the same descriptor without opening the file.
#[test]
fn a_lease_given_back_to_its_handle_keeps_its_file_open_for_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("given-back.lock");
    let mut handle = LeaseHandle::open(&lock).unwrap();
    let mut lease = handle.lock_lease(&Budget::no_wait()).unwrap();
    lease.verify().unwrap();
    let fd = lease.as_fd().unwrap().as_raw_fd();
    assert!(Lease::try_acquire(&lock).unwrap_err().is_contended());
    assert!(handle.try_lock().unwrap_err().is_contended());
    lease.release_into(&mut handle);
    assert_eq!(fd_target(fd), Some(lock.clone()), "kept open in the handle");
    drop(Lease::try_acquire(&lock).expect("released"));
    let again = handle.lock_lease(&Budget::no_wait()).unwrap();
    assert_eq!(
        again.as_fd().unwrap().as_raw_fd(),
        fd,
        "the kept descriptor"
    );
    again.verify().unwrap();
}

/// A release into the handle while another process waits closes the file instead (the
/// waiter gets the chance a closing releaser gives it), and the waiter is granted. (The
/// portable build cannot tell that another process waits.)
#[cfg(not(leasehold_portable))]
#[test]
fn a_lease_given_back_while_another_process_waits_closes_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("waited.lock");
    let mut handle = LeaseHandle::open(&lock).unwrap();
    let mut lease = handle.lock_lease(&Budget::no_wait()).unwrap();
    let fd = lease.as_fd().unwrap().as_raw_fd();
    let mut waiter = Proc::spawn(&mut helper_cmd("wait-exclusive", &lock));
    until("the waiter waits", || blocked_on(waiter.pid(), &lock));
    lease.release_into(&mut handle);
    assert_ne!(fd_target(fd), Some(lock.clone()), "closed, not kept");
    assert_eq!(said(&mut waiter), "got");
}

/// A lease shared with a child process is never unlocked by its release into the handle:
/// an unlock of the open file description the child holds too would take the child's lock.
#[test]
fn a_lease_shared_with_a_child_keeps_the_childs_lock_when_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("child.lock");
    let mut handle = LeaseHandle::open(&lock).unwrap();
    let mut lease = handle.lock_lease(&Budget::no_wait()).unwrap();
    lease.share_with_children(true).unwrap();
    let mut child = Proc::spawn(&mut Command::new("cat"));
    lease.share_with_children(false).unwrap();
    lease.release_into(&mut handle);
    assert!(
        Lease::try_acquire(&lock).unwrap_err().is_contended(),
        "the child still holds the lock"
    );
    child.close_stdin();
    child.wait();
    drop(handle.try_lock().expect("free once the child is gone"));
}
