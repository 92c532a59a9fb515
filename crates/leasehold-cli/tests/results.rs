//! Black-box tests of `leasehold results`: real processes hold an ID's operation lease (through
//! `leasehold run` on its lock file) while real `results` verbs run; synchronisation is by
//! pipes only.
#![cfg(unix)] // POSIX processes, signals and lock files; Windows: crates/leasehold/tests/windows.rs

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

use common::{gave_up_after, hold, leasehold, release, wait_until_free};
use leasehold::patterns::keyed::lock_name;
use testkit::{Out, Proc, assert_one_line_error, run};

/// `leasehold results --root ROOT`.
fn results(root: &Path) -> Command {
    let mut c = leasehold();
    c.arg("results").arg("--root").arg(root);
    c
}

/// The operation lock file of `id` (the name's hashing is checked in the library's tests).
fn lock(root: &Path, id: &str) -> PathBuf {
    root.join(".result-locks-v1").join(lock_name(id))
}

/// Stages `id` from a fresh source directory holding `files` (relative path, content).
fn stage(root: &Path, id: &str, files: &[(&str, &str)]) {
    let src = tempfile::tempdir().unwrap();
    for (rel, body) in files {
        let p = src.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
    let out = run(results(root).args(["stage", id, "--from"]).arg(src.path()));
    assert_eq!(out.code, 0, "{out:?}");
}

/// Every path under `dir` with its content (files) or a marker (anything else).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            out.insert(e.path(), b"<dir>".to_vec());
            out.extend(snapshot(&e.path()));
        } else if ft.is_file() {
            out.insert(e.path(), fs::read(e.path()).unwrap());
        } else {
            out.insert(e.path(), b"<other>".to_vec());
        }
    }
    out
}

/// Starts `results ARGS` (waiting up to 60 s) and returns once it has announced on stderr
/// that it is waiting for a busy ID.
fn spawn_parked(root: &Path, args: &[&OsStr]) -> (Proc, BufReader<ChildStderr>) {
    let mut cmd = results(root);
    cmd.args(["--timeout", "60"])
        .args(args)
        .stderr(Stdio::piped());
    let mut waiter = Proc::spawn(&mut cmd);
    let mut stderr = BufReader::new(waiter.child.stderr.take().unwrap());
    let mut notice = String::new();
    stderr.read_line(&mut notice).unwrap();
    assert!(
        notice.starts_with("leasehold: waiting for result"),
        "{notice:?}"
    );
    (waiter, stderr)
}

/// Runs `results ARGS` while another process holds `id`'s lease: proves that it parks
/// without changing anything under `watched`, then releases the holder and returns how the
/// waiter finished.
fn parks_until_released(root: &Path, id: &str, args: &[&OsStr], watched: &[&Path]) -> Out {
    let holder = hold(&lock(root, id));
    let before: Vec<_> = watched.iter().map(|d| snapshot(d)).collect();
    let (mut waiter, mut stderr) = spawn_parked(root, args);
    let during: Vec<_> = watched.iter().map(|d| snapshot(d)).collect();
    assert_eq!(before, during, "changed the store while parked");
    release(holder);
    let mut out = String::new();
    waiter.stdout.read_to_string(&mut out).unwrap();
    let mut err = String::new();
    stderr.read_to_string(&mut err).unwrap();
    let code = waiter.wait().code().unwrap_or(-1);
    Out {
        code,
        stdout: out,
        stderr: err,
    }
}

