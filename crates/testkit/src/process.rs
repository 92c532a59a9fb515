//! Real child processes, synchronised through pipes: a child's line on stdout is the
//! handshake (never a sleep); SIGKILL of the child's process group is the crash.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::spawns::spawning;

/// The result of a command run to completion by [`run`].
#[derive(Debug)]
pub struct Out {
    /// The exit status, or -1 when a signal ended the process.
    pub code: i32,
    /// Standard output (lossily decoded).
    pub stdout: String,
    /// Standard error (lossily decoded).
    pub stderr: String,
}

/// Runs `cmd` to completion and captures its status and output (stdin as [`Command::output`]
/// leaves it unless `cmd` sets it). Not serialised with [`quiet`](crate::quiet): the spawn
/// lock would be held for the command's whole run.
///
/// # Panics
///
/// When the command cannot be spawned.
pub fn run(cmd: &mut Command) -> Out {
    let out = cmd.output().expect("spawn the command under test");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `cmd` to completion as [`run`] does, but at most for `limit`: the command runs in a
/// process group of its own, and when the limit passes the whole group is SIGKILLed and the
/// output so far is returned as `Err`, so that a suite that hangs fails naming where it
/// stood instead of holding CI until its own time runs out. Processes of the group that
/// outlive the command are SIGKILLed too (they would hold its output open).
///
/// # Panics
///
/// When the command cannot be spawned.
pub fn run_within(cmd: &mut Command, limit: Duration) -> Result<Out, Out> {
    use std::io::Read;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn the command under test");
    let group = Pid::from_raw(child.id() as i32).expect("pid");
    fn drain(mut from: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = from.read_to_end(&mut bytes);
            bytes
        })
    }
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let (ended, end) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = child.wait().expect("wait for the command under test");
        let _ = ended.send(());
        status
    });
    let in_time = end.recv_timeout(limit).is_ok();
    let _ = rustix::process::kill_process_group(group, Signal::KILL);
    let status = waiter.join().expect("the waiting thread");
    let text = |t: std::thread::JoinHandle<Vec<u8>>| {
        String::from_utf8_lossy(&t.join().unwrap_or_default()).into_owned()
    };
    let out = Out {
        code: status.code().unwrap_or(-1),
        stdout: text(stdout),
        stderr: text(stderr),
    };
    match in_time {
        true => Ok(out),
        false => Err(out),
    }
}

/// Asserts the CLI's error contract: stderr is exactly one line, starting with
/// `leasehold: ` and containing `needle`.
///
/// # Panics
///
/// When it does not hold.
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

/// Whether every thread of process `pid` is stopped: a SIGSTOP sent to it has taken effect
/// (state `T` in each `/proc/PID/task/*/stat`; Linux). `false` for a process that is gone.
pub fn stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    let all = tasks.filter_map(Result::ok).all(|t| {
        any = true;
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|st| st.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
    });
    any && all
}

/// A child process in its own process group, with piped stdin/stdout for handshakes. Dropping
/// it while the child runs SIGKILLs the whole group and reaps the child, so no test leaves a
/// holder behind when it fails.
pub struct Proc {
    /// The child itself.
    pub child: Child,
    /// Its stdin, until [`close_stdin`](Proc::close_stdin).
    pub stdin: Option<ChildStdin>,
    /// Its stdout, line-buffered for [`line`](Proc::line).
    pub stdout: BufReader<ChildStdout>,
}

impl Proc {
    /// Spawns `cmd` with piped stdin/stdout in a new process group (stderr as `cmd` says).
    ///
    /// # Panics
    ///
    /// When the command cannot be spawned.
    pub fn spawn(cmd: &mut Command) -> Proc {
        let mut child = {
            let _spawning = spawning();
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .process_group(0)
                .spawn()
                .expect("spawn")
        };
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Proc {
            child,
            stdin,
            stdout,
        }
    }

    /// Reads one line from the child's stdout, without its newline (blocking: the child's
    /// line is the handshake). Empty at EOF.
    pub fn line(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).expect("read child stdout");
        s.trim_end_matches('\n').to_string()
    }

    /// The child's next line marked `@ ` (the handshake of a test binary run again as a
    /// worker), without the mark, past any other output (libtest's own lines, blank ones
    /// too, which [`line`](Self::line) would take for the end).
    ///
    /// # Panics
    ///
    /// When the child's stdout ends first.
    pub fn marked_line(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = self
                .stdout
                .read_line(&mut line)
                .expect("read the worker's stdout");
            assert!(n > 0, "the worker ended before its handshake");
            if let Some(rest) = line.trim_end_matches('\n').strip_prefix("@ ") {
                return rest.to_string();
            }
        }
    }

    /// Writes one line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write child stdin");
        stdin.flush().expect("flush");
    }

    /// Closes the child's stdin (the child reads EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The child's process ID (also its process group's ID).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs the child's whole process group (the child and everything it started) and
    /// reaps the child: a crash, not a release.
    pub fn kill_group(&mut self) {
        let pgid = Pid::from_raw(self.child.id() as i32).expect("pid");
        let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
        let _ = self.child.wait();
    }

    /// SIGKILLs only the child process itself and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `sig` to the child only.
    pub fn signal(&self, sig: Signal) {
        let pid = Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("signal child");
    }

    /// Waits for the child to exit.
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

