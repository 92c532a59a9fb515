//! Windows leases (named kernel semaphores), run under Wine in CI (`.ci/run`).
//!
//! Multi-process tests re-execute this test binary as a holder: the child runs only the
//! [`child_holder`] test, takes the lease named by an environment variable, prints
//! [`READY`] and holds until its stdin closes. The parent synchronises on that line and on
//! closing the pipe — never on sleeps.
//!
//! Aliases: a different *case* of a directory always reaches it (Wine emulates Windows'
//! case-insensitive lookup, and resolves the real case like Windows does). Directory symbolic
//! links are tried with `symlink_dir`; where none can be made, that part is skipped and says so
//! on stderr: Windows without the privilege or developer mode refuses, and **Wine 8 (Debian
//! 12's, used by CI) reports success but creates nothing**; its `mklink /J` fails too, so
//! junctions are not exercised under Wine either. Both resolve through the same
//! `GetFinalPathNameByHandleW` call (`std::fs::canonicalize`) on real Windows.
#![cfg(windows)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use leasehold::patterns::keyed::{KeyError, KeyedLeases};
use leasehold::{Budget, CancelToken, Error, Holders, Lease, LeaseOptions, LockDir, holders};

/// The keyed-lease namespace directory these tests use (the library takes it from its
/// caller; the result store names its own).
const NAMESPACE: &str = ".test-locks-v1";

/// Names the lock path the child should hold.
const CHILD_ENV: &str = "LEASEHOLD_TEST_CHILD_LOCK";
/// The line the child prints once it holds the lease.
const READY: &str = "leasehold-child: holding";

/// Not a test of its own: the body of the holder child (a no-op in a normal run).
#[test]
fn child_holder() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let lease = Lease::try_acquire(&path).expect("child takes the lease");
    let mut out = std::io::stdout();
    writeln!(out, "{READY}").unwrap();
    out.flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    drop(lease);
}

/// A child process holding the lease on a path until [`Holder::release`] closes its stdin.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Kept open and drained: the child's harness reports its result on stdout afterwards.
    stdout: BufReader<ChildStdout>,
}

impl Holder {
    fn spawn(path: &Path) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_holder", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn holder child");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while stdout.read_line(&mut line).expect("child stdout") > 0 {
            // libtest prints "test child_holder ... " on the same line first.
            if line.trim_end().ends_with(READY) {
                return Holder {
                    child,
                    stdin,
                    stdout,
                };
            }
            line.clear();
        }
        panic!(
            "holder child exited before taking the lease: {:?}",
            child.wait()
        );
    }

    /// Closes the child's stdin: it releases the lease and exits.
    fn release(mut self) {
        drop(self.stdin.take());
        let _ = std::io::copy(&mut self.stdout, &mut std::io::sink());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "holder child failed: {status:?}");
    }

    /// Kills the child (`TerminateProcess`) without letting it release anything.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

fn generous() -> Budget {
    Budget::timeout(Duration::from_secs(30))
}

#[test]
fn contention_and_release_between_two_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.lock");
    let holder = Holder::spawn(&path);

    let err = Lease::try_acquire(&path).unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    assert_eq!(
        err.holders().map(|h| h.get()),
        Some(&Holders::Held { pids: vec![] })
    );
    let err = Lease::acquire(&path, &Budget::timeout(Duration::from_millis(100))).unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    assert!(!path.exists(), "the lock file is never created");

    // A waiter that is (almost always) already polling when the holder releases.
    let (started_tx, started_rx) = mpsc::channel();
    let p = path.clone();
    let waiter = std::thread::spawn(move || {
        started_tx.send(()).unwrap();
        Lease::acquire(&p, &generous())
    });
    started_rx.recv().unwrap();
    holder.release();
    let lease = waiter.join().unwrap().expect("the waiter takes over");
    lease.verify().unwrap();

    // And the other way round: while the parent holds it, a child cannot have it.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holder", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        !child.wait().unwrap().success(),
        "the child must not get a held lease"
    );
    drop(lease);
    Holder::spawn(&path).release();
}

#[test]
fn killing_the_holder_releases_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.lock");
    let holder = Holder::spawn(&path);
    assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
    holder.kill();
    // The kernel destroys the object with the dead holder's last handle ("promptly").
    let lease = Lease::acquire(&path, &generous()).expect("free after the holder died");
    assert!(lease.is_held());
}