fn os<'a>(args: &'a [&'a str]) -> Vec<&'a OsStr> {
    args.iter().map(OsStr::new).collect()
}

#[test]
fn apply_parks_without_writing_then_completes_after_release() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("root");
    let target = home.path().join("target");
    fs::create_dir(&target).unwrap();
    stage(&root, "r1", &[("a.txt", "A"), ("sub/b.txt", "B")]);
    let mut args = os(&["apply", "r1", "--to"]);
    args.push(target.as_os_str());
    let out = parks_until_released(&root, "r1", &args, &[&root, &target]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(fs::read_to_string(target.join("a.txt")).unwrap(), "A");
    assert_eq!(fs::read_to_string(target.join("sub/b.txt")).unwrap(), "B");
    assert!(!root.join("results/r1").exists());
}

#[test]
fn discard_and_abort_park_then_remove_after_release() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    for verb in ["discard", "abort"] {
        stage(root, "r1", &[("a", "1")]);
        let out = run(results(root).args(["finish", "r1"]));
        assert_eq!(out.code, 0, "{out:?}");
        let out = parks_until_released(root, "r1", &os(&[verb, "r1"]), &[root]);
        assert_eq!(out.code, 0, "{verb}: {out:?}");
        assert!(!root.join("results/r1").exists(), "{verb}");
        assert!(!root.join("published/r1.json").exists(), "{verb}");
    }
}

#[test]
fn paths_of_an_empty_result_parks_then_removes_it() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, "empty", &[]);
    let out = parks_until_released(root, "empty", &os(&["paths", "empty"]), &[root]);
    assert_eq!((out.code, out.stdout.as_str()), (0, ""), "{out:?}");
    assert!(!root.join("results/empty").exists());
}

#[test]
fn finish_parks_then_publishes_after_release() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, "r1", &[("a", "1")]);
    let out = parks_until_released(root, "r1", &os(&["finish", "r1"]), &[root]);
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(results(root).args(["--json", "pending"]));
    assert_eq!(out.stdout.trim(), r#"["r1"]"#, "{out:?}");
}

/// Could not be admitted within --timeout: exit 75 and nothing changed; `finish` says that
/// durability is unavailable.
#[test]
fn every_verb_gives_up_with_75_and_changes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("root");
    let target = home.path().join("target");
    stage(&root, "r1", &[("a", "1")]);
    stage(&root, "empty", &[]);
    let verbs: [&[&str]; 6] = [
        &["apply", "r1", "--to", target.to_str().unwrap()],
        &["discard", "r1"],
        &["abort", "r1"],
        &["finish", "r1"],
        &["paths", "r1"],
        &["paths", "empty"],
    ];
    for args in verbs {
        let id = args[1];
        let holder = hold(&lock(&root, id));
        let before = snapshot(home.path());
        let out = run(results(&root).args(["--timeout", "0.2"]).args(args));
        assert_eq!(out.code, 75, "{args:?}: {out:?}");
        assert_one_line_error(&out, "held by another process");
        let waited = gave_up_after(out.stderr.trim_end());
        assert!(waited.is_some_and(|s| (0.2..1.0).contains(&s)), "{out:?}");
        if args[0] == "finish" {
            assert!(out.stderr.contains("durability unavailable"), "{out:?}");
        }
        assert_eq!(snapshot(home.path()), before, "{args:?} changed something");
        release(holder);
    }
}

#[test]
fn sweep_skips_busy_ids_without_waiting() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, "busy", &[("a", "1")]);
    stage(root, "idle", &[("a", "1")]);
    let holder = hold(&lock(root, "busy"));
    let started = Instant::now();
    // Default --timeout is 30 s: sweep must not use it.
    let out = run(results(root).args(["sweep", "--older-than", "0", "--json"]));
    assert!(started.elapsed() < Duration::from_secs(5), "sweep waited");
    assert_eq!(out.code, 0, "{out:?}");
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({"removed": ["idle"], "skipped": ["busy"]})
    );
    assert!(root.join("results/busy/entry.json").is_file());
    release(holder);
    let out = run(results(root).args(["sweep", "--older-than", "0"]));
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "removed busy\n"),
        "{out:?}"
    );
}

#[test]
fn lease_is_released_on_normal_exit_and_on_sigkill() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, "r1", &[("a", "1")]);
    let no_wait = |verb: &str| run(results(root).args(["--timeout", "0", verb, "r1"]));

    let holder = hold(&lock(root, "r1"));
    assert_eq!(no_wait("paths").code, 75);
    release(holder);
    assert_eq!(no_wait("paths").code, 0);

    let mut holder = hold(&lock(root, "r1"));
    assert_eq!(no_wait("discard").code, 75);
    holder.kill_group();
    wait_until_free(&lock(root, "r1"));
    let out = no_wait("discard");
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!root.join("results/r1").exists());
}

