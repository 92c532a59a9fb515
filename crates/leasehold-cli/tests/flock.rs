//! `leasehold flock` (contract v1.3), black-box, with real processes: a port of util-linux's
//! own flock regression scenarios (`tests/ts/misc/flock`: non-block, no-fork, shared,
//! exclusive, timeout with its timing window), then flock(1)'s forms, options and exit
//! statuses, the deliberate differences, and interoperation with util-linux `flock(1)`.
//!
//! Handshakes are lines on pipes and `/proc/locks` entries (a waiter blocked in the kernel's
//! queue shows a `->` line with its pid), never sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bin, leasehold};
use rustix::process::Signal;
use testkit::{Out, Proc, assert_one_line_error, blocked_on, run, until};

/// `leasehold flock ARGS...`.
fn lflock(args: &[&str]) -> Command {
    let mut c = leasehold();
    c.arg("flock").args(args);
    c
}

/// The "general lock" of the upstream script: a shared holder that prints `Locking` once it
/// holds and `Unlocking` when told to go (upstream: `sleep 3`; here a line on its stdin).
fn general_lock(flock: &Path, lock: &Path) -> Proc {
    let mut p = Proc::spawn(Command::new(flock).arg("--shared").arg(lock).args([
        "sh",
        "-c",
        "echo Locking; read _; echo Unlocking",
    ]));
    assert_eq!(p.line(), "Locking");
    p
}

/// `do_lock` of the upstream script: `flock OPTS lockfile echo MESG`, its status and output.
fn do_lock(flock: &Path, opts: &str, lock: &Path, mesg: &str) -> Out {
    run(Command::new(flock)
        .args(opts.split_whitespace())
        .arg(lock)
        .args(["echo", mesg]))
}

/// The upstream scenarios against a shared general lock held by `holder_flock`, run by
/// `flock` (our binary under the name `flock`, or as `leasehold flock`).
fn upstream_scenarios(flock: &Path, holder_flock: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("lockfile");
    let mut general = general_lock(holder_flock, &lock);

    // non-block
    let out = do_lock(
        flock,
        "--nonblock --conflict-exit-code 123",
        &lock,
        "You will never see this!",
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (123, ""),
        "non-block: {out:?}"
    );
    // no-fork
    let out = do_lock(
        flock,
        "--no-fork --nonblock --conflict-exit-code 123",
        &lock,
        "You will never see this!",
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (123, ""),
        "no-fork: {out:?}"
    );
    // shared
    let out = do_lock(flock, "--shared", &lock, "Have shared lock");
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "Have shared lock\n"),
        "shared: {out:?}"
    );
    // exclusive
    let out = do_lock(
        flock,
        "--nonblock --exclusive --conflict-exit-code 123",
        &lock,
        "You will never see this!",
    );
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (123, ""),
        "exclusive: {out:?}"
    );

    // timeout, and the time-check: the waiter gets the lock after the general lock goes
    // (never before), well within its 5 s timeout, and says so.
    let start = Instant::now();
    let mut waiter = Proc::spawn(
        Command::new(flock)
            .args(["--timeout", "5", "--conflict-exit-code", "5"])
            .arg(&lock)
            .args(["echo", "After timeout."]),
    );
    until("the timeout waiter waits", || {
        blocked_on(waiter.pid(), &lock)
    });
    assert!(
        waiter.child.try_wait().unwrap().is_none(),
        "it must wait for the general lock"
    );
    general.send("go");
    assert_eq!(general.line(), "Unlocking");
    let released = Instant::now();
    assert_eq!(waiter.line(), "After timeout.");
    let status = waiter.wait();
    let done = Instant::now();
    assert_eq!(status.code(), Some(0), "timeout: {status:?}");
    assert!(general.wait().success());
    assert!(done >= released);
    assert!(
        done - released < Duration::from_secs(1),
        "granted promptly after the release: {:?}",
        done - released
    );
    assert!(done - start < Duration::from_secs(5), "within the timeout");
}

