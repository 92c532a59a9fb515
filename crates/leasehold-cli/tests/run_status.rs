//! Black-box tests of `leasehold run` and `leasehold status` against the contract, with real
//! processes synchronised through pipes.
#![cfg(unix)] // POSIX processes, signals and lock files; Windows: crates/leasehold/tests/windows.rs

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{bin, gave_up_after, hold, leasehold, release, wait_until_free};
use rustix::process::Signal;
use testkit::{Out, Proc, assert_one_line_error, run};

fn status_text(lock: &Path) -> Out {
    run(leasehold().arg("status").arg(lock))
}

fn try_run(lock: &Path) -> Out {
    run(leasehold()
        .args(["run", "--no-wait"])
        .arg(lock)
        .args(["--", "true"]))
}

/// Starts a waiting `run` and returns once it has said (after ~1 s) that it is waiting: a
/// deterministic handshake that the waiter is really blocked on the holder.
fn waiter(lock: &Path, extra: &[&str], command: &[&str]) -> (Proc, String) {
    let mut cmd = leasehold();
    cmd.arg("run").args(extra).arg(lock).arg("--").args(command);
    cmd.stderr(Stdio::piped());
    let mut p = Proc::spawn(&mut cmd);
    let mut err = BufReader::new(p.child.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("notice");
    (p, line)
}

#[test]
fn exclusion_among_several_processes_no_lost_update() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("counter.lock");
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0").unwrap();
    // Read-modify-write without any atomicity of its own: only the lease prevents lost updates.
    let script = format!(
        "n=$(cat '{c}'); n=$((n+1)); printf %s $n > '{c}.tmp'; mv '{c}.tmp' '{c}'",
        c = counter.display()
    );
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let lock = lock.clone();
            let script = script.clone();
            std::thread::spawn(move || {
                for _ in 0..15 {
                    let out = run(leasehold()
                        .arg("run")
                        .arg(&lock)
                        .args(["--", "sh", "-c", &script]));
                    assert_eq!(out.code, 0, "{out:?}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "60");
}

#[test]
fn release_on_clean_exit_and_contention_names_lock_and_pid() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("a.lock");
    let holder = hold(&lock);
    let out = try_run(&lock);
    assert_eq!(out.code, 75);
    assert_one_line_error(&out, &lock.display().to_string());
    assert_one_line_error(&out, &common::pid_note(holder.pid()));
    release(holder);
    assert_eq!(try_run(&lock).code, 0);
}

#[test]
fn release_on_sigkill_of_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("k.lock");
    let mut holder = hold(&lock);
    assert_eq!(try_run(&lock).code, 75);
    holder.kill_group();
    wait_until_free(&lock);
    assert_eq!(try_run(&lock).code, 0);
}

#[test]
fn a_waiter_takes_over_and_says_once_what_it_waits_for() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("w.lock");
    let holder = hold(&lock);
    let (mut w, notice) = waiter(&lock, &[], &["echo", "got it"]);
    assert!(notice.starts_with("leasehold: "), "{notice:?}");
    assert!(notice.contains(&lock.display().to_string()), "{notice:?}");
    assert!(
        notice.contains(&common::pid_note(holder.pid())),
        "{notice:?}"
    );
    release(holder);
    assert_eq!(w.line(), "got it");
    assert!(w.wait().success());
}

#[test]
fn command_keeps_the_lease_when_leasehold_itself_is_sigkilled() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("inherit.lock");
    let mut holder = hold(&lock);
    holder.signal(Signal::KILL); // only leasehold: COMMAND (sh) lives on
    holder.wait();
    let out = try_run(&lock);
    assert_eq!(
        out.code, 75,
        "COMMAND still runs, so nobody else may: {out:?}"
    );
    if testkit::reveals_holders() {
        // (The portable build's status cannot tell; the refused try above is the proof.)
        let st = status_text(&lock);
        assert_eq!(st.code, 0);
        assert!(st.stdout.starts_with("held"), "{st:?}");
    }
    // COMMAND ends (its stdin is our pipe): the lease goes with it.
    holder.send("go");
    assert_eq!(holder.line(), "done");
    wait_until_free(&lock);
    assert_eq!(try_run(&lock).code, 0);
}

