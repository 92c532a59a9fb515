//! Library tests of `KeyedLeases` (multi-process behaviour is tested through the CLI).
#![cfg(unix)] // POSIX lock files (modes, FIFOs, symlinks); Windows keyed leases: tests/windows.rs

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use leasehold::patterns::keyed::{COLLECTOR_LOCK, Collection, KeyError, KeyedLeases, lock_name};
use leasehold::{Budget, CancelToken, Classify, Error};

/// The keyed-lease namespace directory these tests use (the library takes it from its
/// caller; the result store names its own).
const NAMESPACE: &str = ".test-locks-v1";

fn keys(root: &Path) -> KeyedLeases {
    KeyedLeases::new(root, NAMESPACE)
}

fn contended(r: Result<impl std::fmt::Debug, KeyError>) -> bool {
    matches!(r, Err(KeyError::Lease(e)) if e.is_contended())
}

/// Every entry under `dir`, recursively (sorted), to prove nothing was created.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            out.push(e.path().display().to_string());
            if e.file_type().unwrap().is_dir() {
                out.extend(tree(&e.path()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn lock_name_is_lowercase_hex_sha256_of_trimmed_key() {
    assert_eq!(
        lock_name(" abc\t"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.lock"
    );
}

#[test]
fn empty_key_after_trimming_is_refused_and_creates_nothing() {
    let root = tempfile::tempdir().unwrap();
    for k in ["", "   ", "\t\n"] {
        let r = keys(root.path()).try_acquire(k, |_| true);
        assert!(matches!(r, Err(KeyError::EmptyKey { .. })), "{k:?}: {r:?}");
    }
    assert!(tree(root.path()).is_empty());
}

/// A tiny deterministic generator (no extra dependency): xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn key(&mut self) -> String {
        const ALPHABET: &[char] = &[
            'a', 'Z', '0', '.', '/', '-', '_', ' ', '\t', '\n', '\0', 'é', '‽', '\\', ':', '*',
        ];
        let len = (self.next() % 300) as usize;
        (0..len)
            .map(|_| ALPHABET[(self.next() % ALPHABET.len() as u64) as usize])
            .collect()
    }
}

#[test]
fn unknown_keys_allocate_no_lock_files_fuzzed() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    // Once with no namespace at all, once with a namespace holding another key's lock.
    for round in 0..2 {
        if round == 1 {
            drop(leases.try_acquire("known", |_| true).unwrap());
        }
        let before = tree(root.path());
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 + round);
        for _ in 0..3000 {
            let key = rng.key();
            match leases.try_acquire(&key, |_| false) {
                Err(KeyError::Unknown { .. } | KeyError::EmptyKey { .. }) => {}
                other => panic!("{key:?}: {other:?}"),
            }
        }
        assert_eq!(
            tree(root.path()),
            before,
            "an unknown key created something"
        );
    }
}

#[test]
fn missing_root_is_unknown_and_not_created() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("absent");
    let r = keys(&root).try_acquire("r1", |_| false);
    assert!(matches!(r, Err(KeyError::Unknown { .. })), "{r:?}");
    assert_eq!(r.unwrap_err().class(), leasehold::ErrorClass::Usage);
    assert!(!root.exists());
}

#[test]
fn whitespace_aliases_share_one_lease() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    let held = leases.try_acquire("r1", |_| true).unwrap();
    assert_eq!(held.key(), "r1");
    for alias in [" r1", "r1 ", "\tr1\n"] {
        assert!(contended(leases.try_acquire(alias, |_| true)), "{alias:?}");
    }
    // Only one lock file exists for all of them (besides the namespace's collector lock).
    let ns = root.path().join(NAMESPACE);
    let names: Vec<String> = fs::read_dir(ns)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != COLLECTOR_LOCK)
        .collect();
    assert_eq!(names, [lock_name("r1")]);
}

#[test]
fn disjoint_keys_proceed_in_parallel() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    let _a = leases.try_acquire("a", |_| true).unwrap();
    let b = leases.try_acquire("b", |_| true).unwrap();
    assert!(b.verify().is_ok());
}

