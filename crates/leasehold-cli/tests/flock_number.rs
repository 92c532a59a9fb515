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
