//! The multi-root workspace registry through its public API (in-process; the CLI's
//! black-box tests drive real processes).
#![cfg(unix)] // uses POSIX symlinks

use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use leasehold::patterns::authority::State;
use leasehold::patterns::durable::{Step, replace_file_observed};
use leasehold::{Budget, Classify, Lease};
use leasehold_stores::document::{DocumentFiles, RealFiles};
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths, Scope};

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn paths(&self) -> RegistryPaths {
        RegistryPaths::in_home(&self.path().join("home"), None)
    }
    fn registry(&self) -> Registry {
        Registry::new(self.paths())
    }
    fn active(&self) -> Registry {
        let r = self.registry();
        r.acquire(&Budget::no_wait()).unwrap();
        r
    }
    /// A fresh directory, canonicalized.
    fn dir(&self, name: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p.canonicalize().unwrap()
    }
    fn document(&self) -> PathBuf {
        self.paths().document
    }
}

fn scope_of(pairs: &[(&Path, &[&Path])]) -> Scope {
    pairs
        .iter()
        .map(|(p, rs)| {
            (
                p.to_path_buf(),
                rs.iter().map(|r| r.to_path_buf()).collect(),
            )
        })
        .collect()
}

#[test]
fn add_canonicalizes_deduplicates_and_persists() {
    let home = Home::new();
    let (p, r) = (home.dir("p"), home.dir("r"));
    symlink(&r, home.path().join("link")).unwrap();
    let reg = home.active();
    reg.add(&p, &r).unwrap();
    reg.add(&home.path().join("p/../p"), &home.path().join("link"))
        .unwrap();
    assert_eq!(*reg.scope(), scope_of(&[(&p, &[&r])]));
    reg.teardown();
    assert!(home.document().is_file());
    assert!(
        home.paths().lease.is_file(),
        "default lease beside the document"
    );
    let again = home.active();
    assert_eq!(*again.scope(), scope_of(&[(&p, &[&r])]));
}

#[test]
fn add_refuses_what_is_not_an_existing_directory() {
    let home = Home::new();
    let p = home.dir("p");
    std::fs::write(home.path().join("file"), b"x").unwrap();
    let reg = home.active();
    for bad in [home.path().join("missing"), home.path().join("file")] {
        let err = reg.add(&p, &bad).unwrap_err();
        assert_eq!(err.code(), "invalid-root", "{err}");
        let err = reg.add(&bad, &p).unwrap_err();
        assert!(matches!(err, RegistryError::InvalidRoot { .. }), "{err}");
        assert_eq!(err.class(), leasehold::ErrorClass::Usage);
    }
    assert!(reg.scope().is_empty());
    assert!(!home.document().exists(), "nothing written");
}

#[test]
fn remove_matches_deleted_directories_is_idempotent_and_drops_empty_primaries() {
    let home = Home::new();
    let (p, r1, r2) = (home.dir("p"), home.dir("r1"), home.dir("r2"));
    let reg = home.active();
    reg.add(&p, &r1).unwrap();
    reg.add(&p, &r2).unwrap();
    std::fs::remove_dir(&r1).unwrap();
    // A deleted root given in a non-normal form still matches.
    reg.remove(&p, &home.path().join("r2/../r1/.")).unwrap();
    assert_eq!(*reg.scope(), scope_of(&[(&p, &[&r2])]));
    reg.remove(&p, &r1).unwrap(); // absent: still fine
    std::fs::remove_dir(&r2).unwrap();
    std::fs::remove_dir(&p).unwrap();
    reg.remove(&p, &r2).unwrap();
    assert!(reg.scope().is_empty(), "primary without roots dropped");
    reg.remove(&p, &r2).unwrap();
    reg.teardown();
    assert!(home.active().scope().is_empty(), "durably");
}