#[test]
fn repeated_release_is_harmless_and_lock_file_keeps_its_inode_bytes_and_mode() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    let mut lease = leases.try_acquire("r1", |_| true).unwrap();
    let path = leases.lock_path("r1");
    assert_eq!(lease.path(), path);
    let ino = fs::metadata(&path).unwrap().ino();
    assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    fs::write(&path, b"someone's bytes").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    lease.release();
    lease.release();
    assert!(!lease.is_held());
    drop(lease);
    // The lock file stays, with the same inode, bytes and mode; a known key reuses it and an
    // "unknown" one is admitted because its lock file exists.
    let again = leases.try_acquire("r1", |_| false).unwrap();
    let md = fs::metadata(&path).unwrap();
    assert_eq!(md.ino(), ino);
    assert_eq!(md.mode() & 0o777, 0o640);
    assert_eq!(fs::read(&path).unwrap(), b"someone's bytes");
    drop(again);
}

#[test]
fn malformed_namespace_entries_are_refused_and_left_as_they_are() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    let ns = root.path().join(NAMESPACE);
    fs::create_dir(&ns).unwrap();
    let lock = leases.lock_path("r1");
    let target = root.path().join("victim");
    fs::write(&target, b"victim").unwrap();

    fs::create_dir(&lock).unwrap();
    let r = leases.try_acquire("r1", |_| true);
    assert!(
        matches!(&r, Err(KeyError::Lease(e)) if e.is_unusable_path()),
        "{r:?}"
    );
    assert!(fs::symlink_metadata(&lock).unwrap().is_dir());
    fs::remove_dir(&lock).unwrap();

    std::os::unix::fs::symlink(&target, &lock).unwrap();
    let r = leases.try_acquire("r1", |_| true);
    assert!(
        matches!(&r, Err(KeyError::Lease(e)) if e.is_unusable_path()),
        "{r:?}"
    );
    assert!(
        fs::symlink_metadata(&lock)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read(&target).unwrap(), b"victim");
    fs::remove_file(&lock).unwrap();

    // mknodat where available: a spawned mkfifo would share this process's open lock files
    // with the child until it execs, while other tests check what is free.
    #[cfg(target_os = "linux")]
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &lock,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    #[cfg(not(target_os = "linux"))]
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&lock)
            .status()
            .unwrap()
            .success()
    );
    let r = leases.try_acquire("r1", |_| true);
    assert!(
        matches!(&r, Err(KeyError::Lease(e)) if e.is_unusable_path()),
        "{r:?}"
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(fs::symlink_metadata(&lock).unwrap().file_type().is_fifo());
}

#[test]
fn namespace_that_is_a_symlink_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.path().join(NAMESPACE)).unwrap();
    let r = keys(root.path()).try_acquire("r1", |_| true);
    assert!(
        matches!(&r, Err(KeyError::Lease(e)) if e.is_unusable_path()),
        "{r:?}"
    );
    assert!(
        tree(elsewhere.path()).is_empty(),
        "a lock was created through the symlink"
    );
}

#[test]
fn a_renamed_root_or_namespace_fails_verify_but_the_held_lock_stays_held() {
    let parent = tempfile::tempdir().unwrap();
    let (old, new) = (parent.path().join("root"), parent.path().join("moved"));
    fs::create_dir(&old).unwrap();
    let mut lease = keys(&old).try_acquire("r1", |_| true).unwrap();
    lease.verify().unwrap();
    fs::rename(&old, &new).unwrap();
    // A newcomer resolving `old` would find a fresh namespace there: fail closed.
    let lost = lease.verify().unwrap_err();
    assert!(matches!(lost, leasehold::Error::LeaseLost { .. }), "{lost}");
    fs::rename(&new, &old).unwrap();
    lease.verify().expect("back in place");
    // A namespace renamed away (and a fresh one made in its place) is noticed too.
    let ns = old.join(NAMESPACE);
    fs::rename(&ns, old.join("old-locks")).unwrap();
    fs::create_dir(&ns).unwrap();
    assert!(matches!(
        lease.verify(),
        Err(leasehold::Error::LeaseLost { .. })
    ));
    fs::remove_dir(&ns).unwrap();
    fs::rename(old.join("old-locks"), &ns).unwrap();
    fs::rename(&old, &new).unwrap();
    // The same lock, found at the new place, is still held.
    assert!(contended(keys(&new).try_acquire("r1", |_| false)));
    lease.release();
    // Free again once released. Looked at until it is: another test of this process that
    // spawns a child at this moment lends the child a copy of every descriptor until its
    // exec, the released one included, and the kernel keeps the lock for that copy.
    testkit::until("the released key is free", || {
        keys(&new).try_acquire("r1", |_| false).is_ok()
    });
}

