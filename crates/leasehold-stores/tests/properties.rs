//! The stores' readers on arbitrary input: never a panic, a clear error naming the file,
//! and the file left byte-for-byte as it was (a document that does not parse is reported,
//! never overwritten). Also: result IDs accepted by the store are safe path components.

use std::path::Path;

use leasehold::Budget;
use leasehold_stores::document::JsonDocument;
use leasehold_stores::id::SafeId;
use leasehold_stores::registry::{Registry, RegistryError, RegistryPaths};
use leasehold_stores::results::ResultStore;
use proptest::prelude::*;
use serde_json::Value;

/// Arbitrary JSON, nested a few levels (to reach past the parser into the registry's shape
/// checks).
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        Just(Value::String("/tmp".into())),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    "[a-z]{0,6}",
                    Just("workspaces".into()),
                    Just("roots".into()),
                    Just("/tmp".into())
                ],
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Bytes of a document: random, random JSON, or JSON cut short.
fn document_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        json().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        (json(), any::<prop::sample::Index>()).prop_map(|(v, i)| {
            let b = serde_json::to_vec(&v).unwrap();
            let cut = i.index(b.len() + 1);
            b[..cut].to_vec()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_json_document_reader_never_panics_and_names_the_file(bytes in document_bytes()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("doc.json");
        std::fs::write(&path, &bytes).unwrap();
        let is_object = matches!(serde_json::from_slice::<Value>(&bytes), Ok(Value::Object(_)));
        match JsonDocument::new(&path).load() {
            Ok(_) => prop_assert!(is_object),
            Err(e) => {
                prop_assert!(!is_object);
                prop_assert!(e.to_string().contains(path.to_str().unwrap()), "{}", e);
                prop_assert!(e.to_string().contains("does not parse"), "{}", e);
            }
        }
        prop_assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }

    #[test]
    fn the_registry_on_any_document_is_active_or_storage_failed_and_never_rewrites_it(
        bytes in document_bytes()
    ) {
        let dir = tempfile::tempdir().unwrap();
        let paths = RegistryPaths::in_home(dir.path(), None);
        std::fs::create_dir_all(paths.document.parent().unwrap()).unwrap();
        std::fs::write(&paths.document, &bytes).unwrap();
        let registry = Registry::new(paths.clone());
        match registry.acquire(&Budget::no_wait()) {
            Ok(()) => {}
            Err(RegistryError::StorageFailed { reason }) => {
                prop_assert!(reason.contains("does not parse"), "{}", reason);
                // Refused, and the document stays as it was.
                let d = dir.path().canonicalize().unwrap();
                prop_assert!(registry.add(&d, &d).is_err());
                prop_assert_eq!(std::fs::read(&paths.document).unwrap(), bytes);
            }
            Err(other) => prop_assert!(false, "unexpected {:?}", other),
        }
        registry.teardown();
    }

    #[test]
    fn a_result_record_of_any_bytes_is_a_clear_error_never_a_panic(bytes in document_bytes()) {
        let root = tempfile::tempdir().unwrap();
        let candidate = root.path().join("results").join("r1");
        std::fs::create_dir_all(&candidate).unwrap();
        std::fs::write(candidate.join("entry.json"), &bytes).unwrap();
        let store = ResultStore::new(root.path());
        if let Err(e) = store.paths("r1", &Budget::no_wait()) {
            let msg = e.to_string();
            prop_assert!(msg.contains("r1"), "{}", msg);
        }
        let _ = store.pending();
    }

    #[test]
    fn accepted_result_ids_are_safe_path_components(id in prop_oneof![
        any::<String>(),
        "[ ./\\\\\0a-zA-Z0-9_-]{0,140}",
    ]) {
        if let Ok(t) = SafeId::trimmed(&id) {
            let t = t.as_str();
            prop_assert_eq!(t, id.trim());
            prop_assert!(!t.is_empty() && t.len() <= 128);
            prop_assert!(!t.starts_with('.'));
            prop_assert!(!t.contains('/') && !t.contains('\0') && !t.contains('\\'));
            let joined = Path::new("/r/results").join(t);
            prop_assert_eq!(joined.parent(), Some(Path::new("/r/results")));
            let store = ResultStore::new("/r");
            let lock = store.lock_path(&id);
            prop_assert_eq!(lock.parent(), Some(Path::new("/r/.result-locks-v1")));
        }
    }
}
