//! A path that can name no file (empty, or holding a NUL byte) is refused as the caller's
//! input, before anything is opened: `Error::InvalidPath`, class `Usage`, by every way of
//! taking a lease on a path, and by `holders`.

use leasehold::{Budget, Classify, Error, ErrorClass, Lease, LeaseOptions, SharedLease, holders};

fn assert_invalid(e: Error, given: &str) {
    assert!(
        matches!(&e, Error::InvalidPath { path, .. } if path.as_os_str() == given),
        "{given:?}: {e:?}"
    );
    assert_eq!(e.class(), ErrorClass::Usage, "{e}");
    let message = e.to_string();
    assert!(
        message.starts_with(&format!("{given:?} is not a usable path: "))
            && message.ends_with("; give the path of the lock file"),
        "{message}"
    );
}

#[test]
fn an_empty_or_nul_path_is_invalid_input_before_anything_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::env::current_dir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let budget = Budget::no_wait();
    for given in ["", "a\0b.lock"] {
        assert_invalid(Lease::try_acquire(given).unwrap_err(), given);
        assert_invalid(Lease::acquire(given, &budget).unwrap_err(), given);
        assert_invalid(SharedLease::try_acquire(given).unwrap_err(), given);
        assert_invalid(
            LeaseOptions::new()
                .acquire_shared(given, &budget)
                .unwrap_err(),
            given,
        );
        assert_invalid(holders(given).unwrap_err(), given);
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    std::env::set_current_dir(cwd).unwrap();
    assert!(left.is_empty(), "nothing was created: {left:?}");
    let e = Lease::try_acquire("").unwrap_err();
    assert!(e.to_string().contains("it is empty"), "{e}");
    let e = Lease::try_acquire("a\0b").unwrap_err();
    assert!(e.to_string().contains("NUL byte"), "{e}");
}
