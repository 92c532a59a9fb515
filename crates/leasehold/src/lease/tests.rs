//! The primitive's tests on POSIX: real files, real processes, the kernel's own lock table.

/// The pids `holders()` and contention errors name for a lock held by `pids`: Linux reads
/// them from /proc/locks; the portable build (`--cfg leasehold_portable`, the macOS/BSD
/// path) cannot tell and names none.
fn revealed(pids: &[u32]) -> &[u32] {
    if cfg!(leasehold_portable) { &[] } else { pids }
}

/// Asserts that nothing holds `path`: `holders()` says so where the OS tells (Linux);
/// elsewhere (the portable build) a try to take it must succeed.
fn assert_free(path: &Path) {
    if cfg!(leasehold_portable) {
        drop(Lease::try_acquire(path).expect("free: a try takes it"));
    } else {
        assert_eq!(holders(path).unwrap(), Holders::Free);
    }
}

use super::*;
use crate::budget::CancelToken;
use crate::error::Error;
use crate::kind::FileKind;
use posix::BEFORE_LOCK;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::mpsc;
use std::time::Duration;
use std::time::Instant;

/// Makes a FIFO without spawning a process where the platform allows: a child forked
/// from this multi-threaded test process shares every open lock file until it execs, so
/// other tests' released leases would look held for that moment (flock belongs to the
/// open file description). rustix has no `mknodat` on macOS; there mkfifo(1) is used.
pub(crate) fn make_fifo(path: &Path) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    assert!(
        std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap()
            .success()
    );
}

fn set_hook(f: impl FnMut() + 'static) {
    BEFORE_LOCK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
}

fn clear_hook() {
    BEFORE_LOCK.with(|h| *h.borrow_mut() = None);
}

fn replace(path: &Path) {
    std::fs::remove_file(path).unwrap();
    std::fs::File::create(path).unwrap();
}

#[test]
fn file_replaced_between_open_and_lock_is_detected_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.lock");
    std::fs::File::create(&path).unwrap();
    let original = std::fs::metadata(&path).unwrap().ino();
    let p = path.clone();
    let mut fired = false;
    set_hook(move || {
        if !fired {
            fired = true;
            replace(&p);
        }
    });
    let lease = Lease::try_acquire(&path).unwrap();
    clear_hook();
    let now = std::fs::metadata(&path).unwrap().ino();
    assert_ne!(now, original, "the hook replaced the file");
    assert_eq!(
        lease.file_id().unwrap().ino,
        now,
        "lease must be on the new file"
    );
    lease.verify().unwrap();
    // The lease really excludes whoever opens the path now.
    assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
}

#[test]
fn a_file_that_keeps_being_replaced_gives_up_after_three_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("churn.lock");
    let p = path.clone();
    set_hook(move || replace(&p));
    let err = Lease::try_acquire(&path).unwrap_err();
    clear_hook();
    assert!(
        matches!(
            err,
            Error::Unstable {
                attempts: MAX_REOPENS,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn same_process_double_acquisition_contends_and_names_this_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("twice.lock");
    let first = Lease::try_acquire(&path).unwrap();
    let err = Lease::try_acquire(&path).unwrap_err();
    match &err {
        Error::Contended { holders, .. } => {
            assert_eq!(holders.pids(), revealed(&[std::process::id()]))
        }
        other => panic!("expected contention, got {other:?}"),
    }
    drop(first);
    drop(Lease::try_acquire(&path).unwrap());
}

#[test]
fn contention_errors_look_holders_up_only_when_asked() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: contention_errors_look_holders_up_only_when_asked: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lazy.lock");
    let holder = Lease::try_acquire(&path).unwrap();
    let err = Lease::try_acquire(&path).unwrap_err();
    let info = err.holders().expect("contention names its holders").clone();
    // Returning the error read nothing: /proc/locks is costly and stalls other lockers.
    assert_eq!(format!("{info:?}"), "HolderInfo(not looked up)");
    drop(holder);
    // Asked after the release, the answer is the truth at that moment (the portable
    // build cannot tell: Unknown).
    let truth = if cfg!(leasehold_portable) {
        Holders::Unknown
    } else {
        Holders::Free
    };
    assert_eq!(info.get(), &truth);
    let again = Lease::try_acquire(&path).unwrap();
    let err = Lease::try_acquire(&path).unwrap_err();
    // In-process contention names this process, not "another process (pid <ours>)".
    let msg = err.to_string();
    assert!(
        msg.contains("held by this process (another lease of it);"),
        "{msg}"
    );
    assert!(!msg.contains("another process"), "{msg}");
    drop(again);
}

#[test]
fn state_other_users_could_have_prepared_is_refused_unless_shared_state_is_allowed() {
    use std::fs::Permissions;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.lock");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, Permissions::from_mode(0o620)).unwrap();
    let err = Lease::try_acquire(&path).unwrap_err();
    assert!(
        matches!(&err, Error::Untrusted { path: p, reason } if *p == path
            && reason == "may be written by its group (mode 0620)"),
        "{err:?}"
    );
    assert!(err.is_unusable_path());
    assert_eq!(
        std::fs::metadata(&path).unwrap().mode() & 0o7777,
        0o620,
        "untouched"
    );
    drop(
        LeaseOptions::new()
            .allow_shared_state(true)
            .try_acquire(&path)
            .expect("opted in"),
    );
    // Directories: world-writable is refused, unless sticky and root-owned (as /tmp).
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, Permissions::from_mode(0o777)).unwrap();
    let err = check_trusted(&open).unwrap_err();
    assert!(
        err.to_string()
            .contains("may be written by group and others"),
        "{err}"
    );
    std::fs::set_permissions(&open, Permissions::from_mode(0o1777)).unwrap();
    let sticky = check_trusted(&open);
    if rustix::process::geteuid().is_root() {
        sticky.expect("a sticky directory owned by root");
    } else {
        assert!(sticky.is_err(), "sticky but not root's");
    }
    check_trusted(dir.path().join("missing")).expect("nothing there");
    // A symlink's own mode (0777) is not judged.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink("/nonexistent", &link).unwrap();
    check_trusted(&link).expect("a symlink's mode means nothing");
}

