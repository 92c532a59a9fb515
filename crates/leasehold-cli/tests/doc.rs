//! Black-box tests of `leasehold doc` (docs/cli.md, "doc"), with real processes synchronised
//! through lines on pipes, never sleeps.
#![cfg(unix)] // POSIX processes, signals and lock files

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

use common::{bin, hold, leasehold, release};
use testkit::{Out, Proc, assert_one_line_error, run};

const WORKERS: usize = 4;
const INCREMENTS: u32 = 200;

/// The increment COMMAND: the current number on stdin (none: 0), the next one on stdout.
const INCREMENT: &str = "read n; echo $(( ${n:-0} + 1 ))";

fn update(file: &Path, command: &[&str]) -> Out {
    run(leasehold()
        .args(["doc", "update", "--timeout", "60"])
        .arg(file)
        .arg("--")
        .args(command))
}

fn content(file: &Path) -> String {
    std::fs::read_to_string(file).expect("the document")
}

/// `WORKERS` shell loops of `INCREMENTS` runs of `step` each (`$F` is the file, `$I` the
/// loop's number), started together after each said `ready`. Returns the final count.
fn race(file: &Path, step: &str) -> u64 {
    let script = format!(
        "echo ready; read _go; i=0; while [ $i -lt {INCREMENTS} ]; do {step} || exit 1; i=$((i+1)); done; echo done"
    );
    let mut loops: Vec<Proc> = (0..WORKERS)
        .map(|i| {
            Proc::spawn(
                Command::new("sh")
                    .args(["-c", &script])
                    .env("F", file)
                    .env("I", i.to_string())
                    .env("L", bin())
                    .stderr(Stdio::inherit()),
            )
        })
        .collect();
    for l in &mut loops {
        assert_eq!(l.line(), "ready");
    }
    for l in &mut loops {
        l.send("go");
    }
    for l in &mut loops {
        assert_eq!(l.line(), "done");
        assert!(l.wait().success());
    }
    content(file).trim().parse().expect("a count")
}

#[test]
fn four_processes_of_200_updates_through_a_script_lose_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("count");
    let step = format!("\"$L\" doc update --timeout 60 \"$F\" -- sh -c '{INCREMENT}' >/dev/null");
    assert_eq!(race(&file, &step), u64::from(INCREMENTS) * WORKERS as u64);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "only the document and its lock file: {names:?}"
    );
}

#[test]
fn the_same_updates_as_a_plain_read_modify_write_lose_some() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("count");
    // Atomic (a rename) but unlocked: the negative control of the test above.
    let step = format!("sh -c '{INCREMENT}' < \"$F\" > \"$F.$I\" 2>/dev/null; mv \"$F.$I\" \"$F\"");
    std::fs::write(&file, "0\n").expect("start");
    let total = race(&file, &step);
    assert!(
        total < u64::from(INCREMENTS) * WORKERS as u64,
        "an unlocked read-modify-write lost nothing ({total}): the harness does not race"
    );
}

#[test]
fn update_prints_the_new_version_and_read_prints_the_content() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("settings.json");
    std::fs::write(&file, "{\"count\":41}\n").expect("write");
    let script = "tr -d ' \\n' | sed 's/41/42/'";
    let out = update(&file, &["sh", "-c", script]);
    assert_eq!(out.code, 0, "{out:?}");
    let version = out.stdout.trim().to_string();
    assert_eq!(version.len(), 32, "{out:?}");
    assert_eq!(content(&file), "{\"count\":42}");
    let read = run(leasehold().args(["doc", "read"]).arg(&file));
    assert_eq!((read.code, read.stdout.as_str()), (0, "{\"count\":42}"));
    let read = run(leasehold().args(["doc", "read", "--version"]).arg(&file));
    assert_eq!((read.code, read.stdout.trim()), (0, version.as_str()));
}

