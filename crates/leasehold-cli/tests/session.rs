//! Black-box tests of `leasehold session` (docs/cli.md, "session"), with real processes.
//! Synchronisation is by observation, never by sleeping: a test that needs an appender to have
//! written a record runs `session read` until the record is there.
#![cfg(unix)] // POSIX processes, signals and lock files; Windows: crates/leasehold/tests/windows.rs

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::leasehold;
use testkit::{Out, Proc, assert_one_line_error, run};

/// Generous bound for "promptly" and for observing a record another process wrote.
/// A safety bound on waits that normally end in milliseconds (generous: fsync under load).
const BOUND: Duration = Duration::from_secs(60);

fn session(dir: &Path) -> Command {
    let mut c = leasehold();
    c.arg("session").arg("--dir").arg(dir);
    c
}

/// `session read ID`.
fn read(dir: &Path, id: &str) -> Out {
    run(session(dir).args(["read", "--", id]))
}

/// The records `read` prints, asserting success.
fn records(dir: &Path, id: &str) -> Vec<String> {
    let out = read(dir, id);
    assert_eq!(out.code, 0, "read failed: {out:?}");
    out.stdout.lines().map(str::to_string).collect()
}

/// Runs `session append ID` with `input` on stdin, to completion (bounded: a hang fails).
fn append(dir: &Path, id: &str, input: &str) -> Out {
    let mut p = appender(dir, id);
    if let Some(mut stdin) = p.stdin.take() {
        // A writer refused at open exits before reading: a broken pipe is then expected.
        let _ = stdin.write_all(input.as_bytes());
    }
    finish(p)
}

/// A long-running `session append ID` fed line by line through [`Proc::send`].
fn appender(dir: &Path, id: &str) -> Proc {
    Proc::spawn(
        session(dir)
            .args(["append", "--", id])
            .stderr(Stdio::piped()),
    )
}

/// Closes the appender's stdin and collects its exit status and output, failing the test if
/// it does not exit promptly.
fn finish(mut p: Proc) -> Out {
    p.close_stdin();
    let st = p.wait_timeout(BOUND).expect("append did not exit promptly");
    let mut stdout = String::new();
    p.stdout.read_to_string(&mut stdout).unwrap();
    let mut stderr = String::new();
    if let Some(e) = p.child.stderr.as_mut() {
        e.read_to_string(&mut stderr).unwrap();
    }
    Out {
        code: st.code().unwrap_or(-1),
        stdout,
        stderr,
    }
}

/// Runs `read` until it shows `n` records (the handshake with an appender), then returns them.
fn wait_for_records(dir: &Path, id: &str, n: usize) -> Vec<String> {
    let end = Instant::now() + BOUND;
    loop {
        let out = read(dir, id);
        if out.code == 0 {
            let got: Vec<String> = out.stdout.lines().map(str::to_string).collect();
            if got.len() >= n {
                return got;
            }
        }
        assert!(
            Instant::now() < end,
            "never saw {n} records in {id}: {out:?}"
        );
    }
}

/// Every entry under `dir`, recursively (to prove that nothing was created).
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            out.push(e.path());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(tree(&e.path()));
            }
        }
    }
    out.sort();
    out
}

fn lock_of(dir: &Path, id: &str) -> PathBuf {
    dir.join(id).join("session.lock")
}

fn log_of(dir: &Path, id: &str) -> PathBuf {
    dir.join(id).join("session.jsonl")
}

fn status(lock: &Path) -> String {
    common::status_line(lock)
}

