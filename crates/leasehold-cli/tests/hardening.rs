//! A hostile neighbour and hostile input: each test reproduces one finding against
//! the real binary with real processes (other users through `chown`/`setpriv` to `nobody`,
//! FIFOs, symlinks, a FUSE mount, signals, closed pipes) and checks the fix.
//!
//! Synchronisation is by handshakes and by observing the kernel's own state (`/proc/locks`
//! through `leasehold::holders`, `/proc/PID/fdinfo`), never by sleeping; the bounded waits
//! (`wait_timeout`) only keep a regression from hanging the suite.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{closed_stdout, leasehold};
use rustix::process::Signal;
use serde_json::{Value, json};
use testkit::Bindfs;
use testkit::{FlockHolder, Proc, assert_one_line_error, run};

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(st.success());
}

fn canonical_dir(base: &Path, name: &str) -> String {
    let p = base.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p.canonicalize().unwrap().to_str().unwrap().to_string()
}

fn registry(home: &Path) -> Command {
    let mut c = leasehold();
    c.arg("registry").arg("--home").arg(home);
    c
}

fn serve(home: &Path) -> Proc {
    Proc::spawn(registry(home).arg("serve"))
}

fn ask(p: &mut Proc, request: &Value) -> Value {
    p.send(&request.to_string());
    let line = p.line();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// Runs `cmd` with a bound: a regression that hangs (a FIFO opened blocking) fails the test
/// instead of the suite.
fn run_bounded(cmd: &mut Command, limit: Duration) -> testkit::Out {
    let mut p = Proc::spawn(cmd.stderr(Stdio::piped()));
    p.close_stdin();
    let status = p.wait_timeout(limit);
    let Some(status) = status else {
        p.kill_group();
        panic!("did not finish within {limit:?} (hung)");
    };
    let mut stdout = String::new();
    p.stdout.read_to_string(&mut stdout).unwrap();
    let mut stderr = String::new();
    p.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    testkit::Out {
        code: status.code().unwrap_or(-1),
        stdout,
        stderr,
    }
}

// ---------------------------------------------------------------------------------------
// 4. The registry document is opened like the lock file
// ---------------------------------------------------------------------------------------

#[test]
fn a_fifo_symlink_or_huge_registry_document_is_storage_failed_promptly_and_left_as_is() {
    let tmp = tempfile::tempdir().unwrap();
    let foreign = tmp.path().join("foreign.json");
    std::fs::write(
        &foreign,
        br#"{"version":1,"workspaces":{"/":{"roots":["/"]}}}"#,
    )
    .unwrap();
    for (case, needle) in [
        ("fifo", "a FIFO"),
        ("symlink", "symbolic link"),
        ("devzero", "symbolic link"),
        ("huge", "larger than 16 MiB"),
    ] {
        let home = tmp.path().join(case);
        let doc = home.join("storages/multi_root_workspace.json");
        std::fs::create_dir_all(doc.parent().unwrap()).unwrap();
        match case {
            "fifo" => mkfifo(&doc),
            "symlink" => std::os::unix::fs::symlink(&foreign, &doc).unwrap(),
            "devzero" => std::os::unix::fs::symlink("/dev/zero", &doc).unwrap(),
            _ => std::fs::File::create(&doc)
                .unwrap()
                .set_len(17 << 20)
                .unwrap(),
        }
        let before = std::fs::symlink_metadata(&doc).unwrap();
        let out = run_bounded(
            registry(&home).args(["list", "--json"]),
            Duration::from_secs(10),
        );
        assert_eq!(out.code, 1, "{case}: {out:?}");
        assert_one_line_error(&out, needle);
        assert_one_line_error(&out, &doc.display().to_string());
        let after = std::fs::symlink_metadata(&doc).unwrap();
        assert_eq!(
            (before.len(), before.file_type()),
            (after.len(), after.file_type()),
            "{case}: left as it was"
        );

        // serve too: storage-failed with the reason, scope {}, and it keeps answering.
        let mut s = serve(&home);
        let a = ask(&mut s, &json!({"op": "list"}));
        assert_eq!(a["state"], "storage-failed", "{case}: {a}");
        assert_eq!(a["scope"], json!({}), "{case}: {a}");
        assert!(a["message"].as_str().unwrap().contains(needle), "{a}");
        s.close_stdin();
        assert_eq!(s.wait().code(), Some(0));
    }
}

// ---------------------------------------------------------------------------------------
// 6. Ownership and mode checks on existing state
// ---------------------------------------------------------------------------------------

#[test]
fn a_lock_file_of_another_user_or_writable_by_others_is_refused_unless_sharing_is_opted_into() {
    if !is_root() {
        eprintln!("SKIP: ownership tests: need root to chown files to nobody");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // The README's old example: another user's lock file in a sticky, world-writable dir.
    let sticky = tmp.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let theirs = sticky.join("demo.lock");
    std::fs::write(&theirs, b"").unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    let writable = tmp.path().join("writable.lock");
    std::fs::write(&writable, b"").unwrap();
    std::fs::set_permissions(&writable, std::fs::Permissions::from_mode(0o666)).unwrap();

    for (lock, reason) in [
        (&theirs, "belongs to another user (uid 65534"),
        (&writable, "may be written by group and others (mode 0666)"),
    ] {
        let out = run(leasehold().arg("run").arg(lock).args(["--", "echo", "ran"]));
        assert_eq!(out.code, 2, "{out:?}");
        assert_eq!(out.stdout, "", "COMMAND must not run");
        assert_one_line_error(&out, reason);
        assert_one_line_error(&out, &lock.display().to_string());
        assert_one_line_error(&out, "LEASEHOLD_ALLOW_SHARED=1");
        // In this tool's terms: the variable, never the Rust option.
        assert!(!out.stderr.contains("LeaseOptions"), "{out:?}");
        // Where sharing is intended, the opt-in accepts it.
        let out = run(leasehold()
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .arg("run")
            .arg(lock)
            .args(["--", "echo", "ran"]));
        assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
    }
    // The sticky, root-owned directory itself is fine: our own lock file in it is used.
    let ours = sticky.join("ours.lock");
    let out = run(leasehold()
        .arg("run")
        .arg(&ours)
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
}

#[test]
fn a_root_owned_lock_file_is_trusted_by_another_user() {
    if !is_root() {
        eprintln!("SKIP: ownership tests: need root to run as nobody");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lock = tmp.path().join("root.lock");
    std::fs::write(&lock, b"").unwrap();
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::bin())
        .arg("run")
        .arg(&lock)
        .args(["--", "echo", "ran"])
        .stdin(Stdio::null()));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
    // And nobody's own lock file is refused by root.
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    let nobodys = theirs.join("nobody.lock");
    let out = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::bin())
        .arg("run")
        .arg(&nobodys)
        .args(["--", "true"])
        .stdin(Stdio::null()));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(leasehold().arg("run").arg(&nobodys).args(["--", "true"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "belongs to another user");
}

#[test]
fn a_registry_planted_by_another_user_is_not_served_unless_sharing_is_opted_into() {
    if !is_root() {
        eprintln!("SKIP: ownership tests: need root to chown files to nobody");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for planted in ["dir", "doc"] {
        let home = tmp.path().join(planted);
        let storages = home.join("storages");
        std::fs::create_dir_all(&storages).unwrap();
        let doc = storages.join("multi_root_workspace.json");
        std::fs::write(&doc, br#"{"version":1,"workspaces":{"/":{"roots":["/"]}}}"#).unwrap();
        let named = if planted == "dir" {
            std::os::unix::fs::chown(&storages, Some(NOBODY), Some(NOBODY)).unwrap();
            std::fs::set_permissions(&storages, std::fs::Permissions::from_mode(0o777)).unwrap();
            storages.clone()
        } else {
            std::fs::set_permissions(&doc, std::fs::Permissions::from_mode(0o666)).unwrap();
            doc.clone()
        };
        let before = std::fs::read(&doc).unwrap();
        let out = run(registry(&home).args(["list", "--json"]));
        // The storages directory holds the lease's lock file: the lease refuses it first, as
        // an unusable lock path (2); a planted document is a storage failure (1).
        let code = if planted == "dir" { 2 } else { 1 };
        assert_eq!(out.code, code, "{planted}: {out:?}");
        assert_one_line_error(&out, &format!("{}: ", named.display()));
        assert_one_line_error(&out, "refusing to trust it");
        assert!(!out.stdout.contains("\"/\""), "never served: {out:?}");
        assert_eq!(std::fs::read(&doc).unwrap(), before);
        let out = run(registry(&home)
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .args(["list", "--json"]));
        assert_eq!(out.code, 0, "{planted}: {out:?}");
        assert!(out.stdout.contains("\"active\""), "{out:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 7. Fail closed on reads too
// ---------------------------------------------------------------------------------------

#[test]
fn a_deposed_serve_stops_answering_active_as_soon_as_its_lock_file_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let lock = home.join("storages/multi_root_workspace.lock");
    let (p, a) = (
        canonical_dir(tmp.path(), "p"),
        canonical_dir(tmp.path(), "a"),
    );
    let mut first = serve(&home);
    let ok = ask(&mut first, &json!({"op": "add", "primary": p, "root": a}));
    assert_eq!(ok["ok"], true, "{ok}");
    // A backup tool restores the lock file by rename; no write happens in between.
    let restored = home.join("storages/restored");
    std::fs::write(&restored, b"").unwrap();
    std::fs::rename(&restored, &lock).unwrap();
    let mut second = serve(&home);
    let listed = ask(&mut second, &json!({"op": "list"}));
    assert_eq!(listed["state"], "active", "{listed}");
    let removed = ask(
        &mut second,
        &json!({"op": "remove", "primary": p, "root": a}),
    );
    assert_eq!(removed["ok"], true, "{removed}");
    // The deposed one must not grant from memory what the new authority removed.
    let stale = ask(&mut first, &json!({"op": "list"}));
    assert_eq!(stale["ok"], false, "{stale}");
    assert_eq!(stale["state"], "storage-failed", "{stale}");
    assert_eq!(stale["scope"], json!({}), "{stale}");
    assert!(
        stale["message"].as_str().unwrap().contains("lease lost"),
        "{stale}"
    );
    for mut s in [first, second] {
        s.close_stdin();
        assert_eq!(s.wait().code(), Some(0));
    }
}

// ---------------------------------------------------------------------------------------
// 10. FUSE mounts
// ---------------------------------------------------------------------------------------

#[test]
fn a_lock_file_on_fuse_is_refused_unless_network_file_systems_are_opted_into() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(mount) = Bindfs::mount(tmp.path()) else {
        return;
    };
    let (backing, lock) = (&mount.backing, mount.mnt.join("app.lock"));
    // The reason to refuse: through FUSE and through the backing path, nobody excludes.
    let holder = FlockHolder::hold(&backing.join("app.lock"));
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_one_line_error(&out, "network, FUSE or overlay file system (fuse)");
    assert_one_line_error(&out, "LEASEHOLD_ALLOW_NETWORK_FS=1");
    assert!(!out.stderr.contains("LeaseOptions"), "{out:?}");
    drop(holder);
    let out = run(leasehold()
        .env("LEASEHOLD_ALLOW_NETWORK_FS", "1")
        .arg("run")
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
}

// ---------------------------------------------------------------------------------------
// 11. run: a SIGTERM just after the lease is taken is forwarded, not lost
// ---------------------------------------------------------------------------------------

#[test]
fn a_sigterm_landing_right_after_the_grant_never_lets_command_run_to_completion() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: a_sigterm_landing_right_after_the_grant_never_lets_command_run_to_completion: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("race.lock");
    std::fs::write(&lock, b"").unwrap();
    for attempt in 0..40 {
        // COMMAND takes 3 s: finishing it (status 0) means the SIGTERM was lost.
        let mut p = Proc::spawn(leasehold().arg("run").arg(&lock).args(["--", "sleep", "3"]));
        // The moment the grant is observable (the kernel names `run` as the holder), before
        // COMMAND has started: that is the window the signal used to be lost in.
        loop {
            if leasehold::holders(&lock).unwrap().pids().contains(&p.pid()) {
                break;
            }
            if let Ok(Some(st)) = p.child.try_wait() {
                panic!("run exited before holding: {st:?}");
            }
        }
        p.signal(Signal::TERM);
        let st = p
            .wait_timeout(Duration::from_secs(20))
            .expect("run exits after SIGTERM");
        assert_eq!(
            st.code(),
            Some(143),
            "attempt {attempt}: SIGTERM after the grant was lost ({st:?})"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 12. registry serve: back-pressure, prompt SIGTERM, non-UTF-8 lines
// ---------------------------------------------------------------------------------------

#[test]
fn serve_answers_a_non_utf8_line_with_invalid_request_and_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = serve(&tmp.path().join("home"));
    let stdin = s.stdin.as_mut().unwrap();
    stdin.write_all(b"{\"op\":\"l\xffist\"}\n").unwrap();
    stdin.flush().unwrap();
    let bad: Value = serde_json::from_str(&s.line()).unwrap();
    assert_eq!(bad["ok"], false, "{bad}");
    assert_eq!(bad["error"], "invalid-request", "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("UTF-8"), "{bad}");
    let listed = ask(&mut s, &json!({"op": "list"}));
    assert_eq!(listed["ok"], true, "serving goes on: {listed}");
    s.close_stdin();
    assert_eq!(s.wait().code(), Some(0));
}

#[test]
fn serve_reads_one_request_at_a_time_and_sigterm_does_not_wait_for_the_backlog() {
    let tmp = tempfile::tempdir().unwrap();
    let requests = tmp.path().join("requests");
    let line = "{\"op\":\"list\"}\n";
    const N: usize = 200_000;
    std::fs::write(&requests, line.repeat(N)).unwrap();
    let size = std::fs::metadata(&requests).unwrap().len();
    let mut child = registry(&tmp.path().join("home"))
        .arg("serve")
        .stdin(std::fs::File::open(&requests).unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.contains("\"ok\":true"), "{first}");
    // Nobody reads the answers now: serve's main thread ends up blocked writing them (the
    // kernel says so in its wchan), and by then it must have read no further than about
    // one chunk ahead of the request it answers.
    let blocked = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/wchan"))
        .unwrap()
        .contains("pipe_write")
    {
        assert!(
            std::time::Instant::now() < blocked,
            "serve never filled its stdout"
        );
        std::thread::yield_now();
    }
    let pos = |pid: u32| -> u64 {
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/0")).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("pos:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let read_ahead = pos(pid);
    assert!(
        read_ahead < size / 4,
        "serve read {read_ahead} of {size} request bytes ahead of its answers"
    );
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        Signal::TERM,
    )
    .unwrap();
    let answers = out.lines().count() + 1;
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(
        answers < N / 10,
        "SIGTERM waited for the backlog: {answers} of {N} requests answered"
    );
}

// ---------------------------------------------------------------------------------------
// 13. A closed stdout is not a panic
// ---------------------------------------------------------------------------------------

#[test]
fn status_and_results_treat_a_closed_stdout_as_the_end_of_output() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("s.lock");
    let out = closed_stdout(leasehold().arg("status").arg(&lock));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let out = closed_stdout(leasehold().args(["status", "--json"]).arg(&lock));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");

    let root = tmp.path().join("results");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f.txt"), b"x").unwrap();
    let results = || {
        let mut c = leasehold();
        c.arg("results").arg("--root").arg(&root);
        c
    };
    for id in ["a", "b"] {
        let st = run(results().args(["stage", id, "--from"]).arg(&src));
        assert_eq!(st.code, 0, "{st:?}");
    }
    assert_eq!(run(results().args(["finish", "a"])).code, 0);
    for args in [&["paths", "b"][..], &["pending"], &["--json", "pending"]] {
        let out = closed_stdout(results().args(args));
        assert_eq!(
            (out.code, out.stderr.as_str()),
            (0, ""),
            "{args:?}: {out:?}"
        );
    }
    let out = closed_stdout(results().args(["sweep", "--older-than", "0"]));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "sweep: {out:?}");
    // The sweep happened although nobody read its report.
    assert!(!root.join("results/b").exists());
}

// ---------------------------------------------------------------------------------------
// 14. Pids shown are right
// ---------------------------------------------------------------------------------------

#[test]
fn a_sigkilled_run_is_not_named_as_holder_while_its_command_keeps_the_lease() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: a_sigkilled_run_is_not_named_as_holder_while_its_command_keeps_the_lease: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("dead.lock");
    let mut p = Proc::spawn(leasehold().arg("run").arg(&lock).args([
        "--",
        "sh",
        "-c",
        "echo locked; read _ignored",
    ]));
    assert_eq!(p.line(), "locked");
    let dead = p.pid();
    p.kill(); // SIGKILL `run` only; COMMAND (same group) keeps the inherited lease
    let out = run(leasehold().arg("status").arg(&lock));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("held"), "{out:?}");
    assert!(
        !out.stdout.contains(&dead.to_string()),
        "a dead pid shown: {out:?}"
    );
    let out = run(leasehold()
        .arg("run")
        .arg("--no-wait")
        .arg(&lock)
        .args(["--", "true"]));
    assert_eq!(out.code, 75, "{out:?}");
    assert!(!out.stderr.contains(&format!("pid {dead}")), "{out:?}");
    p.kill_group();
}

// ---------------------------------------------------------------------------------------
// 15. One line is one write(2)
// ---------------------------------------------------------------------------------------

#[test]
fn every_stderr_line_is_one_write() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("SKIP: one-write test: strace is not installed (apt-get install strace)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    let lock = tmp.path().join("held.lock");
    let holder = FlockHolder::hold(&lock);
    let trace = tmp.path().join("trace");
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["status".into(), fifo.clone().into()],
        vec![
            "run".into(),
            "--timeout".into(),
            "1.1".into(),
            lock.clone().into(),
            "--".into(),
            "true".into(),
        ],
    ];
    for args in cases {
        let out = run(Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=write", "-e", "signal=none", "-o"])
            .arg(&trace)
            .arg(common::bin())
            .args(&args)
            .stdin(Stdio::null()));
        assert_ne!(out.code, 0, "{args:?}: {out:?}");
        let lines = out.stderr.lines().count();
        let text = std::fs::read_to_string(&trace).unwrap();
        let writes = text.lines().filter(|l| l.contains("write(2,")).count();
        if text.contains("PTRACE") || (lines > 0 && writes == 0) {
            eprintln!("SKIP: one-write test: strace cannot trace here: {text}");
            return;
        }
        assert_eq!(
            writes, lines,
            "{args:?}: {lines} lines in {writes} writes:\n{text}"
        );
    }
    drop(holder);
}

// ---------------------------------------------------------------------------------------
// 16. Smaller truths
// ---------------------------------------------------------------------------------------

#[test]
fn run_timeout_reports_the_whole_wait() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("t.lock");
    let _holder = FlockHolder::hold(&lock);
    let out = run(leasehold()
        .args(["run", "--timeout", "1.4"])
        .arg(&lock)
        .args(["--", "true"]));
    assert_eq!(out.code, 75, "{out:?}");
    let last = out.stderr.lines().last().unwrap();
    assert!(last.contains("gave up after 1.4s"), "{out:?}");
}

#[test]
fn registry_remove_of_a_root_that_became_a_symlink_removes_the_grant() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (p, a) = (
        canonical_dir(tmp.path(), "p"),
        canonical_dir(tmp.path(), "a"),
    );
    let elsewhere = canonical_dir(tmp.path(), "elsewhere");
    assert_eq!(run(registry(&home).args(["add", &p, &a])).code, 0);
    std::fs::remove_dir(&a).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &a).unwrap();
    let out = run(registry(&home).args(["remove", &p, &a]));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(registry(&home).args(["list", "--json"]));
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["scope"], json!({}), "the grant was kept: {v}");
}

