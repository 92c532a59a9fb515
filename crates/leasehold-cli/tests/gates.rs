//! Black-box with real processes: the gate files beside a lock
//! (the shared-mode turnstile, `.<name>.leasehold-gate`, `-readers`, `-writers`) are trusted
//! no more than the lock file; a wait held up at a gate says so, naming the gate and its
//! holders; a lock file's directory that others may write is refused; and lock files on
//! mounts whose paths do not exclude each other (overlayfs, FUSE) are refused before
//! anything is created there.
//!
//! The hostile user is `nobody` (`setpriv`, run as root; the tests that need it print SKIP
//! otherwise), overlayfs is mounted by the test (`mount -t overlay`), FUSE is `bindfs`.
//! Synchronisation is by handshakes: a holder's line on stdout, a waiter's notice on stderr
//! (printed once it has waited a second, so it is waiting), never by sleeping. The bounded
//! waits (`--timeout`, `wait_timeout`) only keep a regression from hanging the suite.
#![cfg(target_os = "linux")]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{hold, leasehold, release, with_pid};
use rustix::process::Signal;
use testkit::Bindfs;
use testkit::{FlockHolder, Proc, assert_one_line_error, run};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A gate file's name beside `lock`: `.NAME.leasehold-gate` plus `suffix`.
fn gate_of(lock: &Path, suffix: &str) -> PathBuf {
    let name = lock.file_name().unwrap().to_str().unwrap();
    lock.with_file_name(format!(".{name}.leasehold-gate{suffix}"))
}

/// `nobody` (no groups) creating `file` and holding it exclusively with util-linux flock(1)
/// until its stdin closes; returns once it holds it.
fn nobody_holds(file: &Path) -> Proc {
    let mut p = Proc::spawn(
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .args(["flock", "-x"])
            .arg(file)
            .args(["sh", "-c", "echo held; read _ || true"]),
    );
    assert_eq!(p.line(), "held", "nobody could not hold {}", file.display());
    p
}

/// util-linux flock(1) holding `file` exclusively (as this user) until its stdin closes.
fn flock_holds(file: &Path) -> Proc {
    let mut p = Proc::spawn(Command::new("flock").arg("-x").arg(file).args([
        "sh",
        "-c",
        "echo held; read _ || true",
    ]));
    assert_eq!(p.line(), "held");
    p
}

/// A `run` with `args` (options, LOCKFILE, `--`, COMMAND) whose stderr the test reads.
fn spawn_run(args: &[&std::ffi::OsStr]) -> (Proc, BufReader<std::process::ChildStderr>) {
    let mut cmd = leasehold();
    cmd.arg("run").args(args).stderr(Stdio::piped());
    let mut p = Proc::spawn(&mut cmd);
    let err = BufReader::new(p.child.stderr.take().unwrap());
    (p, err)
}

fn line_of(err: &mut BufReader<std::process::ChildStderr>) -> String {
    let mut l = String::new();
    err.read_line(&mut l).unwrap();
    l
}

fn rest_of(err: &mut BufReader<std::process::ChildStderr>) -> String {
    let mut s = String::new();
    err.read_to_string(&mut s).unwrap();
    s
}

/// The finding: another user plants and holds a gate beside a lock in a sticky `/tmp`; shared
/// acquirers then hung on a free lock, and waiters (exclusive ones past the notice) never got
/// a lock their holder had released. Now such a gate is ignored (fairness only): every one
/// of them gets the lease.
#[test]
fn a_gate_another_user_planted_and_holds_is_ignored_not_waited_for() {
    if !is_root() {
        eprintln!("SKIP: planted-gate test: needs root to run a holder as nobody");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sticky = tmp.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    for suffix in ["", "-readers", "-writers"] {
        let lock = sticky.join(format!("x{suffix}.lock"));
        if suffix == "-writers" {
            // The writers' queue is used only next to a gate: ours, made by a shared run.
            let out = run(leasehold()
                .args(["run", "--shared"])
                .arg(&lock)
                .args(["--", "true"]));
            assert_eq!(out.code, 0, "{out:?}");
        }
        let planter = nobody_holds(&gate_of(&lock, suffix));
        // A shared try on the free lock (held up at a planted gate, it was refused).
        let out = run(leasehold()
            .args(["run", "--shared", "--no-wait"])
            .arg(&lock)
            .args(["--", "echo", "ran"]));
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (0, "ran\n"),
            "{suffix}: {out:?}"
        );
        // Also where another user's files are accepted: the opt-in, and `leasehold flock`,
        // which takes it for flock(1)'s sake, do not extend to gates.
        let out = run(leasehold()
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .args(["run", "--shared", "--no-wait"])
            .arg(&lock)
            .args(["--", "true"]));
        assert_eq!(out.code, 0, "{suffix}, opted in: {out:?}");
        let out = run(leasehold()
            .args(["flock", "-s", "-n"])
            .arg(&lock)
            .arg("true"));
        assert_eq!(out.code, 0, "{suffix}, flock: {out:?}");
        check_waiters(&lock, suffix);
        drop(planter);
    }
}

