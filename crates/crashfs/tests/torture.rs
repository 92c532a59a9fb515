//! The power-loss torture, short form, and its self-check: with a sync that lies (the
//! directory fsync, or the file fsync, acknowledged and dropped — exactly what leaving the
//! call out of the code under test would do) the torture must report lost or torn writes,
//! so the harness can never pass silently.
//!
//! Runs the real `crashfs` binary, which drives the real `leasehold` binary: the one beside
//! it in the target directory (built by `cargo test --workspace`), else one built here into
//! `target/crashfs-leasehold/`. Skips with a printed `SKIP: crashfs: <why>` line where FUSE
//! is unavailable.

#![cfg(target_os = "linux")]

use std::path::PathBuf;
use std::process::{Command, Output};

fn leasehold() -> PathBuf {
    let beside = PathBuf::from(env!("CARGO_BIN_EXE_crashfs")).with_file_name("leasehold");
    if beside.is_file() {
        return beside;
    }
    // Not built by this invocation (`cargo test -p crashfs`): build it into a target
    // directory of its own (the outer cargo holds the lock on ours).
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/crashfs-leasehold");
    let status = Command::new(env!("CARGO"))
        .args(["build", "-q", "-p", "leasehold-cli", "--target-dir"])
        .arg(&target)
        .status()
        .expect("run cargo build -p leasehold-cli");
    assert!(status.success(), "cargo build -p leasehold-cli failed");
    target.join("debug/leasehold")
}

fn torture(args: &[&str]) -> Option<Output> {
    if let Some(why) = crashfs::unavailable() {
        println!("SKIP: crashfs: {why}");
        return None;
    }
    // Traced: the steps (mount, round, cut, unmount, check) with their times go to stderr,
    // which a failing test prints, so that a harness error can be placed.
    let out = Command::new(env!("CARGO_BIN_EXE_crashfs"))
        .env("CRASHFS_TRACE", "1")
        .arg("torture")
        .arg("--leasehold")
        .arg(leasehold())
        .args(args)
        .output()
        .expect("run crashfs torture");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    Some(out)
}

fn figure(out: &Output, prefix: &str) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{text}"));
    line[prefix.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {line:?}"))
}

#[test]
fn the_stores_lose_nothing_acknowledged_across_power_cuts() {
    let Some(out) = torture(&["--cuts", "4", "--seconds", "60", "--seed", "7"]) else {
        return;
    };
    assert!(out.status.success(), "violations found");
    assert_eq!(figure(&out, "power cuts: "), 4);
    assert!(figure(&out, "acknowledged operations checked: ") > 0);
    assert_eq!(figure(&out, "lost: "), 0);
    // The shared `Document` was updated (by `leasehold doc update`) and checked too.
    let text = String::from_utf8_lossy(&out.stdout);
    let updates = text
        .split("document updates ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse::<u64>().ok());
    assert!(
        updates.is_some_and(|n| n > 0),
        "no document update checked:\n{text}"
    );
}

#[test]
fn with_directory_fsync_ignored_the_torture_finds_lost_writes() {
    let Some(out) = torture(&[
        "--cuts",
        "3",
        "--seconds",
        "60",
        "--policy",
        "drop",
        "--ignore-dir-fsync",
    ]) else {
        return;
    };
    assert_eq!(
        out.status.code(),
        Some(1),
        "the self-check passed: the harness is blind"
    );
    assert!(figure(&out, "lost: ") > 0);
}

#[test]
fn with_file_fsync_ignored_the_torture_finds_lost_or_torn_writes() {
    let Some(out) = torture(&[
        "--cuts",
        "3",
        "--seconds",
        "60",
        "--policy",
        "drop",
        "--ignore-file-fsync",
    ]) else {
        return;
    };
    assert_eq!(
        out.status.code(),
        Some(1),
        "the self-check passed: the harness is blind"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lost = figure(&out, "lost: ");
    let torn = text
        .lines()
        .find_map(|l| l.split("; torn: ").nth(1))
        .and_then(|s| s.split(';').next())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(lost + torn > 0, "neither lost nor torn:\n{text}");
}