#[test]
fn cancellation_while_waiting_stops_the_waiter_and_leaves_the_holder() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path()).max_wait(None);
    let held = leases.try_acquire("r1", |_| true).unwrap();
    let token = CancelToken::new();
    let budget = Budget::unlimited().with_cancel(token.clone());
    let waiter = {
        let leases = leases.clone();
        std::thread::spawn(move || leases.acquire("r1", &budget, |_| false).map(|_| ()))
    };
    token.cancel();
    let r = waiter.join().unwrap();
    assert!(
        matches!(r, Err(KeyError::Lease(Error::Cancelled { .. }))),
        "{r:?}"
    );
    held.verify().expect("the holder is undisturbed");
}

#[test]
fn default_cap_bounds_an_unlimited_budget() {
    let root = tempfile::tempdir().unwrap();
    let _held = keys(root.path()).try_acquire("r1", |_| true).unwrap();
    let capped = keys(root.path()).max_wait(Some(Duration::from_millis(50)));
    let r = capped.acquire("r1", &Budget::unlimited(), |_| true);
    assert!(
        matches!(r, Err(KeyError::Lease(Error::TimedOut { .. }))),
        "{r:?}"
    );
}

/// A budget cancelled before the acquisition starts admits nothing and leaves the key free.
/// (The re-check right before admission catches a cancellation that lands after the lock
/// was granted; since the token is one flag that every step reads, only a real race reaches
/// it, and this test no longer can.)
#[test]
fn a_cancelled_budget_is_refused_admission_and_leaves_the_key_free() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    drop(leases.try_acquire("r2", |_| true).unwrap()); // the key is known now
    let token = CancelToken::new();
    token.cancel();
    let budget = Budget::timeout(Duration::from_secs(5)).with_cancel(token);
    let r = leases.acquire("r2", &budget, |_| true);
    assert!(
        matches!(r, Err(KeyError::Lease(Error::Cancelled { .. }))),
        "{r:?}"
    );
    drop(
        leases
            .try_acquire("r2", |_| true)
            .expect("nothing holds the key after the refused admission"),
    );
}

/// The key lock files in the namespace (the collector lock and foreign names left out).
fn lock_files(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root.join(NAMESPACE))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.len() == 69 && n.ends_with(".lock"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn collect_removes_only_free_lock_files_of_keys_without_records() {
    // It observes holders through /proc/locks, which the portable build does not read.
    if cfg!(leasehold_portable) {
        eprintln!(
            "SKIP: collect_removes_only_free_lock_files_of_keys_without_records: needs /proc/locks (off in the portable build)"
        );
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    for k in ["live", "dead", "held", "held-by-process"] {
        drop(leases.try_acquire(k, |_| true).unwrap());
    }
    // A foreign file and a hidden one are not a key's lock file: never touched.
    fs::write(root.path().join(NAMESPACE).join("notes.txt"), b"x").unwrap();
    let held = leases.try_acquire("held", |_| false).unwrap();
    let other = testkit::FlockHolder::hold(&leases.lock_path("held-by-process"));
    let report = leases
        .collect(Duration::ZERO, || Ok(vec!["live".to_string()]))
        .unwrap();
    assert_eq!(
        report,
        Collection {
            removed: 1,
            kept: 3,
            busy: false
        }
    );
    let mut expected = vec![
        lock_name("live"),
        lock_name("held"),
        lock_name("held-by-process"),
    ];
    expected.sort();
    assert_eq!(lock_files(root.path()), expected);
    assert!(root.path().join(NAMESPACE).join("notes.txt").exists());
    assert!(root.path().join(NAMESPACE).join(COLLECTOR_LOCK).exists());
    // The holders still hold what they held and still verify.
    held.verify().unwrap();
    assert!(contended(leases.try_acquire("held", |_| false)));
    assert!(contended(leases.try_acquire("held-by-process", |_| false)));
    // A collected key without a record is unknown again: nothing is created for it.
    assert!(matches!(
        leases.try_acquire("dead", |_| false),
        Err(KeyError::Unknown { .. })
    ));
    other.kill();
    drop(held);
    // No spawns from here on (a child shares our lock descriptors until it execs), and the
    // killed holder's group may outlive its reaped leader for a moment: wait until free.
    let _quiet = testkit::quiet();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while leasehold::holders(leases.lock_path("held-by-process")).unwrap()
        != leasehold::Holders::Free
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never went"
        );
        std::thread::yield_now();
    }
    let report = leases.collect(Duration::ZERO, || Ok(Vec::new())).unwrap();
    assert_eq!((report.removed, report.kept), (3, 0));
    assert!(lock_files(root.path()).is_empty());
}

