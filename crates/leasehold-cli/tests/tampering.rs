//! `leasehold registry serve` whose lock file is unlinked or replaced while it is the
//! authority: it fails closed before its next write (storage-failed "lease lost", document
//! unchanged), while a newcomer that locks the new file becomes the one writer.
#![cfg(unix)]

mod common;

use std::path::Path;

use common::leasehold;
use serde_json::{Value, json};
use testkit::Proc;

fn ask(p: &mut Proc, request: Value) -> Value {
    p.send(&request.to_string());
    let line = p.line();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

fn serve(home: &Path) -> Proc {
    Proc::spawn(
        leasehold()
            .arg("registry")
            .arg("--home")
            .arg(home)
            .arg("serve"),
    )
}

fn canonical_dir(base: &Path, name: &str) -> String {
    let p = base.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p.canonicalize().unwrap().to_str().unwrap().to_string()
}

#[test]
fn serve_fails_closed_before_its_next_write_when_its_lock_file_is_unlinked_or_replaced() {
    for replace in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let lock = home.join("storages/multi_root_workspace.lock");
        let document = home.join("storages/multi_root_workspace.json");
        let (p, a, b) = (
            canonical_dir(tmp.path(), "p"),
            canonical_dir(tmp.path(), "a"),
            canonical_dir(tmp.path(), "b"),
        );
        let mut first = serve(&home);
        let ok = ask(&mut first, json!({"op": "add", "primary": p, "root": a}));
        assert_eq!(ok["ok"], true, "{ok}");
        let before = std::fs::read(&document).unwrap();

        if replace {
            let impostor = home.join("storages/impostor");
            std::fs::write(&impostor, b"").unwrap();
            std::fs::rename(&impostor, &lock).unwrap();
        } else {
            std::fs::remove_file(&lock).unwrap();
        }
        let refused = ask(&mut first, json!({"op": "add", "primary": p, "root": b}));
        assert_eq!(refused["ok"], false, "{refused}");
        assert_eq!(refused["state"], "storage-failed", "{refused}");
        assert_eq!(refused["error"], "storage-failed", "{refused}");
        assert_eq!(refused["scope"], json!({}), "fail closed: {refused}");
        assert!(
            refused["message"].as_str().unwrap().contains("lease lost"),
            "{refused}"
        );
        assert_eq!(
            std::fs::read(&document).unwrap(),
            before,
            "replace={replace}"
        );

        // The path is free to a newcomer, which becomes the single writer; the first stays
        // refused for everything, list included.
        let mut second = serve(&home);
        let listed = ask(&mut second, json!({"op": "list"}));
        assert_eq!(listed["state"], "active", "{listed}");
        assert_eq!(
            listed["scope"],
            json!({ p.clone(): [a.clone()] }),
            "{listed}"
        );
        let still = ask(&mut first, json!({"op": "list"}));
        assert_eq!(still["state"], "storage-failed", "{still}");
        assert_eq!(still["scope"], json!({}), "{still}");
        for mut p in [first, second] {
            p.close_stdin();
            assert_eq!(p.wait().code(), Some(0));
        }
    }
}
