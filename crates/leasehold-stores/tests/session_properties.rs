//! Session IDs and the JSON-lines log reader on arbitrary input (proptest): IDs accepted are
//! exactly the safe names and stay one directory below DIR; the reader yields exactly the
//! newline-terminated lines of any byte content, never panics, and reports a torn tail; a
//! writer opening such a log repairs the tail and appends after the whole records.
#![cfg(unix)]

use std::path::Path;

use leasehold_stores::session::{SessionId, SessionStore};
use proptest::prelude::*;

/// A session's log file, as the store's on-disk layout names it (`DIR/<id>/session.jsonl`).
const LOG_NAME: &str = "session.jsonl";

fn safe(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn session_ids_accepted_are_exactly_the_safe_names(id in prop_oneof![
        any::<String>(),
        "[./\\\\\0 a-zA-Z0-9_-]{0,140}",
        Just("..".to_string()),
        Just("-".to_string()),
    ]) {
        match SessionId::new(id.clone()) {
            Ok(s) => {
                prop_assert!(safe(&id), "{:?} accepted", id);
                let p = Path::new("/d").join(s.as_str());
                prop_assert_eq!(p.parent(), Some(Path::new("/d")));
            }
            Err(e) => {
                prop_assert!(!safe(&id), "{:?} refused", id);
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_log_reader_yields_exactly_the_whole_lines_of_any_bytes(
        bytes in prop::collection::vec(prop_oneof![3 => any::<u8>(), 1 => Just(b'\n')], 0..200)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let sdir = dir.path().join("s");
        std::fs::create_dir(&sdir).unwrap();
        std::fs::write(sdir.join(LOG_NAME), &bytes).unwrap();
        let store = SessionStore::new(dir.path());
        let id = SessionId::new("s").unwrap();
        let mut reader = store.reader(&id).unwrap();
        let records: Vec<Vec<u8>> = reader.by_ref().map(|r| r.unwrap()).collect();
        let whole_end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let expected: Vec<Vec<u8>> = bytes[..whole_end]
            .split(|&b| b == b'\n')
            .take(bytes[..whole_end].iter().filter(|&&b| b == b'\n').count())
            .map(<[u8]>::to_vec)
            .collect();
        prop_assert_eq!(&records, &expected);
        prop_assert_eq!(reader.torn_tail().is_some(), whole_end < bytes.len());
        prop_assert_eq!(std::fs::read(sdir.join(LOG_NAME)).unwrap(), bytes.clone(), "read only");

        // A writer repairs the torn tail under the lease and appends after the whole records.
        let mut writer = store.open_writer(&id).unwrap();
        writer.append_json("{\"n\":1}").unwrap();
        writer.release();
        let mut after = bytes[..whole_end].to_vec();
        after.extend_from_slice(b"{\"n\":1}\n");
        prop_assert_eq!(std::fs::read(sdir.join(LOG_NAME)).unwrap(), after);
    }
}