/// A shared and an exclusive waiter behind an exclusive holder of `lock` both get the lease
/// once the holder goes, whatever the planted gate.
fn check_waiters(lock: &Path, case: &str) {
    for shared in [true, false] {
        let h = hold(lock);
        let mut args: Vec<&std::ffi::OsStr> = vec!["--timeout".as_ref(), "10".as_ref()];
        if shared {
            args.push("--shared".as_ref());
        }
        args.extend([
            lock.as_os_str(),
            "--".as_ref(),
            "echo".as_ref(),
            "ran".as_ref(),
        ]);
        let (mut w, mut err) = spawn_run(&args);
        let notice = line_of(&mut err);
        assert!(notice.contains("waiting for"), "{case}: {notice:?}");
        release(h);
        assert_eq!(
            w.line(),
            "ran",
            "{case} shared={shared}: {}",
            rest_of(&mut err)
        );
        assert!(w.wait().success());
    }
}

/// A gate hard-linked to the lock file is not used: a waiter holding it would wait for
/// itself (it held the lock file's inode through the gate, and then waited for the lock).
#[test]
fn a_gate_hard_linked_to_the_lock_file_is_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("linked.lock");
    std::fs::write(&lock, b"").unwrap();
    std::fs::hard_link(&lock, gate_of(&lock, "")).unwrap();
    let h = hold(&lock);
    let args: Vec<&std::ffi::OsStr> = vec![
        "--timeout".as_ref(),
        "10".as_ref(),
        lock.as_os_str(),
        "--".as_ref(),
        "echo".as_ref(),
        "ran".as_ref(),
    ];
    let (mut w, mut err) = spawn_run(&args);
    assert!(line_of(&mut err).contains("waiting for"));
    release(h);
    assert_eq!(w.line(), "ran", "{}", rest_of(&mut err));
    assert!(w.wait().success());
}

