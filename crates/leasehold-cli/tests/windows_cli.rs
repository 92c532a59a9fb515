//! Black-box tests of the Windows `leasehold` binary (docs/cli.md), run under Wine by
//! `.ci/run` (`cargo test -p leasehold-cli --target x86_64-pc-windows-gnu --test windows_cli`).
//!
//! Every test drives real processes of the binary under test. A lease holder that is not a
//! store verb is `leasehold run LOCK -- <this test binary>`: the child ([`child_command`])
//! prints [`LOCKED`] — proof that `run` holds the lease, since COMMAND never runs without it —
//! and holds until its stdin closes. Synchronisation is by handshake lines and by observation
//! (`session read` until a record is there), never by sleeping. A crash is
//! `TerminateProcess` (`Child::kill`): the kernel destroys the lease object with the process.
//!
//! Wine 8 cannot create directory symbolic links or junctions (see
//! `crates/leasehold/tests/windows.rs`), so only the case alias is exercised here; the link
//! alias is tried and skipped with a printed reason where it cannot be made.
//!
//! Wine starts a process in roughly half a second, so each test reuses its processes and the
//! suite stays at a few dozen spawns.
#![cfg(windows)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Set in the environment of the child that holds a lease under `leasehold run`.
const CHILD_ENV: &str = "LEASEHOLD_CLI_TEST_CHILD";
/// The line the child prints once it runs (under the lease).
const LOCKED: &str = "leasehold-child: locked";
/// Safety bound on waits that normally end well within a second.
const BOUND: Duration = Duration::from_secs(60);

/// Not a test of its own: the COMMAND of [`hold`] (a no-op in a normal run).
#[test]
fn child_command() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let mut out = std::io::stdout();
    writeln!(out, "{LOCKED}").unwrap();
    out.flush().unwrap();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
}

fn leasehold() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    c.stdin(Stdio::null());
    c
}

/// A command run to completion.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Out {
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn leasehold");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts the CLI's error contract: exit `code`, exactly one line on stderr starting
/// `leasehold: ` and containing `needle`.
fn assert_error(out: &Out, code: i32, needle: &str) {
    assert_eq!(out.code, code, "{out:?}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {out:?}");
    assert!(lines[0].starts_with("leasehold: "), "{out:?}");
    assert!(lines[0].contains(needle), "{needle:?} in {out:?}");
}

/// A long-running process with piped stdin and stdout.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Proc {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        let w = self.stdin.as_mut().expect("stdin open");
        writeln!(w, "{line}")
            .and_then(|()| w.flush())
            .expect("send");
    }

    /// The next line on stdout (without its line ending); `None` at EOF.
    fn next_line(&mut self) -> Option<String> {
        let mut line = String::new();
        match self.stdout.read_line(&mut line).expect("read stdout") {
            0 => None,
            _ => Some(line.trim_end().to_string()),
        }
    }

    /// The next line on stdout (without its line ending); empty at EOF.
    fn line(&mut self) -> String {
        self.next_line().unwrap_or_default()
    }

    /// Sends one request to `registry serve` and parses its one-line answer.
    fn ask(&mut self, request: &str) -> Value {
        self.send(request);
        let line = self.line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    /// Closes stdin and waits (bounded) for the exit.
    fn finish(mut self) -> (ExitStatus, String) {
        drop(self.stdin.take());
        let status = wait_bounded(&mut self.child);
        let mut err = String::new();
        if let Some(e) = self.child.stderr.as_mut() {
            let _ = e.read_to_string(&mut err);
        }
        (status, err)
    }

    /// `TerminateProcess`: the process dies without releasing or flushing anything.
    fn kill(mut self) {
        self.child.kill().expect("TerminateProcess");
        self.child.wait().expect("reap");
    }
}

/// Waits for the exit on a helper thread, failing the test if it takes longer than [`BOUND`].
fn wait_bounded(child: &mut Child) -> ExitStatus {
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        s.spawn(move || tx.send(child.wait().expect("wait")));
        rx.recv_timeout(BOUND)
            .expect("the process did not exit promptly")
    })
}

