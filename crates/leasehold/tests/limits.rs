//! Resource limits: more leases than the descriptor limit allows, and paths longer than the
//! OS allows, end in typed errors — never a panic — and leak nothing.
#![cfg(unix)]

use std::path::PathBuf;
use std::process::Command;

use leasehold::{Error, Lease};

/// Set in the child that runs under a lowered RLIMIT_NOFILE.
const CHILD: &str = "LEASEHOLD_TEST_NOFILE_CHILD";
/// The lowered limit.
const LIMIT: u64 = 64;

/// Runs [`child_holds_leases_until_the_descriptor_limit`] in a child process whose soft
/// RLIMIT_NOFILE is 64 (set by the shell, so that no other test in this process is affected).
#[test]
fn exhausting_descriptors_is_a_typed_error_naming_the_limit_and_leaks_nothing() {
    let test_binary = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {LIMIT} && exec \"$0\" \"$@\""))
        .arg(&test_binary)
        .args([
            "--exact",
            "child_holds_leases_until_the_descriptor_limit",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stdout.contains("CHILD-OK"), "the child ran: {stdout}");
}

#[test]
fn child_holds_leases_until_the_descriptor_limit() {
    if std::env::var_os(CHILD).is_none() {
        return; // only meaningful under the lowered limit set by the test above
    }
    let dir = tempfile::tempdir().unwrap();
    let path = |i: usize| dir.path().join(format!("{i}.lock"));
    let mut held = Vec::new();
    let err = loop {
        match Lease::try_acquire(path(held.len())) {
            Ok(lease) => held.push(lease),
            Err(e) => break e,
        }
        assert!(held.len() <= LIMIT as usize, "more leases than descriptors");
    };
    match &err {
        Error::TooManyOpenFiles { path: p, limit } => {
            assert_eq!(*limit, LIMIT, "{err}");
            assert_eq!(p, &path(held.len()), "{err}");
        }
        other => panic!("expected TooManyOpenFiles, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("descriptor limit 64"), "{message}");
    assert!(message.contains("ulimit -n"), "says what to do: {message}");
    assert!(
        held.len() > 10,
        "only {} leases before the limit",
        held.len()
    );
    let n = held.len();
    drop(held);
    // Nothing leaked: every lease is free again, and as many can be held as before.
    let again: Vec<Lease> = (0..n)
        .map(|i| Lease::try_acquire(path(i)).expect("free after drop"))
        .collect();
    drop(again);
    println!("CHILD-OK {n} leases held under a limit of {LIMIT}");
}

#[test]
fn a_name_or_path_longer_than_the_os_allows_is_name_too_long() {
    let dir = tempfile::tempdir().unwrap();
    let long_name = dir.path().join("n".repeat(300)); // NAME_MAX is 255
    let mut long_path = PathBuf::from(dir.path());
    while long_path.as_os_str().len() <= 4200 {
        long_path.push("d".repeat(200)); // PATH_MAX is 4096
    }
    long_path.push("x.lock");
    for p in [long_name, long_path] {
        let err = Lease::try_acquire(&p).unwrap_err();
        assert!(matches!(err, Error::NameTooLong { .. }), "{err:?}");
        assert!(err.is_unusable_path());
        assert!(err.to_string().contains("too long"), "{err}");
    }
}