/// A gate this user trusts, held by a process that does not let it go (here util-linux
/// flock(1) on the gate file; in life a waiter that is stopped or stuck): a try, a timed-out
/// wait and its notice name the gate and its holder, and what the lock itself is — not
/// "held by another process" while `status` says free. The wait still ends on a signal.
#[test]
fn a_wait_held_up_at_a_gate_names_the_gate_and_its_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("g.lock");
    let gate = gate_of(&lock, "");
    let shown = gate.display().to_string();
    assert_eq!(
        run(leasehold()
            .args(["run", "--shared"])
            .arg(&lock)
            .args(["--", "true"]))
        .code,
        0
    );
    let blocker = flock_holds(&gate);
    let by = format!("held by another process{}", with_pid(blocker.pid()));
    assert_eq!(common::status_line(&lock), "free");

    // A shared try, on a free lock.
    let out = run(leasehold()
        .args(["run", "--shared", "--no-wait"])
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!(out.code, 75, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_one_line_error(
        &out,
        &format!(
            "{}: lock is held up at its gate {shown}, {by}",
            lock.display()
        ),
    );
    if testkit::reveals_holders() {
        // What to do about it, in the library's words as every face says them.
        assert_one_line_error(
            &out,
            "(a waiter ahead in line; the lock itself is free, so that waiter is stopped or stuck: resume or end it); did not wait",
        );
    }
    assert_one_line_error(&out, "did not wait");

    // A shared wait that times out there: the notice and the message say the same.
    let (mut w, mut err) = spawn_run(&[
        "--shared".as_ref(),
        "--timeout".as_ref(),
        "1.5".as_ref(),
        lock.as_os_str(),
        "--".as_ref(),
        "echo".as_ref(),
        "ran".as_ref(),
    ]);
    let notice = line_of(&mut err);
    assert!(
        notice.starts_with(&format!(
            "leasehold: waiting for {} held up at its gate {shown}, {by}",
            lock.display()
        )),
        "{notice:?}"
    );
    assert_eq!(w.wait().code(), Some(75));
    let last = rest_of(&mut err);
    assert!(
        last.contains(&format!("held up at its gate {shown}, {by}")),
        "{last:?}"
    );
    assert!(last.contains("gave up after 1."), "{last:?}");

    // An exclusive wait held up there behind the lock's shared holder: both are named.
    blocker_release(blocker);
    let reader = holder(&lock, &["--shared"]);
    let blocker = flock_holds(&gate);
    let by = format!("held by another process{}", with_pid(blocker.pid()));
    let out = run(leasehold()
        .args(["run", "--timeout", "1.2"])
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!(out.code, 75, "{out:?}");
    assert_eq!(out.stdout, "");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!("held up at its gate {shown}, {by}")),
        "{out:?}"
    );
    if testkit::reveals_holders() {
        let lock_by = format!(
            "the lock itself is held by another process (pid {})",
            reader.pid()
        );
        assert!(last.contains(&lock_by), "{out:?}");
    }

    // Stuck at the gate without a limit, a signal still ends the wait at once.
    let (mut w, mut err) = spawn_run(&[
        "--shared".as_ref(),
        lock.as_os_str(),
        "--".as_ref(),
        "echo".as_ref(),
        "ran".as_ref(),
    ]);
    assert!(line_of(&mut err).contains("held up at its gate"));
    w.signal(Signal::TERM);
    let st = w
        .wait_timeout(Duration::from_secs(5))
        .expect("SIGTERM ends the wait");
    assert_eq!(st.code(), Some(143));
    assert_eq!(w.line(), "", "COMMAND never ran");
    blocker_release(blocker);
    release(reader);
}

/// A `run` (with `extra` options) whose COMMAND prints `locked` and holds until a line.
fn holder(lock: &Path, extra: &[&str]) -> Proc {
    let mut p = Proc::spawn(leasehold().arg("run").args(extra).arg(lock).args([
        "--",
        "sh",
        "-c",
        "echo locked; read _ignored; echo done",
    ]));
    assert_eq!(p.line(), "locked");
    p
}

fn blocker_release(mut p: Proc) {
    p.close_stdin();
    assert!(p.wait().success());
}

/// In a directory that others may write (and that is not sticky and root's),
/// another user can move the lock file away while `run` holds it and a second `run` starts;
/// such a directory — or one that belongs to another user — is refused, nothing created in
/// it, unless sharing is opted into.
#[test]
fn a_lock_file_in_a_directory_others_may_write_is_refused_unless_opted_in() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cases = vec![
        (
            "open",
            0o777,
            "may be written by group and others (mode 0777)",
        ),
        ("group", 0o775, "may be written by its group (mode 0775)"),
    ];
    if is_root() {
        cases.push(("theirs", 0o755, "belongs to another user (uid 65534"));
    } else {
        eprintln!("SKIP: a directory of another user: needs root to chown it to nobody");
    }
    for (name, mode, reason) in cases {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        if name == "theirs" {
            std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        let lock = dir.join("x.lock");
        for extra in [&[][..], &["--shared"]] {
            let out = run(leasehold()
                .arg("run")
                .args(extra)
                .arg(&lock)
                .args(["--", "echo", "ran"]));
            assert_eq!(out.code, 2, "{name}: {out:?}");
            assert_eq!(out.stdout, "", "COMMAND must not run");
            assert_one_line_error(&out, &format!("leasehold: {}: ", dir.display()));
            assert_one_line_error(&out, &lock.display().to_string());
            assert_one_line_error(&out, reason);
            assert_one_line_error(&out, "LEASEHOLD_ALLOW_SHARED=1");
            assert!(!lock.exists(), "{name}: nothing is created in it");
        }
        let out = run(leasehold()
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .arg("run")
            .arg(&lock)
            .args(["--", "echo", "ran"]));
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (0, "ran\n"),
            "{name}: {out:?}"
        );
    }
    // Sticky and root's (`/tmp` itself) stays fine, as does our own 0755 directory.
    let ours = tmp.path().join("ours");
    std::fs::create_dir(&ours).unwrap();
    std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(leasehold()
        .arg("run")
        .arg(ours.join("x.lock"))
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
}