#[test]
fn collect_keeps_young_lock_files_and_a_key_whose_record_appears_meanwhile() {
    let _quiet = testkit::quiet(); // a release must not look held through a forked child
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    drop(leases.try_acquire("young", |_| true).unwrap());
    let report = leases
        .collect(Duration::from_secs(3600), || Ok(Vec::new()))
        .unwrap();
    assert_eq!((report.removed, report.kept), (0, 1));
    // The second listing (made once the file is locked) sees a record the first did not.
    let mut calls = 0;
    let report = leases
        .collect(Duration::ZERO, || {
            calls += 1;
            Ok(if calls == 1 {
                Vec::new()
            } else {
                vec!["young".to_string()]
            })
        })
        .unwrap();
    assert_eq!((report.removed, report.kept, calls), (0, 1, 2));
    assert_eq!(lock_files(root.path()), [lock_name("young")]);
}

#[test]
fn collect_never_waits_for_a_busy_namespace_and_an_acquisition_waits_out_a_collection() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    drop(leases.try_acquire("k", |_| true).unwrap());
    // A process holding the collector lock (as an acquisition does, shared, or a
    // collection, exclusive): the collection keeps everything at once.
    let collector = root.path().join(NAMESPACE).join(COLLECTOR_LOCK);
    let holder = testkit::FlockHolder::hold(&collector);
    let report = leases.collect(Duration::ZERO, || Ok(Vec::new())).unwrap();
    // It did not wait for the collector lock to be free: that process holds it still.
    let probe = fs::File::open(&collector).unwrap();
    assert_eq!(
        rustix::fs::flock(&probe, rustix::fs::FlockOperation::NonBlockingLockShared),
        Err(rustix::io::Errno::WOULDBLOCK),
        "the collection returned while the collector lock was held"
    );
    drop(probe);
    assert_eq!(
        report,
        Collection {
            removed: 0,
            kept: 1,
            busy: true
        }
    );
    // A key no collection holds is taken at once: acquisitions do not take the collector
    // lock on their way in.
    drop(leases.try_acquire("k", |_| false).unwrap());
    // A "try once" acquisition is not refused because a collection passes by: the batch
    // holds the key's file (as a collection does while it examines it), and the acquisition
    // waits for the collector lock (up to a grace of a second), then takes the key.
    // The batch's lock of the key's file: a description of its own, released by closing.
    let batch = fs::File::open(leases.lock_path("k")).unwrap();
    rustix::fs::flock(&batch, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    let waiter = {
        let leases = leases.clone();
        std::thread::spawn(move || leases.try_acquire("k", |_| false).map(drop))
    };
    // Handshake with the kernel: the waiter is queued on the collector lock's inode.
    let ino = fs::metadata(&collector).unwrap().ino();
    let queued = |text: String| {
        text.lines()
            .any(|l| l.contains("->") && l.contains(&format!(":{ino} ")))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !queued(testkit::proc_locks()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter never queued"
        );
        std::thread::yield_now();
    }
    assert!(!waiter.is_finished());
    drop(batch); // the batch kept the file: the key is free once the batch is over
    holder.kill();
    waiter.join().unwrap().unwrap();
}