#[test]
fn a_lease_path_equal_to_the_document_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let doc = home.join("storages/multi_root_workspace.json");
    let spelled = home.join("storages/./multi_root_workspace.json");
    for lease in [&doc, &spelled] {
        for verb in [&["list"][..], &["serve"]] {
            let out = run_bounded(
                registry(&home).arg("--lease-path").arg(lease).args(verb),
                Duration::from_secs(10),
            );
            assert_eq!(out.code, 2, "{verb:?}: {out:?}");
            assert_one_line_error(&out, "is the registry document itself");
            assert_one_line_error(&out, &lease.display().to_string());
        }
    }
    assert!(!doc.exists(), "nothing was created");
}

#[test]
fn a_session_log_that_is_not_a_regular_file_is_not_called_a_lock_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    std::fs::create_dir_all(dir.join("s")).unwrap();
    let log = dir.join("s/session.jsonl");
    mkfifo(&log);
    let mut p = Proc::spawn(
        leasehold()
            .arg("session")
            .arg("--dir")
            .arg(&dir)
            .args(["append", "s"])
            .stderr(Stdio::piped()),
    );
    // The child may refuse the FIFO and exit before it reads its input, so a broken pipe
    // here is one of the outcomes under test, not a failure (CI saw EPIPE on this write).
    if let Some(stdin) = p.stdin.as_mut() {
        let _ = stdin.write_all(b"{\"a\":1}\n");
    }
    p.close_stdin();
    let st = p.wait_timeout(Duration::from_secs(10)).expect("no hang");
    let mut stderr = String::new();
    p.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(st.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&log.display().to_string()), "{stderr}");
    assert!(stderr.contains("a FIFO"), "{stderr}");
    assert!(!stderr.contains("lock file"), "{stderr}");
}

#[test]
fn another_users_live_holder_is_still_named_when_its_descriptors_cannot_be_read() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: another_users_live_holder_is_still_named_when_its_descriptors_cannot_be_read: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    if !is_root() {
        eprintln!("SKIP: needs root to look as nobody at a root holder");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lock = tmp.path().join("root-held.lock");
    let holder = common::hold(&lock);
    let out = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(common::bin())
        .arg("status")
        .arg(&lock)
        .stdin(Stdio::null()));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        format!("held by pid {}\n", holder.pid()),
        "{out:?}"
    );
    common::release(holder);
}