/// The attack itself, through the opt-in: it is what the refusal prevents.
#[test]
fn in_a_directory_another_user_may_write_they_can_move_a_held_lock_file_away() {
    if !is_root() {
        eprintln!("SKIP: moving a held lock file as another user: needs root to run as nobody");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let lock = dir.join("x.lock");
    let mut first = Proc::spawn(
        leasehold()
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .arg("run")
            .arg(&lock)
            .args(["--", "sh", "-c", "echo locked; read _ || true"]),
    );
    assert_eq!(first.line(), "locked");
    let moved = run(Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "mv"])
        .arg(&lock)
        .arg(dir.join("elsewhere"))
        .stdin(Stdio::null()));
    assert_eq!(moved.code, 0, "{moved:?}");
    // With the opt-in, a second run starts beside the first: two holders at once.
    let out = run(leasehold()
        .env("LEASEHOLD_ALLOW_SHARED", "1")
        .args(["run", "--no-wait"])
        .arg(&lock)
        .args(["--", "echo", "second"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "second\n"), "{out:?}");
    // Without it, the directory is refused before any of this can happen.
    let out = run(leasehold()
        .args(["run", "--no-wait"])
        .arg(&lock)
        .args(["--", "echo", "second"]));
    assert_eq!(out.code, 2, "{out:?}");
    first.close_stdin();
    assert!(first.wait().success());
}

/// An overlayfs mount of `lower` + `upper` at `merged`, unmounted on drop.
struct Overlay(PathBuf);

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `mount -o` options of an overlay of `lower` + `upper` (with `work`).
fn overlay_options(lower: &Path, upper: &Path, work: &Path) -> std::ffi::OsString {
    let mut opts = std::ffi::OsString::from("lowerdir=");
    opts.push(lower);
    opts.push(",upperdir=");
    opts.push(upper);
    opts.push(",workdir=");
    opts.push(work);
    opts
}

