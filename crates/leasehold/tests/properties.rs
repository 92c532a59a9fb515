//! Properties of result IDs → lock names, over arbitrary strings (proptest shrinks any
//! failure to a minimal key): deterministic, whitespace aliases collapse, lowercase hex
//! only, never a path separator or NUL, never outside the namespace — also when a real
//! keyed lease is taken for the key.

use std::path::Path;

use leasehold::patterns::keyed::lock_name;
use proptest::prelude::*;

/// The keyed-lease namespace directory these tests use (the library takes it from its
/// caller; the result store names its own).
const NAMESPACE: &str = ".test-locks-v1";

/// Whitespace that `str::trim` removes (ASCII and Unicode White_Space).
fn whitespace() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(vec![
            ' ', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{a0}', '\u{2003}', '\u{3000}',
        ]),
        0..4,
    )
    .prop_map(|v| v.into_iter().collect())
}

/// Keys with the characters that could break out of a directory, mixed with anything.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[./\\\\\0a-z]{0,12}",
        Just("..".to_string()),
        Just("../../etc/passwd".to_string()),
        Just("/".to_string()),
    ]
}

fn is_lock_name(name: &str) -> bool {
    name.len() == 69
        && name.ends_with(".lock")
        && name[..64]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn lock_names_are_deterministic_hex_and_stay_in_the_namespace(k in key()) {
        let name = lock_name(&k);
        prop_assert_eq!(&name, &lock_name(&k));
        prop_assert!(is_lock_name(&name), "{:?}", name);
        prop_assert!(!name.contains('/') && !name.contains('\0') && !name.contains('\\'));
        let ns = Path::new("/root").join(NAMESPACE);
        let path = ns.join(&name);
        prop_assert_eq!(path.parent(), Some(ns.as_path()));
        prop_assert_eq!(path.file_name().and_then(|n| n.to_str()), Some(name.as_str()));
    }

    #[test]
    fn whitespace_aliases_collapse(k in key(), before in whitespace(), after in whitespace()) {
        prop_assert_eq!(lock_name(&format!("{before}{k}{after}")), lock_name(&k));
        prop_assert_eq!(lock_name(&k), lock_name(k.trim()));
    }

    #[test]
    fn keys_that_differ_after_trimming_get_different_locks(a in key(), b in key()) {
        prop_assume!(a.trim() != b.trim());
        prop_assert_ne!(lock_name(&a), lock_name(&b));
    }
}

/// POSIX keyed leases are lock files in the namespace (on Windows a lease is a named kernel
/// object and no file is created; tests/windows.rs covers that).
#[cfg(unix)]
mod on_disk {
    use super::*;
    use leasehold::patterns::keyed::KeyedLeases;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn a_keyed_lease_for_any_key_creates_only_its_lock_file(k in key()) {
            prop_assume!(!k.trim().is_empty());
            let root = tempfile::tempdir().unwrap();
            let leases = KeyedLeases::new(root.path(), NAMESPACE);
            let lease = leases.try_acquire(&k, |_| true).unwrap();
            let ns = root.path().join(NAMESPACE);
            let expected = ns.join(lock_name(&k));
            prop_assert_eq!(lease.path(), expected.as_path());
            let top: Vec<_> = std::fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
            prop_assert_eq!(top, vec![std::ffi::OsString::from(NAMESPACE)]);
            let inside: Vec<_> = std::fs::read_dir(&ns).unwrap().map(|e| e.unwrap().file_name()).collect();
            // The key's lock file alone: an uncontended acquisition takes no collector lock.
            let expected = vec![std::ffi::OsString::from(lock_name(&k))];
            prop_assert_eq!(inside, expected);
        }
    }
}
