//! `LeaseOptions::single_process`: what the opt-in means on each kind of target.
//!
//! * On WASI (`wasm32-wasip1`, run by `.ci/run` under Node's built-in WASI through
//!   `.ci/wasi-run.mjs`) there is no inter-process lock: without the opt-in every acquisition
//!   is `Error::Unsupported` and creates nothing; with it a lease is the in-process claim,
//!   which excludes this program's other leases, releases, waits within a budget, and the
//!   patterns (durable rewrite, append log, keyed leases) work on top of it.
//! * On native targets the option changes nothing: the same in-process tests pass, and a
//!   second *process* (util-linux `flock(1)`) is still excluded in both directions with the
//!   option set (Linux).
//!
//! No sleeps: every wait here is ended by its budget or does not happen. WASI has one
//! thread, so nothing here hands a lease over to a thread that waits.
//!
//! Not on Windows: these tests look at lock files and take shared leases, and a Windows lease
//! is a named semaphore with neither (the Wine run of `.ci/run` found it). There the option
//! changes nothing either: `lease/windows.rs` never reads it.
#![cfg(not(windows))]

#[cfg(target_os = "wasi")]
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use leasehold::patterns::append::{AppendLog, Durability, LogReader};
use leasehold::patterns::durable::replace_file;
use leasehold::patterns::keyed::{KeyError, KeyedLeases};
use leasehold::{
    Budget, CancelToken, Classify, Error, ErrorClass, FileKind, LeaseOptions, LockDir,
};

/// A fresh temporary directory (on WASI under `TMPDIR`, which the runner preopens: WASI has
/// no system temporary directory).
fn tmp() -> tempfile::TempDir {
    #[cfg(target_os = "wasi")]
    let dir = tempfile::tempdir_in(std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into()));
    #[cfg(not(target_os = "wasi"))]
    let dir = tempfile::tempdir();
    dir.expect("a temporary directory")
}

fn single() -> LeaseOptions {
    LeaseOptions::new().single_process(true)
}

fn is_contended_here(err: &Error) -> bool {
    err.is_contended() && err.to_string().contains("held by this process")
}

#[cfg(target_os = "wasi")]
fn assert_unsupported(err: &Error, path: &Path) {
    match err {
        Error::Unsupported { path: p, platform } => {
            assert_eq!(p, path);
            assert_eq!(*platform, "WASI");
        }
        other => panic!("expected Unsupported for {}, got {other:?}", path.display()),
    }
    assert_eq!(err.class(), ErrorClass::Failure);
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(
        msg.contains("if this program is truly the only one")
            && msg.contains("LeaseOptions::single_process(true)"),
        "{msg}"
    );
}

#[cfg(target_os = "wasi")]
#[test]
fn without_the_opt_in_every_acquisition_is_unsupported_and_creates_nothing() {
    use leasehold::{Lease, LeaseHandle, SharedLease};
    let dir = tmp();
    let path = dir.path().join("sub/store.lock");
    let budget = Budget::timeout(Duration::from_secs(5));
    assert_unsupported(&Lease::try_acquire(&path).unwrap_err(), &path);
    assert_unsupported(&Lease::acquire(&path, &budget).unwrap_err(), &path);
    assert_unsupported(&SharedLease::try_acquire(&path).unwrap_err(), &path);
    assert_unsupported(&LeaseHandle::open(&path).unwrap_err(), &path);
    assert_unsupported(
        &LeaseOptions::new()
            .single_process(false)
            .acquire(&path, &budget)
            .unwrap_err(),
        &path,
    );
    assert!(!dir.path().join("sub").exists(), "nothing was created");
    let ld = LockDir::open(dir.path()).expect("a directory handle needs no lock");
    let at = dir.path().join("at.lock");
    assert_unsupported(
        &LeaseOptions::new()
            .try_acquire_at(&ld, "at.lock")
            .unwrap_err(),
        &at,
    );
    assert!(!at.exists(), "nothing was created");
    // The patterns refuse the same way, with the lease's error.
    let keys = KeyedLeases::new(dir.path(), ".test-locks-v1");
    match keys.try_acquire("k", |_| true) {
        Err(KeyError::Lease(e)) => assert_eq!(e.class(), ErrorClass::Failure, "{e}"),
        other => panic!("expected the lease's refusal, got {other:?}"),
    }
}