#[test]
fn appends_each_line_as_it_arrives_and_holds_the_lease_until_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let mut a = appender(&dir, "s1");
    a.send(r#"{"n":1}"#);
    // Seen while stdin is still open: the line was appended on arrival, not at EOF.
    assert_eq!(wait_for_records(&dir, "s1", 1), [r#"{"n":1}"#]);
    assert_eq!(status(&lock_of(&dir, "s1")), common::held_by(a.pid()));
    a.send("");
    a.send(r#"  {"n": 2}  "#);
    assert_eq!(
        wait_for_records(&dir, "s1", 2),
        [r#"{"n":1}"#, r#"{"n": 2}"#]
    );
    a.close_stdin();
    assert!(a.wait().success());
    assert_eq!(status(&lock_of(&dir, "s1")), "free");
    assert!(
        lock_of(&dir, "s1").is_file(),
        "the lock file is never removed"
    );
}

#[test]
fn second_writer_is_refused_with_the_holders_pid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    // A owns the session once its first record is visible. (Which of two writers started
    // together wins is up to the kernel; a writer that opened before the session existed and
    // is refused at its first write is pinned down by the store's unit tests.)
    let mut a = appender(&dir, "s");
    a.send(r#"{"from":"a"}"#);
    wait_for_records(&dir, "s", 1);

    let owned = format!(
        "session s is owned by another process{}",
        common::with_pid(a.pid())
    );
    // A writer started now finds an existing session and is refused at once.
    let c = append(&dir, "s", "{\"from\":\"c\"}\n");
    assert_eq!(c.code, 75, "{c:?}");
    assert_one_line_error(&c, &owned);
    // A long-running writer started now is refused too, before it reads anything.
    let mut b = appender(&dir, "s");
    if let Some(mut stdin) = b.stdin.take() {
        let _ = writeln!(stdin, r#"{{"from":"b"}}"#);
    }
    let b = finish(b);
    assert_eq!(b.code, 75, "{b:?}");
    assert_one_line_error(&b, &owned);

    // Readers work while the writer holds the lease and see only the owner's records.
    assert_eq!(records(&dir, "s"), [r#"{"from":"a"}"#]);
    a.send(r#"{"from":"a2"}"#);
    a.close_stdin();
    assert!(a.wait().success());
    assert_eq!(records(&dir, "s"), [r#"{"from":"a"}"#, r#"{"from":"a2"}"#]);
}

#[test]
fn takeover_after_clean_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let a = append(&dir, "s", "1\n");
    assert_eq!(a.code, 0, "{a:?}");
    let b = append(&dir, "s", "2\n");
    assert_eq!(b.code, 0, "{b:?}");
    assert_eq!(records(&dir, "s"), ["1", "2"]);
}

#[test]
fn takeover_after_sigkill_of_the_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let mut a = appender(&dir, "s");
    a.send("1");
    wait_for_records(&dir, "s", 1);
    a.kill_group();
    let started = Instant::now();
    let b = append(&dir, "s", "2\n");
    assert_eq!(b.code, 0, "a crashed writer must not block the next: {b:?}");
    assert!(started.elapsed() < BOUND);
    assert_eq!(records(&dir, "s"), ["1", "2"]);
}

#[test]
fn a_session_that_never_writes_leaves_no_footprint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    for input in ["", "\n\n", "   \n\t\n", "not json\n{\"a\":1}\n"] {
        let out = append(&dir, "s", input);
        let want = if input.contains("not json") { 2 } else { 0 };
        assert_eq!(out.code, want, "{input:?}: {out:?}");
        assert!(!dir.exists(), "{input:?} created {:?}", tree(tmp.path()));
    }
    let out = read(&dir, "s");
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "unknown-session");
    assert!(!dir.exists(), "read created {:?}", tree(tmp.path()));
}

#[test]
fn append_stops_at_the_first_non_json_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let out = append(&dir, "s", "1\n{\"a\":2}\n\n{\"broken\":\n{\"after\":3}\n");
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "not JSON");
    assert_eq!(records(&dir, "s"), ["1", r#"{"a":2}"#]);
    // Invalid UTF-8 is not JSON either.
    let mut child = session(&dir)
        .args(["append", "s"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"3\n\"\xff\"\n4\n")
        .unwrap();
    let res = child.wait_with_output().unwrap();
    assert_eq!(res.status.code(), Some(2));
    assert_eq!(records(&dir, "s"), ["1", r#"{"a":2}"#, "3"]);
}

#[test]
fn read_prints_whole_records_one_per_line_and_skips_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    assert_eq!(append(&dir, "s", "{\"a\":1}\n[2]\n\"three\"\n").code, 0);
    assert_eq!(read(&dir, "s").stdout, "{\"a\":1}\n[2]\n\"three\"\n");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(log_of(&dir, "s"))
        .unwrap();
    f.write_all(b"{\"torn\":").unwrap();
    let out = read(&dir, "s");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.stdout, "{\"a\":1}\n[2]\n\"three\"\n");
}

#[test]
fn append_repairs_a_torn_tail_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    std::fs::create_dir_all(dir.join("s")).unwrap();
    std::fs::write(log_of(&dir, "s"), b"{\"a\":1}\n{\"b\":2,\"tor").unwrap();
    let out = append(&dir, "s", "{\"c\":3}\n");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read(log_of(&dir, "s")).unwrap(),
        b"{\"a\":1}\n{\"c\":3}\n"
    );
    assert_eq!(records(&dir, "s"), [r#"{"a":1}"#, r#"{"c":3}"#]);
}

#[test]
fn readers_during_appends_see_whole_records() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    const N: usize = 300;
    // Records of several pages each make a partially visible write likely if reads could
    // return one.
    let record = |i: usize| format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(12_000 + i));
    let mut a = appender(&dir, "s");
    a.send(&record(0));
    wait_for_records(&dir, "s", 1);
    let mut stdin = a.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 1..N {
            writeln!(stdin, "{}", record(i)).unwrap();
        }
    });
    let end = Instant::now() + Duration::from_secs(60);
    let mut reads = 0;
    loop {
        let got = records(&dir, "s");
        for (i, line) in got.iter().enumerate() {
            assert!(*line == record(i), "read {reads}: record {i} is not whole");
        }
        reads += 1;
        if got.len() == N {
            break;
        }
        assert!(
            Instant::now() < end,
            "appender stalled at {} records",
            got.len()
        );
    }
    feeder.join().unwrap();
    assert!(a.wait().success());
}

#[test]
fn hostile_lock_files_are_refused_and_left_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious bytes").unwrap();
    for kind in ["symlink", "fifo", "directory"] {
        let id = format!("s-{kind}");
        std::fs::create_dir_all(dir.join(&id)).unwrap();
        std::fs::write(log_of(&dir, &id), b"{\"a\":1}\n").unwrap();
        let lock = lock_of(&dir, &id);
        match kind {
            "symlink" => std::os::unix::fs::symlink(&victim, &lock).unwrap(),
            "fifo" => assert!(
                std::process::Command::new("mkfifo")
                    .arg(&lock)
                    .status()
                    .unwrap()
                    .success()
            ),
            _ => std::fs::create_dir(&lock).unwrap(),
        }
        let before = tree(tmp.path());
        // `append` is bounded: a FIFO that hung the opener would fail the test.
        let out = append(&dir, &id, "{\"b\":2}\n");
        assert_eq!(out.code, 2, "{kind}: {out:?}");
        assert_one_line_error(&out, "session.lock");
        assert_eq!(
            tree(tmp.path()),
            before,
            "{kind}: something was created or removed"
        );
        assert_eq!(
            std::fs::read(log_of(&dir, &id)).unwrap(),
            b"{\"a\":1}\n",
            "{kind}"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious bytes", "{kind}");
        // `read` never touches the lock, hostile or not.
        assert_eq!(records(&dir, &id), [r#"{"a":1}"#], "{kind}");
    }
    let lock = lock_of(&dir, "s-symlink");
    assert!(
        std::fs::symlink_metadata(&lock)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(lock_of(&dir, "s-directory"))
            .unwrap()
            .is_dir()
    );
}

#[test]
fn hostile_error_is_one_line_naming_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    std::fs::create_dir_all(dir.join("s")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", lock_of(&dir, "s")).unwrap();
    let out = append(&dir, "s", "1\n");
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "session.lock");
}

#[test]
fn hostile_session_paths_are_refused_and_left_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"precious\n").unwrap();
    // The log itself a symlink to a victim file.
    std::fs::create_dir_all(dir.join("log-link")).unwrap();
    std::os::unix::fs::symlink(&victim, log_of(&dir, "log-link")).unwrap();
    // The session directory a symlink to a victim directory.
    let victim_dir = tmp.path().join("victim-dir");
    std::fs::create_dir(&victim_dir).unwrap();
    std::os::unix::fs::symlink(&victim_dir, dir.join("dir-link")).unwrap();
    let before = tree(tmp.path());
    for id in ["log-link", "dir-link"] {
        let out = append(&dir, id, "{\"b\":2}\n");
        assert_eq!(out.code, 2, "{id}: {out:?}");
        assert_one_line_error(&out, id);
        let out = read(&dir, id);
        assert_eq!(out.code, 2, "{id}: {out:?}");
        assert_one_line_error(&out, id);
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
    // The refused append may have taken (and created) the lease file inside the real
    // session directory of "log-link" before opening the log; nothing else may appear.
    let after: Vec<PathBuf> = tree(tmp.path())
        .into_iter()
        .filter(|p| *p != lock_of(&dir, "log-link"))
        .collect();
    assert_eq!(after, before);
    assert!(tree(&victim_dir).is_empty());
}

/// The session ID rule of the contract, written independently of the implementation.
fn is_safe_id(id: &str) -> bool {
    (1..=128).contains(&id.chars().count())
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

#[test]
fn unsafe_ids_are_refused_and_safe_ids_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    std::fs::create_dir(&dir).unwrap();
    let mut ids: Vec<String> = [
        "", ".", "..", ".x", "../x", "x/y", "/abs", "a b", "é", "a\tb", "-", "-x", "--", "x.",
        "x..y", "_", "a:b", "a\\b", "*",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "a".repeat(128),
        "a".repeat(129),
        format!(".{}", "a".repeat(10)),
    ])
    .collect();
    // A deterministic generator: a few hundred IDs over safe and unsafe characters.
    let alphabet: Vec<char> = "aZ09._-/ \\:*?é\u{7f}~'\"$\n".chars().collect();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..300 {
        let len = match next() % 10 {
            0 => 120 + (next() % 15) as usize,
            _ => (next() % 12) as usize,
        };
        let safe_only = next() % 2 == 0;
        let id: String = (0..len)
            .map(|_| {
                let pool = if safe_only { 7 } else { alphabet.len() };
                alphabet[(next() % pool as u64) as usize]
            })
            .collect();
        ids.push(id);
    }
    let (mut accepted, mut refused) = (0, 0);
    for id in &ids {
        let before = tree(tmp.path());
        let out = append(&dir, id, "{\"x\":1}\n");
        if is_safe_id(id) {
            assert_eq!(out.code, 0, "{id:?} refused: {out:?}");
            assert!(log_of(&dir, id).is_file(), "{id:?}");
            accepted += 1;
        } else {
            assert_eq!(out.code, 2, "{id:?} accepted: {out:?}");
            assert_one_line_error(&out, "invalid session ID");
            assert_eq!(tree(tmp.path()), before, "{id:?} created something");
            let out = read(&dir, id);
            assert_eq!(out.code, 2, "read {id:?}: {out:?}");
            assert_one_line_error(&out, "invalid session ID");
            refused += 1;
        }
    }
    assert!(
        accepted > 50 && refused > 50,
        "{accepted} accepted, {refused} refused"
    );
    assert_eq!(records(&dir, "-x"), [r#"{"x":1}"#]);
}

#[test]
fn files_and_directories_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a").join("sessions");
    assert_eq!(append(&dir, "s", "1\n").code, 0);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("s")), 0o700);
    assert_eq!(mode(&log_of(&dir, "s")), 0o600);
    assert_eq!(mode(&lock_of(&dir, "s")), 0o600);
}

#[test]
fn default_dir_is_leasehold_home_then_home() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("lh");
    let out = run(leasehold()
        .env("LEASEHOLD_HOME", &home)
        .args(["session", "read", "s"]));
    assert_eq!(out.code, 2);
    assert_one_line_error(&out, "unknown-session");
    let mut c = leasehold();
    c.env("LEASEHOLD_HOME", &home)
        .args(["session", "append", "s"]);
    let mut p = Proc::spawn(&mut c);
    p.send("1");
    assert_eq!(finish(p).code, 0);
    assert_eq!(
        std::fs::read(log_of(&home.join("sessions"), "s")).unwrap(),
        b"1\n"
    );

    let user = tmp.path().join("user");
    let mut c = leasehold();
    c.env_remove("LEASEHOLD_HOME")
        .env("HOME", &user)
        .args(["session", "append", "--", "-u"]);
    let mut p = Proc::spawn(&mut c);
    p.send("2");
    assert_eq!(finish(p).code, 0);
    let sessions = user.join(".leasehold").join("sessions");
    assert_eq!(std::fs::read(log_of(&sessions, "-u")).unwrap(), b"2\n");
    let out = run(leasehold()
        .env_remove("LEASEHOLD_HOME")
        .env("HOME", &user)
        .args(["session", "read", "--", "-u"]));
    assert_eq!(out.stdout, "2\n");
}

