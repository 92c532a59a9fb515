//! What the torture's self-check must find.

use serde_json::Value;

/// Asserts that `leasehold torture --json` printed a report (`stdout`) with violations, one
/// of them about the counter: how broken exclusion (the hidden `--break-exclusion`) shows.
/// In the counter's audit trail that is overlapping holds or, the recorded intervals being
/// subsets of the real ones, a worker entering again without an exit; in the counter itself,
/// a torn value. (A loaded full suite once found no overlap, only a re-entry.)
///
/// # Panics
///
/// When `stdout` is not one JSON report or names no violation about the counter.
pub fn assert_broken_exclusion_found(stdout: &str) {
    let details = violation_details(stdout);
    assert!(
        details.iter().any(|d| d.starts_with("counter")),
        "{details:?}"
    );
}

/// The violations `leasehold torture --json` printed (`stdout`), at least one.
///
/// # Panics
///
/// When `stdout` is not one JSON report or names no violation.
pub fn violation_details(stdout: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert!(v["violations"].as_u64().unwrap_or(0) > 0, "{v}");
    v["violation_details"]
        .as_array()
        .expect("a list of violations")
        .iter()
        .filter_map(|d| d.as_str().map(String::from))
        .collect()
}
