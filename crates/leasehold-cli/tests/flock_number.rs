//! `leasehold flock NUMBER` on every POSIX system (contract v1.3): the lock is taken on the
//! shell's own open file description, so it outlives `leasehold` and excludes until the shell
//! unlocks (`-u`) or closes the descriptor — through `pidfd_getfd` on Linux and `/dev/fd/N` on
//! macOS and the BSDs (`cmd/flock.rs`, `inherited`). Observed with `leasehold flock -n` tries
//! only (no `/proc/locks`), so the same test runs wherever the verb exists.
#![cfg(unix)]

mod common;

use std::process::Command;

use common::bin;
use testkit::run;

/// Runs `script` under `sh` with `$LH` the binary under test and `$F` the lock file; returns
/// its stdout lines.
fn sh(script: &str, lock: &std::path::Path) -> Vec<String> {
    let out = run(Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("LH", bin())
        .env("F", lock));
    assert_eq!(out.code, 0, "{out:?}");
    out.stdout.lines().map(String::from).collect()
}

/// Write-only (`exec 9>f`, flock(1)'s own example), read-only (`exec 9<f`) and read-write
/// descriptors: each is locked on the shell's description, so a later try from another
/// description conflicts (exit 1) while the shell keeps it, and is free again after `-u` on
/// the same number — and after the shell closes it.
#[test]
fn number_locks_the_shells_description_in_every_access_mode() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("n.lock");
    std::fs::write(&lock, b"").unwrap();
    for redirect in ["9>\"$F\"", "9<\"$F\"", "9<>\"$F\""] {
        let script = format!(
            r#"exec {redirect}
"$LH" flock -n 9; echo "lock $?"
"$LH" flock -n "$F" true; echo "other while held $?"
"$LH" flock -n -s "$F" true; echo "other shared while held $?"
"$LH" flock -u 9; echo "unlock $?"
"$LH" flock -n "$F" true; echo "other after unlock $?"
"$LH" flock -n -s 9; echo "shared $?"
"$LH" flock -n -s "$F" true; echo "other shared while shared $?"
"$LH" flock -n "$F" true; echo "other exclusive while shared $?"
exec 9>&-
"$LH" flock -n "$F" true; echo "other after close $?""#
        );
        assert_eq!(
            sh(&script, &lock),
            [
                "lock 0",
                "other while held 1",
                "other shared while held 1",
                "unlock 0",
                "other after unlock 0",
                "shared 0",
                "other shared while shared 0",
                "other exclusive while shared 1",
                "other after close 0",
            ],
            "{redirect}"
        );
    }
}

/// A number that is not an open descriptor: one line naming it, exit 65 (flock(1)'s "cannot
/// lock").
#[test]
fn number_that_is_not_open_is_one_line_and_exit_65() {
    let out = run(Command::new(bin()).args(["flock", "-n", "47"]));
    assert_eq!(out.code, 65, "{out:?}");
    testkit::assert_one_line_error(&out, "descriptor 47");
}

/// A FIFO: two open file descriptions of it exclude each other, as with flock(1) (a FIFO
/// descriptor was refused, and the message named our internal duplicate,
/// "descriptor 8", for the user's 9).
#[test]
fn number_locks_a_fifo_as_flock_does() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert_eq!(run(Command::new("mkfifo").arg(&fifo)).code, 0);
    // `<>` opens a FIFO without waiting for the other end.
    let script = r#"exec 9<>"$F" 8<>"$F"
"$LH" flock -n 9; echo "lock $?"
"$LH" flock -n 8; echo "other while held $?"
"$LH" flock -u 9; echo "unlock $?"
"$LH" flock -n -s 8; echo "other after unlock $?"
"$LH" flock -n -s 9; echo "shared beside shared $?""#;
    assert_eq!(
        sh(script, &fifo),
        [
            "lock 0",
            "other while held 1",
            "unlock 0",
            "other after unlock 0",
            "shared beside shared 0",
        ]
    );
}

/// A pipe: its read end and its write end are two open file descriptions of one inode, so a
/// lock through one excludes the other — here as stdin (`flock 0`) and stdout (`flock 1`).
#[test]
fn number_locks_a_pipe_as_flock_does() {
    let (r, w) = std::io::pipe().unwrap();
    let lflock = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.arg("flock").args(args);
        c
    };
    let out = run(lflock(&["-n", "0"]).stdin(r.try_clone().unwrap()));
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:?}");
    let out = run(lflock(&["-n", "1"]).stdout(w.try_clone().unwrap()));
    assert_eq!(out.code, 1, "the other end is excluded: {out:?}");
    if cfg!(target_os = "linux") {
        // And util-linux flock(1) sees the same lock.
        let out = run(Command::new("flock")
            .args(["-n", "1"])
            .stdout(w.try_clone().unwrap()));
        assert_eq!(out.code, 1, "{out:?}");
    }
    let out = run(lflock(&["-u", "0"]).stdin(r.try_clone().unwrap()));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(lflock(&["-n", "1"]).stdout(w.try_clone().unwrap()));
    assert_eq!(out.code, 0, "free after -u: {out:?}");
}

/// A device: a character device node of our own (the same device as `/dev/null`, so the
/// lock is on an inode no other program uses), opened twice.
#[test]
fn number_locks_a_device_as_flock_does() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP: number_locks_a_device_as_flock_does: needs root to make a device node");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("null");
    let rdev = std::fs::metadata("/dev/null").unwrap().rdev() as rustix::fs::Dev;
    let made = run(Command::new("mknod")
        .arg(&dev)
        .arg("c")
        .arg(rustix::fs::major(rdev).to_string())
        .arg(rustix::fs::minor(rdev).to_string()));
    assert_eq!(made.code, 0, "{made:?}");
    let script = r#"exec 9>"$F" 8>"$F"
"$LH" flock -n 9; echo "lock $?"
"$LH" flock -n 8; echo "other while held $?"
exec 9>&-
"$LH" flock -n 8; echo "other after close $?""#;
    assert_eq!(
        sh(script, &dev),
        ["lock 0", "other while held 1", "other after close 0"]
    );
}
