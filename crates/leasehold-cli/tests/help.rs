//! The help a user reads and the usage errors a user meets, black-box:
//! every page of `--help` describes every argument, option and subcommand, states each
//! default once, and lists `--etcd` as working only where it was built; `run --help` gives
//! `run`'s own exit statuses; and COMMAND written after LOCKFILE without `--` gets a tip
//! that says to put `--` before it.
#![cfg(unix)]

mod common;

use common::leasehold;
use testkit::run;

/// Whether the binary under test was built with the etcd arbiter (the integration tests are
/// built with the package's features).
const ETCD_BUILT: bool = cfg!(feature = "etcd");

/// The help page of `leasehold WORDS... --help`.
fn help(words: &[&str]) -> String {
    let out = run(leasehold().args(words).arg("--help"));
    assert_eq!(out.code, 0, "{words:?}: {out:?}");
    assert_eq!(out.stderr, "", "{words:?}");
    out.stdout
}

/// The entries of a help page's section (`Commands:`, `Arguments:`, `Options:`): each entry
/// as (name, description), the description empty when there is none. clap lays a page out
/// in one of two ways: a description beside its name, or — when one of them is long — each
/// description on the lines below its name, indented deeper, entries apart by blank lines.
fn entries(page: &str, section: &str) -> Vec<(String, String)> {
    let lines = page
        .lines()
        .skip_while(|l| *l != section)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("  "));
    let mut found: Vec<(String, String)> = Vec::new();
    for line in lines {
        let entry = line.trim_start();
        if entry.is_empty() {
            continue;
        }
        let indent = line.len() - entry.len();
        if let Some(last) = found.last_mut().filter(|_| indent >= 8) {
            // A description below its name (or a wrapped one).
            if !last.1.is_empty() {
                last.1.push(' ');
            }
            last.1.push_str(entry);
            continue;
        }
        // clap separates the name from its description by two spaces or more; a name
        // (`-w, --wait <SECS>`, `<PRIMARY>`) never holds two spaces in a row.
        match entry.split_once("  ") {
            Some((name, description)) => found.push((name.into(), description.trim().into())),
            None => found.push((entry.into(), String::new())),
        }
    }
    found
}

/// Every page under `leasehold`, as (its words, its text), depth first.
fn every_page() -> Vec<(Vec<String>, String)> {
    let mut pages = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(words) = todo.pop() {
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let page = help(&refs);
        for (name, _) in entries(&page, "Commands:") {
            if name != "help" {
                let mut next = words.clone();
                next.push(name);
                todo.push(next);
            }
        }
        pages.push((words, page));
    }
    pages
}

#[test]
fn every_help_page_describes_every_entry_and_states_each_default_once() {
    let pages = every_page();
    assert!(
        pages.len() > 15,
        "found the verbs and their subcommands: {}",
        pages.len()
    );
    for (words, page) in &pages {
        for section in ["Commands:", "Arguments:", "Options:"] {
            for (name, description) in entries(page, section) {
                assert!(
                    !description.is_empty(),
                    "leasehold {words:?} --help: {name} has no description:\n{page}"
                );
                // "(default 75) [default: 75]": the default once, in clap's own words.
                assert!(
                    !(description.contains("[default:") && description.contains("(default")),
                    "leasehold {words:?} --help: {name} states its default twice: {description}"
                );
            }
        }
    }
    // `leasehold help flock` is clap's page of the verb (its flock(1) argv has its own).
    let out = run(leasehold().args(["help", "flock"]));
    assert_eq!(out.code, 0, "{out:?}");
    for (name, description) in entries(&out.stdout, "Arguments:") {
        assert!(!description.is_empty(), "{name}: {}", out.stdout);
    }
}

#[test]
fn etcd_options_are_marked_where_etcd_is_not_built() {
    let mut seen = 0;
    for (words, page) in every_page() {
        for (name, description) in entries(&page, "Options:") {
            if name.starts_with("--etcd") {
                seen += 1;
                let marked = description.contains("not in this build");
                assert_eq!(
                    marked, !ETCD_BUILT,
                    "leasehold {words:?} --help: {name}: {description}"
                );
            }
            // The options that only mean something with --etcd are not listed without it.
            if !ETCD_BUILT {
                for only_with_etcd in ["--ttl", "--prefix", "--grace"] {
                    assert!(
                        !name.starts_with(only_with_etcd),
                        "leasehold {words:?} --help lists {name}"
                    );
                }
            }
        }
    }
    assert!(
        seen >= 5,
        "run, status, registry (and its verbs), bench, torture: {seen}"
    );
    // Used anyway, it says how to get it (exit 1, one line) — with the feature, it would
    // try to connect instead.
    if !ETCD_BUILT {
        let out = run(leasehold().args(["run", "--etcd", "http://127.0.0.1:1", "n", "--", "true"]));
        assert_eq!(out.code, 1, "{out:?}");
        testkit::assert_one_line_error(&out, "--features etcd");
    }
}

#[test]
fn run_help_lists_runs_own_exit_statuses() {
    let page = help(&["run"]);
    let statuses = page
        .split_once("Exit status:")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no exit statuses in run --help:\n{page}"));
    for needle in [
        "COMMAND's",
        "128+N",
        "126",
        "127",
        "75",
        "--conflict-exit-code",
        "130",
        "143",
        "74",
        "2 ",
        "1 ",
    ] {
        assert!(
            statuses.contains(needle),
            "run --help's exit statuses lack {needle:?}:\n{statuses}"
        );
    }
}

/// `run LOCK echo hi`: clap says "unexpected argument 'echo' found" and stops there; the tip
/// says what to write instead. Nothing runs and nothing is created.
#[test]
fn command_after_lockfile_without_double_dash_gets_a_tip() {
    let tmp = tempfile::tempdir().unwrap();
    let lock = tmp.path().join("x.lock");
    for args in [&["echo", "hi"][..], &["echo"], &["sh", "-c", "exit 3"]] {
        let out = run(leasehold().arg("run").arg(&lock).args(args));
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (2, ""),
            "{args:?}: {out:?}"
        );
        assert!(
            out.stderr.contains(&format!(
                "tip: COMMAND goes after `--`: leasehold run [OPTIONS] LOCKFILE -- {} [ARGS...]",
                args[0]
            )),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!lock.exists(), "a usage error opens nothing");
    }
    // Options before LOCKFILE change nothing; an unexpected *option* keeps clap's own tip.
    let out = run(leasehold()
        .args(["run", "--no-wait"])
        .arg(&lock)
        .arg("echo"));
    assert!(
        out.stderr.contains("tip: COMMAND goes after `--`"),
        "{out:?}"
    );
    let out = run(leasehold().arg("run").arg(&lock).arg("-x"));
    assert_eq!(out.code, 2);
    assert!(!out.stderr.contains("COMMAND goes after"), "{out:?}");
    // Other verbs' unexpected arguments get no such tip.
    let out = run(leasehold().args(["status"]).arg(&lock).arg("echo"));
    assert_eq!(out.code, 2);
    assert!(!out.stderr.contains("COMMAND goes after"), "{out:?}");
    // With `--` it runs.
    let out = run(leasehold().arg("run").arg(&lock).args(["--", "echo", "hi"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "hi\n"), "{out:?}");
}