#[test]
fn one_directory_through_two_spellings_is_one_lease() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("Data");
    std::fs::create_dir(&real).unwrap();
    let upper = dir.path().join("DATA").join("STORE.LOCK");
    let lease = Lease::try_acquire(real.join("store.lock")).unwrap();
    let err = Lease::try_acquire(&upper).unwrap_err();
    assert!(err.is_contended(), "case alias: {err:?}");

    // Another process sees the same object through the other spelling.
    drop(lease);
    let holder = Holder::spawn(&upper);
    assert!(
        Lease::try_acquire(real.join("Store.Lock"))
            .unwrap_err()
            .is_contended()
    );
    holder.release();

    let lease = Lease::try_acquire(real.join("store.lock")).unwrap();
    let alias = dir.path().join("alias");
    match std::os::windows::fs::symlink_dir(&real, &alias)
        .and_then(|()| std::fs::symlink_metadata(&alias).map(drop))
    {
        Ok(()) => {
            let err = Lease::try_acquire(alias.join("store.lock")).unwrap_err();
            assert!(err.is_contended(), "symlink alias: {err:?}");
        }
        Err(e) => eprintln!("skipped the symbolic-link alias: cannot create one here: {e}"),
    }
    // A different directory or name is a different lease.
    std::fs::create_dir(dir.path().join("other")).unwrap();
    drop(Lease::try_acquire(dir.path().join("other").join("store.lock")).unwrap());
    drop(Lease::try_acquire(real.join("store2.lock")).unwrap());
    drop(lease);
}

#[test]
fn object_names_follow_the_real_path_and_fold_case() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("Mixed");
    std::fs::create_dir(&real).unwrap();
    let a = Lease::try_acquire(real.join("a.lock")).unwrap();
    let name = a.object_name().to_string();
    assert!(name.starts_with("Local\\leasehold-"), "{name}");
    assert_eq!(name.len(), "Local\\leasehold-".len() + 64);
    drop(a);
    let dotted = dir
        .path()
        .join("mixed")
        .join("..")
        .join("MIXED")
        .join("A.LOCK");
    assert_eq!(Lease::try_acquire(&dotted).unwrap().object_name(), name);
}

/// A named semaphore has no shared mode: shared leases are refused, typed, taking nothing.
#[test]
fn shared_leases_are_refused_with_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.lock");
    match leasehold::SharedLease::try_acquire(&path) {
        Err(Error::SharedUnsupported { path: p }) => assert_eq!(p, path),
        other => panic!("expected SharedUnsupported, got {other:?}"),
    }
    let err = leasehold::SharedLease::acquire(&path, &generous()).unwrap_err();
    assert!(err.is_unusable_path(), "{err:?}");
    // Nothing was taken: an exclusive lease is free.
    drop(Lease::try_acquire(&path).unwrap());
}

#[test]
fn same_process_leases_exclude_and_release_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("twice.lock");
    let mut first = Lease::try_acquire(&path).unwrap();
    assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
    first.verify().unwrap();
    first.release();
    first.release();
    assert!(!first.is_held());
    assert!(matches!(first.verify(), Err(Error::Released { .. })));
    let _again = Lease::try_acquire(&path).unwrap();
}

#[test]
fn cancellation_and_deadline_end_a_wait_promptly_and_leave_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wait.lock");
    let mut holder = Lease::try_acquire(&path).unwrap();
    let token = CancelToken::new();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let p = path.clone();
    let waiter = std::thread::spawn(move || Lease::acquire(&p, &budget));
    token.cancel();
    let res = waiter.join().unwrap();
    assert!(matches!(res, Err(Error::Cancelled { .. })), "{res:?}");

    let started = Instant::now();
    let err = Lease::acquire(&path, &Budget::timeout(Duration::from_millis(150))).unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    holder.release();
    let _lease = Lease::try_acquire(&path).expect("the abandoned waiters hold nothing");
}

