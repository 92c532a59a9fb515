//! A lease handed to COMMAND lasts until the last process holding it has exited (contract:
//! "COMMAND and its descendants inherit the lease"), whatever way the acquisition went
//! through the shared-mode gates: a `run` or `flock` whose COMMAND leaves a background
//! descendant and exits must leave the lock held — `status` says held, `run --no-wait` exits
//! 75, util-linux `flock -n` exits 1 — until that descendant is gone.
//!
//! An exclusive waiter kept the gate with its lease and, when it released,
//! unlocked the lock through a duplicate of its descriptor — the very open file description
//! COMMAND's tree inherited — so the lock was free beside COMMAND's background child. Every
//! path the gates create is driven here with real processes: a plain gate (a shared user came
//! before) with the writers' queue, a shared waiter present during the exclusive wait, a
//! readers' gate left by an earlier shared wait, the `flock` verb, and a shared waiter that
//! hands its lease on. Handshakes are lines on pipes and `/proc/locks` states, never sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::process::Command;

use common::{hold, leasehold, release, status_line};
use rustix::process::{Pid, Signal};
use testkit::{Proc, blocked_on, run, until};

/// COMMAND for the waiter: starts a background `sleep` that inherits the lease (its stdin,
/// stdout and stderr elsewhere, so no pipe of the test waits for it), prints its pid, exits.
const LEAVE_BEHIND: &str = "sleep 600 </dev/null >/dev/null 2>&1 & echo $!";

/// A process left behind by COMMAND, SIGKILLed when dropped (on every path of a test).
struct Descendant(Pid);

impl Drop for Descendant {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(self.0, Signal::KILL);
    }
}

/// How the lock is set up before the exclusive holder takes it.
#[derive(Clone, Copy, Debug)]
enum Before {
    /// A shared `run` came and went: the gate exists.
    SharedTry,
    /// A shared `run` waited for an exclusive holder: the gate and the readers' gate exist.
    SharedWait,
}

fn prepare(lock: &Path, before: Before) {
    let shared_try = run(leasehold()
        .args(["run", "--shared"])
        .arg(lock)
        .args(["--", "true"]));
    assert_eq!(shared_try.code, 0, "{shared_try:?}");
    if let Before::SharedWait = before {
        let holder = hold(lock);
        let mut reader = Proc::spawn(
            leasehold()
                .args(["run", "--shared"])
                .arg(lock)
                .args(["--", "echo", "reader"]),
        );
        until("the shared run waits", || blocked_on(reader.pid(), lock));
        release(holder);
        assert_eq!(reader.line(), "reader");
        assert!(reader.wait().success());
        let name = lock.file_name().unwrap().to_str().unwrap();
        assert!(
            lock.with_file_name(format!(".{name}.leasehold-gate-readers"))
                .exists(),
            "a shared wait leaves a readers' gate"
        );
    }
}

/// `waiter` (a `run` or `flock` whose COMMAND is [`LEAVE_BEHIND`]) waits for an exclusive
/// holder, gets the lease when it goes (after a shared waiter, with `reader`), and exits;
/// answers the descendant left holding the lease. With `reader`, checks that the shared
/// waiter is still waiting after the exclusive waiter exited: the lock never came free.
fn left_behind(lock: &Path, waiter: &mut Command, reader: bool) -> (Descendant, Option<Proc>) {
    let holder = hold(lock);
    let mut waiter = Proc::spawn(waiter);
    until("the waiter waits", || blocked_on(waiter.pid(), lock));
    let reader = reader.then(|| {
        let r = Proc::spawn(leasehold().args(["run", "--shared"]).arg(lock).args([
            "--",
            "sh",
            "-c",
            "echo reader; read _",
        ]));
        until("a shared run waits too", || blocked_on(r.pid(), lock));
        r
    });
    release(holder);
    let pid: i32 = waiter.line().parse().expect("the background pid");
    let descendant = Descendant(Pid::from_raw(pid).expect("a pid"));
    assert!(waiter.wait().success());
    if let Some(r) = &reader {
        // Looked at until seen, not once: the kernel also wakes a reader queued behind a
        // writer's request when that writer is granted, and the reader queues again only
        // when it next runs. Let in, it would never queue again.
        until(
            "the shared run waits while COMMAND's background child holds the lease",
            || blocked_on(r.pid(), lock),
        );
    }
    (descendant, reader)
}

