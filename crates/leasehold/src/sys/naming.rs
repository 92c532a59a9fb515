//! How a lock path becomes the name of a Windows kernel object.
//!
//! On Windows a lease is a named semaphore, so everything that should exclude must agree on
//! one name: `Local\leasehold-<hex sha256(key)>`, where the key is the *real* path of the lock
//! file's (already existing) parent directory joined with the lock file's name, case-folded.
//!
//! * **Real path, not a lexical one.** One directory reached through a junction, a symbolic
//!   link, an 8.3 short name or another spelling of its case must give one lock, so the parent
//!   is resolved by the file system (`std::fs::canonicalize`, which on Windows opens the
//!   directory and asks `GetFinalPathNameByHandleW`). Only the parent is resolved: the lock
//!   file itself need not exist and is never created.
//! * **Case-folded.** Windows file names are case-insensitive; the resolved parent already
//!   comes back in its stored case, and folding the whole key makes the file name's case
//!   irrelevant too.
//! * **Hashed.** Object names are limited in length and may not contain `\` beyond the
//!   namespace prefix; a SHA-256 in hex is a fixed 64 characters whatever the path.
//! * **`Local\`.** The object lives in the caller's logon-session namespace, which needs no
//!   privilege (`Global\` needs `SeCreateGlobalPrivilege`); processes of one desktop session
//!   exclude each other, processes in different sessions (a service and a desktop app) do not.
//!
//! The functions are pure string functions, compiled and tested on every platform.

#![cfg_attr(not(windows), allow(dead_code))]

use std::io;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The prefix of every leasehold object name.
pub(crate) const PREFIX: &str = "Local\\leasehold-";

/// The key of a lock file: `canonical_parent` (the resolved parent directory, as the file
/// system spells it) joined with `file_name` by `separator`, case-folded.
///
/// A parent that is not valid Unicode (an unpaired UTF-16 surrogate) is folded lossily: two
/// such paths may then share one lock — more exclusion, never less.
pub(crate) fn lock_key(canonical_parent: &str, file_name: &str, separator: char) -> String {
    let mut key = String::with_capacity(canonical_parent.len() + 1 + file_name.len());
    key.push_str(canonical_parent);
    if !key.ends_with(separator) {
        key.push(separator);
    }
    key.push_str(file_name);
    key.to_lowercase()
}

/// The kernel object name for a key: [`PREFIX`] + lowercase hex SHA-256 of its UTF-8 bytes.
pub(crate) fn object_name(key: &str) -> String {
    let mut name = String::with_capacity(PREFIX.len() + 64);
    name.push_str(PREFIX);
    push_sha256_hex(&mut name, key.as_bytes());
    name
}

/// Appends the SHA-256 of `bytes` to `out` as 64 lowercase hex digits: the one spelling of a
/// hashed name in the crate (Windows object names, keyed lock files, long gate names), so
/// that every name derived from one key is the same name wherever it is computed. Lowercase
/// because the CLI contract says lock names are lowercase hex, and a name compared on a
/// case-sensitive file system must have one spelling.
///
/// A table, not `write!("{b:02x}")`: the formatter measured a tenth of a keyed acquisition
/// (32 calls through `fmt`).
pub(crate) fn push_sha256_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(64);
    for b in Sha256::digest(bytes).iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
}

/// The key of the lock file `file_name` inside the existing directory `parent`, resolving
/// `parent` through the file system (links, junctions, short names, case).
pub(crate) fn resolve_key(parent: &Path, file_name: &str) -> io::Result<String> {
    let real = std::fs::canonicalize(parent)?;
    Ok(lock_key(
        &real.to_string_lossy(),
        file_name,
        std::path::MAIN_SEPARATOR,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_name_is_the_prefixed_hex_sha256_of_the_key() {
        // sha256("abc"), the FIPS 180-2 test vector.
        assert_eq!(
            object_name("abc"),
            "Local\\leasehold-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let name = object_name(&lock_key(r"\\?\C:\Users\Me\App", "store.lock", '\\'));
        assert_eq!(name.len(), PREFIX.len() + 64);
        assert!(
            name[PREFIX.len()..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert!(
            !name[PREFIX.len()..].contains('\\'),
            "only the namespace separator"
        );
    }

    #[test]
    fn keys_fold_case_and_join_with_one_separator() {
        let a = lock_key(r"\\?\C:\Users\Me\App", "Store.LOCK", '\\');
        let b = lock_key(r"\\?\c:\users\me\app\", "store.lock", '\\');
        assert_eq!(a, r"\\?\c:\users\me\app\store.lock");
        assert_eq!(a, b);
        assert_eq!(object_name(&a), object_name(&b));
        // Non-ASCII letters fold too (NTFS compares them case-insensitively as well).
        assert_eq!(
            lock_key(r"C:\ÄRGER", "Ü.lock", '\\'),
            lock_key(r"C:\ärger", "ü.lock", '\\')
        );
    }

    #[test]
    fn different_files_and_directories_get_different_names() {
        let names = [
            lock_key(r"C:\app", "a.lock", '\\'),
            lock_key(r"C:\app", "b.lock", '\\'),
            lock_key(r"C:\app\sub", "a.lock", '\\'),
            lock_key(r"D:\app", "a.lock", '\\'),
        ]
        .map(|k| object_name(&k));
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn resolution_follows_the_file_system_not_the_spelling() {
        // One directory reached as itself, through `..`, and through a symbolic link. On
        // Windows creating one needs a privilege (or developer mode), and Wine 8 reports
        // success without creating anything: the link part runs only where a link exists.
        let dir = crate::test_dir();
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sub")).unwrap();
        let direct = resolve_key(&real, "x.lock").unwrap();
        let dotted = resolve_key(&real.join("sub").join(".."), "x.lock").unwrap();
        assert_eq!(direct, dotted);
        let link = dir.path().join("alias");
        #[cfg(unix)]
        let linked = std::os::unix::fs::symlink(&real, &link);
        #[cfg(windows)]
        let linked = std::os::windows::fs::symlink_dir(&real, &link);
        #[cfg(not(any(unix, windows)))] // WASI: std has no stable symlink call
        let linked: std::io::Result<()> = Err(std::io::ErrorKind::Unsupported.into());
        if linked.is_ok() && std::fs::symlink_metadata(&link).is_ok() {
            assert_eq!(resolve_key(&link, "x.lock").unwrap(), direct);
        }
        assert_ne!(resolve_key(&real.join("sub"), "x.lock").unwrap(), direct);
        assert!(resolve_key(&dir.path().join("missing"), "x.lock").is_err());
    }
}