/// Our binary under the name `flock`, through a symlink.
fn as_flock(dir: &Path) -> PathBuf {
    let link = dir.join("flock");
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    link
}

#[test]
fn upstream_regression_scenarios_pass_under_the_name_flock() {
    let dir = tempfile::tempdir().unwrap();
    let ours = as_flock(dir.path());
    upstream_scenarios(&ours, &ours);
}

#[test]
fn upstream_regression_scenarios_pass_against_a_util_linux_general_lock() {
    let dir = tempfile::tempdir().unwrap();
    let ours = as_flock(dir.path());
    upstream_scenarios(&ours, Path::new("flock"));
    // And util-linux's flock itself against our general lock: one lock across both.
    upstream_scenarios(Path::new("flock"), &ours);
}

#[test]
fn the_verb_form_runs_the_same_scenarios() {
    // `leasehold flock` (argv[1] == "flock"), through a wrapper script so `do_lock` can
    // call it like a program.
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("lflock");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec '{}' flock \"$@\"\n", bin().display()),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    upstream_scenarios(&wrapper, &wrapper);
}

#[test]
fn conflict_statuses_and_timeouts_are_flocks() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("l");
    let mut holder = Proc::spawn(
        lflock(&[])
            .arg(&lock)
            .args(["sh", "-c", "echo locked; read _"]),
    );
    assert_eq!(holder.line(), "locked");
    // -n: 1 by default, silently.
    let out = run(lflock(&["-n"]).arg(&lock).arg("true"));
    assert_eq!((out.code, out.stderr.as_str()), (1, ""), "{out:?}");
    // -w: gives up after about SECS, 1 by default (or -E), and never runs COMMAND.
    let start = Instant::now();
    let out = run(lflock(&["-w", "0.3"]).arg(&lock).args(["echo", "ran"]));
    let took = start.elapsed();
    assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{out:?}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let out = run(lflock(&["-E", "0", "-w", "0.1"]).arg(&lock).arg("true"));
    assert_eq!(out.code, 0, "-E 0 is a valid conflict status");
    // -w 0 is -n.
    let out = run(lflock(&["-w", "0", "-E", "42"]).arg(&lock).arg("true"));
    assert_eq!(out.code, 42);
    // --verbose says why on stderr.
    let out = run(lflock(&["-n", "--verbose"]).arg(&lock).arg("true"));
    assert_eq!(out.code, 1);
    assert_one_line_error(&out, "failed to get lock");
    holder.send("");
    assert!(holder.wait().success());
    // Free: COMMAND's status, or 128 + the signal that killed it.
    let out = run(lflock(&[]).arg(&lock).args(["sh", "-c", "exit 7"]));
    assert_eq!(out.code, 7);
    let out = run(lflock(&[]).arg(&lock).args(["sh", "-c", "kill -TERM $$"]));
    assert_eq!(out.code, 128 + 15);
    let out = run(lflock(&["--verbose"]).arg(&lock).arg("true"));
    assert!(out.stdout.contains("getting lock took"), "{out:?}");
    assert!(out.stdout.contains("executing true"), "{out:?}");
}