#[test]
fn disjoint_ids_progress_while_one_is_held() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, "held", &[("a", "1")]);
    stage(root, "free", &[("a", "1")]);
    let holder = hold(&lock(root, "held"));
    for verb in ["paths", "finish", "discard"] {
        let out = run(results(root).args(["--timeout", "0", verb, "free"]));
        assert_eq!(out.code, 0, "{verb}: {out:?}");
    }
    stage(root, "new", &[("b", "2")]);
    release(holder);
}

#[test]
fn whitespace_aliases_share_one_lease() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, " r1\t", &[("a", "1")]);
    assert!(root.join("results/r1").is_dir());
    let holder = hold(&lock(root, "r1"));
    for alias in ["r1", "  r1", "r1\n"] {
        let out = run(results(root).args(["--timeout", "0", "discard", alias]));
        assert_eq!(out.code, 75, "{alias:?}: {out:?}");
    }
    release(holder);
    let out = run(results(root).args(["--timeout", "0", "discard", " r1 "]));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(lock_files(root), [lock_name("r1")]);
}

#[test]
fn unknown_unsafe_and_empty_ids_are_exit_2_and_create_no_lock_file() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("root");
    stage(&root, "known", &[("a", "1")]);
    let before = snapshot(home.path());
    let target = home.path().join("target");
    for id in ["nope", "r2", " other ", "known2", "x.y-z_1"] {
        for args in [
            vec!["paths", id],
            vec!["finish", id],
            vec!["discard", id],
            vec!["abort", id],
            vec!["apply", id, "--to", target.to_str().unwrap()],
        ] {
            let out = run(results(&root).args(&args));
            assert_eq!(out.code, 2, "{args:?}: {out:?}");
            assert_one_line_error(&out, "unknown-result");
        }
    }
    for id in ["", "   ", "../escape", "a/b", ".hidden"] {
        let out = run(results(&root).args(["paths", id]));
        assert_eq!(out.code, 2, "{id:?}: {out:?}");
        assert_one_line_error(&out, "invalid result ID");
    }
    assert_eq!(
        snapshot(home.path()),
        before,
        "an unknown ID created something"
    );
    // Without a managed root at all, nothing is created either.
    let absent = home.path().join("absent");
    let out = run(results(&absent).args(["discard", "r1"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert!(!absent.exists());
}

#[test]
fn lock_file_keeps_its_inode_across_cleanup() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, "r1", &[("a", "1")]);
    let ino = fs::metadata(lock(root, "r1")).unwrap().ino();
    let out = run(results(root).args(["discard", "r1"]));
    assert_eq!(out.code, 0, "{out:?}");
    stage(root, "r1", &[("a", "1")]);
    let out = run(results(root)
        .args(["apply", "r1", "--to"])
        .arg(home.path().join("t")));
    assert_eq!(out.code, 0, "{out:?}");
    stage(root, "r1", &[]);
    let out = run(results(root).args(["paths", "r1"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!root.join("results/r1").exists());
    assert_eq!(fs::metadata(lock(root, "r1")).unwrap().ino(), ino);
}

#[test]
fn malformed_namespace_entries_are_refused_and_left_as_they_are() {
    use std::os::unix::fs::FileTypeExt;
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("root");
    let src = tempfile::tempdir().unwrap();
    fs::create_dir_all(root.join(".result-locks-v1")).unwrap();
    let victim = home.path().join("victim");
    fs::write(&victim, "victim").unwrap();
    let lock = lock(&root, "r1");
    type Check = fn(&fs::FileType) -> bool;
    let kinds: [(&str, Check); 3] = [
        ("directory", |t| t.is_dir()),
        ("symlink", |t| t.is_symlink()),
        ("fifo", |t| t.is_fifo()),
    ];
    for (kind, is_kind) in kinds {
        match kind {
            "directory" => fs::create_dir(&lock).unwrap(),
            "symlink" => std::os::unix::fs::symlink(&victim, &lock).unwrap(),
            _ => assert!(
                Command::new("mkfifo")
                    .arg(&lock)
                    .status()
                    .unwrap()
                    .success()
            ),
        }
        let out = run(results(&root)
            .args(["stage", "r1", "--from"])
            .arg(src.path()));
        assert_eq!(out.code, 2, "{kind}: {out:?}");
        assert_one_line_error(&out, "not a regular file");
        assert!(!root.join("results/r1").exists(), "{kind}: staged anyway");
        // A known ID (its candidate exists) is refused the same way.
        fs::create_dir_all(root.join("results/r1")).unwrap();
        let out = run(results(&root).args(["discard", "r1"]));
        assert_eq!(out.code, 2, "{kind}: {out:?}");
        assert!(root.join("results/r1").exists(), "{kind}: discarded anyway");
        fs::remove_dir(root.join("results/r1")).unwrap();
        assert!(
            is_kind(&fs::symlink_metadata(&lock).unwrap().file_type()),
            "{kind}"
        );
        assert_eq!(fs::read(&victim).unwrap(), b"victim");
        if kind == "directory" {
            fs::remove_dir(&lock).unwrap();
        } else {
            fs::remove_file(&lock).unwrap();
        }
    }
}

#[test]
fn json_shapes_result_exists_and_default_root() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("results");
    let src = tempfile::tempdir().unwrap();
    fs::write(src.path().join("a"), "1").unwrap();
    let in_home = |args: &[&str]| {
        let mut c = leasehold();
        c.env("LEASEHOLD_HOME", home.path())
            .arg("results")
            .args(args);
        c
    };
    let out = run(in_home(&["stage", "r1", "--from"]).arg(src.path()));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(root.join("results/r1/entry.json").is_file());
    let out = run(in_home(&["stage", "r1", "--from"]).arg(src.path()));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "result-exists");
    let out = run(&mut in_home(&["--json", "paths", "r1"]));
    assert_eq!(out.stdout.trim(), r#"["a"]"#);
    let out = run(&mut in_home(&["--json", "pending"]));
    assert_eq!(out.stdout.trim(), "[]");
    run(&mut in_home(&["finish", "r1"]));
    let out = run(&mut in_home(&["pending"]));
    assert_eq!(out.stdout, "r1\n");
}

#[test]
fn sigterm_while_waiting_stops_promptly_with_nothing_changed() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path();
    stage(root, "r1", &[("a", "1")]);
    let holder = hold(&lock(root, "r1"));
    let before = snapshot(root);
    let (mut waiter, _stderr) = spawn_parked(root, &os(&["discard", "r1"]));
    waiter.signal(rustix::process::Signal::TERM);
    let status = waiter
        .wait_timeout(Duration::from_secs(5))
        .expect("stops promptly");
    assert_eq!(status.code(), Some(143));
    assert_eq!(snapshot(root), before);
    release(holder);
}