#[test]
fn exit_status_is_commands_and_signals_map_to_128_plus_n() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("s.lock");
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "sh", "-c", "exit 7"]));
    assert_eq!(out.code, 7);
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(out.code, 143);
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "/no/such/program"]));
    assert_eq!(out.code, 127);
    assert_one_line_error(&out, "/no/such/program");
}

#[test]
fn timeout_and_no_wait_give_up_with_75_or_the_conflict_code_and_never_run_command() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("t.lock");
    let marker = dir.path().join("ran");
    let touch = format!("touch '{}'", marker.display());
    let holder = hold(&lock);
    let started = Instant::now();
    let out = run(leasehold()
        .args(["run", "--timeout", "0.3"])
        .arg(&lock)
        .args(["--", "sh", "-c", &touch]));
    assert_eq!(out.code, 75, "{out:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_one_line_error(
        &out,
        &format!(
            "{}: lock is held by another process{}; gave up after ",
            lock.display(),
            common::with_pid(holder.pid())
        ),
    );
    let waited = gave_up_after(out.stderr.trim_end());
    assert!(waited.is_some_and(|s| (0.3..1.0).contains(&s)), "{out:?}");
    let out = run(leasehold()
        .args(["run", "--no-wait", "--conflict-exit-code", "9"])
        .arg(&lock)
        .args(["--", "sh", "-c", &touch]));
    assert_eq!(out.code, 9);
    assert_one_line_error(&out, "did not wait (wait for it with --timeout SECS)");
    let out = run(leasehold()
        .args(["run", "--timeout", "0", "--conflict-exit-code", "0"])
        .arg(&lock)
        .args(["--", "sh", "-c", &touch]));
    assert_eq!(out.code, 0);
    assert!(!marker.exists(), "COMMAND must never run without the lease");
    // The abandoned waiters hold nothing: the holder's pid is the only one.
    if testkit::reveals_holders() {
        let st = run(leasehold().args(["status", "--json"]).arg(&lock));
        let v: serde_json::Value = serde_json::from_str(&st.stdout).unwrap();
        assert_eq!(v["holders"], serde_json::json!([holder.pid()]));
    }
    release(holder);
    assert_eq!(try_run(&lock).code, 0);
}

/// A wait longer than the notice's second says once what it waits for, and when it gives
/// up it counts the whole wait, the quiet first second included.
#[test]
fn a_long_wait_gives_notice_once_and_reports_the_whole_wait_when_it_gives_up() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("n.lock");
    let holder = hold(&lock);
    let out = run(leasehold()
        .args(["run", "--timeout", "1.5"])
        .arg(&lock)
        .args(["--", "true"]));
    assert_eq!(out.code, 75, "{out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    let held = format!(
        "{} held by another process{}",
        lock.display(),
        common::with_pid(holder.pid())
    );
    assert_eq!(lines.len(), 2, "{out:?}");
    assert_eq!(lines[0], format!("leasehold: waiting for {held}"));
    let tail = gave_up_after(lines[1]);
    // 1.5 s in all: the quiet second before the notice counts (it said 0.5 s once).
    assert!(tail.is_some_and(|s| (1.5..2.0).contains(&s)), "{out:?}");
    release(holder);
}