#[test]
fn nothing_is_written_unless_command_exits_0_with_content_that_parses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("settings.json");
    std::fs::write(&file, "{\"a\":1}").expect("write");
    // COMMAND fails: its status, nothing written.
    let out = update(&file, &["sh", "-c", "echo '{}'; exit 3"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert_one_line_error(&out, "nothing was written");
    // COMMAND's output is not JSON: 2, nothing written.
    let out = update(&file, &["sh", "-c", "echo not json"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "does not parse as JSON");
    // COMMAND cannot be found: 127.
    let out = update(&file, &["no-such-command-here"]);
    assert_eq!(out.code, 127, "{out:?}");
    assert_eq!(content(&file), "{\"a\":1}");
    // A document that does not parse is never handed to COMMAND nor overwritten.
    std::fs::write(&file, "{ torn").expect("write");
    let out = update(&file, &["sh", "-c", "echo '{}'"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_one_line_error(&out, "does not parse");
    assert_eq!(content(&file), "{ torn");
}

#[test]
fn a_symlink_fifo_or_directory_at_file_is_exit_2_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("target");
    std::fs::write(&target, "1").expect("write");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let fifo = dir.path().join("fifo");
    assert!(run(Command::new("mkfifo").arg(&fifo)).code == 0);
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    for path in [&link, &fifo, &sub] {
        for out in [
            run(leasehold().args(["doc", "read"]).arg(path)),
            update(path, &["sh", "-c", "echo 2"]),
        ] {
            assert_eq!(out.code, 2, "{path:?}: {out:?}");
            assert_one_line_error(&out, "not a regular file");
            assert!(
                out.stderr
                    .contains(&*path.file_name().unwrap().to_string_lossy())
            );
        }
    }
    assert_eq!(content(&target), "1");
}

#[test]
fn a_held_lease_is_exit_75_and_a_stale_if_version_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("count");
    let first = update(&file, &["sh", "-c", INCREMENT]);
    assert_eq!(first.code, 0, "{first:?}");
    let holder = hold(&dir.path().join("count.lock"));
    let out = run(leasehold()
        .args(["doc", "update", "--no-wait"])
        .arg(&file)
        .args(["--", "sh", "-c", INCREMENT]));
    assert_eq!(out.code, 75, "{out:?}");
    assert_one_line_error(&out, "did not wait");
    let out = run(leasehold()
        .args(["doc", "update", "--timeout", "0.2"])
        .arg(&file)
        .args(["--", "sh", "-c", INCREMENT]));
    assert_eq!(out.code, 75, "{out:?}");
    assert_one_line_error(&out, "wait longer with --timeout SECS");
    release(holder);
    let second = update(&file, &["sh", "-c", INCREMENT]);
    assert_eq!(second.code, 0, "{second:?}");
    let out = run(leasehold()
        .args(["doc", "update", "--if", first.stdout.trim()])
        .arg(&file)
        .args(["--", "sh", "-c", INCREMENT]));
    assert_eq!(out.code, 75, "{out:?}");
    assert_one_line_error(&out, second.stdout.trim());
    assert_eq!(content(&file), "2\n");
    let out = run(leasehold()
        .args(["doc", "update", "--if", second.stdout.trim()])
        .arg(&file)
        .args(["--", "sh", "-c", INCREMENT]));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(content(&file), "3\n");
}

#[test]
fn command_does_not_inherit_the_lock_descriptor() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("count");
    let lock = dir.path().join("count.lock");
    // Exits 9 if any of its descriptors is the lock file.
    let script = "for f in /proc/$$/fd/*; do [ \"$(readlink \"$f\")\" = \"$LOCK\" ] && exit 9; done; echo ok";
    let out = run(leasehold()
        .args(["doc", "update"])
        .arg(&file)
        .args(["--", "sh", "-c", script])
        .env("LOCK", &lock));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(content(&file), "ok\n");
    // The check itself finds an inherited lock (`run` hands its lease to COMMAND).
    let out = run(leasehold()
        .arg("run")
        .arg(&lock)
        .args(["--", "sh", "-c", script])
        .env("LOCK", &lock));
    assert_eq!(out.code, 9, "{out:?}");
}

/// `doc update FILE -- COMMAND` where COMMAND says its pid on stderr and then waits forever;
/// returns the tool, its stderr and COMMAND's pid.
fn stuck_update(file: &Path) -> (Child, BufReader<ChildStderr>, u32) {
    let mut tool = leasehold()
        .args(["doc", "update"])
        .arg(file)
        .args(["--", "sh", "-c", "echo $$ >&2; exec sleep 1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(tool.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("COMMAND's pid");
    let pid = line.trim().parse().expect("a pid");
    (tool, stderr, pid)
}

/// Waits for `child` to exit, failing the test after a minute (a bound on a hang, never a
/// synchronisation).
fn bounded_wait(child: &mut Child) -> std::process::ExitStatus {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(std::time::Instant::now() < end, "the tool did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is not alive: its state in /proc/PID/stat is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

#[test]
fn sigterm_to_the_tool_stops_command_and_writes_nothing() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("count");
    std::fs::write(&file, "5\n").expect("write");
    let (mut tool, _stderr, command) = stuck_update(&file);
    let pid = rustix::process::Pid::from_raw(tool.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
    let status = bounded_wait(&mut tool);
    assert_eq!((status.code(), status.signal()), (Some(143), None));
    assert!(!alive(command), "COMMAND {command} still runs");
    assert_eq!(content(&file), "5\n");
    let out = run(leasehold()
        .args(["doc", "update", "--no-wait"])
        .arg(&file)
        .args(["--", "sh", "-c", INCREMENT]));
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(content(&file), "6\n");
}

#[test]
fn sigkill_of_the_tool_frees_the_lease_and_command_output_is_never_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("count");
    std::fs::write(&file, "5\n").expect("write");
    let (mut tool, _stderr, command) = stuck_update(&file);
    tool.kill().expect("SIGKILL");
    tool.wait().expect("reap");
    // COMMAND still runs (its own process group), but the lease went with the tool.
    assert!(alive(command));
    let out = run(leasehold()
        .args(["doc", "update", "--no-wait"])
        .arg(&file)
        .args(["--", "sh", "-c", INCREMENT]));
    assert_eq!(out.code, 0, "{out:?}");
    let pgid = rustix::process::Pid::from_raw(command as i32).expect("pid");
    let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
    assert_eq!(content(&file), "6\n");
}

#[test]
fn watch_prints_the_version_then_every_new_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("count");
    let first = update(&file, &["sh", "-c", INCREMENT]);
    let mut watch = Proc::spawn(leasehold().args(["doc", "watch"]).arg(&file));
    assert_eq!(watch.line(), first.stdout.trim());
    for _ in 0..20 {
        let out = update(&file, &["sh", "-c", INCREMENT]);
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(watch.line(), out.stdout.trim());
    }
    watch.signal(rustix::process::Signal::INT);
    let status = watch.wait();
    assert_eq!(status.code(), Some(130));
    let _ = watch.stdin.as_mut().map(|s| s.flush());
}

#[test]
fn jq_is_a_safe_read_modify_write() {
    if run(Command::new("jq").arg("--version")).code != 0 {
        println!("SKIP: doc update with jq: jq is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("settings.json");
    std::fs::write(&file, "{\"count\": 0, \"theme\": \"dark\"}\n").expect("write");
    for _ in 0..3 {
        let out = update(&file, &["jq", ".count += 1"]);
        assert_eq!(out.code, 0, "{out:?}");
    }
    let value: serde_json::Value = serde_json::from_str(&content(&file)).expect("JSON");
    assert_eq!(value, serde_json::json!({"count": 3, "theme": "dark"}));
    // A jq program that fails (exit 5, its own message on the shared stderr) writes nothing.
    let out = update(&file, &["jq", ".count | error"]);
    assert_eq!(out.code, 5, "{out:?}");
    assert!(
        out.stderr
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("leasehold: ") && l.contains("nothing was written")),
        "{out:?}"
    );
    let value: serde_json::Value = serde_json::from_str(&content(&file)).expect("JSON");
    assert_eq!(value["count"], 3);
}
