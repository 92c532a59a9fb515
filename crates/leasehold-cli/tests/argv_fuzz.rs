//! Random argv to the real `leasehold` binary: whatever the arguments, it exits with one of
//! the contract's statuses (0, 1, 2, 75) — never 101 (a panic) — and stderr never says
//! "panicked". Runs in a private home and working directory; the words are chosen so that
//! no case can wait without limit, copy outside the sandbox, or start a torture run.
#![cfg(unix)]

mod common;

use std::time::Duration;

use common::leasehold;
use proptest::prelude::*;
use testkit::Proc;

const WORDS: &[&str] = &[
    "run",
    "status",
    "registry",
    "results",
    "add",
    "remove",
    "list",
    "serve",
    "stage",
    "paths",
    "finish",
    "apply",
    "discard",
    "abort",
    "sweep",
    "pending",
    "--json",
    "--timeout",
    "--no-wait",
    "--conflict-exit-code",
    "--home",
    "--lease-path",
    "--root",
    "--from",
    "--to",
    "--older-than",
    "--help",
    "-h",
    "--version",
    "--",
    "-",
    "",
    " ",
    "0",
    "1",
    "-1",
    "0.5",
    "1e309",
    "NaN",
    "inf",
    "99999999999999999999",
    "a",
    "a.lock",
    "sub/b",
    "./c",
    "r1",
    " r1 ",
    ".hidden",
    "../nonexistent-xyz",
    "/nonexistent-xyz/x",
    "é",
    "日本",
    "%s",
    "\u{7f}",
];

/// A token: a word above, or any short string made safe (no absolute path, no `..`).
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(WORDS).prop_map(str::to_string),
        1 => "\\PC{0,12}".prop_map(|s: String| {
            let s = s.replace('\0', "");
            if s.starts_with('/') || s.contains("..") || s.trim() == "." { format!("x{}", s.replace("..", "_")) } else { s }
        }),
    ]
}

/// Whatever follows `--` is the command `run` would start: make it `true`.
fn argv() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(token(), 0..7).prop_map(|mut v| {
        if let Some(i) = v.iter().position(|t| t == "--") {
            v.truncate(i + 1);
            v.push("true".into());
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_argv_never_panics_and_exits_with_a_contract_status(args in argv()) {
        let sandbox = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(sandbox.path().join("sub")).unwrap();
        let mut cmd = leasehold();
        cmd.args(&args)
            .current_dir(sandbox.path())
            .env("LEASEHOLD_HOME", sandbox.path().join("home"))
            .env("HOME", sandbox.path());
        let mut p = Proc::spawn(cmd.stderr(std::process::Stdio::piped()));
        p.close_stdin();
        let status = p.wait_timeout(Duration::from_secs(20)).expect("exits by itself");
        let mut stderr = String::new();
        if let Some(mut e) = p.child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut stderr);
        }
        let code = status.code();
        prop_assert!(matches!(code, Some(0 | 1 | 2 | 75)), "{:?}: {:?} {}", args, status, stderr);
        prop_assert!(!stderr.contains("panicked"), "{:?}: {}", args, stderr);
    }
}
