//! The result store under interruption: `results` verbs stopped by SIGINT/SIGTERM
//! once admitted, killed with SIGKILL part-way, and run beside another
//! operation on the same ID after the lock namespace was moved — each against the
//! real binary with real processes.
//!
//! Synchronisation is by looking, never by sleeping: a test waits (`testkit::until`) until
//! the operation's work is visible on disk, stops the process with SIGSTOP and waits until
//! the kernel shows it stopped (`/proc/PID/task/*/stat`), then sends the signal under test
//! and SIGCONT, so that the signal lands part-way through the work wherever the machine's
//! speed put it. A try whose operation finished before it could be stopped proves nothing
//! and is made again with a fresh store.
#![cfg(unix)]

mod common;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::leasehold;
use rustix::process::Signal;
use testkit::{Out, Proc, assert_one_line_error, run, until};

/// A safety bound on a process that must exit (normally within milliseconds).
const BOUND: Duration = Duration::from_secs(30);

/// How many fresh stores a test tries before it gives up establishing its premise.
const TRIES: usize = 5;

fn results(root: &Path) -> Command {
    let mut c = leasehold();
    c.arg("results").arg("--root").arg(root);
    c
}

/// Whether this machine shows thread states in `/proc` (needed to see a SIGSTOP land).
fn can_see_stops(test: &str) -> bool {
    let ok = Path::new("/proc/self/task").is_dir();
    if !ok {
        eprintln!("SKIP: {test}: needs /proc/PID/task to see a SIGSTOP take effect");
    }
    ok
}