#[test]
fn release_is_idempotent_and_drop_releases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rel.lock");
    let mut lease = Lease::try_acquire(&path).unwrap();
    lease.release();
    lease.release();
    assert!(!lease.is_held());
    assert!(matches!(lease.verify(), Err(Error::Released { .. })));
    let again = Lease::try_acquire(&path).unwrap();
    drop(again);
    drop(Lease::try_acquire(&path).unwrap());
    assert!(path.exists(), "a lock file is never removed");
}

#[test]
fn verify_reports_unlinked_and_replaced_lock_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.lock");
    let lease = Lease::try_acquire(&path).unwrap();
    lease.verify().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(lease.verify(), Err(Error::LeaseLost { .. })));
    std::fs::File::create(&path).unwrap();
    assert!(matches!(lease.verify(), Err(Error::LeaseLost { .. })));
}

#[test]
fn creates_file_0600_and_parents_0700_and_preserves_existing_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/new.lock");
    drop(Lease::try_acquire(&path).unwrap());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    assert_eq!(mode(&dir.path().join("a/b")), 0o700);

    let existing = dir.path().join("existing.lock");
    std::fs::write(&existing, b"keep me").unwrap();
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).unwrap();
    drop(Lease::try_acquire(&existing).unwrap());
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    assert_eq!(mode(&existing), 0o644);
}

#[test]
fn hostile_paths_are_refused_without_following_or_changing_anything() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = dir.path().join("link.lock");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let dangling = dir.path().join("dangling.lock");
    std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
    let fifo = dir.path().join("fifo.lock");
    make_fifo(&fifo);
    let sock = dir.path().join("sock.lock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let subdir = dir.path().join("dir.lock");
    std::fs::create_dir(&subdir).unwrap();
    let cases: [(&Path, FileKind); 6] = [
        (&link, FileKind::Symlink),
        (&dangling, FileKind::Symlink),
        (&fifo, FileKind::Fifo),
        (&sock, FileKind::Socket),
        (Path::new("/dev/null"), FileKind::CharDevice),
        (&subdir, FileKind::Directory),
    ];
    for (path, want) in cases {
        for budget in [Budget::no_wait(), Budget::timeout(Duration::from_secs(5))] {
            match LeaseOptions::new().acquire(path, &budget) {
                Err(Error::NotRegularFile { kind, path: p }) => {
                    assert_eq!(kind, want, "{}", path.display());
                    assert_eq!(p, path);
                }
                other => panic!("{}: expected refusal, got {other:?}", path.display()),
            }
        }
        assert!(matches!(holders(path), Err(Error::NotRegularFile { .. })));
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(
        std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert!(
        !dir.path().join("nothing").exists(),
        "dangling link not followed"
    );
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(matches!(
        Lease::try_acquire(file.join("under.lock")),
        Err(Error::ParentNotDirectory { .. })
    ));
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn holders_names_this_process_and_free_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.lock");
    assert_eq!(holders(&path).unwrap(), Holders::Free);
    assert_eq!(
        holders(dir.path().join("no/such/parent")).unwrap(),
        Holders::Free
    );
    assert!(!path.exists(), "holders() creates nothing");
    let lease = Lease::try_acquire(&path).unwrap();
    let expected = if cfg!(leasehold_portable) {
        Holders::Unknown
    } else {
        Holders::Held {
            pids: vec![std::process::id()],
        }
    };
    assert_eq!(holders(&path).unwrap(), expected);
    // Looking does not disturb: the lease is still held and still excludes.
    lease.verify().unwrap();
    assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
    drop(lease);
    assert_free(&path);
}

#[test]
fn a_waiter_takes_over_when_the_holder_releases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.lock");
    let holder = Lease::try_acquire(&path).unwrap();
    let (tx, rx) = mpsc::channel();
    let p = path.clone();
    let waiter = std::thread::spawn(move || {
        tx.send(()).unwrap();
        Lease::acquire(&p, &Budget::timeout(Duration::from_secs(30)))
    });
    rx.recv().unwrap();
    drop(holder);
    let lease = waiter.join().unwrap().expect("waiter gets the lease");
    lease.verify().unwrap();
}

#[test]
fn cancellation_from_another_thread_ends_the_wait_and_leaves_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.lock");
    let mut holder = Lease::try_acquire(&path).unwrap();
    let token = CancelToken::new();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let p = path.clone();
    let waiter = std::thread::spawn(move || Lease::acquire(&p, &budget));
    token.cancel();
    let res = waiter.join().unwrap();
    assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");
    holder.release();
    // Nothing of the abandoned waiter holds the lease: it is free at once.
    assert_free(&path);
    drop(Lease::try_acquire(&path).unwrap());
}

