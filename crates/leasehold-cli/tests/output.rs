//! Stdout that cannot be written, black-box: a full one (`/dev/full`, every write ENOSPC), a
//! pipe whose reader has gone (EPIPE) and a closed descriptor 1 (`>&-`), against every verb
//! that prints. A full stdout loses the output, so the verb exits 1 with one line saying so
//! (as `status` always did, and util-linux tools do); a reader that went away is the end of
//! output, and a closed stdout discards it — neither changes the status. Nothing panics (exit
//! 101), and `flock --verbose` never keeps COMMAND from running.
#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::process::Command;

use common::{bin, closed_stdout, full_stdout, leasehold};
use testkit::{Out, assert_one_line_error, run};

/// `cmd` (a `leasehold` command) with its descriptor 1 closed, through `sh`'s `>&-`.
fn no_stdout(cmd: &Command) -> Out {
    let mut sh = Command::new("sh");
    sh.args(["-c", "exec \"$@\" >&-", "sh"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    run(sh.stdin(std::process::Stdio::null()))
}

/// `Some(out)` of `cmd` with stdout `/dev/full`, or a SKIP line when there is none.
fn full(cmd: &mut Command, what: &str) -> Option<Out> {
    let out = full_stdout(cmd);
    if out.is_none() {
        eprintln!("SKIP: {what} to a full stdout: this system has no /dev/full");
    }
    out
}

/// The contract for a full stdout: exit 1, one line naming the failed write.
fn assert_write_failed(out: &Out, what: &str) {
    assert_eq!(out.code, 1, "{what}: {out:?}");
    assert_one_line_error(out, "writing stdout: No space left on device");
}

/// The contract for a reader that went away or a closed stdout: the verb's own status
/// (`code`), nothing on stderr.
fn assert_quiet(out: &Out, code: i32, what: &str) {
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (code, ""),
        "{what}: {out:?}"
    );
}

/// Every form of every verb below prints something, so each must report a full stdout;
/// each is also run with a gone reader and with a closed stdout.
fn check(mut cmd: Command, what: &str) {
    if let Some(out) = full(&mut cmd, what) {
        assert_write_failed(&out, what);
    }
    assert_quiet(&closed_stdout(&mut cmd), 0, what);
    assert_quiet(&no_stdout(&cmd), 0, what);
}

fn results(root: &Path) -> Command {
    let mut c = leasehold();
    c.arg("results").arg("--root").arg(root);
    c
}

fn registry(home: &Path) -> Command {
    let mut c = leasehold();
    c.arg("registry").arg("--home").arg(home);
    c
}

/// `results paths/pending/sweep/gc` printed through a writer whose errors they dropped:
/// `> /dev/full` exited 0 with the output lost.
#[test]
fn results_verbs_report_a_full_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("results");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f.txt"), b"x").unwrap();
    for id in ["a", "b"] {
        let out = run(results(&root).args(["stage", id, "--from"]).arg(&src));
        assert_eq!(out.code, 0, "{out:?}");
    }
    assert_eq!(run(results(&root).args(["finish", "a"])).code, 0);
    for args in [
        &["paths", "b"][..],
        &["--json", "paths", "b"],
        &["pending"],
        &["--json", "pending"],
        &["gc"],
        &["--json", "gc"],
        // Nothing old enough to remove: a sweep that changes nothing still reports.
        &["--json", "sweep", "--older-than", "100000"],
    ] {
        let mut cmd = results(&root);
        cmd.args(args);
        check(cmd, &format!("results {args:?}"));
    }
    // A sweep that removes: the removal stands although its report was lost.
    let mut cmd = results(&root);
    cmd.args(["sweep", "--older-than", "0"]);
    if let Some(out) = full(&mut cmd, "results sweep") {
        assert_write_failed(&out, "results sweep");
        assert!(!root.join("results/b").exists(), "the sweep happened");
    }
}