/// A lock taken through an overlay's merged path does not exclude one taken
/// through its upper directory (shown with util-linux flock(1) first), so a lock file on
/// an overlay whose layer directories are reachable here is refused, like FUSE, unless
/// opted into — and nothing is created on the mount (neither the lock file nor missing
/// parents) before the refusal. The layer names hold a space, which mountinfo prints
/// escaped (`\040`): read unescaped, they are found.
#[test]
fn a_lock_file_on_overlayfs_is_refused_before_anything_is_created_unless_opted_in() {
    if !is_root() {
        eprintln!("SKIP: overlayfs test: needs root to mount an overlay");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let [lower, upper, work, merged] =
        ["low er", "up per", "work", "merged"].map(|d| tmp.path().join(d));
    for d in [&lower, &upper, &work, &merged] {
        std::fs::create_dir(d).unwrap();
    }
    let mounted = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o"])
        .arg(overlay_options(&lower, &upper, &work))
        .arg(&merged)
        .output();
    match mounted {
        Ok(o) if o.status.success() => {}
        other => {
            eprintln!("SKIP: overlayfs test: the kernel or container refused the mount: {other:?}");
            return;
        }
    }
    let _mount = Overlay(merged.clone());
    // The reason: held through the upper directory, the merged path is still free.
    let holder = FlockHolder::hold(&upper.join("held.lock"));
    let flocked = run(Command::new("flock")
        .arg("-n")
        .arg(merged.join("held.lock"))
        .arg("true"));
    assert_eq!(
        flocked.code, 0,
        "overlayfs paths exclude each other here? {flocked:?}"
    );
    let out = run(leasehold()
        .arg("run")
        .arg(merged.join("held.lock"))
        .args(["--", "echo", "ran"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stdout, "");
    assert_one_line_error(
        &out,
        "network, FUSE or overlay file system (overlay, an upper or lower directory of which is reachable here)",
    );
    assert_one_line_error(&out, "LEASEHOLD_ALLOW_NETWORK_FS=1");
    drop(holder);
    refused_before_anything_is_created(&merged, &upper);
    let out = run(leasehold()
        .env("LEASEHOLD_ALLOW_NETWORK_FS", "1")
        .arg("run")
        .arg(merged.join("new.lock"))
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
}

/// An overlay is refused only where its upper or lower
/// directory can be reached — a container's root overlay, whose layers only the host sees,
/// is not. In a private mount namespace (`unshare -m`) the test mounts an overlay, then
/// covers the upper directory's parent with a tmpfs: the lower is still reachable, so a lock
/// file on the overlay is refused; with the lower's parent covered too, nothing of the
/// layers is reachable and `run` runs its command on the overlay (exclusion through the
/// merged path, shown by a second `run` meanwhile).
#[test]
fn an_overlay_whose_layers_cannot_be_reached_here_is_accepted() {
    if !is_root() {
        eprintln!("SKIP: overlay in a private mount namespace: needs root to mount");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let [lo, up, merged] = ["lo", "up", "merged"].map(|d| t.join(d));
    let [lower, upper, work] = [lo.join("lower"), up.join("upper"), up.join("work")];
    for d in [&lower, &upper, &work, &merged] {
        std::fs::create_dir_all(d).unwrap();
    }
    // Each step prints one line the test reads; an exit of 90 means a mount was refused.
    let script = r#"
        mount -t overlay overlay -o "$1" "$2" || exit 90
        mount -t tmpfs none "$3" || exit 90
        "$5" run --no-wait "$2/a.lock" -- echo ran-a; echo "a=$?"
        mount -t tmpfs none "$4" || exit 90
        "$5" run --no-wait "$2/b.lock" -- sh -c '"$0" run --no-wait "$1" -- echo inner; echo "inner=$?"' "$5" "$2/b.lock"
        echo "b=$?"
    "#;
    let out = run(Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(overlay_options(&lower, &upper, &work))
        .args([&merged, &up, &lo])
        .arg(common::bin())
        .stdin(Stdio::null()));
    if out.code == 90 || out.code == 1 && out.stdout.is_empty() {
        eprintln!(
            "SKIP: overlay in a private mount namespace: the kernel or container refused the mounts: {out:?}"
        );
        return;
    }
    // Upper covered, lower reachable: refused, and nothing was run.
    assert!(out.stdout.starts_with("a=2\n"), "{out:?}");
    assert!(
        out.stderr
            .contains("(overlay, an upper or lower directory of which is reachable here)"),
        "{out:?}"
    );
    // Both covered: accepted; the lease holds through the merged path (75 for the second).
    assert_eq!(out.stdout, "a=2\ninner=75\nb=0\n", "{out:?}");
}

/// Refused lock paths under `mnt` (a new file, a file under missing parents; exclusive,
/// shared, `flock`): exit 2 (66 for `flock`) and nothing appears in `backing`.
fn refused_before_anything_is_created(mnt: &Path, backing: &Path) {
    for lock in [mnt.join("new.lock"), mnt.join("a/b/new.lock")] {
        for extra in [&[][..], &["--shared"]] {
            let out = run(leasehold()
                .arg("run")
                .args(extra)
                .arg(&lock)
                .args(["--", "echo", "ran"]));
            assert_eq!(out.code, 2, "{}: {out:?}", lock.display());
            assert_eq!(out.stdout, "");
        }
        let out = run(leasehold().arg("flock").arg(&lock).arg("true"));
        assert_ne!(out.code, 0, "{out:?}");
        let names: Vec<_> = std::fs::read_dir(backing)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != "held.lock")
            .collect();
        assert!(names.is_empty(), "{}: created {names:?}", lock.display());
    }
}

/// A FUSE refusal came after the lock file had been created on the mount; now it
/// comes first, for a missing lock file and for missing parents.
#[test]
fn a_lock_path_on_fuse_is_refused_before_anything_is_created_on_the_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(mount) = Bindfs::mount(tmp.path()) else {
        return;
    };
    refused_before_anything_is_created(&mount.mnt, &mount.backing);
}

/// `leasehold flock` honours `LEASEHOLD_ALLOW_NETWORK_FS=1` as `run` does: without it a
/// lock file on FUSE (bindfs) is refused (66, one line naming the opt-in), with it the lock
/// is taken there, exclusive and shared (it used `LeaseOptions::new()`, and a user had no
/// way past the refusal).
#[test]
fn flock_on_fuse_is_refused_unless_network_file_systems_are_opted_into() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(mount) = Bindfs::mount(tmp.path()) else {
        return;
    };
    let lock = mount.mnt.join("f.lock");
    for extra in [&[][..], &["-s"]] {
        let out = run(leasehold()
            .arg("flock")
            .args(extra)
            .arg(&lock)
            .args(["echo", "ran"]));
        assert_eq!((out.code, out.stdout.as_str()), (66, ""), "{out:?}");
        assert_one_line_error(&out, "network, FUSE or overlay file system (fuse)");
        assert_one_line_error(&out, "LEASEHOLD_ALLOW_NETWORK_FS=1");
        let out = run(leasehold()
            .env("LEASEHOLD_ALLOW_NETWORK_FS", "1")
            .arg("flock")
            .args(extra)
            .arg(&lock)
            .args(["echo", "ran"]));
        assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
    }
    // Opted in, the lock is held there: a second flock -n through the mount is refused.
    let out = run(leasehold()
        .env("LEASEHOLD_ALLOW_NETWORK_FS", "1")
        .arg("flock")
        .arg(&lock)
        .arg(common::bin())
        .args(["flock", "-n"])
        .arg(&lock)
        .args(["echo", "inner"]));
    assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{out:?}");
}

/// `leasehold doc update` honours `LEASEHOLD_ALLOW_NETWORK_FS=1` as `run` does: without it a
/// document on FUSE (bindfs) is refused (2, an unusable path: one line naming the opt-in) and nothing is
/// written; with it the update runs there.
#[test]
fn doc_update_on_fuse_is_refused_unless_network_file_systems_are_opted_into() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(mount) = Bindfs::mount(tmp.path()) else {
        return;
    };
    let doc = mount.mnt.join("settings.json");
    let update = || {
        let mut c = leasehold();
        c.args(["doc", "update", "--timeout", "5"]).arg(&doc).args([
            "--",
            "sh",
            "-c",
            "echo '{\"n\": 1}'",
        ]);
        c
    };
    let out = run(&mut update());
    assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{out:?}");
    assert_one_line_error(&out, "LEASEHOLD_ALLOW_NETWORK_FS=1");
    assert!(!mount.backing.join("settings.json").exists());
    let out = run(update().env("LEASEHOLD_ALLOW_NETWORK_FS", "1"));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(mount.backing.join("settings.json")).unwrap(),
        "{\"n\": 1}\n"
    );
}