#[test]
fn usage_errors_exit_64_and_unopenable_files_66() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("l");
    for args in [
        &[][..],
        &["-n"],
        &["notanumber"],
        &["-E", "256", "x", "true"],
        &["-F", "-o", "x", "true"],
        &["x", "-c"],
        &["x", "-c", "a", "b"],
        &["--bogus", "x", "true"],
    ] {
        let out = run(&mut lflock(args));
        assert_eq!(out.code, 64, "{args:?}: {out:?}");
        assert_one_line_error(&out, "flock: ");
    }
    assert!(
        !dir.path().join("x").exists(),
        "a usage error opens nothing"
    );
    let help = run(&mut lflock(&["-h"]));
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("--conflict-exit-code"));
    let version = run(&mut lflock(&["-V"]));
    assert_eq!(version.code, 0);
    assert!(version.stdout.contains("flock"));
    // Parents are not created, as in flock(1).
    let out = run(lflock(&[]).arg(dir.path().join("no/such/l")).arg("true"));
    assert_eq!(out.code, 66, "{out:?}");
    assert_one_line_error(&out, "no/such/l");
    assert!(!dir.path().join("no").exists());
    // COMMAND that cannot be run: 69, as flock(1).
    let out = run(lflock(&[]).arg(&lock).arg("/no/such/program"));
    assert_eq!(out.code, 69, "{out:?}");
    assert_one_line_error(&out, "/no/such/program");
}

#[test]
fn symlinks_fifos_sockets_and_devices_are_refused_promptly_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let dirlink = dir.path().join("dirlink");
    std::os::unix::fs::symlink(dir.path(), &dirlink).unwrap();
    let fifo = dir.path().join("fifo");
    assert_eq!(run(Command::new("mkfifo").arg(&fifo)).code, 0);
    let sock = dir.path().join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    for (path, why) in [
        (&link, "symbolic link"),
        (&dirlink, "symbolic link"),
        (&fifo, "FIFO"),
        (&sock, "socket"),
        (&PathBuf::from("/dev/null"), "device"),
    ] {
        let start = Instant::now();
        let out = run(lflock(&["-s"]).arg(path).args(["echo", "ran"]));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{path:?} promptly"
        );
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (66, ""),
            "{path:?}: {out:?}"
        );
        assert_one_line_error(&out, why);
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(
        std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

#[test]
fn new_files_are_0600_and_directories_lock_like_flock() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("new");
    assert_eq!(run(lflock(&[]).arg(&lock).arg("true")).code, 0);
    assert_eq!(
        std::fs::metadata(&lock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A directory: locked (read-only), and util-linux flock on it is excluded.
    let d = dir.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let mut holder = Proc::spawn(
        lflock(&[])
            .arg(&d)
            .args(["sh", "-c", "echo locked; read _"]),
    );
    assert_eq!(holder.line(), "locked");
    assert_eq!(
        run(Command::new("flock").arg("-n").arg(&d).arg("true")).code,
        1
    );
    holder.send("");
    assert!(holder.wait().success());
    assert_eq!(
        run(Command::new("flock").arg("-n").arg(&d).arg("true")).code,
        0
    );
    // And the other way round: util-linux holds the directory, we are excluded.
    let mut theirs = Proc::spawn(
        Command::new("flock")
            .arg(&d)
            .args(["-c", "echo locked; read _"]),
    );
    assert_eq!(theirs.line(), "locked");
    assert_eq!(run(lflock(&["-n"]).arg(&d).arg("true")).code, 1);
    assert_eq!(run(lflock(&["-n", "-s"]).arg(&d).arg("true")).code, 1);
    theirs.send("");
    assert!(theirs.wait().success());
}

#[test]
fn a_descriptor_number_locks_the_shells_description() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("fd9");
    // The lock outlives `leasehold flock`: the shell's descriptor 9 holds it until -u.
    let script = format!(
        "exec 9>'{l}'
'{b}' flock -n 9 || exit 10
flock -n '{l}' true && exit 11
'{b}' flock -u 9 || exit 12
flock -n '{l}' true || exit 13
'{b}' flock -s 9 || exit 14
flock -n -s '{l}' true || exit 15
flock -n -x '{l}' true && exit 16
exit 0",
        l = lock.display(),
        b = bin().display()
    );
    let out = run(Command::new("sh").arg("-c").arg(&script));
    assert_eq!(out.code, 0, "{out:?}");
    // A held lock: -n conflicts (1), -E applies; a descriptor that is not open: 65.
    let mut holder = Proc::spawn(
        Command::new("flock")
            .arg(&lock)
            .args(["-c", "echo locked; read _"]),
    );
    assert_eq!(holder.line(), "locked");
    let script = format!(
        "exec 9<'{}'; '{}' flock -n -E 3 9",
        lock.display(),
        bin().display()
    );
    assert_eq!(run(Command::new("sh").arg("-c").arg(&script)).code, 3);
    drop(holder);
    let out = run(&mut lflock(&["-n", "57"]));
    assert_eq!(out.code, 65, "{out:?}");
    assert_one_line_error(&out, "57");
}

/// COMMAND and its descendants inherit the lock: killing `leasehold flock` itself leaves
/// COMMAND holding it. With -o, COMMAND does not hold it; with -F, COMMAND *is* the process
/// that locked (exec, no fork).
#[test]
fn command_inherits_the_lock_unless_closed_and_no_fork_execs() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: command_inherits_the_lock_unless_closed_and_no_fork_execs: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("inherit");
    let held = |lock: &Path| run(Command::new("flock").arg("-n").arg(lock).arg("true")).code == 1;

    let mut p = Proc::spawn(
        lflock(&[])
            .arg(&lock)
            .args(["sh", "-c", "echo locked; read _"]),
    );
    assert_eq!(p.line(), "locked");
    p.kill(); // SIGKILL leasehold only; its COMMAND lives on with the descriptor
    assert!(held(&lock), "COMMAND keeps the lock after leasehold died");
    p.kill_group();
    until("the orphaned COMMAND died", || !held(&lock));

    let mut p = Proc::spawn(
        lflock(&["-o"])
            .arg(&lock)
            .args(["sh", "-c", "echo locked; read _"]),
    );
    assert_eq!(p.line(), "locked");
    assert!(held(&lock), "leasehold holds it while COMMAND runs");
    p.kill();
    assert!(!held(&lock), "with -o COMMAND never had the lock");
    p.kill_group();

    let mut p = Proc::spawn(
        lflock(&["-F"])
            .arg(&lock)
            .args(["sh", "-c", "echo $$; read _"]),
    );
    let pid: u32 = p.line().parse().unwrap();
    assert_eq!(
        pid,
        p.pid(),
        "-F: COMMAND replaced leasehold (exec, no fork)"
    );
    assert!(held(&lock));
    match leasehold_holders(&lock) {
        Some(pids) => assert_eq!(pids, vec![pid]),
        None => panic!("status names the holder"),
    }
    p.send("");
    assert!(p.wait().success());
    assert!(!held(&lock));
}