/// The lock is held (by the descendant): `status`, `run --no-wait` and util-linux `flock -n`
/// all say so. Then, with the descendant killed, the shared run that waited (if any) gets it,
/// and after it a waiting `run`.
fn assert_held_until_gone(
    lock: &Path,
    (descendant, reader): (Descendant, Option<Proc>),
    what: &str,
) {
    assert!(
        status_line(lock).starts_with("held"),
        "{what}: status says {:?}",
        status_line(lock)
    );
    let second = run(leasehold()
        .args(["run", "--no-wait"])
        .arg(lock)
        .args(["--", "echo", "SECOND"]));
    assert_eq!(second.code, 75, "{what}: a second run got in: {second:?}");
    let third = run(Command::new("flock")
        .arg("-n")
        .arg(lock)
        .args(["echo", "third"]));
    assert_eq!(third.code, 1, "{what}: flock(1) got in: {third:?}");
    drop(descendant);
    if let Some(mut reader) = reader {
        assert_eq!(
            reader.line(),
            "reader",
            "{what}: the shared run gets it next"
        );
        reader.send("go");
        assert!(reader.wait().success());
    }
    let after = run(leasehold()
        .args(["run", "--timeout", "20"])
        .arg(lock)
        .args(["--", "true"]));
    assert_eq!(
        after.code, 0,
        "{what}: free once the descendant is gone: {after:?}"
    );
}

/// Whether this build cannot see waiters (the portable build reads no `/proc/locks`); says
/// SKIP for `test` then.
fn cannot_see_waiters(test: &str) -> bool {
    if !testkit::reveals_holders() {
        eprintln!("SKIP: {test}: needs /proc/locks (off in the portable build)");
    }
    !testkit::reveals_holders()
}

fn run_waiter(lock: &Path) -> Command {
    let mut c = leasehold();
    c.arg("run")
        .arg(lock)
        .args(["--", "sh", "-c", LEAVE_BEHIND]);
    c
}

#[test]
fn an_exclusive_run_that_waited_at_the_gate_leaves_its_lease_to_commands_descendant() {
    if cannot_see_waiters(
        "an_exclusive_run_that_waited_at_the_gate_leaves_its_lease_to_commands_descendant",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("x.lock");
    prepare(&lock, Before::SharedTry);
    let left = left_behind(&lock, &mut run_waiter(&lock), false);
    let name = lock.file_name().unwrap().to_str().unwrap();
    assert!(
        lock.with_file_name(format!(".{name}.leasehold-gate-writers"))
            .exists(),
        "the wait went through the writers' queue"
    );
    assert_held_until_gone(&lock, left, "gate and writers' queue");
}

#[test]
fn an_exclusive_run_that_waited_beside_a_shared_waiter_leaves_its_lease_to_commands_descendant() {
    if cannot_see_waiters(
        "an_exclusive_run_that_waited_beside_a_shared_waiter_leaves_its_lease_to_commands_descendant",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("x.lock");
    prepare(&lock, Before::SharedTry);
    let left = left_behind(&lock, &mut run_waiter(&lock), true);
    assert_held_until_gone(&lock, left, "a shared waiter present");
}

#[test]
fn an_exclusive_run_that_passed_the_readers_gate_leaves_its_lease_to_commands_descendant() {
    if cannot_see_waiters(
        "an_exclusive_run_that_passed_the_readers_gate_leaves_its_lease_to_commands_descendant",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("x.lock");
    prepare(&lock, Before::SharedWait);
    let left = left_behind(&lock, &mut run_waiter(&lock), false);
    assert_held_until_gone(&lock, left, "the readers' gate");
}

#[test]
fn a_flock_that_waited_at_the_gate_leaves_its_lock_to_commands_descendant() {
    if cannot_see_waiters("a_flock_that_waited_at_the_gate_leaves_its_lock_to_commands_descendant")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("x.lock");
    prepare(&lock, Before::SharedWait);
    let mut waiter = leasehold();
    waiter
        .arg("flock")
        .arg(&lock)
        .args(["sh", "-c", LEAVE_BEHIND]);
    let left = left_behind(&lock, &mut waiter, false);
    assert_held_until_gone(&lock, left, "the flock verb");
}

#[test]
fn a_shared_run_that_waited_leaves_its_lease_to_commands_descendant() {
    if cannot_see_waiters("a_shared_run_that_waited_leaves_its_lease_to_commands_descendant") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("x.lock");
    prepare(&lock, Before::SharedWait);
    let mut waiter = leasehold();
    waiter
        .args(["run", "--shared"])
        .arg(&lock)
        .args(["--", "sh", "-c", LEAVE_BEHIND]);
    let left = left_behind(&lock, &mut waiter, false);
    assert_held_until_gone(&lock, left, "a shared wait");
}
