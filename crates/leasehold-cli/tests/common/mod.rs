//! Helpers shared by the CLI's black-box tests: run the real binary, hold a lease in a real
//! child process, and synchronise with it through pipes (never sleeps).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `leasehold` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_leasehold"))
}

/// A `leasehold` command with a private home, no inherited stdin.
pub fn leasehold() -> Command {
    let mut c = Command::new(bin());
    c.stdin(Stdio::null());
    c
}

/// The result of a finished command.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs to completion and captures everything.
pub fn run(cmd: &mut Command) -> Out {
    let out = cmd.output().expect("spawn leasehold");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts that stderr is exactly one line starting with `leasehold: ` and containing `needle`.
pub fn assert_one_line_error(out: &Out, needle: &str) {
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one stderr line, got {:?}",
        out.stderr
    );
    assert!(lines[0].starts_with("leasehold: "), "{:?}", lines[0]);
    assert!(lines[0].contains(needle), "{:?} lacks {needle:?}", lines[0]);
}

/// A child process started in its own process group, with piped stdin/stdout for handshakes.
pub struct Proc {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: BufReader<ChildStdout>,
}

impl Proc {
    /// Spawns `cmd` with piped stdin/stdout in a new process group.
    pub fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0)
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

    /// Reads one line from the child's stdout (blocking: the child's line is the handshake).
    pub fn line(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).expect("read child stdout");
        s.trim_end_matches('\n').to_string()
    }

    /// Writes one line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write child stdin");
        stdin.flush().expect("flush");
    }

    /// Closes the child's stdin (EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs the child's whole process group (the child and everything it started).
    pub fn kill_group(&mut self) {
        let pgid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        let _ = self.child.wait();
    }

    /// SIGKILLs only the child process itself.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `sig` to the child only.
    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("signal child");
    }

    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().expect("wait child")
    }

    /// Waits at most `limit` for the child to exit (polling its status: used only to bound a
    /// test that would otherwise hang, never to synchronise).
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return Some(st);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill_group();
        }
    }
}

/// Holds the lease on `lock` through `leasehold run` until told to stop: the command prints
/// `locked` (proof the lease is held: COMMAND never runs without it) and waits for a line or
/// EOF on stdin.
pub fn hold(lock: &Path) -> Proc {
    let mut p = Proc::spawn(leasehold().arg("run").arg(lock).args([
        "--",
        "sh",
        "-c",
        "echo locked; read _ignored; echo done",
    ]));
    assert_eq!(p.line(), "locked");
    p
}

/// Waits (at most 10 s) until `leasehold status` reports `lock` free. After SIGKILLing a
/// [`hold`] group, `wait()` reaps only `leasehold`; its COMMAND, which shares the lease, dies
/// a moment later, so the release is observed rather than assumed.
pub fn wait_until_free(lock: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = run(leasehold().arg("status").arg(lock));
        if out.stdout == "free\n" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never became free: {out:?}",
            lock.display()
        );
    }
}

/// Releases a holder started by [`hold`] and waits for it to exit cleanly.
pub fn release(mut p: Proc) {
    p.send("go");
    assert_eq!(p.line(), "done");
    assert!(p.wait().success());
}

/// The seconds in a contention message's "…; gave up after S s; wait longer with --timeout
/// SECS" tail (`None` if the line has no such tail). Compared by range, never exactly: a
/// loaded machine wakes a deadline late.
#[allow(dead_code)] // used by the waiting verbs' tests only
pub fn gave_up_after(line: &str) -> Option<f64> {
    line.strip_suffix("s; wait longer with --timeout SECS")
        .and_then(|l| l.rsplit_once("; gave up after "))
        .and_then(|(_, secs)| secs.parse().ok())
}