#[test]
fn unknown_fields_survive_a_rewrite() {
    let home = Home::new();
    let (p, r, r2) = (home.dir("p"), home.dir("r"), home.dir("r2"));
    std::fs::create_dir_all(home.document().parent().unwrap()).unwrap();
    let doc = serde_json::json!({
        "version": 1,
        "future": {"x": [1, 2]},
        "workspaces": {p.to_str().unwrap(): {"roots": [r.to_str().unwrap()], "label": "mine"}}
    });
    std::fs::write(home.document(), doc.to_string()).unwrap();
    let reg = home.active();
    reg.add(&p, &r2).unwrap();
    let back: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.document()).unwrap()).unwrap();
    assert_eq!(back["future"], serde_json::json!({"x": [1, 2]}));
    let entry = &back["workspaces"][p.to_str().unwrap()];
    assert_eq!(entry["label"], "mine");
    assert_eq!(
        entry["roots"],
        serde_json::json!([r.to_str().unwrap(), r2.to_str().unwrap()])
    );
}

#[test]
fn a_corrupt_document_fails_storage_and_is_left_byte_for_byte() {
    let home = Home::new();
    let (p, r) = (home.dir("p"), home.dir("r"));
    std::fs::create_dir_all(home.document().parent().unwrap()).unwrap();
    let corrupt = b"{\"workspaces\": {\"/a\": {\"roots\": [\"/b\"]}}, oops";
    std::fs::write(home.document(), corrupt).unwrap();
    let reg = home.registry();
    let err = reg.acquire(&Budget::no_wait()).unwrap_err();
    assert_eq!(err.code(), "storage-failed");
    assert_eq!(err.class(), leasehold::ErrorClass::Failure);
    assert!(
        err.to_string().contains("multi_root_workspace.json"),
        "{err}"
    );
    assert!(matches!(reg.state(), State::StorageFailed { .. }));
    assert!(reg.scope().is_empty());
    assert_eq!(reg.add(&p, &r).unwrap_err().code(), "storage-failed");
    assert_eq!(reg.remove(&p, &r).unwrap_err().code(), "storage-failed");
    assert_eq!(std::fs::read(home.document()).unwrap(), corrupt);
    // It keeps the lease while failed...
    let other = home.registry();
    assert_eq!(
        other.acquire(&Budget::no_wait()).unwrap_err().code(),
        "registry-contended"
    );
    // ...and a refresh after repair becomes active.
    std::fs::write(home.document(), b"{}").unwrap();
    reg.refresh().unwrap();
    assert_eq!(reg.state(), State::Active);
}

#[test]
fn grants_only_inside_primary_or_granted_roots_and_only_while_active() {
    let home = Home::new();
    let (p, r, outside) = (home.dir("p"), home.dir("r"), home.dir("outside"));
    std::fs::create_dir_all(r.join("sub")).unwrap();
    symlink(&outside, p.join("escape")).unwrap();
    symlink(outside.join("nothing-yet"), r.join("dangling")).unwrap();
    let reg = home.registry();
    assert!(!reg.grants(&p, &r), "not active: nothing granted");
    reg.acquire(&Budget::no_wait()).unwrap();
    reg.add(&p, &r).unwrap();
    assert!(reg.grants(&p, &p.join("new-file")));
    assert!(reg.grants(&p, &r.join("sub")));
    assert!(reg.grants(&p, &r.join("sub/not-yet")));
    assert!(!reg.grants(&p, &outside));
    assert!(!reg.grants(&p, &r.join("../outside")), "`..` cannot escape");
    assert!(
        !reg.grants(&p, &p.join("escape")),
        "a symlink cannot escape"
    );
    assert!(!reg.grants(&p, &p.join("escape/file")));
    assert!(
        !reg.grants(&p, &r.join("dangling")),
        "nor a dangling symlink"
    );
    assert!(!reg.grants(&r, &p), "grants are per primary");

    let other = home.registry();
    assert!(other.acquire(&Budget::no_wait()).is_err());
    assert!(!other.grants(&p, &r), "a contended process grants nothing");
    reg.teardown();
    assert!(!reg.grants(&p, &r), "torn down: nothing granted");
    other.refresh().unwrap();
    assert!(
        other.grants(&p, &r.join("sub")),
        "the successor sees the durable write"
    );
}

