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
    assert_eq!(
        fs::read_dir(root.join(".result-locks-v1")).unwrap().count(),
        1
    );
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