/// The per-ID lock files under `root` (the collector lock left out).
fn lock_files(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root.join(".result-locks-v1"))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn gc_removes_only_unheld_lock_files_of_ids_without_records() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    for id in ["kept", "gone", "held", "published"] {
        stage(&root, id, &[("a.txt", "a")]);
    }
    assert_eq!(run(results(&root).args(["finish", "published"])).code, 0);
    // A candidate removed by hand leaves its ID with a lock file and no record.
    fs::remove_dir_all(root.join("results").join("published")).unwrap();
    for id in ["gone", "held"] {
        assert_eq!(run(results(&root).args(["discard", id])).code, 0);
    }
    // Another process holds the lease of "held" (no record any more).
    let holder = hold(&lock(&root, "held"));
    let out = run(results(&root).args(["--json", "gc"]));
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"removed": 1, "kept": 3}));
    let mut expected = vec![lock_name("kept"), lock_name("held"), lock_name("published")];
    expected.sort();
    assert_eq!(lock_files(&root), expected);
    // The held ID stays exclusive: a second holder cannot have it.
    let busy = run(results(&root).args(["--timeout", "0", "discard", "held"]));
    assert_eq!(busy.code, 75, "{busy:?}");
    release(holder);
    // Too young for --older-than: kept; then collected. Text output says both counts.
    let out = run(results(&root).args(["gc", "--older-than", "3600"]));
    assert_eq!(out.stdout, "removed 0 lock file(s), kept 3\n", "{out:?}");
    let out = run(results(&root).args(["gc"]));
    assert_eq!(out.stdout, "removed 1 lock file(s), kept 2\n", "{out:?}");
    assert!(!lock(&root, "held").exists());
    // A collected ID without a record is unknown again, and nothing is created for it.
    let out = run(results(&root).args(["discard", "held"]));
    assert_one_line_error(&out, "unknown-result");
    assert_eq!(out.code, 2);
    assert!(!lock(&root, "held").exists());
    // A missing root is nothing to collect.
    let out = run(results(&home.path().join("absent")).args(["--json", "gc"]));
    assert_eq!(
        (out.code, out.stdout.trim()),
        (0, r#"{"kept":0,"removed":0}"#)
    );
}