/// How many of this process's descriptors are open on `path` (Linux: `/proc/self/fd`).
fn open_descriptors_on(path: &Path) -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// An acquisition of a free key opens nothing but the key's lock file: no descriptor of the
/// collector lock is opened (the post-lock check alone makes it safe, see the module
/// documentation). One that finds its key busy looks at the collector lock once and keeps
/// that descriptor, unlocked (a collection can run), for the next busy acquisitions of the
/// `KeyedLeases` and its clones.
#[test]
fn free_keys_take_no_collector_lock_and_busy_ones_keep_one_descriptor_unlocked() {
    if !cfg!(target_os = "linux") {
        eprintln!(
            "SKIP: free_keys_take_no_collector_lock_and_busy_ones_keep_one_descriptor_unlocked: reads /proc/self/fd (Linux)"
        );
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    for k in ["a", "b", "c", "a", "b", "c"] {
        drop(leases.try_acquire(k, |_| true).unwrap());
    }
    let collector = root.path().join(NAMESPACE).join(COLLECTOR_LOCK);
    assert_eq!(open_descriptors_on(&collector), 0, "free keys: none");
    // Busy where no collection ever began: the busy try stands, and an operation that only
    // tried creates nothing.
    let holder = testkit::FlockHolder::hold(&leases.lock_path("a"));
    assert!(contended(leases.try_acquire("a", |_| true)));
    assert!(
        !collector.exists(),
        "an acquisition never creates the collector lock"
    );
    holder.kill();
    let report = leases.collect(Duration::ZERO, || Ok(Vec::new())).unwrap();
    assert_eq!((report.removed, report.busy), (3, false), "{report:?}");
    // Once a collection made it, a busy key is tried again under it, on one kept descriptor.
    let holder = testkit::FlockHolder::hold(&leases.lock_path("a"));
    for _ in 0..3 {
        assert!(contended(leases.try_acquire("a", |_| true)));
    }
    assert_eq!(open_descriptors_on(&collector), 1, "one kept descriptor");
    holder.kill();
    let report = leases.collect(Duration::ZERO, || Ok(Vec::new())).unwrap();
    assert_eq!((report.removed, report.busy), (1, false), "{report:?}");
    // Clones share it.
    let clone = leases.clone();
    let held = clone.try_acquire("a", |_| true).unwrap();
    assert!(contended(leases.try_acquire("a", |_| true)));
    drop(held);
    assert_eq!(open_descriptors_on(&collector), 1);
}

/// The kept root and namespace follow the path: a lease taken in a namespace that was
/// renamed away fails its `verify`, and from then on the same `KeyedLeases` acquires in the
/// namespace that now stands at the path (where a newcomer holds the key), not in the old
/// one.
#[test]
fn a_failed_verify_makes_the_next_acquisition_open_the_namespace_again() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    let lease = leases.try_acquire("r1", |_| true).unwrap();
    let ns = root.path().join(NAMESPACE);
    fs::rename(&ns, root.path().join("old-locks")).unwrap();
    fs::create_dir(&ns).unwrap();
    assert!(matches!(lease.verify(), Err(Error::LeaseLost { .. })));
    drop(lease);
    let newcomer = keys(root.path()).try_acquire("r1", |_| true).unwrap();
    assert!(contended(leases.try_acquire("r1", |_| true)));
    drop(newcomer);
    let again = leases.try_acquire("r1", |_| false).unwrap();
    again.verify().expect("taken in the namespace at the path");
}