#[test]
fn a_configured_lease_path_is_used_instead_of_the_default() {
    let home = Home::new();
    let lease = home.path().join("elsewhere/registry.lock");
    let paths = RegistryPaths::in_home(&home.path().join("home"), Some(lease.clone()));
    let reg = Registry::new(paths);
    reg.acquire(&Budget::no_wait()).unwrap();
    assert!(Lease::try_acquire(&lease).unwrap_err().is_contended());
    assert!(!home.paths().lease.exists());
}

/// Files whose `replace` runs the real atomic rewrite, calling `hook` after every step.
type Hook = Box<dyn FnMut(Step, &Path, &Path) -> io::Result<()> + Send>;
struct Observed(Mutex<Hook>);

impl DocumentFiles for Observed {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        RealFiles.read(path)
    }
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut hook = self.0.lock().unwrap();
        replace_file_observed(path, bytes, &mut |step, tmp| hook(step, path, tmp))
    }
}

/// Copies what is in the document's directory right now: what a crash here would leave.
fn snapshot(doc: &Path, into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    for e in std::fs::read_dir(doc.parent().unwrap()).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().ends_with(".lock") {
            continue;
        }
        std::fs::copy(e.path(), into.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_crash_at_any_step_of_the_rewrite_leaves_the_old_or_the_new_document() {
    let home = Home::new();
    let (p, r1, r2) = (home.dir("p"), home.dir("r1"), home.dir("r2"));
    home.active().add(&p, &r1).unwrap(); // the old document
    let snaps = home.path().join("snaps");
    let taken: Arc<Mutex<Vec<(Step, PathBuf)>>> = Arc::default();
    let hook: Hook = {
        let (snaps, taken) = (snaps.clone(), taken.clone());
        Box::new(move |step, doc, _tmp| {
            let at = snaps.join(format!("{step:?}/storages"));
            snapshot(doc, &at);
            taken.lock().unwrap().push((step, at));
            Ok(())
        })
    };
    let reg = Registry::with_files(home.paths(), Arc::new(Observed(Mutex::new(hook))), None);
    reg.acquire(&Budget::no_wait()).unwrap();
    reg.add(&p, &r2).unwrap();

    let old = scope_of(&[(&p, &[&r1])]);
    let new = scope_of(&[(&p, &[&r1, &r2])]);
    let taken = taken.lock().unwrap().clone();
    assert_eq!(taken.len(), Step::ALL.len());
    for (step, at) in taken {
        // Recover from the crash state as a successor would: open it with a fresh registry.
        let crashed = Registry::new(RegistryPaths::in_home(at.parent().unwrap(), None));
        crashed
            .acquire(&Budget::no_wait())
            .unwrap_or_else(|e| panic!("{step:?}: torn document: {e}"));
        let seen = (*crashed.scope()).clone();
        let expected = if matches!(step, Step::Renamed | Step::DirSynced) {
            &new
        } else {
            &old
        };
        assert_eq!(&seen, expected, "after {step:?}");
        // And the recovered store takes further writes (leftover temporaries do not hurt).
        crashed.add(&p, &r2).unwrap();
    }
}

#[test]
fn a_failed_write_is_not_acknowledged_and_fails_closed() {
    let home = Home::new();
    let (p, r1, r2) = (home.dir("p"), home.dir("r1"), home.dir("r2"));
    home.active().add(&p, &r1).unwrap();
    let before = std::fs::read(home.document()).unwrap();
    for fail_at in [Step::Created, Step::Written, Step::Synced] {
        let hook: Hook = Box::new(move |step, _, _| {
            if step == fail_at {
                Err(io::Error::other("injected fault"))
            } else {
                Ok(())
            }
        });
        let reg = Registry::with_files(home.paths(), Arc::new(Observed(Mutex::new(hook))), None);
        reg.acquire(&Budget::no_wait()).unwrap();
        let err = reg.add(&p, &r2).unwrap_err();
        assert_eq!(err.code(), "storage-failed", "{fail_at:?}");
        assert!(err.to_string().contains("injected fault"), "{err}");
        assert!(reg.scope().is_empty(), "{fail_at:?}: scope withdrawn");
        assert!(!reg.grants(&p, &r1));
        assert_eq!(
            std::fs::read(home.document()).unwrap(),
            before,
            "{fail_at:?}"
        );
    }
}

#[test]
fn opening_the_store_under_the_lease_removes_killed_rewrites_temporaries_and_follows_none() {
    let home = Home::new();
    let (p, r) = (home.dir("p"), home.dir("r"));
    let reg = home.active();
    reg.add(&p, &r).unwrap();
    reg.teardown();
    let doc = home.document();
    let storages = doc.parent().unwrap();
    let left = storages.join(".multi_root_workspace.json.tmp.4242.0");
    std::fs::write(&left, b"{\"torn\":").unwrap();
    let victim = home.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let link = storages.join(".multi_root_workspace.json.tmp.4242.1");
    symlink(&victim, &link).unwrap();
    // Not opened (the lease is held elsewhere): nothing is touched.
    let holder = Lease::try_acquire(&home.paths().lease).unwrap();
    assert!(home.registry().acquire(&Budget::no_wait()).is_err());
    assert!(left.exists());
    drop(holder);
    let reg = home.active();
    assert!(!left.exists(), "the temporary was left behind");
    assert!(
        link.symlink_metadata().is_ok(),
        "a symlink is not a temporary"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert_eq!(reg.scope().get(&p).map(|v| v.len()), Some(1));
}

/// Real files, except that the directory holding the home (`area`) is moved away — renamed
/// to `moved`, a fresh one with an empty `home/storages/` put in its place, as another user
/// who may rename it can — at a chosen moment of the first write: before the new version is
/// staged, or right after the store's last check of the lease, before the rename.
struct MovedDuringTheWrite {
    area: PathBuf,
    before_staging: bool,
    done: Mutex<bool>,
}

impl MovedDuringTheWrite {
    fn move_once(&self) {
        let mut done = self.done.lock().unwrap();
        if !std::mem::replace(&mut *done, true) {
            std::fs::rename(&self.area, self.area.with_file_name("moved")).unwrap();
            std::fs::create_dir_all(self.area.join("home/storages")).unwrap();
        }
    }
}

impl DocumentFiles for MovedDuringTheWrite {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        RealFiles.read(path)
    }
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.replace_checked(path, bytes, &mut || Ok(()))
    }
    fn replace_checked(
        &self,
        path: &Path,
        bytes: &[u8],
        check: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<()> {
        if self.before_staging {
            self.move_once();
            return RealFiles.replace_checked(path, bytes, check);
        }
        RealFiles.replace_checked(path, bytes, &mut || {
            let checked = check();
            self.move_once();
            checked
        })
    }
}

/// The registry verifies its lease once the new document is staged, not only before the
/// write: a directory above it moved away after the authority's check (here, before the
/// temporary file is made, or after the last check and before the rename) fails the write,
/// unacknowledged, instead of putting the document in the fresh directory now at the path,
/// where the path's next holder writes. The moved store keeps what it had.
#[test]
fn a_directory_moved_above_the_registry_during_a_write_fails_the_write() {
    for before_staging in [true, false] {
        let home = Home::new();
        let area = home.path().join("area");
        let (p, r) = (home.dir("p"), home.dir("r"));
        let paths = RegistryPaths::in_home(&area.join("home"), None);
        let files = Arc::new(MovedDuringTheWrite {
            area: area.clone(),
            before_staging,
            done: Mutex::new(false),
        });
        let registry = Registry::with_files(paths.clone(), files, None);
        registry.acquire(&Budget::no_wait()).unwrap();
        let err = registry
            .add(&p, &r)
            .expect_err("a write whose store moved away is not acknowledged");
        assert!(
            matches!(err, RegistryError::StorageFailed { .. }),
            "before staging {before_staging}: {err:?}"
        );
        assert!(
            !paths.document.exists(),
            "before staging {before_staging}: the write landed in the fresh directory at the path"
        );
        assert_eq!(
            registry.state(),
            State::StorageFailed {
                reason: "lease lost".into()
            }
        );
        registry.teardown();
    }
}