/// `status --json` says how far the kernel's lock reaches on the lock path's mount, and the
/// refusal of a FUSE mount says it too: a bindfs mount is `host-only` (a lock there is this
/// host's), the temporary directory's file system `local`.
#[test]
fn status_and_the_refusal_say_how_far_the_mounts_locks_reach() {
    let tmp = tempfile::tempdir().unwrap();
    let local = run(leasehold()
        .args(["status", "--json"])
        .arg(tmp.path().join("no/such/x.lock")));
    assert_eq!(local.code, 0, "{local:?}");
    let doc: serde_json::Value = serde_json::from_str(&local.stdout).unwrap();
    assert_eq!(doc["mount"]["locks"], "local", "{doc}");
    let Some(mount) = Bindfs::mount(tmp.path()) else {
        return;
    };
    let lock = mount.mnt.join("x.lock");
    let out = run(leasehold().args(["status", "--json"]).arg(&lock));
    assert_eq!(out.code, 0, "{out:?}");
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["mount"]["locks"], "host-only", "{doc}");
    assert_eq!(doc["mount"]["fs"], "fuse", "{doc}");
    assert!(
        doc["mount"]["reason"].as_str().unwrap().contains("FUSE"),
        "{doc}"
    );
    let out = run(leasehold().arg("run").arg(&lock).args(["--", "true"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "its locks are host-only (FUSE (fuse)");
}