/// Whether process `pid` holds a `flock` lock on anything (a granted line of `/proc/locks`).
fn holds_a_lock(pid: u32) -> bool {
    let pid = pid.to_string();
    testkit::proc_locks()
        .lines()
        .any(|l| !l.contains("->") && l.split_whitespace().nth(4) == Some(pid.as_str()))
}

/// `results gc` held the collector lock for its whole run (and listed every
/// record again every 256 lock files), so at 100,000 lock files an unrelated `paths ID
/// --timeout 0.2` failed with 75. Now it collects in batches and releases the collector lock
/// between them: during a collection of 100,000 lock files (with 5,000 records to list),
/// `paths` of a live ID is admitted, and the collection goes on and removes them all. The
/// collection is known to be under way by the locks it holds (`/proc/locks`), and still to
/// be under way once `paths` is done (it has not exited).
#[test]
fn a_gc_of_a_large_namespace_never_holds_up_another_id() {
    const LOCK_FILES: usize = 100_000;
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    stage(&root, "live", &[("a.txt", "a")]);
    let ns = root.join(".result-locks-v1");
    for i in 0..LOCK_FILES {
        fs::File::create(ns.join(lock_name(&format!("gone-{i}")))).unwrap();
    }
    // Records are listed by name: directories are enough to make each listing cost.
    for i in 0..5_000 {
        fs::create_dir(root.join("results").join(format!("listed-{i}"))).unwrap();
    }
    let mut gc = Proc::spawn(results(&root).args(["--json", "gc"]));
    testkit::until("gc is collecting", || holds_a_lock(gc.pid()));
    let started = Instant::now();
    let out = run(results(&root).args(["--timeout", "0.2", "paths", "live"]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "a.txt\n"), "{out:?}");
    assert!(
        gc.child.try_wait().unwrap().is_none(),
        "the collection ended before `paths` did ({:?}): it showed nothing",
        started.elapsed()
    );
    let report: serde_json::Value = serde_json::from_str(&gc.line()).unwrap();
    assert_eq!(report["removed"], LOCK_FILES, "{report}");
    assert!(gc.wait().success());
    assert_eq!(lock_files(&root), [lock_name("live")]);
}

#[test]
fn apply_refuses_a_symlinked_directory_inside_target_and_writes_nothing_outside() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    stage(&root, "x", &[("sub/evil.txt", "payload"), ("a.txt", "a")]);
    let target = home.path().join("target");
    let outside = home.path().join("outside");
    fs::create_dir_all(&target).unwrap();
    fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, target.join("sub")).unwrap();
    let out = run(results(&root).args(["apply", "x", "--to"]).arg(&target));
    assert_ne!(out.code, 0, "{out:?}");
    assert_one_line_error(&out, "symbolic link");
    assert!(out.stderr.contains("sub"), "{out:?}");
    assert!(snapshot(&outside).is_empty(), "apply wrote outside TARGET");
    // The candidate is kept for a retry once TARGET is repaired.
    assert!(root.join("results/x/entry.json").is_file());
}