#[test]
fn timeout_gives_up_reports_the_holder_and_leaves_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.lock");
    let mut holder = Lease::try_acquire(&path).unwrap();
    let started = Instant::now();
    let err = Lease::acquire(&path, &Budget::timeout(Duration::from_millis(150))).unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(150));
    match &err {
        Error::TimedOut { holders, .. } => {
            assert_eq!(holders.pids(), revealed(&[std::process::id()]))
        }
        other => panic!("expected timeout, got {other:?}"),
    }
    holder.release();
    assert_free(&path);
    drop(Lease::try_acquire(&path).unwrap());
}

#[test]
fn waiting_for_a_missing_file_that_must_not_be_created_fails_without_creating() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.lock");
    let err = LeaseOptions::new()
        .create(false)
        .try_acquire(&path)
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(!path.exists());
}

#[test]
fn lease_handle_reacquires_excludes_and_follows_a_replaced_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warm.lock");
    let mut handle = LeaseHandle::open(&path).unwrap();
    for _ in 0..100 {
        let lease = handle.try_lock().unwrap();
        lease.verify().unwrap();
        assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
        lease.release();
        drop(Lease::try_acquire(&path).unwrap());
    }
    {
        let cold = Lease::try_acquire(&path).unwrap();
        assert!(handle.try_lock().unwrap_err().is_contended());
        drop(cold);
    }
    replace(&path);
    let lease = handle.try_lock().unwrap();
    lease
        .verify()
        .expect("the handle followed the path to the new file");
    assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
    drop(lease);
    assert_free(&path);
}

#[test]
fn lock_dir_follows_a_symlinked_root_but_never_a_symlinked_child() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir_all(real.join("sub")).unwrap();
    std::fs::write(real.join("file"), b"x").unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("alias")).unwrap();
    std::os::unix::fs::symlink(real.join("sub"), real.join("linked")).unwrap();
    let root = LockDir::open(dir.path().join("alias")).expect("a configured root may be a link");
    root.child("sub", false).expect("a real child directory");
    match root.child("linked", true) {
        Err(Error::NotDirectory { kind, path }) => {
            assert_eq!(kind, FileKind::Symlink);
            assert!(path.ends_with("linked"));
        }
        other => panic!("a symlinked child must be refused, got {other:?}"),
    }
    assert!(matches!(
        root.child("file", true),
        Err(Error::NotDirectory {
            kind: FileKind::Regular,
            ..
        })
    ));
    assert_eq!(std::fs::read(real.join("file")).unwrap(), b"x");
    assert!(
        std::fs::symlink_metadata(real.join("linked"))
            .unwrap()
            .is_symlink()
    );
}

#[test]
fn lock_dir_leases_stay_locked_but_fail_verify_once_the_directory_is_renamed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let ld = LockDir::create(&root).unwrap();
    let lease = LeaseOptions::new().try_acquire_at(&ld, "k.lock").unwrap();
    lease.verify().expect("in place");
    let moved = dir.path().join("moved");
    std::fs::rename(&root, &moved).unwrap();
    // Newcomers resolving `root` reach something else: the lease no longer excludes them.
    assert!(
        matches!(lease.verify(), Err(Error::LeaseLost { ref path }) if *path == root),
        "{:?}",
        lease.verify()
    );
    // The lock itself stays held on the file that moved.
    let err = LeaseOptions::new()
        .try_acquire(moved.join("k.lock"))
        .unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    assert!(LeaseOptions::new().try_acquire_at(&ld, "../x").is_err());
    assert!(LeaseOptions::new().try_acquire_at(&ld, "a/b").is_err());
}