/// Holds the lease on `lock` through `leasehold run LOCK -- <child>`; dropping its stdin (or
/// [`Proc::finish`]) ends the child and so the `run`.
fn hold(lock: &Path) -> Proc {
    let mut p = Proc::spawn(
        leasehold()
            .arg("run")
            .arg(lock)
            .arg("--")
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_command",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1"),
    );
    while let Some(line) = p.next_line() {
        // libtest prints "test child_command ... " on the same line first.
        if line.ends_with(LOCKED) {
            return p;
        }
    }
    let (status, err) = p.finish();
    panic!("the holder never ran its command: {status:?} {err}");
}

/// The same path with every letter's case flipped: another spelling of one directory.
fn other_case(p: &Path) -> PathBuf {
    let s: String = p
        .to_string_lossy()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    PathBuf::from(s)
}

fn mkdirs(base: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|n| {
            let d = base.join(n);
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// registry
// ---------------------------------------------------------------------------------------

fn registry(home: &Path) -> Command {
    let mut c = leasehold();
    c.arg("registry").arg("--home").arg(home);
    c
}

fn add_request(primary: &Path, root: &Path) -> String {
    serde_json::json!({"op": "add", "primary": primary, "root": root}).to_string()
}

/// The roots the scope lists, as strings (order kept).
fn roots(answer: &Value) -> Vec<String> {
    answer["scope"]
        .as_object()
        .map(|m| {
            m.values()
                .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                .filter_map(|r| r.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn registry_contention_hand_over_and_takeover_after_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("Home");
    let dirs = mkdirs(tmp.path(), &["primary", "root1", "root2"]);
    let (primary, root1, root2) = (&dirs[0], &dirs[1], &dirs[2]);

    let mut first = Proc::spawn(registry(&home).arg("serve"));
    let a = first.ask(&add_request(primary, root1));
    assert_eq!(a["ok"], true, "{a}");
    assert_eq!(a["state"], "active", "{a}");

    // A one-shot verb through another spelling of the home is refused: one lease.
    let out = run(registry(&other_case(&home)).args(["list", "--json"]));
    assert_error(&out, 75, "registry is held by another process");
    let doc: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(doc, serde_json::json!({"state": "contended", "scope": {}}));
    let out = run(registry(&home).arg("add").arg(primary).arg(root2));
    assert_error(&out, 75, "registry is held by another process");

    // A second server stays up, contended and fail-closed.
    let mut second = Proc::spawn(registry(&home).arg("serve"));
    let b = second.ask(r#"{"op":"list"}"#);
    assert_eq!(b["ok"], false, "{b}");
    assert_eq!(b["state"], "contended", "{b}");
    assert_eq!(b["error"], "registry-contended", "{b}");
    assert_eq!(b["scope"], serde_json::json!({}), "{b}");

    // EOF: the first server tears down in order and exits 0; the second takes over.
    let (status, err) = first.finish();
    assert!(status.success(), "serve after EOF: {status:?} {err}");
    let b = second.ask(r#"{"op":"refresh"}"#);
    assert_eq!(b["ok"], true, "{b}");
    assert_eq!(b["state"], "active", "{b}");
    assert_eq!(roots(&b).len(), 1, "the first server's mutation: {b}");

    // An answered mutation survives TerminateProcess, and the lease dies with the process.
    let b = second.ask(&add_request(primary, root2));
    assert_eq!(b["ok"], true, "{b}");
    second.kill();
    let out = run(registry(&home).args(["list", "--json"]));
    assert_eq!(out.code, 0, "{out:?}");
    let doc: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(doc["state"], "active", "{doc}");
    assert_eq!(
        roots(&doc).len(),
        2,
        "durable read-back after the kill: {doc}"
    );

    // Stored in the form users write (no verbatim `\\?\` prefix), so that a root deleted
    // since is still removable by its path.
    assert!(roots(&doc).iter().all(|r| !r.starts_with(r"\\?\")), "{doc}");
    std::fs::remove_dir(root1).unwrap();
    let out = run(registry(&home).arg("remove").arg(primary).arg(root1));
    assert_eq!(out.code, 0, "{out:?}");
    let out = run(registry(&home).args(["list", "--json"]));
    let doc: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(roots(&doc).len(), 1, "the deleted root was removed: {doc}");
}

#[test]
fn registry_storage_failure_leaves_the_document_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let doc = home.join("storages").join("multi_root_workspace.json");
    std::fs::create_dir_all(doc.parent().unwrap()).unwrap();
    std::fs::write(&doc, b"{not json").unwrap();
    let out = run(registry(&home).args(["list", "--json"]));
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(std::fs::read(&doc).unwrap(), b"{not json");
}

// ---------------------------------------------------------------------------------------
// session
// ---------------------------------------------------------------------------------------

fn session(dir: &Path) -> Command {
    let mut c = leasehold();
    c.arg("session").arg("--dir").arg(dir);
    c
}

fn records(dir: &Path, id: &str) -> Vec<String> {
    let out = run(session(dir).args(["read", "--", id]));
    assert_eq!(out.code, 0, "read: {out:?}");
    out.stdout.lines().map(str::to_string).collect()
}

/// Runs `read` until it shows `n` records (the handshake with an appender).
fn wait_for_records(dir: &Path, id: &str, n: usize) -> Vec<String> {
    let end = Instant::now() + BOUND;
    loop {
        let out = run(session(dir).args(["read", "--", id]));
        if out.code == 0 && out.stdout.lines().count() >= n {
            return out.stdout.lines().map(str::to_string).collect();
        }
        assert!(Instant::now() < end, "never saw {n} records: {out:?}");
    }
}

fn append_all(dir: &Path, id: &str, input: &str) -> Out {
    let mut child = session(dir)
        .args(["append", "--", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn append");
    if let Some(mut w) = child.stdin.take() {
        let _ = w.write_all(input.as_bytes()); // a refused writer may exit before reading
    }
    let out = child.wait_with_output().expect("append");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn session_single_writer_readers_never_blocked_and_takeover_after_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("Sessions");

    let mut writer = Proc::spawn(session(&dir).args(["append", "s1"]));
    writer.send(r#"{"n":1}"#);
    assert_eq!(wait_for_records(&dir, "s1", 1), [r#"{"n":1}"#]);
    // No lock file: the lease is a kernel object.
    assert!(!dir.join("s1").join("session.lock").exists());

    // A second writer, also through another spelling of the directory, is refused.
    for d in [dir.clone(), other_case(&dir)] {
        let out = append_all(&d, "s1", "{\"n\":2}\n");
        assert_error(&out, 75, "session s1 is owned by another process");
    }
    // Readers work while the writer holds the lease, and the writer keeps appending.
    writer.send(r#"{"n":3}"#);
    assert_eq!(
        wait_for_records(&dir, "s1", 2),
        [r#"{"n":1}"#, r#"{"n":3}"#]
    );

    // Killed mid-session: every record it wrote is there, and the next writer takes over.
    writer.kill();
    // A torn final line, as a writer killed inside its write would leave.
    let log = dir.join("s1").join("session.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b"{\"n\":").unwrap();
    drop(f);
    assert_eq!(records(&dir, "s1").len(), 2, "a torn line is not printed");
    let out = append_all(&dir, "s1", "{\"n\":4}\n\n{\"n\":5}\n");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        records(&dir, "s1"),
        [r#"{"n":1}"#, r#"{"n":3}"#, r#"{"n":4}"#, r#"{"n":5}"#],
        "the torn tail was cut before the next append"
    );

    // Not JSON: the records before it stay, nothing of it is written, exit 2.
    let out = append_all(&dir, "s1", "{\"n\":6}\nnot json\n{\"n\":7}\n");
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(records(&dir, "s1").last().unwrap(), r#"{"n":6}"#);

    let out = run(session(&dir).args(["read", "unknown"]));
    assert_error(&out, 2, "unknown-session");
    let out = run(session(&dir).args(["append", ".hidden"]));
    assert_eq!(out.code, 2, "{out:?}");
}

// ---------------------------------------------------------------------------------------
// results
// ---------------------------------------------------------------------------------------

fn results(root: &Path) -> Command {
    let mut c = leasehold();
    c.arg("results").arg("--root").arg(root);
    c
}

#[test]
fn results_contention_hand_over_and_takeover_after_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("Managed");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub").join("a.txt"), b"hello").unwrap();
    let out = run(results(&root).args(["stage", "r1", "--from"]).arg(&src));
    assert_eq!(out.code, 0, "{out:?}");
    let lock = leasehold_stores::results::ResultStore::new(&root).lock_path("r1");

    // Another process holds the ID's lease: no verb is admitted within its budget,
    // also through another spelling of the root or of the ID (trimmed).
    let holder = hold(&lock);
    let out = run(results(&root).args(["--timeout", "0", "paths", "r1"]));
    assert_eq!(out.code, 75, "{out:?}");
    let out = run(results(&other_case(&root)).args(["--timeout", "0", "discard", " r1 "]));
    assert_eq!(out.code, 75, "{out:?}");
    let out = run(results(&root).args(["--timeout", "0", "finish", "r1"]));
    assert_eq!(out.code, 75, "{out:?}");
    assert!(
        out.stderr.contains("durab"),
        "finish says durability: {out:?}"
    );
    let out = run(results(&root).args(["--json", "sweep", "--older-than", "0"]));
    assert_eq!(out.code, 0, "{out:?}");
    let doc: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(doc["skipped"], serde_json::json!(["r1"]), "busy: {doc}");

    // A waiting `finish` is admitted when the holder releases (hand-over).
    let waiter = Proc::spawn(results(&root).args(["--timeout", "60", "finish", "r1"]));
    let (status, err) = holder.finish();
    assert!(status.success(), "holder: {err}");
    let (status, err) = waiter.finish();
    assert!(status.success(), "waiting finish: {err}");
    let out = run(results(&root).args(["--json", "pending"]));
    assert_eq!(out.stdout.trim(), r#"["r1"]"#, "{out:?}");

    // The holder killed (TerminateProcess of `run`): its lease dies with it.
    let holder = hold(&lock);
    let out = run(results(&root)
        .args(["--timeout", "0", "apply", "r1", "--to"])
        .arg(tmp.path().join("t")));
    assert_eq!(out.code, 75, "{out:?}");
    let Proc {
        mut child,
        stdin,
        stdout,
    } = holder;
    child.kill().unwrap();
    child.wait().unwrap();
    drop((stdin, stdout)); // ends the orphaned COMMAND too
    let target = tmp.path().join("target");
    let out = run(results(&root)
        .args(["--timeout", "30", "apply", "r1", "--to"])
        .arg(&target));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        std::fs::read(target.join("sub").join("a.txt")).unwrap(),
        b"hello"
    );
    let out = run(results(&root).args(["--json", "pending"]));
    assert_eq!(out.stdout.trim(), "[]", "{out:?}");
    let out = run(results(&root).args(["paths", "r1"]));
    assert_error(&out, 2, "unknown-result");
}

// ---------------------------------------------------------------------------------------
// run and status
// ---------------------------------------------------------------------------------------

#[test]
fn run_contention_hand_over_takeover_and_status() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("Locks");
    std::fs::create_dir(&dir).unwrap();
    let lock = dir.join("job.lock");
    let holder = hold(&lock);

    let out = run(leasehold()
        .args(["run", "--no-wait"])
        .arg(other_case(&lock))
        .args(["--", "cmd", "/c", "exit", "0"]));
    assert_error(&out, 75, "held by another process");
    let out = run(leasehold()
        .args(["run", "--no-wait", "--conflict-exit-code", "9"])
        .arg(&lock)
        .args(["--", "cmd", "/c", "exit", "0"]));
    assert_eq!(out.code, 9, "{out:?}");
    let out = run(leasehold()
        .args(["run", "--timeout", "0.2"])
        .arg(&lock)
        .args(["--", "cmd", "/c", "exit", "0"]));
    assert_eq!(out.code, 75, "{out:?}");
    // What Windows cannot do is said: `run --help` names the missing inheritance.
    let help = run(leasehold().args(["run", "--help"]));
    assert!(
        help.stdout.contains("COMMAND does not inherit the lease"),
        "{help:?}"
    );
    // Windows does not reveal holders: status says so in one line.
    let out = run(leasehold().arg("status").arg(&lock));
    assert_error(&out, 1, "does not reveal lock holders");

    // A waiter runs its command once the holder releases, with the command's status.
    let waiter = Proc::spawn(
        leasehold()
            .arg("run")
            .arg(&lock)
            .args(["--", "cmd", "/c", "exit", "7"]),
    );
    let (status, _) = holder.finish();
    assert!(status.success());
    let (status, err) = waiter.finish();
    assert_eq!(status.code(), Some(7), "{err}");

    // Killed holder: the next run gets the lease at once.
    let holder = hold(&lock);
    holder.kill();
    let out = run(leasehold()
        .args(["run", "--no-wait"])
        .arg(&lock)
        .args(["--", "cmd", "/c", "exit", "0"]));
    assert_eq!(out.code, 0, "{out:?}");
    assert!(!lock.exists(), "no lock file on Windows");
}

#[test]
fn a_linked_directory_is_the_same_lease_where_links_can_be_made() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let alias = tmp.path().join("alias");
    if let Err(e) = std::os::windows::fs::symlink_dir(&real, &alias)
        .and_then(|()| std::fs::symlink_metadata(&alias).map(drop))
    {
        eprintln!(
            "SKIP: directory symbolic link alias: cannot create one here (Wine 8 reports success but creates nothing): {e}"
        );
        return;
    }
    let holder = hold(&real.join("x.lock"));
    let out = run(leasehold()
        .args(["run", "--no-wait"])
        .arg(alias.join("x.lock"))
        .args(["--", "cmd", "/c", "exit", "0"]));
    assert_eq!(out.code, 75, "{out:?}");
    let (status, _) = holder.finish();
    assert!(status.success());
}

// ---------------------------------------------------------------------------------------
// bench and torture (workers killed with TerminateProcess)
// ---------------------------------------------------------------------------------------

/// `bench --quick` runs on Windows: it exits 0, prints the table with every figure Windows
/// can measure, says in one line for each figure it cannot why not, and removes its files.
/// Figures are printed, never asserted (no timed assertions).
#[test]
fn bench_quick_prints_the_windows_table_and_the_figures_it_cannot_measure() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(leasehold()
        .args(["bench", "--quick", "--dir"])
        .arg(dir.path()));
    assert_eq!(out.code, 0, "{out:?}");
    let table = &out.stdout;
    assert!(
        table.starts_with("leasehold bench --quick — ") && table.contains(" Windows "),
        "{table}"
    );
    let rows = [
        "cold cycle (try_acquire: resolve, create object; drop)",
        "warm re-acquire (LeaseHandle: lock + verify, unlock)",
        "verify() on a held lease",
        "uncontended cold Lease::acquire (unlimited budget) + release",
        "uncontended cold Lease::acquire (deadline + CancelToken) + release",
        "uncontended warm LeaseHandle::lock + release",
        "takeover after TerminateProcess of the holder (kill → acquire)",
        "cancellation: cancel() → acquire returns",
        "deadline: deadline passed → acquire returns",
        "registry mutation (add/remove",
        "session append, fsync per record",
        "session append, batched",
        "keyed lease try_acquire + release, 10 IDs",
        // 1,000 IDs with --quick on Windows (fewer if the setup hit its time limit).
        "keyed lease try_acquire + release, 1",
    ];
    for row in rows {
        let line = table
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no row {row:?} in\n{table}"));
        // A measured row has a median in µs, ms or per second.
        assert!(
            line.contains(" µs") || line.contains(" ms") || line.contains(" /s"),
            "{line}"
        );
    }
    // Floors are the lease's path calls, issued bare.
    assert!(
        table.contains("(its path calls only: stat ×2, canonicalize)"),
        "{table}"
    );
    let not: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("not measured on Windows: "))
        .collect();
    for key in [
        "uncontended_floor",
        "fs4_cold_cycle",
        "handoff_2",
        "async_waiter_threads",
        "crowd_waiting_cpu",
        "waiting_cpu",
        "shared_try_acquire",
        "gc_beside_verbs",
        "uncued floors",
    ] {
        assert!(
            not.iter().any(|l| l.contains(key)),
            "no 'not measured' line for {key}: {not:?}"
        );
    }
    // The uncued handoff between processes: every leasehold method with 2 and 4 workers.
    for method in [
        "Lease::acquire, unlimited budget",
        "Lease::acquire, deadline + CancelToken",
        "LeaseHandle::lock (warm)",
        "Lease::acquire_async, current-thread runtime",
        "KeyedLeases::acquire, deadline + CancelToken",
    ] {
        for w in ["2", "4"] {
            assert!(
                table
                    .lines()
                    .any(|l| l.starts_with(&format!("{w}  {method}"))),
                "no uncued line for {method} with {w} workers:\n{table}"
            );
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "bench left files behind: {left:?}");
}

fn torture(dir: &Path, args: &[&str]) -> Out {
    run(leasehold()
        .arg("torture")
        .args(args)
        .args(["--json", "--dir"])
        .arg(dir))
}

/// A short torture: workers are killed with TerminateProcess while holding leases and in
/// every step of a durable rewrite; the checker finds no overlapping holders and every
/// acknowledged mutation in the final registry and counter; the run cleans up.
#[test]
fn torture_kills_workers_with_terminate_process_and_finds_no_violation() {
    let dir = tempfile::tempdir().unwrap();
    let out = torture(
        dir.path(),
        &["--workers", "3", "--kills", "12", "--seconds", "90"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["kills"], 12, "{v}");
    assert!(v["registry_operations"].as_u64().unwrap() > 0, "{v}");
    assert!(v["counter_operations"].as_u64().unwrap() > 0, "{v}");
    assert!(v["lease_intervals"].as_u64().unwrap() > 0, "{v}");
    assert!(v["takeovers"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "cleaned up"
    );

    // The collector mode: keyed leases on four IDs while a collector runs.
    let out = torture(
        dir.path(),
        &["--gc", "--workers", "3", "--kills", "10", "--seconds", "90"],
    );
    assert_eq!(out.code, 0, "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["kills"], 10, "{v}");
    assert!(v["lease_intervals"].as_u64().unwrap() > 0, "{v}");
}

/// The checker's self-check on Windows: workers that take the counter's lease on lock files
/// of their own overlap, and the torture must say so (exit 1, one line, evidence kept).
/// And the etcd mode, which pauses workers with SIGSTOP, says in one line that it is not
/// available here.
#[test]
fn torture_detects_broken_exclusion_and_refuses_the_etcd_mode() {
    let dir = tempfile::tempdir().unwrap();
    let out = torture(
        dir.path(),
        &[
            "--break-exclusion",
            "--workers",
            "3",
            "--kills",
            "10",
            "--seconds",
            "90",
        ],
    );
    assert_error(&out, 1, "violation(s) found");
    testkit::assert_broken_exclusion_found(&out.stdout);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "the evidence is kept"
    );

    let out = run(leasehold().args(["torture", "--etcd", "http://127.0.0.1:1"]));
    assert_error(&out, 1, "not available on Windows");
}

/// `flock` is POSIX-only: every form — FILE COMMAND, `-c`, and NUMBER (an inherited
/// descriptor) — says in one line that it is not available and why, exit 2, runs nothing
/// and creates nothing.
#[test]
fn flock_says_it_is_not_available_in_every_form() {
    let dir = tempfile::tempdir().unwrap();
    let lock = dir.path().join("f.lock");
    let lock = lock.to_str().unwrap();
    for args in [
        vec!["flock", "-n", "9"],
        vec!["flock", lock, "cmd", "/c", "exit 0"],
        vec!["flock", "-s", lock, "-c", "exit 0"],
    ] {
        let out = run(leasehold().args(&args));
        assert_error(&out, 2, "flock: not available on this platform");
        assert!(
            out.stderr.contains("use `leasehold run`"),
            "{args:?}: {out:?}"
        );
    }
    assert!(!dir.path().join("f.lock").exists());
}