fn leasehold_holders(lock: &Path) -> Option<Vec<u32>> {
    let out = run(leasehold().args(["status", "--json"]).arg(lock));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
    Some(
        v["holders"]
            .as_array()?
            .iter()
            .filter_map(|p| p.as_u64().map(|p| p as u32))
            .collect(),
    )
}

#[test]
fn sigint_and_sigterm_while_waiting_exit_130_and_143_without_running_command() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("sig");
    let marker = dir.path().join("ran");
    let mut holder = Proc::spawn(
        Command::new("flock")
            .arg(&lock)
            .args(["-c", "echo locked; read _"]),
    );
    assert_eq!(holder.line(), "locked");
    for (sig, code) in [(Signal::INT, 130), (Signal::TERM, 143)] {
        let mut waiter = Proc::spawn(lflock(&[]).arg(&lock).args(["touch"]).arg(&marker));
        until("the waiter waits", || blocked_on(waiter.pid(), &lock));
        let sent = Instant::now();
        waiter.signal(sig);
        let status = waiter.wait_timeout(Duration::from_secs(5)).expect("exits");
        assert!(sent.elapsed() < Duration::from_secs(1), "promptly");
        assert_eq!(status.code(), Some(code), "{sig:?}");
        assert!(!marker.exists(), "COMMAND never ran");
    }
    holder.send("");
    assert!(holder.wait().success());
}