/// A real holder process: util-linux `flock` holding the same kind of lock the library takes
/// (`flock(LOCK_EX)` on the file), in its own process group, until its stdin closes
/// ([`release`](Self::release)) or it is killed ([`kill`](Self::kill)). Dropping it SIGKILLs
/// the group.
pub struct FlockHolder(Proc);

impl FlockHolder {
    /// Creates `lock` if missing and holds it from another process; returns once the child
    /// has printed that it holds the lock.
    ///
    /// # Panics
    ///
    /// When util-linux `flock` is missing or does not report the lock.
    pub fn hold(lock: &Path) -> FlockHolder {
        if !lock.exists() {
            std::fs::File::create(lock).expect("create the lock file");
        }
        // `-o`: the shell it runs does not inherit the lock's descriptor, so the lock is
        // `flock`'s alone and is gone once `kill` has reaped it (a shell child still dying
        // would otherwise hold it a moment longer).
        let mut holder = Proc::spawn(
            Command::new("flock")
                .arg("-o")
                .arg(lock)
                .args(["-c", "echo locked; read _"]),
        );
        assert_eq!(
            holder.line(),
            "locked",
            "util-linux flock did not take the lock"
        );
        FlockHolder(holder)
    }

    /// SIGKILLs the holder's whole process group and reaps it: a crash, not a release.
    pub fn kill(mut self) {
        self.0.kill_group();
    }

    /// Releases the lock as a holder that finished would: its stdin closes, its command
    /// ends, `flock` exits (closing the lock's descriptor), and it is reaped.
    pub fn release(mut self) {
        self.0.close_stdin();
        self.0.wait();
    }
}

/// Kills `holder` while an abandoned wait of this process (a waiter that timed out, was
/// cancelled or dropped) is queued for `lock` alone, and checks that the grant the kernel
/// then gives that wait is let go by itself, with no call into the library: a next holder
/// process — util-linux `flock` giving up after 20 s, a bound the kernel's wait keeps, not a
/// sleep here — gets the lock, and this process then neither holds nor waits for it.
///
/// Woken is not yet granted: on a loaded machine the next holder can take the lock between
/// the kernel waking the abandoned helper and the helper's retry, and the helper then queues
/// again behind it — still abandoned, its grant still to come. So each round lets the next
/// holder go again, until the helper is seen out of the queue while another process holds
/// the lock (a grant kept by the library would have made the next holder time out instead).
///
/// # Panics
///
/// When a next holder does not get the lock, or this process holds it, or still waits for
/// it after 100 rounds.
pub fn assert_abandoned_grant_let_go(lock: &Path, holder: FlockHolder) {
    let pid = std::process::id();
    holder.kill();
    for _ in 0..100 {
        crate::until("the abandoned wait is woken", || {
            !crate::blocked_on(pid, lock)
        });
        let mut next = Proc::spawn(
            Command::new("flock")
                .args(["-w", "20"])
                .arg(lock)
                .args(["-c", "echo locked; read _"]),
        );
        assert_eq!(
            next.line(),
            "locked",
            "the next holder never got the lock: the abandoned grant was kept"
        );
        assert!(!crate::holds(pid, lock), "this process holds the lock");
        if !crate::blocked_on(pid, lock) {
            return;
        }
        // The helper lost the race to `next` and queued again: let `next` go.
        next.close_stdin();
        next.wait();
    }
    panic!("this process waits for the lock again after 100 next holders");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sh -c script` through [`run_within`] with `limit`, and how long it took.
    fn within(script: &str, limit: Duration) -> (Result<Out, Out>, Duration) {
        let started = Instant::now();
        let out = run_within(Command::new("sh").args(["-c", script]), limit);
        (out, started.elapsed())
    }

    #[test]
    fn a_command_that_ends_in_time_gives_its_output_and_status() {
        let out = within("echo out; echo err >&2; exit 3", Duration::from_secs(60))
            .0
            .expect("in time");
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (3, "out\n", "err\n")
        );
    }

    #[test]
    fn a_command_that_hangs_is_stopped_with_its_output_so_far() {
        let (out, took) = within("echo begun; exec sleep 600", Duration::from_millis(300));
        assert_eq!(out.expect_err("stopped").stdout, "begun\n");
        assert!(took < Duration::from_secs(60));
    }

    #[test]
    fn processes_left_behind_in_its_group_do_not_hold_the_output_open() {
        // The background `sleep` keeps the pipes open after `sh` has exited.
        let (out, took) = within("sleep 600 & echo done", Duration::from_secs(60));
        assert_eq!(out.expect("in time").stdout, "done\n");
        assert!(took < Duration::from_secs(60));
    }
}