/// `registry list` (plain and `--json`, active and contended) and `registry serve` wrote
/// with `let _ = writeln!`: a full stdout exited 0.
#[test]
fn registry_list_and_serve_report_a_full_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let dirs = tmp.path().join("p");
    std::fs::create_dir_all(&dirs).unwrap();
    let out = run(registry(&home).arg("add").arg(&dirs).arg(&dirs));
    assert_eq!(out.code, 0, "{out:?}");
    for args in [&["list"][..], &["list", "--json"]] {
        let mut cmd = registry(&home);
        cmd.args(args);
        check(cmd, &format!("registry {args:?}"));
    }
    // Serve answers each request line; one it cannot write fails the verb, after the
    // teardown (the lease is released: a one-shot verb gets the registry at once).
    let requests = tmp.path().join("requests");
    std::fs::write(&requests, "{\"op\":\"list\"}\n").unwrap();
    let serve = || {
        let mut c = registry(&home);
        c.arg("serve");
        c
    };
    let mut cmd = serve();
    if let Some(out) = full_stdout(cmd.stdin(std::fs::File::open(&requests).unwrap())) {
        assert_write_failed(&out, "registry serve");
        let out = run(registry(&home).arg("list"));
        assert_eq!(out.code, 0, "released after the failed answer: {out:?}");
    }
    let mut cmd = serve();
    let out = closed_stdout(cmd.stdin(std::fs::File::open(&requests).unwrap()));
    assert_quiet(&out, 0, "registry serve, reader gone");
    // Contended: `list --json` still prints its answer, and still reports a full stdout.
    let holder = common::hold(&home.join("storages/multi_root_workspace.lock"));
    let mut cmd = registry(&home);
    cmd.args(["list", "--json"]);
    if let Some(out) = full(&mut cmd, "registry list --json, contended") {
        assert_eq!(out.code, 75, "the contention is the status: {out:?}");
    }
    common::release(holder);
}

/// `flock --help`, `-V` and `--verbose` printed with `print!`/`println!`, which panic (exit
/// 101) on a failed write; with `--verbose` the panic came after the lock was taken and
/// before COMMAND ran. Now: flock(1)'s behaviour — COMMAND runs, and a
/// full stdout fails the run with 1 afterwards, one line.
#[test]
fn flock_help_version_and_verbose_survive_any_stdout() {
    for args in [&["--help"][..], &["-h"], &["-V"], &["--version"]] {
        let mut cmd = leasehold();
        cmd.arg("flock").args(args);
        check(cmd, &format!("flock {args:?}"));
    }
    // Invoked as `flock` (a symlink), the same.
    let tmp = tempfile::tempdir().unwrap();
    let link = tmp.path().join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    let mut cmd = Command::new(&link);
    cmd.arg("--help");
    check(cmd, "flock --help as flock");

    let lock = tmp.path().join("v.lock");
    let ran = tmp.path().join("ran");
    let verbose = || {
        let mut c = leasehold();
        c.args(["flock", "--verbose"])
            .arg(&lock)
            .args(["sh", "-c", "touch \"$0\"; exit 7"])
            .arg(&ran);
        c
    };
    let mut cmd = verbose();
    if let Some(out) = full(&mut cmd, "flock --verbose") {
        assert!(ran.exists(), "COMMAND ran: {out:?}");
        assert_write_failed(&out, "flock --verbose");
    }
    std::fs::remove_file(&ran).ok();
    assert_quiet(
        &closed_stdout(&mut verbose()),
        7,
        "flock --verbose, reader gone",
    );
    assert!(ran.exists(), "COMMAND ran with a gone reader");
    std::fs::remove_file(&ran).unwrap();
    assert_quiet(&no_stdout(&verbose()), 7, "flock --verbose, closed stdout");
    assert!(ran.exists(), "COMMAND ran with a closed stdout");
    // -F: COMMAND replaces flock; the failed line is reported before the exec.
    std::fs::remove_file(&ran).unwrap();
    let mut cmd = leasehold();
    cmd.args(["flock", "--verbose", "-F"])
        .arg(&lock)
        .args(["sh", "-c", "touch \"$0\"; exit 7"])
        .arg(&ran);
    if let Some(out) = full(&mut cmd, "flock --verbose -F") {
        assert!(ran.exists(), "COMMAND ran: {out:?}");
        assert_eq!(out.code, 7, "-F: COMMAND's status: {out:?}");
        assert_one_line_error(&out, "writing stdout");
    }
}

/// clap's `--help` and `--version` went through `Error::exit`, which swallows a failed
/// write: `leasehold --help > /dev/full` exited 0 with the text lost.
#[test]
fn help_and_version_report_a_full_stdout() {
    for args in [
        &["--help"][..],
        &["--version"],
        &["run", "--help"],
        &["registry", "add", "--help"],
        &["help", "results"],
    ] {
        let mut cmd = leasehold();
        cmd.args(args);
        check(cmd, &format!("{args:?}"));
    }
}