/// Shared leases through `flock -s` keep the turnstile: while an exclusive `leasehold flock`
/// waits behind a shared holder, a new `leasehold flock -s -n` is refused (it queues behind
/// the writer), where util-linux `flock -s -n`, which knows no gate, gets in.
#[test]
fn shared_newcomers_queue_behind_a_waiting_exclusive_leasehold_flock() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("turnstile");
    let mut reader =
        Proc::spawn(
            lflock(&["-s"])
                .arg(&lock)
                .args(["sh", "-c", "echo locked; read _"]),
        );
    assert_eq!(reader.line(), "locked");
    let mut writer = Proc::spawn(lflock(&[]).arg(&lock).args(["echo", "writer in"]));
    until("the writer waits", || blocked_on(writer.pid(), &lock));
    assert_eq!(run(lflock(&["-s", "-n"]).arg(&lock).arg("true")).code, 1);
    assert_eq!(
        run(Command::new("flock")
            .args(["-s", "-n"])
            .arg(&lock)
            .arg("true"))
        .code,
        0
    );
    reader.send("");
    assert!(reader.wait().success());
    assert_eq!(writer.line(), "writer in");
    assert!(writer.wait().success());
    assert_eq!(run(lflock(&["-s", "-n"]).arg(&lock).arg("true")).code, 0);
}

/// flock(1)'s cross-user case, a `/var/lock`-style lock file in a shared sticky directory:
/// a FILE that another user owns, or that its group or others may write, is locked as
/// flock(1) locks it — not refused with 66. A script that switches to us
/// by `PATH` shares such files between users; the lease is the open file description, and
/// the ownership rule guards the stores `run` and the other verbs keep, not a bare lock
/// file the caller chose. Across users the lock still excludes, both ways.
#[test]
fn a_lock_file_another_user_owns_or_may_write_is_locked_as_flock_does() {
    if !rustix::process::geteuid().is_root() {
        eprintln!(
            "SKIP: a_lock_file_another_user_owns_or_may_write_is_locked_as_flock_does: needs root to chown to nobody and run as nobody"
        );
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Another user's file, 0644, locked by root.
    let theirs = dir.path().join("theirs.lock");
    std::fs::write(&theirs, b"").unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = run(lflock(&["-n"]).arg(&theirs).args(["echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
    let out = run(lflock(&["-n", "-s"]).arg(&theirs).args(["echo", "ran"]));
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "ran\n"),
        "shared: {out:?}"
    );
    // `run` keeps the ownership rule: this is where the two verbs differ on purpose.
    let out = run(leasehold().arg("run").arg(&theirs).args(["--", "true"]));
    assert_eq!(out.code, 2, "{out:?}");

    // A root file every user may write (0666), held by nobody: root is excluded, by us and
    // by util-linux flock, until nobody lets go; then root gets it.
    let shared = dir.path().join("shared.lock");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut nobody = Proc::spawn(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(bin())
            .arg("flock")
            .arg(&shared)
            .args(["sh", "-c", "echo locked; read _"]),
    );
    assert_eq!(nobody.line(), "locked");
    assert_eq!(run(lflock(&["-n"]).arg(&shared).arg("true")).code, 1);
    assert_eq!(
        run(Command::new("flock").arg("-n").arg(&shared).arg("true")).code,
        1
    );
    nobody.send("");
    assert!(nobody.wait().success());
    let mut root = Proc::spawn(
        lflock(&[])
            .arg(&shared)
            .args(["sh", "-c", "echo locked; read _"]),
    );
    assert_eq!(root.line(), "locked");
    let out = run(Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["flock", "-n"])
        .arg(&shared)
        .arg("true")
        .stdin(std::process::Stdio::null()));
    assert_eq!(
        (out.code, out.stderr.as_str()),
        (1, ""),
        "nobody is excluded: {out:?}"
    );
    root.send("");
    assert!(root.wait().success());
}
