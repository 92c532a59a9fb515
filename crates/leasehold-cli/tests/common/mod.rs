//! Helpers of the CLI's black-box tests that need the `leasehold` binary under test
//! (`CARGO_BIN_EXE_leasehold` exists only while this crate's tests compile). Generic process
//! helpers ([`Proc`], [`run`], [`Out`], `assert_one_line_error`) come from `testkit`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::{Proc, run};

/// The `leasehold` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_leasehold"))
}

/// A `leasehold` command with no inherited stdin.
pub fn leasehold() -> Command {
    let mut c = Command::new(bin());
    c.stdin(Stdio::null());
    c
}

/// Holds the lease on `lock` through `leasehold run` until told to stop: the command prints
/// `locked` (proof the lease is held: COMMAND never runs without it) and waits for a line or
/// EOF on stdin.
pub fn hold(lock: &Path) -> Proc {
    let mut p = Proc::spawn(leasehold().arg("run").arg(lock).args([
        "--",
        "sh",
        "-c",
        "echo locked; read _ignored; echo done",
    ]));
    assert_eq!(p.line(), "locked");
    p
}

/// The note a contention message adds for holder `pid`: `(pid N)` on Linux; nothing when
/// the OS does not reveal holders — built with `--cfg leasehold_portable` (the macOS/BSD code
/// path, README "Platforms"), where messages must then carry no pid at all.
pub fn pid_note(pid: u32) -> String {
    if !testkit::reveals_holders() {
        String::new()
    } else {
        format!("(pid {pid})")
    }
}

/// What `status` says of `lock`: `free`, `held` or `held by pid N`. Without holder
/// information (the portable build, where `status` says it cannot tell) a `run --no-wait`
/// try answers `free` or `held` instead.
pub fn status_line(lock: &Path) -> String {
    if !testkit::reveals_holders() {
        let out = run(leasehold()
            .args(["run", "--no-wait"])
            .arg(lock)
            .args(["--", "true"]));
        return if out.code == 0 { "free" } else { "held" }.to_string();
    }
    let out = run(leasehold().arg("status").arg(lock));
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout.trim().to_string()
}

/// What [`status_line`] says of a lock held by `pid`.
pub fn held_by(pid: u32) -> String {
    if !testkit::reveals_holders() {
        "held".to_string()
    } else {
        format!("held by pid {pid}")
    }
}

/// ` (pid N)` as it follows "held by another process" in messages (see [`pid_note`]).
pub fn with_pid(pid: u32) -> String {
    if !testkit::reveals_holders() {
        String::new()
    } else {
        format!(" (pid {pid})")
    }
}

/// Waits (at most 10 s) until `leasehold status` reports `lock` free. After SIGKILLing a
/// [`hold`] group, `wait()` reaps only `leasehold`; its COMMAND, which shares the lease, dies
/// a moment later, so the release is observed rather than assumed.
pub fn wait_until_free(lock: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Without holder information (the portable build) only a try tells: `run --no-wait`.
        let out = if !testkit::reveals_holders() {
            let out = run(leasehold()
                .args(["run", "--no-wait"])
                .arg(lock)
                .args(["--", "true"]));
            if out.code == 0 {
                return;
            }
            out
        } else {
            run(leasehold().arg("status").arg(lock))
        };
        if out.stdout == "free\n" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never became free: {out:?}",
            lock.display()
        );
    }
}

/// Releases a holder started by [`hold`] and waits for it to exit cleanly.
pub fn release(mut p: Proc) {
    p.send("go");
    assert_eq!(p.line(), "done");
    assert!(p.wait().success());
}

/// The seconds in a contention message's "…; gave up after S s; wait longer with --timeout
/// SECS" tail (`None` if the line has no such tail). Compared by range, never exactly: a
/// loaded machine wakes a deadline late.
#[allow(dead_code)] // used by the waiting verbs' tests only
pub fn gave_up_after(line: &str) -> Option<f64> {
    line.strip_suffix("s; wait longer with --timeout SECS")
        .and_then(|l| l.rsplit_once("; gave up after "))
        .and_then(|(_, secs)| secs.parse().ok())
}

/// Runs `cmd` with `stdout` as its standard output (stdin as `cmd` says: [`leasehold`] makes
/// it `/dev/null`), capturing its status and stderr (the returned `stdout` is empty).
fn with_stdout(cmd: &mut Command, stdout: Stdio) -> testkit::Out {
    let out = cmd.stdout(stdout).stderr(Stdio::piped()).output().unwrap();
    testkit::Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `cmd` with stdout a pipe whose reader has gone (every write fails with EPIPE), as in
/// `leasehold … | head -0`.
pub fn closed_stdout(cmd: &mut Command) -> testkit::Out {
    let (r, w) = std::io::pipe().unwrap();
    drop(r);
    with_stdout(cmd, w.into())
}

/// Runs `cmd` with stdout `/dev/full` (every write fails with ENOSPC), or `None` when this
/// system has no `/dev/full`.
pub fn full_stdout(cmd: &mut Command) -> Option<testkit::Out> {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .ok()?;
    Some(with_stdout(cmd, full.into()))
}