#[test]
fn discard_through_a_symlinked_results_area_removes_nothing_outside_the_root() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    stage(&root, "build", &[("a.txt", "a")]);
    // Another user swaps ROOT/results for a link to a directory that holds a `build` that is
    // not a result.
    let elsewhere = home.path().join("elsewhere");
    fs::create_dir_all(elsewhere.join("build")).unwrap();
    fs::write(elsewhere.join("build/precious"), "keep").unwrap();
    fs::rename(root.join("results"), home.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("results")).unwrap();
    let before = snapshot(&elsewhere);
    let out = run(results(&root).args(["discard", "build"]));
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!(
        snapshot(&elsewhere),
        before,
        "discard removed outside the root"
    );
    // A real directory without entry.json is not a candidate either.
    fs::remove_file(root.join("results")).unwrap();
    fs::create_dir_all(root.join("results/build")).unwrap();
    fs::write(root.join("results/build/precious"), "keep").unwrap();
    let out = run(results(&root).args(["discard", "build"]));
    assert_ne!(out.code, 0, "{out:?}");
    assert!(root.join("results/build/precious").exists());
}

#[test]
fn staged_and_applied_files_lose_set_id_bits_and_candidate_dirs_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    let src = home.path().join("src");
    fs::create_dir_all(src.join("bin")).unwrap();
    fs::write(src.join("bin/tool"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(src.join("bin/tool"), fs::Permissions::from_mode(0o6755)).unwrap();
    let out = run(results(&root).args(["stage", "x", "--from"]).arg(&src));
    assert_eq!(out.code, 0, "{out:?}");
    let staged = root.join("results/x/files/bin/tool");
    assert_eq!(fs::metadata(&staged).unwrap().mode() & 0o7000, 0);
    for dir in ["results/x", "results/x/files", "results/x/files/bin"] {
        assert_eq!(
            fs::metadata(root.join(dir)).unwrap().mode() & 0o777,
            0o700,
            "{dir}"
        );
    }
    let target = home.path().join("t");
    let out = run(results(&root).args(["apply", "x", "--to"]).arg(&target));
    assert_eq!(out.code, 0, "{out:?}");
    let mode = fs::metadata(target.join("bin/tool")).unwrap().mode();
    assert_eq!(mode & 0o7000, 0, "{mode:o}");
    assert_eq!(mode & 0o100, 0o100, "{mode:o}");
}

#[test]
fn an_unusable_root_or_target_is_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("file");
    fs::write(&file, "x").unwrap();
    let src = home.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "a").unwrap();
    let out = run(results(&file).args(["stage", "x", "--from"]).arg(&src));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "file");
    let root = home.path().join("r");
    stage(&root, "x", &[("a", "a")]);
    let out = run(results(&root).args(["apply", "x", "--to"]).arg(&file));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "file");
    assert!(root.join("results/x/entry.json").is_file());
}

#[test]
fn a_staged_tree_with_a_fifo_or_symlink_is_refused_promptly() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    let src = home.path().join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("a"), "a").unwrap();
    mkfifo(&src.join("fifo"));
    let started = Instant::now();
    let out = run(results(&root).args(["stage", "x", "--from"]).arg(&src));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "FIFO");
    assert!(started.elapsed() < Duration::from_secs(2));
    fs::remove_file(src.join("fifo")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("link")).unwrap();
    let out = run(results(&root).args(["stage", "x", "--from"]).arg(&src));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "symbolic link");
    assert!(!root.join("results/x").exists());
}

#[test]
fn paths_quotes_names_a_line_could_not_carry() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    stage(
        &root,
        "x",
        &[
            ("plain.txt", "a"),
            ("two\nlines", "b"),
            ("back\\slash", "c"),
            ("\"q", "d"),
        ],
    );
    let out = run(results(&root).args(["paths", "x"]));
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            r#""\"q""#,
            r#""back\\slash""#,
            "plain.txt",
            r#""two\nlines""#
        ],
        "{out:?}"
    );
    // Each quoted line is a JSON string naming the path.
    let decoded: Vec<String> = lines
        .iter()
        .map(|l| match l.starts_with('"') {
            true => serde_json::from_str(l).unwrap(),
            false => l.to_string(),
        })
        .collect();
    assert_eq!(decoded, ["\"q", "back\\slash", "plain.txt", "two\nlines"]);
}