/// Without any failed `verify`, the kept directories are still checked again (at least every
/// 100 ms): a namespace replaced behind the `KeyedLeases` is followed, and a root others may
/// now write is refused. Looked at again and again until it happens, never slept for.
#[test]
fn the_kept_root_and_namespace_are_checked_again() {
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path());
    drop(leases.try_acquire("r1", |_| true).unwrap());
    let ns = root.path().join(NAMESPACE);
    fs::rename(&ns, root.path().join("old-locks")).unwrap();
    fs::create_dir(&ns).unwrap();
    let newcomer = keys(root.path()).try_acquire("r1", |_| true).unwrap();
    testkit::until("the kept namespace is opened again", || {
        contended(leases.try_acquire("r1", |_| true))
    });
    drop(newcomer);
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o777)).unwrap();
    testkit::until("a root others may write is refused", || {
        matches!(
            leases.try_acquire("r1", |_| true),
            Err(KeyError::Lease(Error::Untrusted { .. }))
        )
    });
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o700)).unwrap();
}

/// Whether some thread of this process waits in the kernel's lock queue for `path`'s inode.
fn queued_on(path: &Path) -> bool {
    let ino = fs::metadata(path).unwrap().ino();
    let pid = std::process::id().to_string();
    testkit::proc_locks().lines().any(|l| {
        l.contains("->")
            && l.split_whitespace().nth(5) == Some(pid.as_str())
            && l.contains(&format!(":{ino} "))
    })
}

/// A waiter that wakes on a lock file the collector removed (and a newcomer made again) goes
/// back to the admission rather than reopen the path on its own (in the wait, it could be
/// woken on a collected file again and again and give up as "replaced 3 times while
/// locking"), and a file a collection's batch holds sends it to the collector lock. Here a
/// process holds the collector lock and the key's new file (as a batch does) when the waiter
/// wakes on the removed file: the waiter waits for the collector lock, and takes the key's
/// new file once the batch is over. Every step is looked at in `/proc/locks`, never timed.
#[test]
fn a_waiter_woken_on_a_collected_file_tries_again_under_the_collector_lock() {
    if !cfg!(target_os = "linux") {
        eprintln!(
            "SKIP: a_waiter_woken_on_a_collected_file_tries_again_under_the_collector_lock: reads /proc/locks (Linux)"
        );
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let leases = keys(root.path()).max_wait(None);
    drop(leases.try_acquire("k", |_| true).unwrap());
    let path = leases.lock_path("k");
    let collector = root.path().join(NAMESPACE).join(COLLECTOR_LOCK);
    let holder = testkit::FlockHolder::hold(&path);
    let waiter = {
        let leases = leases.clone();
        std::thread::spawn(move || {
            leases.acquire("k", &Budget::timeout(Duration::from_secs(60)), |_| true)
        })
    };
    testkit::until("the waiter is queued on the key's file", || {
        queued_on(&path)
    });
    // A collection holds the namespace, has removed the file, and a newcomer made it again.
    let collection = testkit::FlockHolder::hold(&collector);
    fs::remove_file(&path).unwrap();
    fs::File::create(&path).unwrap();
    let batch = testkit::FlockHolder::hold(&path);
    holder.kill(); // the waiter is granted the removed file
    testkit::until("the waiter waits for the collector lock", || {
        queued_on(&collector)
    });
    assert!(
        !waiter.is_finished(),
        "taken while a collection held the namespace"
    );
    batch.kill();
    collection.kill();
    let lease = waiter
        .join()
        .unwrap()
        .expect("the key, once the collection is over");
    lease
        .verify()
        .expect("the key's file that stands at the path");
}

#[test]
fn a_busy_key_tried_once_says_it_was_a_single_try() {
    // The admission's non-blocking try reports why it did not wait as a single try, as a
    // plain lease's try_acquire does, not as a deadline that had passed (main's Budget
    // tells the two apart).
    let root = tempfile::tempdir().unwrap();
    let holder = keys(root.path());
    let _held = holder.try_acquire("job-1", |_| true).unwrap();
    let other = keys(root.path());
    for budget in [Budget::no_wait(), Budget::timeout(Duration::ZERO)] {
        match other.acquire("job-1", &budget, |_| true) {
            Err(KeyError::Lease(Error::Contended { why, .. })) => {
                assert_eq!(why, leasehold::NotWaited::SingleTry, "{budget:?}");
            }
            other => panic!("a busy key tried once: {other:?}"),
        }
    }
}
