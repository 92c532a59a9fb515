//! `leasehold run --shared` (contract v1.3), black-box with real processes: shared holders
//! run at once, shared and exclusive exclude each other, and a waiting exclusive `run` is not
//! starved — new shared acquirers wait behind it.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::leasehold;
use testkit::{Proc, run};

/// A `run` (with `extra` options) whose COMMAND prints `locked` and holds until a line.
fn holder(lock: &Path, extra: &[&str]) -> Proc {
    let mut p = Proc::spawn(leasehold().arg("run").args(extra).arg(lock).args([
        "--",
        "sh",
        "-c",
        "echo locked; read _; echo done",
    ]));
    assert_eq!(p.line(), "locked");
    p
}

fn release(mut p: Proc) {
    p.send("go");
    assert_eq!(p.line(), "done");
    assert!(p.wait().success());
}

fn try_run(lock: &Path, extra: &[&str]) -> i32 {
    run(leasehold()
        .arg("run")
        .args(extra)
        .args(["--no-wait"])
        .arg(lock)
        .args(["--", "true"]))
    .code
}

#[test]
fn shared_runs_coexist_and_exclude_exclusive_ones_both_ways() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: shared_runs_coexist_and_exclude_exclusive_ones_both_ways: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("s.lock");
    let a = holder(&lock, &["--shared"]);
    let b = holder(&lock, &["--shared"]); // both COMMANDs run at once
    assert_eq!(try_run(&lock, &[]), 75, "exclusive vs shared");
    assert_eq!(
        try_run(&lock, &["--shared", "--conflict-exit-code", "9"]),
        0
    );
    let out = run(leasehold().arg("status").arg(&lock));
    assert!(out.stdout.starts_with("held by pid "), "{out:?}");
    release(a);
    release(b);
    let x = holder(&lock, &[]);
    assert_eq!(try_run(&lock, &["--shared"]), 75, "shared vs exclusive");
    assert_eq!(
        try_run(&lock, &["--shared", "--conflict-exit-code", "9"]),
        9
    );
    // Interop: util-linux sees our shared and exclusive leases for what they are.
    release(x);
    let s = holder(&lock, &["--shared"]);
    assert_eq!(
        run(Command::new("flock")
            .args(["-n", "-s"])
            .arg(&lock)
            .arg("true"))
        .code,
        0
    );
    assert_eq!(
        run(Command::new("flock")
            .args(["-n", "-x"])
            .arg(&lock)
            .arg("true"))
        .code,
        1
    );
    release(s);
}

/// A shared holder H; an exclusive `run` W waits (its notice after 1 s is the handshake);
/// then a new `run --shared --no-wait` is refused although only shared holders hold the
/// lock — it queues behind W — while util-linux `flock -s -n` (no gate) gets in. When H
/// goes, W's COMMAND runs; after it, shared runs get in again.
#[test]
fn a_waiting_exclusive_run_holds_back_new_shared_runs() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("turnstile.lock");
    let h = holder(&lock, &["--shared"]);
    let mut cmd = leasehold();
    cmd.arg("run")
        .arg(&lock)
        .args(["--", "sh", "-c", "echo writer; read _"]);
    cmd.stderr(Stdio::piped());
    let mut w = Proc::spawn(&mut cmd);
    let mut err = BufReader::new(w.child.stderr.take().unwrap());
    let mut notice = String::new();
    err.read_line(&mut notice).unwrap();
    assert!(notice.contains("waiting for"), "{notice:?}");
    assert_eq!(
        try_run(&lock, &["--shared"]),
        75,
        "behind the waiting writer"
    );
    assert_eq!(
        run(Command::new("flock")
            .args(["-n", "-s"])
            .arg(&lock)
            .arg("true"))
        .code,
        0
    );
    release(h);
    assert_eq!(w.line(), "writer");
    assert_eq!(try_run(&lock, &["--shared"]), 75, "the writer holds it");
    w.send("");
    assert!(w.wait().success());
    assert_eq!(try_run(&lock, &["--shared"]), 0);
}

#[test]
fn shared_runs_refuse_unusable_paths_like_run() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"x").unwrap();
    let link = dir.path().join("link.lock");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = run(leasehold()
        .args(["run", "--shared"])
        .arg(&link)
        .args(["--", "true"]));
    assert_eq!(out.code, 2, "{out:?}");
    testkit::assert_one_line_error(&out, "link.lock");
}

/// The script of a nested shared acquisition, run by an outer shared holder (`run --shared`
/// or `flock -s`): it says `outer-held`, waits for a line (the test queues a writer
/// meanwhile), then runs a nested shared acquisition (`$INNER true`) and says `inner-done`.
/// (The writer is not started by the script: it would inherit the outer holder's
/// descriptor and wait for its own copy of the shared lock for ever, with flock(1) too.)
const NESTED: &str = r#"
echo outer-held
read _
$INNER true && echo inner-done
"#;

/// Runs [`NESTED`] under `outer` with `inner` as the nested acquisition (`sep`: both are
/// `run`, whose COMMAND follows `--`), with an exclusive `leasehold flock -x` of another
/// tree queued in between (blocked on the lock, holding its gate); panics unless the script
/// completes within 20 s (a bound on a hang, not a synchronisation) and the writer then
/// gets the lock.
fn nested_completes(outer: &[&str], inner: &str, sep: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("nested.lock");
    let lh = common::bin();
    let mut cmd = leasehold();
    cmd.args(outer)
        .arg(&lock)
        .args(sep)
        .args(["sh", "-c", NESTED])
        .env(
            "INNER",
            format!(
                "{} {inner} {} {}",
                lh.display(),
                lock.display(),
                sep.join(" ")
            ),
        );
    let mut p = Proc::spawn(&mut cmd);
    assert_eq!(p.line(), "outer-held");
    let mut writer = Proc::spawn(leasehold().args(["flock", "-x"]).arg(&lock).args([
        "sh",
        "-c",
        "echo writer-got",
    ]));
    testkit::until("the writer waits for the outer holder", || {
        testkit::blocked_on(writer.pid(), &lock)
    });
    p.send("go");
    let status = p.wait_timeout(std::time::Duration::from_secs(20));
    assert!(
        status.is_some(),
        "{outer:?} then {inner}: the nested shared acquisition waited behind the queued writer (deadlock)"
    );
    assert_eq!(p.line(), "inner-done", "{outer:?} then {inner}");
    assert!(status.unwrap().success());
    assert_eq!(writer.line(), "writer-got");
    assert!(writer.wait().success());
}

/// A shared acquisition nested in a shared `run`/`flock -s` whose descriptor it inherited
/// does not wait at the gate of a writer queued in between (which waits for the outer one):
/// the script completes, as with util-linux `flock(1)`.
#[test]
fn a_nested_shared_acquisition_is_not_held_up_by_a_writer_queued_behind_its_outer_one() {
    nested_completes(&["run", "--shared"], "run --shared", &["--"]);
    nested_completes(&["flock", "-s"], "flock -s", &[]);
}