#[test]
fn sweep_removes_leftovers_of_killed_operations_under_the_ids_lease() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("r");
    stage(&root, "keep", &[("a", "a")]);
    // What a SIGKILLed stage, discard and publish leave behind.
    fs::create_dir_all(root.join("results/.stage-dead/files")).unwrap();
    fs::write(root.join("results/.stage-dead/files/x"), "x").unwrap();
    fs::create_dir_all(root.join("results/.trash-gone")).unwrap();
    fs::create_dir_all(root.join("published")).unwrap();
    fs::write(root.join("published/.keep.json.tmp.4242.0"), "{").unwrap();
    // A leftover whose ID is busy may be its owner's work in progress: kept.
    fs::create_dir_all(root.join("results/.stage-busy")).unwrap();
    let holder = hold(&lock(&root, "busy"));
    let out = run(results(&root).args(["sweep", "--older-than", "3600"]));
    assert_eq!(out.code, 0, "{out:?}");
    release(holder);
    let mut left: Vec<String> = fs::read_dir(root.join("results"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, [".stage-busy", "keep"]);
    assert_eq!(fs::read_dir(root.join("published")).unwrap().count(), 0);
}

#[test]
fn a_fifo_or_symlink_swapped_into_src_while_stage_waits_is_refused_and_never_hangs() {
    for swap in ["fifo", "symlink"] {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("r");
        let src = home.path().join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("a"), "a").unwrap();
        let secret = home.path().join("secret");
        fs::write(&secret, "secret").unwrap();
        // stage walks SRC, then waits for the ID's lease, which another process holds.
        let holder = hold(&lock(&root, "x"));
        let args = [
            OsStr::new("stage"),
            OsStr::new("x"),
            OsStr::new("--from"),
            src.as_os_str(),
        ];
        let (mut waiter, mut stderr) = spawn_parked(&root, &args);
        // Swapped atomically (rename over `a`): a walk made meanwhile sees one or the other.
        let aside = home.path().join("aside");
        match swap {
            "fifo" => mkfifo(&aside),
            _ => std::os::unix::fs::symlink(&secret, &aside).unwrap(),
        }
        fs::rename(&aside, src.join("a")).unwrap();
        release(holder);
        let status = waiter
            .wait_timeout(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{swap}: stage hung on what was swapped in"));
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{swap}: {err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("leasehold: ") && last.contains("src"),
            "{swap}: {err}"
        );
        assert!(
            !root.join("results/x").exists(),
            "{swap}: something was staged"
        );
        let staged = snapshot(&root);
        assert!(
            !staged.values().any(|v| v == b"secret"),
            "{swap}: the secret was staged"
        );
    }
}

/// Makes a FIFO at `path` (`mkfifo(1)`: portable across the POSIX targets).
fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A managed root or lock namespace that others may write could have its
/// lock files removed or replaced under their holders: it is refused (exit 2, one line naming
/// it and the mode) unless the user opts in with LEASEHOLD_ALLOW_SHARED=1, and nothing is
/// created or changed by the refusal.
#[cfg(unix)]
#[test]
fn a_root_or_namespace_others_may_write_is_refused_unless_shared_state_is_allowed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("a.txt"), b"a").unwrap();
    let out = run(results(&root)
        .args(["stage", "r1", "--from"])
        .arg(src.path()));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, &root.display().to_string());
    assert_one_line_error(&out, "may be written by group and others (mode 0777)");
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        0,
        "nothing created"
    );
    let out = run(results(&root)
        .env("LEASEHOLD_ALLOW_SHARED", "1")
        .args(["stage", "r1", "--from"])
        .arg(src.path()));
    assert_eq!(out.code, 0, "opted in: {out:?}");
    // The root made private again, but the namespace writable by others: refused too.
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let ns = root.join(".result-locks-v1");
    std::fs::set_permissions(&ns, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(results(&root).args(["discard", "r1"]));
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, &ns.display().to_string());
    assert!(
        root.join("results/r1").exists(),
        "the refused discard removed nothing"
    );
}