/// Plants the candidate `id` with `n` one-byte files `d/fNNNNN` as a stage leaves it (record
/// and files; written directly, without a stage's fsyncs, so that a large one is quick to
/// make). Returns the record's file list.
fn plant(root: &Path, id: &str, n: usize) -> Vec<String> {
    let files: Vec<String> = (0..n).map(|i| format!("d/f{i:05}")).collect();
    let candidate = root.join("results").join(id);
    fs::create_dir_all(candidate.join("files/d")).unwrap();
    for f in &files {
        fs::write(candidate.join("files").join(f), "x").unwrap();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let entry = serde_json::json!({"id": id, "created_ms": now, "files": files});
    fs::write(candidate.join("entry.json"), entry.to_string()).unwrap();
    files
}

/// How many entries the directory `dir` has (0 when it does not exist).
fn count(dir: &Path) -> usize {
    fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Starts `results ARGS` with stderr piped.
fn start(root: &Path, args: &[&str]) -> Proc {
    Proc::spawn(results(root).args(args).stderr(Stdio::piped()))
}

/// Whether `p` has exited.
fn exited(p: &mut Proc) -> bool {
    p.child.try_wait().expect("try_wait").is_some()
}

/// Waits until `begun` holds, then stops `p` (SIGSTOP) and waits until the stop has taken
/// effect. `false` when `p` exited first: the try proves nothing.
fn stop_when(p: &mut Proc, begun: impl Fn() -> bool) -> bool {
    until("the operation's work is visible", || begun() || exited(p));
    if exited(p) {
        return false;
    }
    p.signal(Signal::STOP);
    until("SIGSTOP took effect", || {
        testkit::stopped(p.pid()) || exited(p)
    });
    !exited(p)
}

/// Sends `sig` to the stopped `p`, continues it, and collects how it ended.
fn signal_and_finish(mut p: Proc, sig: Signal) -> Out {
    p.signal(sig);
    p.signal(Signal::CONT);
    let status = p.wait_timeout(BOUND).expect("the verb did not exit");
    let mut stderr = String::new();
    if let Some(e) = p.child.stderr.as_mut() {
        e.read_to_string(&mut stderr).unwrap();
    }
    Out {
        code: status.code().unwrap_or(-1),
        stdout: String::new(),
        stderr,
    }
}

/// `apply` obeys SIGTERM once admitted. Stopped part-way, it writes at
/// most the file it was writing, exits 143 with one line saying what it wrote and that the
/// candidate and publication are kept; applying again finishes the job.
#[test]
fn sigterm_stops_apply_at_the_next_file_and_keeps_the_candidate() {
    if !can_see_stops("sigterm_stops_apply_at_the_next_file_and_keeps_the_candidate") {
        return;
    }
    const N: usize = 400;
    for _ in 0..TRIES {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("r");
        let target = home.path().join("t");
        plant(&root, "x", N);
        assert_eq!(run(results(&root).args(["finish", "x"])).code, 0);
        let written = target.join("d");
        let mut p = start(&root, &["apply", "x", "--to", target.to_str().unwrap()]);
        let at_stop = match stop_when(&mut p, || count(&written) > 0) {
            true => count(&written),
            false => N,
        };
        if at_stop >= N - 1 {
            eprintln!("apply was too far to tell stopping from finishing; again");
            continue;
        }
        let out = signal_and_finish(p, Signal::TERM);
        assert_eq!(out.code, 143, "{out:?}");
        assert_one_line_error(&out, "apply stopped by a cancellation");
        assert_one_line_error(&out, "candidate and publication kept");
        let after = count(&written);
        assert!(
            after <= at_stop + 1,
            "went on after the signal: {at_stop} files at the stop, {after} at exit"
        );
        assert!(root.join("results/x/entry.json").is_file());
        assert!(root.join("published/x.json").is_file());
        let out = run(results(&root).args(["apply", "x", "--to"]).arg(&target));
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(count(&written), N);
        assert!(!root.join("results/x").exists());
        return;
    }
    panic!("apply finished {TRIES} times before it could be stopped part-way");
}

/// `stage` obeys SIGINT once admitted: it removes its partial copy, stages
/// nothing, and exits 130 with one line saying so.
#[test]
fn sigint_stops_stage_and_leaves_nothing_staged() {
    if !can_see_stops("sigint_stops_stage_and_leaves_nothing_staged") {
        return;
    }
    const N: usize = 400;
    let src = tempfile::tempdir().unwrap();
    for i in 0..N {
        fs::write(src.path().join(format!("f{i:05}")), "x").unwrap();
    }
    for _ in 0..TRIES {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("r");
        let partial = root.join("results/.stage-x/files");
        let mut p = start(
            &root,
            &["stage", "x", "--from", src.path().to_str().unwrap()],
        );
        if !stop_when(&mut p, || count(&partial) > 0) || root.join("results/x").exists() {
            eprintln!("stage finished before it could be stopped; again");
            continue;
        }
        let out = signal_and_finish(p, Signal::INT);
        assert_eq!(out.code, 130, "{out:?}");
        assert_one_line_error(&out, "stage stopped by a cancellation");
        assert_one_line_error(&out, "the candidate was not created");
        assert_eq!(
            count(&root.join("results")),
            0,
            "nothing staged, nothing left"
        );
        let out = run(results(&root)
            .args(["stage", "x", "--from"])
            .arg(src.path()));
        assert_eq!(out.code, 0, "{out:?}");
        return;
    }
    panic!("stage finished {TRIES} times before it could be stopped part-way");
}

/// `discard` obeys SIGTERM while it deletes a large candidate: the
/// candidate is already out of the store (no candidate, no publication), the verb exits 143
/// saying so, and what it had not deleted yet is left under the trash name, which `sweep`
/// removes.
#[test]
fn sigterm_stops_discard_while_it_deletes_and_sweep_finishes() {
    if !can_see_stops("sigterm_stops_discard_while_it_deletes_and_sweep_finishes") {
        return;
    }
    const N: usize = 20_000;
    for _ in 0..TRIES {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("r");
        plant(&root, "x", N);
        assert_eq!(run(results(&root).args(["finish", "x"])).code, 0);
        let trash: PathBuf = root.join("results/.trash-x");
        let mut p = start(&root, &["discard", "x"]);
        if !stop_when(&mut p, || trash.exists()) || !trash.exists() {
            eprintln!("discard finished before it could be stopped; again");
            continue;
        }
        let out = signal_and_finish(p, Signal::TERM);
        assert_eq!(out.code, 143, "{out:?}");
        assert_one_line_error(&out, "discard stopped by a cancellation");
        assert_one_line_error(&out, "left for sweep");
        assert!(!root.join("results/x").exists());
        assert!(!root.join("published/x.json").exists());
        assert!(
            trash.exists(),
            "the signal landed before the deletion ended"
        );
        let out = run(results(&root).args(["sweep", "--older-than", "3600"]));
        assert_eq!(out.code, 0, "{out:?}");
        assert!(!trash.exists(), "sweep removes the rest");
        return;
    }
    panic!("discard finished {TRIES} times before it could be stopped part-way");
}

/// The names in `dir` that are temporaries of process `pid` (`.NAME.tmp.PID.N`).
fn temporaries_of(dir: &Path, pid: u32) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.') && n.contains(&format!(".tmp.{pid}.")))
        .collect();
    names.sort();
    names
}

/// A SIGKILLed `apply` leaves the temporary of the file it was writing in
/// TARGET (`.NAME.tmp.PID.N`). The next operation on that ID — a re-apply, a discard, a
/// sweep (the result not expired) — removes it under the ID's lease, while another
/// process's temporary of the same file and a user's file of a temporary's shape are kept.
#[test]
fn temporaries_of_a_killed_apply_go_at_the_next_operation_on_the_id() {
    if !can_see_stops("temporaries_of_a_killed_apply_go_at_the_next_operation_on_the_id") {
        return;
    }
    const N: usize = 400;
    for next in ["apply", "discard", "sweep"] {
        let mut done = false;
        for _ in 0..TRIES {
            let home = tempfile::tempdir().unwrap();
            let root = home.path().join("r");
            let target = home.path().join("t");
            let written = target.join("d");
            plant(&root, "x", N);
            let mut p = start(&root, &["apply", "x", "--to", target.to_str().unwrap()]);
            // Stop it whenever one more file is in place, until one is caught mid-write.
            let mut seen = 0;
            let caught = loop {
                if !stop_when(&mut p, || count(&written) > seen) {
                    break false;
                }
                if !temporaries_of(&written, p.pid()).is_empty() {
                    break true;
                }
                seen = count(&written);
                p.signal(Signal::CONT);
            };
            if !caught {
                eprintln!("{next}: apply finished before it was caught mid-write; again");
                continue;
            }
            let killed = p.pid();
            p.kill(); // SIGKILL while stopped, mid-write
            let left = temporaries_of(&written, killed);
            assert_eq!(left.len(), 1, "{left:?}");
            // Not the killed apply's: another process's rewrite of the same file, and a
            // user's file that only looks like a temporary.
            let theirs = ".f00000.tmp.1.0";
            let users = format!(".notours.tmp.{killed}.0");
            fs::write(written.join(theirs), "theirs").unwrap();
            fs::write(written.join(&users), "user's").unwrap();
            let out = match next {
                "apply" => run(results(&root).args(["apply", "x", "--to"]).arg(&target)),
                "discard" => run(results(&root).args(["discard", "x"])),
                _ => run(results(&root).args(["sweep", "--older-than", "3600"])),
            };
            assert_eq!(out.code, 0, "{next}: {out:?}");
            assert_eq!(temporaries_of(&written, killed), [users.as_str()], "{next}");
            assert!(written.join(theirs).is_file(), "{next}");
            match next {
                "apply" => assert_eq!(count(&written), N + 2),
                "discard" => assert!(!root.join("results/x").exists()),
                _ => {
                    assert!(root.join("results/x/entry.json").is_file(), "not expired");
                    assert!(!root.join("results/x/applying.json").exists());
                }
            }
            done = true;
            break;
        }
        assert!(
            done,
            "{next}: apply finished {TRIES} times before it was caught"
        );
    }
}

/// One ID, one operation at a time, even after the lock namespace is
/// moved under a running operation. An `apply` is stopped part-way (SIGSTOP: it holds the
/// ID's lease in the namespace that is then renamed); a `discard` of the same ID takes the
/// ID's lease in a fresh namespace, but is not let in while the apply works on the
/// candidate: it gives up with 75 and removes nothing. The apply, continued, finds its lease
/// lost at its next file and stops with a message that is true — the candidate and the
/// publication are kept, as it says. Then the discard goes through.
#[test]
fn a_moved_lock_namespace_does_not_let_a_second_operation_in() {
    if !can_see_stops("a_moved_lock_namespace_does_not_let_a_second_operation_in") {
        return;
    }
    const N: usize = 400;
    for _ in 0..TRIES {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("r");
        let target = home.path().join("t");
        let written = target.join("d");
        plant(&root, "x", N);
        assert_eq!(run(results(&root).args(["finish", "x"])).code, 0);
        let mut apply = start(&root, &["apply", "x", "--to", target.to_str().unwrap()]);
        if !stop_when(&mut apply, || count(&written) > 0) || count(&written) >= N - 1 {
            eprintln!("apply finished before it could be stopped part-way; again");
            continue;
        }
        fs::rename(root.join(".result-locks-v1"), root.join(".moved")).unwrap();
        let out = run(results(&root).args(["--timeout", "0.3", "discard", "x"]));
        assert_eq!(out.code, 75, "{out:?}");
        assert_one_line_error(&out, "another operation");
        assert_one_line_error(&out, &common::pid_note(apply.pid()));
        assert!(
            root.join("results/x/entry.json").is_file(),
            "discard removed the candidate"
        );
        assert!(
            root.join("published/x.json").is_file(),
            "discard removed the publication"
        );

        apply.signal(Signal::CONT);
        let status = apply.wait_timeout(BOUND).expect("apply did not exit");
        let mut err = String::new();
        apply
            .child
            .stderr
            .as_mut()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let out = Out {
            code: status.code().unwrap_or(-1),
            stdout: String::new(),
            stderr: err,
        };
        assert_eq!(out.code, 1, "{out:?}");
        assert_one_line_error(&out, "lease lost");
        assert_one_line_error(&out, "candidate and publication kept");
        assert!(
            root.join("results/x/entry.json").is_file(),
            "as the message says"
        );
        assert!(
            root.join("published/x.json").is_file(),
            "as the message says"
        );

        let out = run(results(&root).args(["discard", "x"]));
        assert_eq!(out.code, 0, "{out:?}");
        assert!(!root.join("results/x").exists());
        return;
    }
    panic!("apply finished {TRIES} times before it could be stopped part-way");
}

/// Messages that are true: what an interrupted apply says is kept is
/// looked at, not assumed. Here the candidate and its publication are removed behind the
/// store's back while the apply is stopped; continued, it fails at its next file and says
/// they are no longer in the store (it used to say "candidate and publication kept").
#[test]
fn an_apply_that_fails_part_way_says_what_is_really_kept() {
    if !can_see_stops("an_apply_that_fails_part_way_says_what_is_really_kept") {
        return;
    }
    const N: usize = 400;
    for _ in 0..TRIES {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("r");
        let target = home.path().join("t");
        let written = target.join("d");
        plant(&root, "x", N);
        assert_eq!(run(results(&root).args(["finish", "x"])).code, 0);
        let mut apply = start(&root, &["apply", "x", "--to", target.to_str().unwrap()]);
        if !stop_when(&mut apply, || count(&written) > 0) || count(&written) >= N - 1 {
            eprintln!("apply finished before it could be stopped part-way; again");
            continue;
        }
        fs::remove_dir_all(root.join("results/x")).unwrap();
        fs::remove_file(root.join("published/x.json")).unwrap();
        apply.signal(Signal::CONT);
        let status = apply.wait_timeout(BOUND).expect("apply did not exit");
        let mut err = String::new();
        apply
            .child
            .stderr
            .as_mut()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let out = Out {
            code: status.code().unwrap_or(-1),
            stdout: String::new(),
            stderr: err,
        };
        assert_eq!(out.code, 1, "{out:?}");
        assert_one_line_error(&out, "apply failed part-way");
        assert_one_line_error(&out, "candidate and publication are no longer in the store");
        return;
    }
    panic!("apply finished {TRIES} times before it could be stopped part-way");
}

/// The two halves above at once: the lock namespace is renamed under a stopped `apply`, the
/// `discard` of the same ID is refused (75, nothing removed), and then the candidate and its
/// publication are removed behind the store's back. The apply, continued, finds its lease
/// lost and says what is really left: that the candidate and publication are no longer in
/// the store — not that they are kept.
#[test]
fn after_a_namespace_rename_discard_is_refused_and_apply_says_what_is_gone() {
    if !can_see_stops("after_a_namespace_rename_discard_is_refused_and_apply_says_what_is_gone") {
        return;
    }
    const N: usize = 400;
    for _ in 0..TRIES {
        let home = tempfile::tempdir().unwrap();
        let root = home.path().join("r");
        let target = home.path().join("t");
        let written = target.join("d");
        plant(&root, "x", N);
        assert_eq!(run(results(&root).args(["finish", "x"])).code, 0);
        let mut apply = start(&root, &["apply", "x", "--to", target.to_str().unwrap()]);
        if !stop_when(&mut apply, || count(&written) > 0) || count(&written) >= N - 1 {
            eprintln!("apply finished before it could be stopped part-way; again");
            continue;
        }
        fs::rename(root.join(".result-locks-v1"), root.join(".moved")).unwrap();
        let out = run(results(&root).args(["--timeout", "0.3", "discard", "x"]));
        assert_eq!(out.code, 75, "{out:?}");
        assert_one_line_error(&out, "another operation");
        assert!(
            root.join("results/x/entry.json").is_file(),
            "discard removed nothing"
        );
        assert!(
            root.join("published/x.json").is_file(),
            "discard removed nothing"
        );
        fs::remove_dir_all(root.join("results/x")).unwrap();
        fs::remove_file(root.join("published/x.json")).unwrap();

        apply.signal(Signal::CONT);
        let status = apply.wait_timeout(BOUND).expect("apply did not exit");
        let mut err = String::new();
        apply
            .child
            .stderr
            .as_mut()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let out = Out {
            code: status.code().unwrap_or(-1),
            stdout: String::new(),
            stderr: err,
        };
        assert_eq!(out.code, 1, "{out:?}");
        assert_one_line_error(&out, "candidate and publication are no longer in the store");
        assert!(
            !out.stderr.contains("candidate and publication kept"),
            "{out:?}"
        );
        return;
    }
    panic!("apply finished {TRIES} times before it could be stopped part-way");
}
