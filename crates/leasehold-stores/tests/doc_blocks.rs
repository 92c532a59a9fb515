//! Every fenced example in the README, docs/examples.md and the two binding READMEs is run by
//! the test command, or is marked as not runnable with the reason. This test is the one place
//! that knows which runs each block, and what each marker means:
//!
//! * `rust` in README.md and docs/examples.md: this crate's doc tests (`src/lib.rs` includes
//!   both files), compiled and run by `cargo test --doc -p leasehold-stores --all-features`.
//!   rustdoc's own `rust,no_run` is compiled there and not run, for the reason [`NO_RUN`]
//!   gives.
//! * `js` in bindings/node/README.md: `bindings/node/test/readme.test.js`, run by
//!   `bindings/node/tests/node.rs` under `node --test`; each block's first line is a comment
//!   naming the file it is run as, ending in .mjs (an ES module) or .cjs (CommonJS).
//! * `python` in bindings/python/README.md: `bindings/python/tests/test_readme.py`, run by
//!   `bindings/python/tests/python.rs` under pytest.
//! * a block whose info string's second word is one of [`NOT_RUN`]'s markers: not run, for
//!   the reason given there.

use std::path::{Path, PathBuf};

/// Why a marked block is not run, by its marker (the info string's second word, so that the
/// first still names the language for highlighting: ```` ```sh install ````).
const NOT_RUN: &[(&str, &str)] = &[
    (
        "install",
        "installs published packages from crates.io, npm or PyPI: the tests use this tree, and a registry is no part of them",
    ),
    (
        "synopsis",
        "a command's grammar, with placeholders (LOCKFILE, COMMAND) where a user puts their own: not a command line; docs/cli.md's verbs are tested one by one in crates/leasehold-cli/tests",
    ),
    (
        "checkout",
        "builds or tests this repository with cargo or maturin, which is what runs this test",
    ),
];

/// Why a `rust,no_run` block is compiled and not run.
const NO_RUN: &str = "it connects to an etcd cluster at the URL the reader gives; crates/leasehold/tests/etcd.rs runs the same calls against a real etcd it starts";

/// Which runner takes an unmarked block of `lang` in `doc`, and where it is.
fn runner(doc: &str, lang: &str) -> Option<&'static str> {
    match (doc, lang) {
        ("README.md" | "docs/examples.md", "rust") => Some("crates/leasehold-stores/src/lib.rs"),
        ("docs/examples.md", "rust,no_run") if !NO_RUN.is_empty() => {
            Some("crates/leasehold-stores/src/lib.rs")
        }
        ("bindings/node/README.md", "js") => Some("bindings/node/test/readme.test.js"),
        ("bindings/python/README.md", "python") => Some("bindings/python/tests/test_readme.py"),
        _ => None,
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced blocks of `text`: info string, first line (1-based) of the body, body.
fn blocks(text: &str) -> Vec<(String, usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(info) = lines[i].strip_prefix("```") {
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && lines[end] != "```" {
                end += 1;
            }
            found.push((
                info.trim().to_string(),
                start + 1,
                lines[start..end].join("\n"),
            ));
            i = end;
        }
        i += 1;
    }
    found
}

#[test]
fn every_fenced_example_is_run_or_marked_with_why_not() {
    let mut unplaced = Vec::new();
    let mut counted = 0;
    for doc in [
        "README.md",
        "docs/examples.md",
        "bindings/node/README.md",
        "bindings/python/README.md",
    ] {
        let text = std::fs::read_to_string(root().join(doc)).expect("read the document");
        for (info, line, body) in blocks(&text) {
            counted += 1;
            let marker = info.split_whitespace().nth(1);
            if let Some(marker) = marker {
                if !NOT_RUN.iter().any(|(m, _)| *m == marker) {
                    unplaced.push(format!("{doc}:{line}: unknown marker {marker:?} ({info})"));
                }
                continue;
            }
            match runner(doc, &info) {
                Some(by) => {
                    let runs = std::fs::read_to_string(root().join(by))
                        .unwrap_or_else(|e| panic!("{by}: {e}"));
                    assert!(
                        runs.contains(doc.rsplit('/').next().unwrap_or(doc)),
                        "{by} runs {doc}'s examples"
                    );
                    if info == "js" {
                        let first = body.lines().next().unwrap_or("");
                        assert!(
                            first.starts_with("// ")
                                && (first.ends_with(".mjs") || first.ends_with(".cjs")),
                            "{doc}:{line}: a js example's first line is a comment naming the file it runs as, ending in .mjs or .cjs, not {first:?}"
                        );
                    }
                }
                None => unplaced.push(format!(
                    "{doc}:{line}: a ```{info} block that nothing runs: give it a runner, or a marker of {:?}",
                    NOT_RUN.iter().map(|(m, _)| *m).collect::<Vec<_>>()
                )),
            }
        }
    }
    assert!(
        counted >= 20,
        "only {counted} blocks found: has a document moved?"
    );
    assert!(unplaced.is_empty(), "{}", unplaced.join("\n"));
}

#[test]
fn the_readme_and_the_examples_are_doc_tests_of_this_crate() {
    let lib = std::fs::read_to_string(root().join("crates/leasehold-stores/src/lib.rs"))
        .expect("read src/lib.rs");
    for doc in [
        r#"include_str!("../../../README.md")"#,
        r#"include_str!("../../../docs/examples.md")"#,
    ] {
        assert!(lib.contains(doc), "src/lib.rs has #[doc = {doc}]");
    }
}
