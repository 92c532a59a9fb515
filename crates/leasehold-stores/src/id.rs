//! The stores' one safe-ID type: what a session ID and a result ID must be, stated once.
//!
//! Both kinds of ID become one directory entry inside a directory the store owns
//! (`DIR/ID/`, `ROOT/results/ID/`, `ROOT/published/ID.json`), so both obey one rule
//! ([`SafeId::RULE`]): whatever the caller passes, an ID cannot escape its directory (`..`,
//! `/`), hide among the store's own names (hidden names, starting with `.`, are the stores'
//! staging, trash and lock names) or name anything special. The CLI contract makes an unsafe
//! ID unusable input for either store.
//!
//! The one difference the contract makes is trimming: result IDs are trimmed ("IDs equal
//! after trimming are the same result and share one lease"), session IDs are taken as
//! given. That is the difference between the two constructors, [`SafeId::trimmed`] and
//! [`SafeId::new`]; the rule they check is the same one.

use std::ffi::OsStr;
use std::fmt;
use std::str::FromStr;

use leasehold::{Classify, ErrorClass};

/// An ID that is safe as one directory entry: 1 to [`MAX_LEN`](Self::MAX_LEN) characters
/// from `[A-Za-z0-9._-]`, not starting with `.` ([`RULE`](Self::RULE)).
///
/// Validation happens once, when one is made, so that everything holding a `SafeId` may use
/// it as a single directory name without looking again. An ID starting with `-` is valid
/// (command lines pass it after `--`).
///
/// ```
/// use leasehold_stores::id::SafeId;
///
/// assert_eq!(SafeId::new("run-42").unwrap().as_str(), "run-42");
/// assert_eq!(SafeId::trimmed("  r1\n").unwrap().as_str(), "r1");
/// for unsafe_id in ["", "..", "a/b", ".hidden", "tab\tname", " r1 "] {
///     assert!(SafeId::new(unsafe_id).is_err(), "{unsafe_id:?}");
/// }
/// assert!(SafeId::trimmed("   ").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SafeId(String);

/// An ID refused by [`SafeId`]'s rule: the ID as given and what is wrong with it. Each store
/// turns it into its own error, which names the store and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid ID {id:?}: {reason}; use {}", SafeId::RULE)]
pub struct IdError {
    /// The rejected ID, as given (lossily converted if it was not UTF-8).
    pub id: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Classify for IdError {
    /// Always [`ErrorClass::Usage`]: the caller's input is at fault, and nothing was read or
    /// created.
    fn class(&self) -> ErrorClass {
        ErrorClass::Usage
    }
}

/// Why an ID that is empty once trimmed is refused (also what the keyed pattern's own
/// refusal of an empty key becomes in the result store).
pub(crate) const EMPTY_AFTER_TRIM: &str = "it is empty after trimming whitespace";

impl SafeId {
    /// The longest ID accepted, in characters (bytes: all allowed characters are ASCII).
    pub const MAX_LEN: usize = 128;

    /// The rule, as messages state it.
    pub const RULE: &'static str = "1-128 characters from [A-Za-z0-9._-], not starting with '.'";

    /// `id` exactly as given (session IDs: no trimming).
    ///
    /// # Errors
    /// [`IdError`] when `id` breaks the rule.
    pub fn new(id: impl Into<String>) -> Result<SafeId, IdError> {
        let id = id.into();
        match refusal(&id, "it is empty") {
            None => Ok(SafeId(id)),
            Some(reason) => Err(IdError { id, reason }),
        }
    }

    /// `id` with surrounding whitespace trimmed (result IDs: IDs equal after trimming are
    /// one result).
    ///
    /// # Errors
    /// [`IdError`] naming `id` as given when the trimmed ID breaks the rule.
    pub fn trimmed(id: &str) -> Result<SafeId, IdError> {
        let t = id.trim();
        match refusal(t, EMPTY_AFTER_TRIM) {
            None => Ok(SafeId(t.to_string())),
            Some(reason) => Err(IdError {
                id: id.to_string(),
                reason,
            }),
        }
    }

    /// [`new`](Self::new) of an ID given as an OS string (a command-line argument, possibly
    /// not UTF-8, which no safe ID is).
    ///
    /// # Errors
    /// [`IdError`] when `id` is not UTF-8 or breaks the rule.
    pub fn from_os(id: &OsStr) -> Result<SafeId, IdError> {
        match id.to_str() {
            Some(s) => SafeId::new(s),
            None => Err(IdError {
                id: id.to_string_lossy().into_owned(),
                reason: OUTSIDE,
            }),
        }
    }

    /// Whether `name` is a safe ID exactly as it stands (a directory entry a store lists:
    /// anything else in its directory is not one of its IDs).
    pub fn is_safe(name: &str) -> bool {
        refusal(name, "").is_none()
    }

    /// The ID as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const OUTSIDE: &str = "it contains a character outside [A-Za-z0-9._-]";

/// The rule, once: why `id` is not safe (`empty` says why an empty one is not), or `None`.
fn refusal(id: &str, empty: &'static str) -> Option<&'static str> {
    if id.is_empty() {
        Some(empty)
    } else if id.len() > SafeId::MAX_LEN {
        Some("it is longer than 128 characters")
    } else if id.starts_with('.') {
        Some("it starts with '.'")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some(OUTSIDE)
    } else {
        None
    }
}

impl fmt::Display for SafeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SafeId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<SafeId, IdError> {
        SafeId::new(s)
    }
}

impl AsRef<str> for SafeId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_two_constructors() {
        for ok in [
            "a",
            "run-42",
            "A.b_c-D",
            "-starts-with-dash",
            &"x".repeat(128),
        ] {
            assert_eq!(SafeId::new(ok).unwrap().as_str(), ok);
            assert_eq!(SafeId::trimmed(ok).unwrap().as_str(), ok);
            assert!(SafeId::is_safe(ok));
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "tab\tname",
            "sp ace",
            "nul\0",
            "é",
            &"x".repeat(129),
        ] {
            let e = SafeId::new(bad).unwrap_err();
            assert_eq!(e.id, bad);
            assert!(!SafeId::is_safe(bad), "{bad:?}");
            assert_eq!(e.class(), ErrorClass::Usage);
        }
        // Trimming is the one difference: surrounding whitespace goes, inner stays refused.
        assert_eq!(SafeId::trimmed("  r1\n").unwrap().as_str(), "r1");
        assert!(SafeId::new(" r1").is_err());
        assert!(SafeId::trimmed("r 1").is_err());
        let e = SafeId::trimmed(" \t ").unwrap_err();
        assert_eq!((e.id.as_str(), e.reason), (" \t ", EMPTY_AFTER_TRIM));
        assert_eq!(SafeId::new("").unwrap_err().reason, "it is empty");
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            assert!(SafeId::from_os(OsStr::from_bytes(b"a\xff")).is_err());
        }
        assert_eq!(SafeId::from_os(OsStr::new("ok")).unwrap().as_str(), "ok");
    }
}
