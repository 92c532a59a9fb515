//! crashfs through a real FUSE mount: what the kernel passes through, what a cut keeps, and
//! that `flock` excludes between processes on it.
//!
//! Skips with a printed `SKIP: crashfs: <why>` line where FUSE is unavailable (no
//! `/dev/fuse`, or neither root nor `fusermount3`). Every mount is a [`Mounted`], which
//! unmounts on drop, so a failing assertion never leaves a mount behind.

#![cfg(target_os = "linux")]

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use crashfs::{CutPolicy, Faults, Mounted};

fn skip() -> bool {
    match crashfs::unavailable() {
        Some(why) => {
            println!("SKIP: crashfs: {why}");
            true
        }
        None => false,
    }
}

fn dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let backing = work.path().join("backing");
    let mnt = work.path().join("mnt");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    (work, backing, mnt)
}

fn fsync_path(p: &Path) {
    File::open(p).unwrap().sync_all().unwrap();
}

#[test]
fn a_cut_keeps_exactly_what_was_synced_file_and_directory() {
    if skip() {
        return;
    }
    let (_work, backing, mnt) = dirs();
    fs::write(backing.join("old.txt"), b"old\n").unwrap();
    let m = Mounted::mount(&backing, &mnt, Faults::default()).unwrap();
    assert_eq!(fs::read(mnt.join("old.txt")).unwrap(), b"old\n");

    // Data and name synced: survives.
    fs::write(mnt.join("both.txt"), b"both").unwrap();
    fsync_path(&mnt.join("both.txt"));
    // Only the data synced (its directory never is): the name is lost.
    fs::create_dir(mnt.join("never-synced")).unwrap();
    fs::write(mnt.join("never-synced/data-only.txt"), b"data").unwrap();
    fsync_path(&mnt.join("never-synced/data-only.txt"));
    // A directory with a synced file, its own name synced.
    fs::create_dir(mnt.join("sub")).unwrap();
    fs::write(mnt.join("sub/inner.txt"), b"inner").unwrap();
    fsync_path(&mnt.join("sub/inner.txt"));
    fsync_path(&mnt.join("sub"));
    fsync_path(&mnt);
    // After the directory sync: a name whose data was never synced is an empty file...
    fs::write(mnt.join("name-only.txt"), b"lost bytes").unwrap();
    fsync_path(&mnt);
    // ...and later, unsynced changes to a synced file are gone.
    let mut f = OpenOptions::new()
        .append(true)
        .open(mnt.join("both.txt"))
        .unwrap();
    f.write_all(b" and more").unwrap();
    drop(f);
    fs::remove_file(mnt.join("old.txt")).unwrap();

    assert_eq!(fs::read(mnt.join("both.txt")).unwrap(), b"both and more");
    let stats = m.handle().stats();
    assert!(stats.file_syncs >= 3 && stats.dir_syncs >= 3, "{stats:?}");
    let report = m.handle().cut(CutPolicy::DropAll, 0).unwrap();
    assert!(report.dropped >= 3, "{report:?}");
    // Powered off: everything fails until the remount.
    assert!(fs::read(mnt.join("both.txt")).is_err());
    m.unmount().unwrap();

    let _m = Mounted::mount(&backing, &mnt, Faults::default()).unwrap();
    assert_eq!(fs::read(mnt.join("both.txt")).unwrap(), b"both");
    assert!(
        mnt.join("never-synced").is_dir(),
        "its name was synced with the root"
    );
    assert!(!mnt.join("never-synced/data-only.txt").exists());
    assert_eq!(fs::read(mnt.join("sub/inner.txt")).unwrap(), b"inner");
    assert_eq!(fs::read(mnt.join("name-only.txt")).unwrap(), b"");
    assert_eq!(
        fs::read(mnt.join("old.txt")).unwrap(),
        b"old\n",
        "unlink was not synced"
    );
    // The backing directory is the durable state too.
    assert_eq!(fs::read(backing.join("both.txt")).unwrap(), b"both");
}

#[test]
fn ignoring_directory_fsync_loses_a_durably_written_new_file() {
    if skip() {
        return;
    }
    let (_work, backing, mnt) = dirs();
    let m = Mounted::mount(
        &backing,
        &mnt,
        Faults {
            ignore_dir_fsync: true,
            ..Faults::default()
        },
    )
    .unwrap();
    fs::write(mnt.join("doc"), b"acknowledged").unwrap();
    fsync_path(&mnt.join("doc"));
    fsync_path(&mnt);
    m.handle().cut(CutPolicy::DropAll, 0).unwrap();
    m.unmount().unwrap();
    let _m = Mounted::mount(&backing, &mnt, Faults::default()).unwrap();
    assert!(!mnt.join("doc").exists());
}

#[test]
fn flock_on_the_mount_excludes_between_processes() {
    if skip() {
        return;
    }
    if Command::new("flock").arg("-V").output().is_err() {
        println!("SKIP: crashfs: flock(1) from util-linux is not installed");
        return;
    }
    let (_work, backing, mnt) = dirs();
    let _m = Mounted::mount(&backing, &mnt, Faults::default()).unwrap();
    let lock = mnt.join("lock");
    // The holder says "held" once it has the lock, then waits for its stdin to close.
    let mut holder = Command::new("flock")
        .arg(&lock)
        .args(["-c", "echo held; cat >/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "held");
    let contender = Command::new("flock")
        .args(["-n"])
        .arg(&lock)
        .arg("true")
        .status()
        .unwrap();
    assert_eq!(contender.code(), Some(1), "a second process got the lock");
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let after = Command::new("flock")
        .args(["-n"])
        .arg(&lock)
        .arg("true")
        .status()
        .unwrap();
    assert!(after.success(), "the lock was not released with its holder");
}
