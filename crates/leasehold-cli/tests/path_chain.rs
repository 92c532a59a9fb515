//! The way to LOCKFILE, against another user: every directory above it and every symlink on
//! the way is judged before `run` takes the lease, and a held `run` whose lock is moved away
//! from its path (a directory above it renamed by another user, with the opt-in for shared
//! state) stops COMMAND's tree instead of letting a second `run` run beside it.
//!
//! Other users are `nobody`, through `chown` and `setpriv`: the tests need root and print a
//! `SKIP:` line elsewhere. Synchronisation is by handshakes (COMMAND prints its pids) and by
//! waiting for processes to exit; the bounded waits only keep a regression from hanging.
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::leasehold;
use testkit::{Proc, assert_one_line_error, run};

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A temporary directory others may enter (its own chain is root's: `/tmp` and this).
fn tempdir() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    tmp
}

/// Whether `pid` is gone (or a zombie: it runs no more).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

#[test]
fn a_lock_below_a_directory_another_user_may_rename_in_is_refused_naming_it() {
    if !is_root() {
        eprintln!("SKIP: path-chain ownership test: needs root to chown a directory to nobody");
        return;
    }
    let tmp = tempdir();
    let x = tmp.path().join("X");
    std::fs::create_dir_all(x.join("a").join("b")).unwrap();
    chmod(&x, 0o777);
    std::os::unix::fs::chown(&x, Some(NOBODY), Some(NOBODY)).unwrap();
    let lock = x.join("a").join("b").join("lock");
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{out:?}");
    assert_one_line_error(
        &out,
        &format!("{}: a directory above {}", x.display(), lock.display()),
    );
    assert_one_line_error(&out, "belongs to another user (uid 65534");
    assert_one_line_error(&out, "LEASEHOLD_ALLOW_SHARED=1");
    assert!(!lock.exists(), "nothing created");
    // Ours but writable by others and not sticky: the same.
    std::os::unix::fs::chown(&x, Some(0), Some(0)).unwrap();
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "may be written by group and others (mode 0777)");
    // A relative LOCKFILE: the working directory's chain is judged too.
    let out = run(leasehold()
        .current_dir(x.join("a"))
        .arg("run")
        .arg("b/lock")
        .args(["--", "echo", "ran"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, &format!("{}: a directory above b/lock", x.display()));
    // The opt-in for shared set-ups accepts it.
    let out = run(leasehold()
        .env("LEASEHOLD_ALLOW_SHARED", "1")
        .arg("run")
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "ran\n"), "{out:?}");
}

#[test]
fn a_symlink_on_the_way_that_another_user_owns_is_refused_naming_it() {
    if !is_root() {
        eprintln!("SKIP: path-chain symlink test: needs root to own a symlink as nobody");
        return;
    }
    let tmp = tempdir();
    let sticky = tmp.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    chmod(&sticky, 0o1777);
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    // Made by nobody, as another user would in /tmp.
    let link = sticky.join("jobs");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "ln",
            "-s",
        ])
        .arg(&real)
        .arg(&link)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lock = link.join("job.lock");
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{out:?}");
    assert_one_line_error(
        &out,
        &format!("{}: a symbolic link on the way to", link.display()),
    );
    assert_one_line_error(&out, "belongs to another user (uid 65534");
    assert!(!real.join("job.lock").exists(), "nothing created");
}