#[test]
fn with_the_opt_in_a_second_lease_in_this_process_is_contended_until_the_first_is_released() {
    let dir = tmp();
    let path = dir.path().join("a/b/store.lock");
    let mut first = single().try_acquire(&path).expect("the opt-in grants");
    first.verify().unwrap();
    assert!(
        path.is_file(),
        "the lock file (and its parents) were created"
    );
    let err = single().try_acquire(&path).unwrap_err();
    assert!(is_contended_here(&err), "{err}");
    assert!(
        matches!(&err, Error::Contended { path: p, .. } if *p == path),
        "{err:?}"
    );
    // Another spelling of the same file is the same lease (claims are keyed by inode), and
    // so is a lease taken in a directory handle.
    let dotted = dir.path().join("a/./b/store.lock");
    assert!(is_contended_here(
        &single().try_acquire(&dotted).unwrap_err()
    ));
    let ld = LockDir::open(dir.path().join("a/b")).unwrap();
    assert!(is_contended_here(
        &single().try_acquire_at(&ld, "store.lock").unwrap_err()
    ));
    first.release();
    assert!(matches!(first.verify(), Err(Error::Released { .. })));
    let again = single()
        .try_acquire_at(&ld, "store.lock")
        .expect("free after release");
    drop(again);
    drop(single().try_acquire(&path).expect("free after drop"));
}

#[test]
fn a_bounded_wait_for_a_held_lease_times_out_and_a_cancelled_one_stops_leaving_it_to_its_holder() {
    let dir = tmp();
    let path = dir.path().join("wait.lock");
    let holder = single().try_acquire(&path).unwrap();
    let started = Instant::now();
    let err = single()
        .acquire(&path, &Budget::timeout(Duration::from_millis(150)))
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    assert!(is_contended_here(&err), "{err}");
    assert!(
        waited >= Duration::from_millis(150),
        "gave up early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "the deadline ended it: {waited:?}"
    );
    let token = CancelToken::new();
    token.cancel();
    let cancelled = single()
        .acquire(&path, &Budget::unlimited().with_cancel(token))
        .unwrap_err();
    assert!(
        matches!(cancelled, Error::Cancelled { .. }),
        "{cancelled:?}"
    );
    assert_eq!(cancelled.class(), ErrorClass::Cancelled);
    // The abandoned waiters left nothing queued: the holder still holds, then hands over.
    holder.verify().unwrap();
    drop(holder);
    drop(
        single()
            .acquire(&path, &Budget::timeout(Duration::from_secs(5)))
            .expect("free at once"),
    );
}

#[test]
fn shared_leases_coexist_and_exclude_an_exclusive_one() {
    let dir = tmp();
    let path = dir.path().join("shared.lock");
    let a = single().try_acquire_shared(&path).unwrap();
    let b = single().try_acquire_shared(&path).unwrap();
    assert!(is_contended_here(&single().try_acquire(&path).unwrap_err()));
    drop((a, b));
    let writer = single().try_acquire(&path).unwrap();
    assert!(
        single()
            .try_acquire_shared(&path)
            .unwrap_err()
            .is_contended()
    );
    drop(writer);
}

#[test]
fn a_lease_handle_takes_the_lease_again_and_again() {
    let dir = tmp();
    let path = dir.path().join("handle.lock");
    let mut handle = single().open_handle(&path).unwrap();
    for _ in 0..20 {
        let lease = handle.try_lock().unwrap();
        lease.verify().unwrap();
        assert!(is_contended_here(&single().try_acquire(&path).unwrap_err()));
        lease.release();
        drop(single().try_acquire(&path).unwrap());
    }
}

#[test]
fn a_replaced_lock_file_loses_the_lease_and_a_directory_there_is_refused_untouched() {
    let dir = tmp();
    let path = dir.path().join("replaced.lock");
    let lease = single().try_acquire(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(lease.verify(), Err(Error::LeaseLost { .. })));
    // A newcomer locks the new file: the old lease excludes nobody any more.
    drop(single().try_acquire(&path).expect("the new file is free"));
    let sub = dir.path().join("dir.lock");
    std::fs::create_dir(&sub).unwrap();
    match single().try_acquire(&sub) {
        Err(Error::NotRegularFile { kind, path: p }) => {
            assert_eq!(kind, FileKind::Directory);
            assert_eq!(p, sub);
        }
        other => panic!("expected refusal, got {other:?}"),
    }
    assert!(sub.is_dir());
}