#[test]
fn nothing_is_created_or_pinned_and_holders_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("a").join("b");
    let path = parent.join("p.lock");
    let lease = Lease::try_acquire(&path).unwrap();
    assert!(parent.is_dir(), "missing parents are created");
    assert!(!path.exists(), "the lock file is not");
    assert_eq!(holders(&path).unwrap(), Holders::Unknown);
    // No handle on the directory: it can be removed while the lease is held, and the lease
    // still excludes whoever recreates the path.
    std::fs::remove_dir_all(dir.path().join("a")).unwrap();
    assert!(Lease::try_acquire(&path).unwrap_err().is_contended());
    lease.verify().unwrap();
    drop(lease);
    let _lease = Lease::try_acquire(&path).unwrap();
    // A missing lock file must exist when creation is off.
    let err = LeaseOptions::new()
        .create(false)
        .try_acquire(parent.join("absent.lock"))
        .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
}

#[test]
fn directories_and_files_in_the_way_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("dir.lock");
    std::fs::create_dir(&sub).unwrap();
    assert!(matches!(
        Lease::try_acquire(&sub),
        Err(Error::NotRegularFile { .. })
    ));
    assert!(matches!(holders(&sub), Err(Error::NotRegularFile { .. })));
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = Lease::try_acquire(file.join("under.lock")).unwrap_err();
    assert!(err.is_unusable_path(), "{err:?}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    // An existing regular lock file is fine and left as it is.
    let existing = dir.path().join("existing.lock");
    std::fs::write(&existing, b"keep me").unwrap();
    drop(Lease::try_acquire(&existing).unwrap());
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
}

fn keys(root: &Path) -> KeyedLeases {
    KeyedLeases::new(root, NAMESPACE)
}

fn contended(r: Result<impl std::fmt::Debug, KeyError>) -> bool {
    matches!(r, Err(KeyError::Lease(e)) if e.is_contended())
}

#[test]
fn keyed_leases_name_objects_by_namespace_and_hashed_id() {
    let tmp = tempfile::tempdir().unwrap();
    let root: PathBuf = tmp.path().join("Root");
    std::fs::create_dir(&root).unwrap();
    assert!(matches!(
        keys(&root).try_acquire("r1", |_| false),
        Err(KeyError::Unknown { .. })
    ));
    assert!(
        !root.join(NAMESPACE).exists(),
        "unknown keys allocate nothing"
    );
    let lease = keys(&root).try_acquire("r1", |_| true).unwrap();
    lease.verify().unwrap();
    assert!(contended(keys(&root).try_acquire(" r1\n", |_| true)));
    // The root reached through another spelling is the same namespace.
    assert!(contended(
        keys(&tmp.path().join("ROOT")).try_acquire("r1", |_| true)
    ));
    // Another key proceeds in parallel.
    drop(keys(&root).try_acquire("r2", |_| true).unwrap());
    // The lock name is the namespace's real path plus the hashed ID.
    let ns = LockDir::open(&root)
        .unwrap()
        .child(NAMESPACE, false)
        .unwrap();
    let direct =
        LeaseOptions::new().try_acquire_at(&ns, &leasehold::patterns::keyed::lock_name("r1"));
    assert!(direct.unwrap_err().is_contended());
    assert!(
        Lease::try_acquire(keys(&root).lock_path("r1"))
            .unwrap_err()
            .is_contended()
    );
    drop(lease);
    drop(keys(&root).try_acquire("r1", |_| true).unwrap());
}

#[test]
fn lock_dir_refuses_plain_name_violations_and_linked_children() {
    let tmp = tempfile::tempdir().unwrap();
    let ld = LockDir::create(tmp.path().join("ld")).unwrap();
    for bad in ["..", "a\\b", "a/b", "c:x", ""] {
        assert!(
            LeaseOptions::new().try_acquire_at(&ld, bad).is_err(),
            "{bad:?}"
        );
        assert!(ld.child(bad, true).is_err(), "{bad:?}");
    }
    std::fs::write(tmp.path().join("ld").join("file"), b"x").unwrap();
    assert!(matches!(
        ld.child("file", true),
        Err(Error::NotDirectory { .. })
    ));
    let target = tmp.path().join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    let linked = tmp.path().join("ld").join("linked");
    if std::os::windows::fs::symlink_dir(&target, &linked).is_ok()
        && std::fs::symlink_metadata(&linked).is_ok()
    {
        assert!(matches!(
            ld.child("linked", true),
            Err(Error::NotDirectory { .. })
        ));
    }
}