/// The notice does not restart the wait: a waiting `run` whose lock file
/// is replaced (by rename, as a backup restore would) stays in line behind the old file's
/// holder after it says it waits, rather than opening the path again and taking the free
/// new file beside that holder. It waits until its deadline, and COMMAND never runs.
#[test]
fn the_notice_does_not_restart_the_wait_on_a_replaced_lock_file() {
    if !testkit::reveals_holders() {
        eprintln!(
            "SKIP: the_notice_does_not_restart_the_wait_on_a_replaced_lock_file: needs /proc/locks to see the waiter blocked (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("r.lock");
    let link = dir.path().join("r.link");
    let marker = dir.path().join("ran");
    // util-linux flock(1) holds it: a `run` holding it would stop its COMMAND (and release)
    // once its lock file is replaced, which is not what is tested here.
    let holder = testkit::FlockHolder::hold(&lock);
    // A second name for the held inode, which the replacement leaves in place.
    std::fs::hard_link(&lock, &link).unwrap();
    let mut cmd = leasehold();
    cmd.args(["run", "--timeout", "2.5"])
        .arg(&lock)
        .args(["--", "touch"])
        .arg(&marker)
        .stderr(Stdio::piped());
    let mut waiter = Proc::spawn(&mut cmd);
    testkit::until("the waiter waits in the kernel for the held file", || {
        testkit::blocked_on(waiter.pid(), &link)
    });
    let fresh = dir.path().join("r.fresh");
    std::fs::write(&fresh, b"").unwrap();
    std::fs::rename(&fresh, &lock).unwrap();
    let mut err = BufReader::new(waiter.child.stderr.take().expect("stderr"));
    let mut notice = String::new();
    err.read_line(&mut notice).expect("notice");
    assert!(notice.starts_with("leasehold: waiting for "), "{notice:?}");
    let status = waiter.wait();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(
        !marker.exists(),
        "took the replaced lock file beside the holder it waited for ({status:?}, {rest:?})"
    );
    assert_eq!(status.code(), Some(75), "{rest:?}");
    assert!(rest.contains("gave up after"), "{rest:?}");
    holder.release();
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("u.lock");
    let cases: [&[&str]; 5] = [
        &["run", "--timeout", "1", "--no-wait", "L", "--", "true"],
        &["run", "--timeout", "-1", "L", "--", "true"],
        &["run", "--timeout", "soon", "L", "--", "true"],
        &["run", "L"],
        &["status"],
    ];
    for args in cases {
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if *a == "L" {
                    lock.display().to_string()
                } else {
                    a.to_string()
                }
            })
            .collect();
        let out = run(leasehold().args(&args));
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
    }
    assert!(!lock.exists(), "a usage error changes nothing");
}

#[test]
fn sigint_and_sigterm_while_waiting_stop_promptly_without_running_command() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("sig.lock");
    let marker = dir.path().join("ran");
    let touch = format!("touch '{}'", marker.display());
    let holder = hold(&lock);
    for (sig, code) in [(Signal::INT, 130), (Signal::TERM, 143)] {
        let (mut w, _notice) = waiter(&lock, &[], &["sh", "-c", &touch]);
        let sent = Instant::now();
        w.signal(sig);
        let st = w
            .wait_timeout(Duration::from_secs(5))
            .expect("stops promptly");
        assert!(
            sent.elapsed() < Duration::from_secs(1),
            "{:?}",
            sent.elapsed()
        );
        assert_eq!(st.code(), Some(code));
    }
    assert!(!marker.exists());
    release(holder);
}

#[test]
fn creates_0600_with_0700_parents_and_preserves_existing_bytes_and_mode() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("p/q/new.lock");
    assert_eq!(
        run(leasehold().arg("run").arg(&lock).args(["--", "true"])).code,
        0
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&lock), 0o600);
    assert_eq!(mode(&dir.path().join("p")), 0o700);
    assert_eq!(mode(&dir.path().join("p/q")), 0o700);
    let existing = dir.path().join("existing.lock");
    std::fs::write(&existing, "keep\n").unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        run(leasehold().arg("run").arg(&existing).args(["--", "true"])).code,
        0
    );
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep\n");
    assert_eq!(mode(&existing), 0o644);
    assert!(
        lock.exists() && existing.exists(),
        "lock files are never removed"
    );
}