#[test]
fn read_into_a_closed_pipe_is_not_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    // Far more than a pipe buffer holds, so `read` is still writing when the consumer leaves.
    // (Few, large records: each append is fsynced, and thousands of fsyncs are slow.)
    let pad = "p".repeat(2000);
    let input: String = (0..300)
        .map(|i| format!("{{\"record\":{i},\"pad\":\"{pad}\"}}\n"))
        .collect();
    assert_eq!(append(&dir, "s", &input).code, 0);
    let mut child = session(&dir)
        .args(["read", "s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 11];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap(); // dropped: pipe closed
    let out = child.wait_with_output().unwrap();
    assert_eq!(&first, b"{\"record\":0");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty());
}

/// A writer whose session directory is renamed under it keeps working
/// through its directory handles, while a second writer resolves `DIR/ID` to a fresh
/// directory and owns the ID there. The first must notice at its next append (the whole
/// chain is verified before each durable append) and stop with one line and status 1,
/// writing nothing more into the moved log.
#[test]
fn a_writer_whose_session_directory_was_renamed_stops_before_its_next_append() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let mut a = appender(&dir, "s");
    a.send("1");
    assert_eq!(wait_for_records(&dir, "s", 1), ["1"]);
    std::fs::rename(dir.join("s"), dir.join("moved")).unwrap();
    // The second writer owns the ID now (its record is visible under the ID's path).
    let mut b = appender(&dir, "s");
    b.send(r#"{"from":"b"}"#);
    assert_eq!(wait_for_records(&dir, "s", 1), [r#"{"from":"b"}"#]);
    a.send("2");
    let a = finish(a);
    assert_eq!(a.code, 1, "{a:?}");
    assert_one_line_error(&a, "lease lost");
    assert_one_line_error(&a, &dir.join("s").display().to_string());
    assert_eq!(
        std::fs::read(log_of(&dir, "moved")).unwrap(),
        b"1\n",
        "nothing more went into the moved log"
    );
    b.send(r#"{"from":"b2"}"#);
    let b = finish(b);
    assert_eq!(b.code, 0, "{b:?}");
    assert_eq!(records(&dir, "s"), [r#"{"from":"b"}"#, r#"{"from":"b2"}"#]);
}

/// A session another user prepared — a session directory or log that
/// belongs to someone else or that others may write, holding forged records — is neither
/// appended to nor served by `read` (exit 2, one line naming it), and the refusal creates
/// nothing (no lock file in their directory); `LEASEHOLD_ALLOW_SHARED=1` accepts it. The
/// other user is `nobody` where the tests run as root (chown); the mode cases run anyway.
#[test]
fn a_session_another_user_could_have_prepared_is_neither_appended_to_nor_read() {
    use std::os::unix::fs::PermissionsExt;
    const NOBODY: u32 = 65534;
    let root = rustix::process::geteuid().is_root();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let forged = b"{\"forged\":true}\n";
    // (ID, what to prepare, the path the refusal names, its reason)
    let mut cases = vec![(
        "dir-0777",
        "dir",
        0o777,
        false,
        "may be written by group and others",
    )];
    cases.push((
        "log-0666",
        "log",
        0o666,
        false,
        "may be written by group and others",
    ));
    if root {
        cases.push((
            "dir-nobody",
            "dir",
            0o700,
            true,
            "belongs to another user (uid 65534",
        ));
        cases.push((
            "log-nobody",
            "log",
            0o600,
            true,
            "belongs to another user (uid 65534",
        ));
        cases.push((
            "both-nobody",
            "dir",
            0o777,
            true,
            "belongs to another user (uid 65534",
        ));
    } else {
        eprintln!("SKIP: sessions owned by nobody: need root to chown files to nobody");
    }
    for (id, what, mode, theirs, reason) in cases {
        let sdir = dir.join(id);
        std::fs::create_dir_all(&sdir).unwrap();
        std::fs::write(log_of(&dir, id), forged).unwrap();
        let named = if what == "dir" {
            sdir.clone()
        } else {
            log_of(&dir, id)
        };
        std::fs::set_permissions(&named, std::fs::Permissions::from_mode(mode)).unwrap();
        if theirs {
            std::os::unix::fs::chown(&named, Some(NOBODY), Some(NOBODY)).unwrap();
            if id == "both-nobody" {
                std::os::unix::fs::chown(log_of(&dir, id), Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        let before = tree(tmp.path());
        for out in [append(&dir, id, "{\"mine\":1}\n"), read(&dir, id)] {
            assert_eq!(out.code, 2, "{id}: {out:?}");
            assert_eq!(out.stdout, "", "{id}: forged records served");
            assert_one_line_error(&out, &format!("{}: {reason}", named.display()));
            assert_one_line_error(&out, "LEASEHOLD_ALLOW_SHARED=1");
        }
        assert_eq!(
            tree(tmp.path()),
            before,
            "{id}: the refusal created something"
        );
        assert_eq!(std::fs::read(log_of(&dir, id)).unwrap(), forged, "{id}");
        let out = run(session(&dir)
            .env("LEASEHOLD_ALLOW_SHARED", "1")
            .args(["read", "--", id]));
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (0, "{\"forged\":true}\n"),
            "{id}: opted in"
        );
    }
    // The sessions directory itself counts too.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = append(&dir, "new", "1\n");
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, &format!("{}: may be written", dir.display()));
    assert!(!dir.join("new").exists());
}

/// The record limit of `session --help` (64 MiB), written independently of the store.
const RECORD_LIMIT: usize = 64 << 20;

/// A line longer than the record limit (valid JSON, one byte over) is
/// refused — exit 2, one line naming the limit — with nothing of it or after it written,
/// while the lines before it stay; `session --help` states the limit. (The boundary itself,
/// a record of exactly the limit, is pinned down by the library's tests.)
#[test]
fn append_refuses_a_line_over_the_record_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    let over = format!("\"{}\"", "x".repeat(RECORD_LIMIT - 1));
    let out = append(&dir, "s", &format!("1\n{over}\n2\n"));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_one_line_error(
        &out,
        "line 2 is longer than the record limit of 67108864 bytes",
    );
    assert_eq!(records(&dir, "s"), ["1"]);
    let help = run(session(&dir).arg("--help"));
    assert!(help.stdout.contains("at most 67108864 bytes"), "{help:?}");
}

/// `read` holds at most the record limit of a line. A torn tail of 512 MiB
/// (sparse: it costs no disk) is skipped under a 256 MiB address-space limit, where reading
/// it whole aborted with a backtrace; a whole line over the limit (no writer writes one) ends the output
/// after the records before it, with one line and status 1.
#[test]
fn read_skips_a_torn_tail_over_the_limit_in_bounded_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions");
    assert_eq!(append(&dir, "s", "1\n").code, 0);
    let log = std::fs::OpenOptions::new()
        .write(true)
        .open(log_of(&dir, "s"))
        .unwrap();
    log.set_len(2 + (512 << 20)).unwrap();
    let bounded = |dir: &Path| {
        run(Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v 262144 && exec "$0" session --dir "$1" read s"#)
            .arg(common::bin())
            .arg(dir)
            .stdin(Stdio::null()))
    };
    let out = bounded(&dir);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "1\n"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr, "");

    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(log_of(&dir, "s"))
        .unwrap();
    log.write_all(b"\n2\n").unwrap();
    let out = bounded(&dir);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (1, "1\n"),
        "{}",
        out.stderr
    );
    assert_one_line_error(&out, "over the record limit of 67108864 bytes");
    assert_one_line_error(&out, &log_of(&dir, "s").display().to_string());
}
