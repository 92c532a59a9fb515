//! The whole way to a lock file is judged, and a held lease notices when it moves.
//!
//! Another user who may rename a directory anywhere above a lock file, or who owns a
//! symlink on the way and re-points it, moves the lock file away from its path while it is
//! held: a newcomer then locks a new file there. Acquisition refuses such a path (every
//! component from the root down, as OpenSSH's StrictModes); with the opt-in for shared
//! state, [`Lease::verify`] resolves the whole path again and reports the loss.
//!
//! Other users are `nobody` (through `chown` and `setpriv`), so those parts need root; they
//! print a `SKIP:` line elsewhere.
#![cfg(target_os = "linux")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use leasehold::{Error, Lease, LeaseOptions, LockDir, check_trusted};

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `argv` as `nobody` (root only) and asserts it succeeded.
fn as_nobody(argv: &[&std::ffi::OsStr]) {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(argv)
        .output()
        .expect("setpriv (util-linux)");
    assert!(out.status.success(), "{argv:?} as nobody: {out:?}");
}

/// A world-writable directory that is not sticky, two levels above the lock file's own: the
/// lock file is refused, naming that directory; the same directory sticky (and root's)
/// passes, as `/tmp` does.
#[test]
fn a_lock_below_a_directory_others_may_write_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x");
    let dir = x.join("a").join("b");
    std::fs::create_dir_all(&dir).unwrap();
    chmod(&x, 0o777);
    if is_root() {
        std::os::unix::fs::chown(&x, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let lock = dir.join("lock");
    let err = Lease::try_acquire(&lock).unwrap_err();
    match &err {
        Error::Untrusted { path, reason } => {
            assert_eq!(path, &x, "{err}");
            let why = match is_root() {
                true => "belongs to another user (uid 65534",
                false => "may be written by group and others (mode 0777)",
            };
            assert!(reason.contains(why), "{err}");
            assert!(
                reason.contains(&format!("a directory above {}", lock.display())),
                "{err}"
            );
        }
        other => panic!("want Untrusted, got {other:?}"),
    }
    assert!(
        err.to_string().contains("LEASEHOLD_ALLOW_SHARED=1"),
        "{err}"
    );
    assert!(!lock.exists(), "nothing created");
    // A store's directories below it are refused by the same rule.
    let err = check_trusted(&dir).unwrap_err();
    assert!(
        matches!(&err, Error::Untrusted { path, .. } if *path == x),
        "{err:?}"
    );
    // The opt-in for shared set-ups accepts it.
    drop(
        LeaseOptions::new()
            .allow_shared_state(true)
            .try_acquire(&lock)
            .expect("opted in"),
    );
    if is_root() {
        // Sticky and root's: nobody but an entry's owner may rename it.
        std::os::unix::fs::chown(&x, Some(0), Some(0)).unwrap();
        chmod(&x, 0o1777);
        drop(Lease::try_acquire(&lock).expect("sticky and root's, as /tmp"));
    } else {
        eprintln!("SKIP: sticky part: needs root to own a sticky directory as root");
    }
}

/// A symlink on the way that another user owns, in a sticky directory (where they may make
/// one): its owner can re-point it, so the lock is refused, naming the link; our own link to
/// the same place is followed and its target judged.
#[test]
fn a_symlink_on_the_way_that_another_user_owns_is_refused() {
    if !is_root() {
        eprintln!(
            "SKIP: a_symlink_on_the_way_that_another_user_owns_is_refused: needs root to own a symlink as nobody"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let sticky = tmp.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    chmod(&sticky, 0o1777);
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = sticky.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
    let lock = link.join("job.lock");
    let err = Lease::try_acquire(&lock).unwrap_err();
    match &err {
        Error::Untrusted { path, reason } => {
            assert_eq!(path, &link, "{err}");
            assert!(reason.contains("a symbolic link on the way to"), "{err}");
            assert!(
                reason.contains("belongs to another user (uid 65534"),
                "{err}"
            );
        }
        other => panic!("want Untrusted, got {other:?}"),
    }
    assert!(!real.join("job.lock").exists(), "nothing created");
    // Ours: followed, and the target's chain judged (fit here).
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    drop(Lease::try_acquire(&lock).expect("our own symlink to a fit directory"));
    // Ours, but leading into a directory others may write: refused, naming the target.
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o777);
    let ours = sticky.join("ours");
    std::os::unix::fs::symlink(&open, &ours).unwrap();
    let err = Lease::try_acquire(ours.join("job.lock")).unwrap_err();
    assert!(
        matches!(&err, Error::Untrusted { path, .. } if *path == ours),
        "the directory itself, named as written: {err:?}"
    );
    let err = Lease::try_acquire(ours.join("sub").join("job.lock")).unwrap_err();
    assert!(
        matches!(&err, Error::Untrusted { path, .. } if *path == open),
        "an ancestor, named as reached: {err:?}"
    );
}

/// With the opt-in, another user renames a directory above a held lease's lock file: the
/// lease's `verify` says it is lost (the path resolves to nothing, then to a newcomer's
/// file), and so does re-pointing a symlink on the way.
#[test]
fn verify_reports_a_lease_moved_away_by_an_ancestor_rename_or_a_repointed_symlink() {
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let x = tmp.path().join("x");
    std::fs::create_dir_all(x.join("a").join("b")).unwrap();
    chmod(&x, 0o777);
    let lock = x.join("a").join("b").join("lock");
    let opts = LeaseOptions::new().allow_shared_state(true);
    let held = opts.try_acquire(&lock).unwrap();
    held.verify().expect("in place");
    let (from, to) = (x.join("a"), x.join("moved"));
    if is_root() {
        // The other user's rename (they may write x).
        as_nobody(&["mv".as_ref(), from.as_os_str(), to.as_os_str()]);
    } else {
        eprintln!("SKIP: rename as another user: needs root; renaming as ourselves");
        std::fs::rename(&from, &to).unwrap();
    }
    assert!(
        matches!(held.verify(), Err(Error::LeaseLost { path }) if path == lock),
        "{:?}",
        held.verify()
    );
    // A newcomer locks a new file at the path: the moved lease must not think it still holds.
    let newcomer = opts.try_acquire(&lock).expect("a new file at the path");
    assert!(matches!(held.verify(), Err(Error::LeaseLost { .. })));
    newcomer.verify().unwrap();
    drop((held, newcomer));

    // A symlink on the way, re-pointed (replaced by a link elsewhere) while held.
    let one = tmp.path().join("one");
    let two = tmp.path().join("two");
    std::fs::create_dir(&one).unwrap();
    std::fs::create_dir(&two).unwrap();
    let link = x.join("link");
    std::os::unix::fs::symlink(&one, &link).unwrap();
    let lock = link.join("lock");
    let held = opts.try_acquire(&lock).unwrap();
    held.verify().unwrap();
    std::fs::write(two.join("lock"), b"").unwrap();
    let swap = x.join("link.new");
    std::os::unix::fs::symlink(&two, &swap).unwrap();
    std::fs::rename(&swap, &link).unwrap();
    assert!(
        matches!(held.verify(), Err(Error::LeaseLost { .. })),
        "{:?}",
        held.verify()
    );
}

/// A lease taken in a directory handle ([`LockDir`]) keeps its handle working after a
/// directory above it is renamed, while newcomers resolve the path to a new directory: its
/// `verify` walks the handle's chain and reports the loss.
#[test]
fn verify_of_a_lease_in_a_directory_handle_reports_a_renamed_ancestor() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir_all(root.join("a").join("b")).unwrap();
    let dir = LockDir::open(&root)
        .unwrap()
        .child("a", false)
        .unwrap()
        .child("b", false)
        .unwrap();
    let held = LeaseOptions::new().try_acquire_at(&dir, "lock").unwrap();
    held.verify().expect("in place");
    std::fs::rename(root.join("a"), root.join("moved")).unwrap();
    // A newcomer takes the same lock at the path.
    std::fs::create_dir_all(root.join("a").join("b")).unwrap();
    let newcomer = Lease::try_acquire(root.join("a").join("b").join("lock")).expect("a new file");
    assert!(
        matches!(held.verify(), Err(Error::LeaseLost { .. })),
        "{:?}",
        held.verify()
    );
    newcomer.verify().unwrap();
}

/// A way judged while a directory on it did not exist yet is not remembered as fit: in a
/// sticky directory another user may create that directory afterwards, writable by all.
#[test]
fn a_chain_judged_before_another_user_created_part_of_it_is_judged_again() {
    if !is_root() {
        eprintln!(
            "SKIP: a_chain_judged_before_another_user_created_part_of_it_is_judged_again: needs root to create as nobody"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    chmod(tmp.path(), 0o755);
    let sticky = tmp.path().join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    chmod(&sticky, 0o1777);
    let theirs = sticky.join("later");
    let doc = theirs.join("sub").join("doc.json");
    check_trusted(&doc).expect("nothing there yet");
    as_nobody(&[
        "mkdir".as_ref(),
        "-m".as_ref(),
        "0777".as_ref(),
        theirs.as_os_str(),
    ]);
    std::fs::create_dir(theirs.join("sub")).unwrap();
    let err = check_trusted(&doc).unwrap_err();
    assert!(
        matches!(&err, Error::Untrusted { path, .. } if *path == theirs),
        "{err:?}"
    );
    let lock = theirs.join("sub").join("x.lock");
    let err = Lease::try_acquire(&lock).unwrap_err();
    assert!(
        matches!(&err, Error::Untrusted { path, .. } if *path == theirs),
        "{err:?}"
    );
}

/// A `LockDir`'s directory is judged at every acquisition until it is found fit, and then
/// remembered by the handle, as a fit path is (what could make it unfit is a chmod by its
/// owner, this user or root); a handle opened afresh judges it again.
#[test]
fn a_lock_dir_is_judged_until_found_fit_and_then_remembered_by_its_handle() {
    let untrusted = |r: leasehold::Result<Lease>| matches!(r, Err(Error::Untrusted { .. }));
    let tmp = tempfile::tempdir().unwrap();
    let ns = tmp.path().join("ns");
    std::fs::create_dir(&ns).unwrap();
    chmod(&ns, 0o777);
    let dir = LockDir::open(&ns).unwrap();
    let options = LeaseOptions::new();
    assert!(untrusted(options.try_acquire_at(&dir, "k.lock")));
    assert!(untrusted(options.try_acquire_at(&dir, "k.lock")));
    chmod(&ns, 0o700);
    drop(options.try_acquire_at(&dir, "k.lock").unwrap());
    chmod(&ns, 0o777);
    drop(options.try_acquire_at(&dir, "k.lock").unwrap());
    let fresh = LockDir::open(&ns).unwrap();
    assert!(untrusted(options.try_acquire_at(&fresh, "k.lock")));
    chmod(&ns, 0o700);
}
