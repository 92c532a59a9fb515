//! `crashfs mount --control SOCKET` and `crashfs cut`: the command-line face of a cut.
//!
//! Synchronised on the mount's "mounted at" line (printed once the control socket listens)
//! and on the mount process's exit after the cut. Skips with `SKIP: crashfs: <why>` where
//! FUSE is unavailable; a guard kills the mount process and detaches the mount if a step
//! fails.

#![cfg(target_os = "linux")]

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

struct Guard {
    child: Child,
    mnt: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        crashfs::fs::lazy_unmount(&self.mnt);
    }
}

#[test]
fn mount_then_cut_through_the_control_socket_keeps_only_what_was_synced() {
    if let Some(why) = crashfs::unavailable() {
        println!("SKIP: crashfs: {why}");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let backing = work.path().join("backing");
    let mnt = work.path().join("mnt");
    let socket = work.path().join("control");
    fs::create_dir(&backing).unwrap();
    fs::create_dir(&mnt).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_crashfs"))
        .arg("mount")
        .arg(&backing)
        .arg(&mnt)
        .arg("--control")
        .arg(&socket)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut guard = Guard {
        child,
        mnt: mnt.clone(),
    };
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("mounted at"), "{line}");

    fs::write(mnt.join("synced"), b"kept").unwrap();
    File::open(mnt.join("synced")).unwrap().sync_all().unwrap();
    File::open(&mnt).unwrap().sync_all().unwrap();
    fs::write(mnt.join("unsynced"), b"dropped").unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_crashfs"))
        .args(["cut", "--policy", "drop", "--control"])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok kept=0 dropped="));
    // The cut unmounts: the mount process ends by itself.
    assert!(guard.child.wait().unwrap().success());
    assert_eq!(fs::read(backing.join("synced")).unwrap(), b"kept");
    assert!(!backing.join("unsynced").exists());
    assert!(!mnt.join("synced").exists(), "still mounted");
}