/// Every kind of unusable LOCKFILE: exit 2 promptly, one line naming it, nothing changed.
#[test]
fn unusable_lockfiles_exit_2_promptly_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let victim = d.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, d.join("link.lock")).unwrap();
    std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling.lock")).unwrap();
    assert!(
        std::process::Command::new("mkfifo")
            .arg(d.join("fifo.lock"))
            .status()
            .unwrap()
            .success()
    );
    let _sock = std::os::unix::net::UnixListener::bind(d.join("sock.lock")).unwrap();
    std::fs::create_dir(d.join("dir.lock")).unwrap();
    let paths = [
        d.join("link.lock"),
        d.join("dangling.lock"),
        d.join("fifo.lock"),
        d.join("sock.lock"),
        d.join("dir.lock"),
        Path::new("/dev/null").to_path_buf(),
        victim.join("under.lock"),
    ];
    for p in &paths {
        for verb in [&["run", "--no-wait"][..], &["run"][..], &["status"][..]] {
            let mut cmd = leasehold();
            cmd.args(verb).arg(p);
            if verb[0] == "run" {
                cmd.args(["--", "touch"]).arg(d.join("ran"));
            }
            let started = Instant::now();
            let out = run(&mut cmd);
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{p:?} {verb:?} slow"
            );
            assert_eq!(out.code, 2, "{p:?} {verb:?}: {out:?}");
            assert_one_line_error(&out, &p.display().to_string());
        }
    }
    assert!(!d.join("ran").exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(!d.join("nowhere").exists());
}

/// Permission denied is unusable too (exit 2). Run as an unprivileged user, since root
/// bypasses permission checks.
#[test]
fn permission_denied_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let locked = dir.path().join("closed");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The binary must be reachable by `nobody`: copy it somewhere world-readable. The copy
    // is made by cp(1), never by this process: a write descriptor open here would be
    // inherited by children other tests fork meanwhile, and exec would fail with ETXTBSY.
    let exe = dir.path().join("leasehold");
    let copied = std::process::Command::new("install")
        .args(["-m", "0755"])
        .arg(bin())
        .arg(&exe)
        .status()
        .unwrap();
    assert!(copied.success());
    let lock = locked.join("x.lock");
    let is_root = rustix::process::geteuid().is_root();
    let mut cmd = if is_root {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe);
        c
    } else {
        std::process::Command::new(&exe)
    };
    cmd.args(["run", "--no-wait"])
        .arg(&lock)
        .args(["--", "true"]);
    let out = run(&mut cmd);
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "permission denied");
    assert!(!lock.exists());
}

#[test]
fn status_reports_free_held_and_json_without_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("st.lock");
    let out = status_text(&lock);
    assert_eq!((out.code, out.stdout.as_str()), (0, "free\n"));
    let out = status_text(&dir.path().join("missing/parent/x.lock"));
    assert_eq!((out.code, out.stdout.as_str()), (0, "free\n"));
    assert!(
        !lock.exists() && !dir.path().join("missing").exists(),
        "status creates nothing"
    );
    let holder = hold(&lock);
    let out = status_text(&lock);
    if !testkit::reveals_holders() {
        // The macOS/BSD path: the OS does not reveal holders, and status says so in one line.
        assert_eq!(out.code, 1, "{out:?}");
        assert_one_line_error(&out, "this system does not reveal lock holders");
        release(holder);
        return;
    }
    assert_eq!(out.stdout, format!("held by pid {}\n", holder.pid()));
    let out = run(leasehold().args(["status", "--json"]).arg(&lock));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["path"], lock.display().to_string(), "{v}");
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["holders"], serde_json::json!([holder.pid()]), "{v}");
    assert_eq!(v["mount"]["locks"], "local", "{v}");
    // No record lease is held on the path (`run` with LEASEHOLD_SHARED_MOUNT takes one).
    assert_eq!(v["record"], serde_json::Value::Null, "{v}");
    release(holder);
    let out = run(leasehold().args(["status", "--json"]).arg(&lock));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["held"], false);
    assert_eq!(v["holders"], serde_json::json!([]));
}

/// `status` must never take the lock, not even for an instant: a storm of try-once `run`s
/// never fails while `status` probes the same file continuously.
#[test]
fn status_during_a_storm_of_no_wait_runs_causes_no_spurious_failure() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("storm.lock");
    assert_eq!(try_run(&lock).code, 0);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = {
        let (lock, stop) = (lock.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Portable build: "does not reveal lock holders" (exit 1), never a disturbance.
                let want = if !testkit::reveals_holders() { 1 } else { 0 };
                assert_eq!(status_text(&lock).code, want);
                n += 1;
            }
            n
        })
    };
    for i in 0..150 {
        let out = try_run(&lock);
        assert_eq!(out.code, 0, "run #{i} failed spuriously: {out:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(prober.join().unwrap() > 0);
}
