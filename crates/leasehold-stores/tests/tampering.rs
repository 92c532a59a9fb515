//! Lock-file tampering: the lock file unlinked or replaced while held. `verify()` reports it,
//! and the registry authority fails closed before its next write — the exact sequence is
//! shown by the event recorder: after the tamper, a mutation is admitted, the lease check
//! fails, the authority goes to storage-failed "lease lost", and no write begins.

use std::path::{Path, PathBuf};

use leasehold::patterns::authority::{Event, State};
use leasehold::{Budget, Error, Lease};
use leasehold_stores::document::RealFiles;
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths};
use testkit::Recorder;

/// The ways to take a held lock file away from its holder.
#[derive(Debug, Clone, Copy)]
enum Tamper {
    Unlink,
    /// Another file renamed over the lock path (a new inode stands there).
    Replace,
}

fn tamper(lock: &Path, how: Tamper) {
    match how {
        Tamper::Unlink => std::fs::remove_file(lock).unwrap(),
        Tamper::Replace => {
            let other = lock.with_extension("impostor");
            std::fs::write(&other, b"").unwrap();
            std::fs::rename(&other, lock).unwrap();
        }
    }
}

fn dir(base: &Path, name: &str) -> PathBuf {
    let p = base.join(name);
    std::fs::create_dir_all(&p).unwrap();
    p.canonicalize().unwrap()
}

#[test]
fn verify_reports_an_unlinked_or_replaced_lock_file() {
    for how in [Tamper::Unlink, Tamper::Replace] {
        let tmp = tempfile::tempdir().unwrap();
        let lock = tmp.path().join("x.lock");
        let lease = Lease::try_acquire(&lock).unwrap();
        lease.verify().unwrap();
        tamper(&lock, how);
        assert!(
            matches!(lease.verify(), Err(Error::LeaseLost { .. })),
            "{how:?}"
        );
        // The tampered path is free to a newcomer: that is why the holder must stop writing.
        drop(Lease::try_acquire(&lock).expect("a newcomer locks the new file"));
    }
}

#[test]
fn the_authority_fails_closed_before_its_next_write_after_tampering() {
    for how in [Tamper::Unlink, Tamper::Replace] {
        let tmp = tempfile::tempdir().unwrap();
        let (primary, a, b) = (
            dir(tmp.path(), "p"),
            dir(tmp.path(), "a"),
            dir(tmp.path(), "b"),
        );
        let paths = RegistryPaths::in_home(&tmp.path().join("home"), None);
        let rec = Recorder::new();
        let registry = Registry::with_files(
            paths.clone(),
            std::sync::Arc::new(RealFiles),
            Some(rec.observer("r")),
        );
        registry.acquire(&Budget::no_wait()).unwrap();
        registry.add(&primary, &a).unwrap();
        let document = std::fs::read(&paths.document).unwrap();
        let seen = rec.events().len();

        tamper(&paths.lease, how);
        let err = registry.add(&primary, &b).unwrap_err();
        assert!(
            matches!(&err, RegistryError::StorageFailed { reason } if reason == "lease lost"),
            "{how:?}: {err:?}"
        );
        assert_eq!(err.to_string(), "registry storage failed: lease lost");

        let after: Vec<Event> = rec.events()[seen..]
            .iter()
            .map(|(_, e)| e.clone())
            .collect();
        assert_eq!(
            after,
            vec![
                Event::MutationBegin,
                Event::StorageFailed("lease lost".into()),
                Event::MutationEnd,
            ],
            "{how:?}: no WriteBegin after the tamper"
        );
        assert_eq!(
            std::fs::read(&paths.document).unwrap(),
            document,
            "{how:?}: document unchanged"
        );
        assert_eq!(
            registry.state(),
            State::StorageFailed {
                reason: "lease lost".into()
            }
        );
        assert!(registry.scope().is_empty(), "{how:?}: fail closed");
        assert!(!registry.grants(&primary, &a), "{how:?}: fail closed");
        // Every later request is refused too, still without writing.
        assert!(registry.add(&primary, &b).is_err());
        assert!(
            !rec.events()[seen..]
                .iter()
                .any(|(_, e)| *e == Event::WriteBegin),
            "{how:?}: nothing written while failed"
        );
    }
}

#[test]
fn reads_verify_the_lease_so_a_deposed_authority_grants_nothing_without_a_write() {
    for how in [Tamper::Unlink, Tamper::Replace] {
        let tmp = tempfile::tempdir().unwrap();
        let (primary, granted) = (dir(tmp.path(), "p"), dir(tmp.path(), "g"));
        let paths = RegistryPaths::in_home(&tmp.path().join("home"), None);
        let registry = Registry::new(paths.clone());
        registry.acquire(&Budget::no_wait()).unwrap();
        registry.add(&primary, &granted).unwrap();
        assert!(registry.grants(&primary, &granted.join("f")));
        tamper(&paths.lease, how);
        // No mutation in between: the very next read notices, and grants nothing.
        assert!(!registry.grants(&primary, &granted.join("f")), "{how:?}");
        assert!(registry.scope().is_empty(), "{how:?}");
        assert!(
            matches!(registry.state(), State::StorageFailed { reason } if reason == "lease lost"),
            "{how:?}"
        );
        assert!(matches!(
            registry.ensure_active(),
            Err(RegistryError::StorageFailed { .. })
        ));
    }
}