#[test]
fn durable_rewrites_and_the_append_log_read_back_under_the_lease() {
    let dir = tmp();
    let ld = LockDir::open(dir.path()).unwrap();
    let lease = single().try_acquire_at(&ld, "store.lock").unwrap();
    let doc = dir.path().join("doc.json");
    replace_file(&doc, b"{\"v\":1}").unwrap();
    replace_file(&doc, b"{\"v\":2}").unwrap();
    assert_eq!(std::fs::read(&doc).unwrap(), b"{\"v\":2}");
    let names: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "the lock file and the document, no temporaries: {names:?}"
    );

    let (mut log, torn) =
        AppendLog::open_at(&ld, "log.jsonl", &lease, Durability::EveryRecord).unwrap();
    assert!(torn.is_none());
    log.append(&lease, b"{\"n\":1}").unwrap();
    log.append_batch(&lease, [&b"{\"n\":2}"[..], b"{\"n\":3}"])
        .unwrap();
    drop(log);
    let mut reader = LogReader::open_at(&ld, "log.jsonl").unwrap().unwrap();
    let records: Vec<Vec<u8>> = (&mut reader).map(Result::unwrap).collect();
    assert_eq!(
        records,
        [&b"{\"n\":1}"[..], b"{\"n\":2}", b"{\"n\":3}"].map(<[u8]>::to_vec)
    );
    assert!(reader.torn_tail().is_none());
    // A lost lease stops the writer before it writes.
    std::fs::remove_file(dir.path().join("store.lock")).unwrap();
    assert!(AppendLog::open_at(&ld, "log.jsonl", &lease, Durability::None).is_err());
}

#[test]
fn keyed_leases_exclude_per_key_and_unknown_keys_allocate_nothing() {
    let dir = tmp();
    let keys = KeyedLeases::new(dir.path(), ".test-locks-v1").with_options(single());
    let a = keys.try_acquire("alpha", |_| true).unwrap();
    a.verify().unwrap();
    match keys.try_acquire("alpha", |_| true) {
        Err(KeyError::Lease(e)) => assert!(is_contended_here(&e), "{e}"),
        other => panic!("expected contention, got {other:?}"),
    }
    let b = keys
        .try_acquire("beta", |_| true)
        .expect("another key is free");
    assert!(matches!(
        keys.try_acquire("gamma", |_| false),
        Err(KeyError::Unknown { .. })
    ));
    assert!(!keys.lock_path("gamma").exists());
    drop((a, b));
    drop(
        keys.try_acquire("alpha", |_| true)
            .expect("free after release"),
    );
}

/// A waiter in this process is handed the lease by the claim table when the holder releases
/// (first come, first served: a newcomer after the release is refused), here an async one on
/// a current-thread runtime, which is how one WASI thread runs a holder and a waiter at once.
/// The waiter is queued once it first returns pending (one `yield_now` on this runtime).
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn a_queued_async_waiter_is_handed_the_lease_when_the_holder_releases() {
    let dir = tmp();
    let path = dir.path().join("handover.lock");
    let holder = single().try_acquire(&path).unwrap();
    let p = path.clone();
    let waiter = tokio::spawn(async move {
        single()
            .acquire_async(&p, &Budget::timeout(Duration::from_secs(30)))
            .await
    });
    tokio::task::yield_now().await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the lease is held"
    );
    drop(holder);
    let err = single().try_acquire(&path).unwrap_err();
    assert!(
        is_contended_here(&err),
        "the release handed the lease to the waiter: {err}"
    );
    let lease = waiter
        .await
        .expect("the waiter task")
        .expect("the waiter got the lease");
    lease.verify().unwrap();
    drop(lease);
    drop(
        single()
            .try_acquire(&path)
            .expect("free after the waiter released"),
    );
}

/// Native targets ignore nothing: with the option set the kernel lock is still taken, so a
/// real second process is excluded both ways (util-linux `flock(1)`, which takes the same
/// `flock` the library does).
#[cfg(target_os = "linux")]
#[test]
fn with_the_opt_in_native_leases_still_exclude_other_processes() {
    use std::process::Command;
    let dir = tmp();
    let path = dir.path().join("native.lock");
    let holder = testkit::FlockHolder::hold(&path);
    let err = single().try_acquire(&path).unwrap_err();
    assert!(matches!(err, Error::Contended { .. }), "{err:?}");
    let err = single()
        .acquire(&path, &Budget::timeout(Duration::from_millis(100)))
        .unwrap_err();
    assert!(matches!(err, Error::TimedOut { .. }), "{err:?}");
    holder.kill();
    let lease = single()
        .acquire(&path, &Budget::timeout(Duration::from_secs(30)))
        .expect("free once the other process is gone");
    let other = testkit::run(Command::new("flock").arg("-n").arg(&path).arg("true"));
    assert_eq!(
        other.code, 1,
        "flock -n must find the lease held: {other:?}"
    );
    drop(lease);
    let other = testkit::run(Command::new("flock").arg("-n").arg(&path).arg("true"));
    assert_eq!(other.code, 0, "free after release: {other:?}");
}