/// With the opt-in, `run` holds a lock below a directory another user may write; that user
/// renames a directory above the lock file. COMMAND (which ignores SIGTERM, so SIGKILL is
/// needed) and the child it started are stopped, `run` exits 74 with one line, and only
/// then does a second `run` at the path have the lock to itself.
#[test]
fn a_held_run_whose_lock_is_moved_away_by_another_user_stops_command() {
    if !is_root() {
        eprintln!("SKIP: path-chain rename test: needs root to rename as nobody");
        return;
    }
    let tmp = tempdir();
    let x = tmp.path().join("X");
    std::fs::create_dir_all(x.join("a").join("b")).unwrap();
    chmod(&x, 0o777);
    std::os::unix::fs::chown(&x, Some(NOBODY), Some(NOBODY)).unwrap();
    let lock = x.join("a").join("b").join("lock");
    let mut first = Proc::spawn(
        leasehold()
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .arg("run")
            .arg(&lock)
            .args([
                "--",
                "sh",
                "-c",
                "trap '' TERM; sleep 1000 & echo $$ $!; wait",
            ])
            .stderr(Stdio::piped()),
    );
    let pids: Vec<u32> = first
        .line()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "mv",
        ])
        .arg(x.join("a"))
        .arg(x.join("moved"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let status = first
        .wait_timeout(Duration::from_secs(30))
        .expect("run must stop COMMAND once its lock was moved away");
    assert_eq!(status.code(), Some(74), "{status:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(first.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("leasehold: "), "{err}");
    assert!(err.contains(&lock.display().to_string()), "{err}");
    assert!(err.contains("COMMAND was stopped (status 137)"), "{err}");
    for pid in pids {
        assert!(dead(pid), "COMMAND's process {pid} still runs");
    }
    // A second run at the path now has it alone.
    std::fs::create_dir_all(x.join("a").join("b")).unwrap();
    let out = run(leasehold()
        .env("LEASEHOLD_ALLOW_SHARED", "1")
        .args(["run", "--no-wait"])
        .arg(&lock)
        .args(["--", "echo", "second"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "second\n"), "{out:?}");
}

/// `O_CREAT` on another user's symlink in a sticky directory fails with `EACCES` (the
/// kernel's protected-symlink rule), not `ELOOP`: the refusal still says what is there.
#[test]
fn another_users_symlink_in_a_sticky_directory_is_called_a_symlink() {
    if !is_root() {
        eprintln!("SKIP: sticky symlink test: needs root to own a symlink as nobody");
        return;
    }
    let tmp = tempdir();
    let sticky = tmp.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    chmod(&sticky, 0o1777);
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let link = sticky.join("demo.lock");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = run(leasehold()
        .arg("run")
        .arg(&link)
        .args(["--", "echo", "ran"]));
    assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{out:?}");
    assert_one_line_error(&out, &format!("{}: ", link.display()));
    assert_one_line_error(&out, "is a symbolic link");
    assert!(!out.stderr.contains("permission denied"), "{out:?}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    // `status` says the same.
    let out = run(leasehold().arg("status").arg(&link));
    assert_one_line_error(&out, "is a symbolic link");
}

/// The lock file itself replaced under a held `run` (renamed over, as a restore would): the
/// path leads to another file, which a newcomer would lock, so COMMAND is stopped the same
/// way. Needs no other user.
#[test]
fn a_held_run_whose_lock_file_is_replaced_stops_command() {
    let tmp = tempdir();
    let lock = tmp.path().join("r.lock");
    let mut first = Proc::spawn(
        leasehold()
            .arg("run")
            .arg(&lock)
            .args(["--", "sh", "-c", "echo $$; exec sleep 1000"])
            .stderr(Stdio::piped()),
    );
    let pid: u32 = first.line().parse().unwrap();
    let fresh = tmp.path().join("fresh");
    std::fs::write(&fresh, b"").unwrap();
    std::fs::rename(&fresh, &lock).unwrap();
    let status = first
        .wait_timeout(Duration::from_secs(30))
        .expect("run must stop COMMAND once its lock file was replaced");
    assert_eq!(status.code(), Some(74), "{status:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(first.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("COMMAND was stopped (status 143)"), "{err}");
    assert!(dead(pid));
}

/// Unmounts an overlay on drop.
struct Overlay(std::path::PathBuf);

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// An overlay's layer directories moved after mounting (the directory holding `upper/` and
/// `lower/` renamed): its record in mountinfo still names the old paths, which lead nowhere,
/// but the layers are still reachable under the new name, and a lock through `merged/` does
/// not exclude one through the renamed `upper/` (shown with flock(1)). So the two must not
/// both be had: the merged path is refused, since the file system the layers were recorded
/// on is reachable here.
#[test]
fn an_overlay_whose_layers_were_moved_after_mounting_is_still_refused() {
    if !is_root() {
        eprintln!("SKIP: moved overlay layers: needs root to mount an overlay");
        return;
    }
    let tmp = tempdir();
    let layers = tmp.path().join("layers");
    let [lower, upper, work] = ["lower", "upper", "work"].map(|d| layers.join(d));
    let merged = tmp.path().join("merged");
    for d in [&lower, &upper, &work, &merged] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut opts = std::ffi::OsString::from("lowerdir=");
    for (part, dir) in [("", &lower), (",upperdir=", &upper), (",workdir=", &work)] {
        opts.push(part);
        opts.push(dir);
    }
    let mounted = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o"])
        .arg(&opts)
        .arg(&merged)
        .output();
    match mounted {
        Ok(o) if o.status.success() => {}
        other => {
            eprintln!(
                "SKIP: moved overlay layers: the kernel or container refused the mount: {other:?}"
            );
            return;
        }
    }
    let _mount = Overlay(merged.clone());
    let moved = tmp.path().join("moved");
    std::fs::rename(&layers, &moved).unwrap();
    let through_upper = moved.join("upper").join("job.lock");
    let through_merged = merged.join("job.lock");
    // The reason: held through the renamed upper directory, the merged path is still free.
    let holder = testkit::FlockHolder::hold(&through_upper);
    let flocked = run(Command::new("flock")
        .arg("-n")
        .arg(&through_merged)
        .arg("true"));
    assert_eq!(
        flocked.code, 0,
        "overlay paths exclude each other here? {flocked:?}"
    );
    drop(holder);
    // `run` through the renamed upper directory holds; through the merged path it must not
    // get the lock as well.
    let mut first = Proc::spawn(leasehold().arg("run").arg(&through_upper).args([
        "--",
        "sh",
        "-c",
        "echo locked; read _x; echo done",
    ]));
    assert_eq!(first.line(), "locked");
    let out = run(leasehold()
        .args(["run", "--no-wait"])
        .arg(&through_merged)
        .args(["--", "echo", "ran"]));
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (2, ""),
        "both held at once: {out:?}"
    );
    assert_one_line_error(
        &out,
        "overlay, an upper or lower directory of which was moved",
    );
    assert_one_line_error(&out, "LEASEHOLD_ALLOW_NETWORK_FS=1");
    first.close_stdin();
    let status = first.wait();
    assert!(status.success(), "{status:?}");
}

fn registry(home: &Path) -> Command {
    let mut c = leasehold();
    c.arg("registry").arg("--home").arg(home);
    c
}

fn ask(p: &mut Proc, request: &serde_json::Value) -> serde_json::Value {
    p.send(&request.to_string());
    let line = p.line();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

/// The registry's home below a directory another user may rename in: refused at start,
/// naming that directory. With the opt-in, that user renames a directory above the home
/// while `serve` is the authority: its next answer of any kind is storage-failed "lease
/// lost" (the path now leads to a fresh, empty store, where a new authority may start), and
/// it never again answers from memory what it granted.
#[test]
fn a_registry_whose_home_another_user_can_move_is_refused_or_fails_closed_once_moved() {
    if !is_root() {
        eprintln!("SKIP: registry path-chain test: needs root to rename as nobody");
        return;
    }
    let tmp = tempdir();
    let x = tmp.path().join("X");
    let home = x.join("a").join("home");
    std::fs::create_dir_all(&home).unwrap();
    chmod(&x, 0o777);
    std::os::unix::fs::chown(&x, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = run(registry(&home).args(["list", "--json"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, &format!("{}: a directory above", x.display()));
    let [p, r] = ["p", "r"].map(|d| {
        let d = tmp.path().join(d);
        std::fs::create_dir(&d).unwrap();
        d.to_str().unwrap().to_string()
    });
    let mut serve = Proc::spawn(
        registry(&home)
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .arg("serve"),
    );
    let added = ask(
        &mut serve,
        &serde_json::json!({"op": "add", "primary": p, "root": r}),
    );
    assert_eq!(added["ok"], true, "{added}");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "mv",
        ])
        .arg(x.join("a"))
        .arg(x.join("moved"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stale = ask(&mut serve, &serde_json::json!({"op": "list"}));
    assert_eq!(stale["ok"], false, "{stale}");
    assert_eq!(stale["state"], "storage-failed", "{stale}");
    assert_eq!(stale["scope"], serde_json::json!({}), "{stale}");
    assert!(
        stale["message"].as_str().unwrap().contains("lease lost"),
        "{stale}"
    );
    serve.close_stdin();
    assert_eq!(serve.wait().code(), Some(0));
}
