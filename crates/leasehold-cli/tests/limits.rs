//! Resource limits through the CLI: an overlong lock path is unusable input (exit 2, one
//! line); a store on a really read-only file system is storage-failed with the reason, the
//! document untouched, and `refresh` recovers once the file system is writable again.
#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::leasehold;
use serde_json::{Value, json};
use testkit::{Proc, assert_one_line_error, run};

#[test]
fn an_overlong_lock_path_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let long_name = dir.path().join("n".repeat(300));
    let mut long_path = PathBuf::from(dir.path());
    while long_path.as_os_str().len() <= 4200 {
        long_path.push("d".repeat(200));
    }
    long_path.push("x.lock");
    for p in [&long_name, &long_path] {
        let out = run(leasehold().arg("run").arg(p).args(["--", "true"]));
        assert_eq!(out.code, 2, "{out:?}");
        assert_one_line_error(&out, "too long");
    }
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    /// Mounts a fresh tmpfs at `dir`; `None` where this process may not mount (not root).
    fn tmpfs(dir: &Path) -> Option<Mount> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mount(dir.to_path_buf()))
    }
    fn remount(&self, mode: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(st.success(), "remount {mode}");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn ask(p: &mut Proc, request: Value) -> Value {
    p.send(&request.to_string());
    serde_json::from_str(&p.line()).unwrap()
}

#[test]
fn a_read_only_file_system_is_storage_failed_with_the_reason_and_refresh_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(mount) = Mount::tmpfs(&tmp.path().join("mnt")) else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root); the seam test covers EROFS");
        return;
    };
    let dirs: Vec<String> = ["p", "a", "b"]
        .iter()
        .map(|n| {
            let d = tmp.path().join(n);
            std::fs::create_dir_all(&d).unwrap();
            d.canonicalize().unwrap().to_str().unwrap().to_string()
        })
        .collect();
    let (p, a, b) = (&dirs[0], &dirs[1], &dirs[2]);
    let home = mount.0.join("home");
    let document = home.join("storages/multi_root_workspace.json");
    let mut server = Proc::spawn(
        leasehold()
            .arg("registry")
            .arg("--home")
            .arg(&home)
            .arg("serve"),
    );
    let ok = ask(&mut server, json!({"op": "add", "primary": p, "root": a}));
    assert_eq!(ok["ok"], true, "{ok}");
    let before = std::fs::read(&document).unwrap();

    mount.remount("ro");
    let failed = ask(&mut server, json!({"op": "add", "primary": p, "root": b}));
    assert_eq!(failed["ok"], false, "{failed}");
    assert_eq!(failed["state"], "storage-failed", "{failed}");
    assert_eq!(failed["error"], "storage-failed", "{failed}");
    assert_eq!(failed["scope"], json!({}), "{failed}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains("Read-only file system"), "{message}");
    assert!(message.contains(document.to_str().unwrap()), "{message}");
    assert_eq!(std::fs::read(&document).unwrap(), before);

    mount.remount("rw");
    let back = ask(&mut server, json!({"op": "refresh"}));
    assert_eq!(back["ok"], true, "{back}");
    assert_eq!(back["scope"], json!({ p.clone(): [a.clone()] }), "{back}");
    let ok = ask(&mut server, json!({"op": "add", "primary": p, "root": b}));
    assert_eq!(
        ok["scope"],
        json!({ p.clone(): [a.clone(), b.clone()] }),
        "{ok}"
    );
    server.close_stdin();
    assert_eq!(server.wait().code(), Some(0));
}
