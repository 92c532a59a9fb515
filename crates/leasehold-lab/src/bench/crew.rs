//! The parent side of the multi-process figures: worker processes (this binary as
//! `leasehold worker bench ROLE`), the lines they print, and knowing that a waiter waits.
//! Parent and workers synchronise through pipes (one line per event), never by sleeping.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;
#[cfg(unix)]
use std::time::Instant;

use super::report::io_fail;
use super::role::Wait;
use crate::exit::Failure;

/// Upper bound on any single wait for a worker's line: a wedged benchmark fails, never hangs.
const LINE_LIMIT: Duration = Duration::from_secs(20);

/// Worker processes and one channel carrying every line they print, tagged by worker.
pub(super) struct Crew {
    children: Vec<(Child, Option<ChildStdin>)>,
    tx: mpsc::Sender<(usize, String)>,
    rx: mpsc::Receiver<(usize, String)>,
}

impl Crew {
    pub(super) fn new() -> Crew {
        let (tx, rx) = mpsc::channel();
        Crew {
            children: Vec::new(),
            tx,
            rx,
        }
    }

    /// Starts a worker (`index` of `of`, for handoff workers and crowds); returns its index.
    pub(super) fn spawn(
        &mut self,
        role: &str,
        lock: &Path,
        stamp: Option<&Path>,
        (index, of): (usize, usize),
        wait: Wait,
    ) -> Result<usize, Failure> {
        let mut args = vec![format!("--index={index}"), format!("--of={of}")];
        args.extend(wait.flag().map(String::from));
        self.spawn_args(role, lock, stamp, &args)
    }

    /// Starts a worker with these worker arguments (besides role, lock and stamp); returns
    /// its index.
    pub(super) fn spawn_args(
        &mut self,
        role: &str,
        lock: &Path,
        stamp: Option<&Path>,
        args: &[String],
    ) -> Result<usize, Failure> {
        let mut cmd = crate::platform::worker_command("bench")?;
        cmd.args([role, "--lock"]).arg(lock);
        if let Some(s) = stamp {
            cmd.arg("--stamp").arg(s);
        }
        cmd.args(args);
        self.spawn_command(cmd)
    }

    /// Starts `cmd` as a worker speaking the worker protocol on its stdin and stdout (a
    /// contender of another language, `external.rs`); returns its index.
    pub(super) fn spawn_command(
        &mut self,
        mut cmd: std::process::Command,
    ) -> Result<usize, Failure> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io_fail("start a worker process"))?;
        let idx = self.children.len();
        let stdin = child.stdin.take();
        if let Some(stdout) = child.stdout.take() {
            let tx = self.tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((idx, line)).is_err() {
                        break;
                    }
                }
            });
        }
        self.children.push((child, stdin));
        Ok(idx)
    }

    pub(super) fn pid(&self, idx: usize) -> u32 {
        self.children[idx].0.id()
    }

    /// The next line from any worker.
    pub(super) fn recv(&self) -> Result<(usize, String), Failure> {
        self.rx
            .recv_timeout(LINE_LIMIT)
            .map_err(|_| Failure::failed("bench: a worker process stopped answering"))
    }

    /// The next line from any worker, waiting at most `limit` (for workers whose lines are
    /// seconds of durable work apart).
    pub(super) fn recv_within(&self, limit: Duration) -> Result<(usize, String), Failure> {
        self.rx
            .recv_timeout(limit)
            .map_err(|_| Failure::failed("bench: a worker process stopped answering"))
    }

    /// The next line from worker `idx`, which must start with `tag`; returns its numbers.
    pub(super) fn expect(&self, idx: usize, tag: &str) -> Result<Vec<u64>, Failure> {
        let (from, line) = self.recv()?;
        let mut it = line.split_whitespace();
        if from != idx || it.next() != Some(tag) {
            return Err(Failure::failed(format!(
                "bench: unexpected worker line {line:?} (wanted {tag} from worker {idx})"
            )));
        }
        it.map(|n| n.parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| Failure::failed(format!("bench: malformed worker line {line:?}")))
    }

    /// Writes `line` to worker `idx`'s stdin.
    pub(super) fn send(&mut self, idx: usize, line: &str) -> Result<(), Failure> {
        use std::io::Write;
        let stdin = self.children[idx]
            .1
            .as_mut()
            .ok_or_else(|| Failure::failed("bench: a worker's stdin is closed"))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(io_fail("cue a worker"))
    }

    /// SIGKILLs worker `idx` and reaps it.
    pub(super) fn kill(&mut self, idx: usize) {
        let child = &mut self.children[idx].0;
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Closes worker `idx`'s stdin (its cue to finish) and reaps it.
    pub(super) fn finish(&mut self, idx: usize) {
        self.children[idx].1 = None;
        let _ = self.children[idx].0.wait();
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        for (child, stdin) in &mut self.children {
            *stdin = None;
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// How long, on Windows, a waiter that has seen the lease held is given before the event it
/// waits for is triggered: Windows offers no view of whether a thread sleeps (Linux:
/// `/proc`), and a Windows waiter polls with back-off (1 ms doubling to 16 ms), which has
/// reached its longest interval after ~31 ms. A scenario parameter (what a long-waiting
/// poller sees), not a synchronisation: the waiter has told us it waits before this starts.
#[cfg(windows)]
pub(super) const SETTLE: Duration = Duration::from_millis(50);

/// An id of the calling thread that [`until_thread_waits`] understands (Linux: its tid).
pub(super) fn this_thread() -> u64 {
    #[cfg(unix)]
    {
        rustix::thread::gettid().as_raw_nonzero().get() as u64
    }
    #[cfg(windows)]
    {
        0
    }
}

/// Returns once thread `tid` of this process (from [`this_thread`], sent by the thread just
/// before it starts to wait) is waiting: Linux sees it asleep in `/proc`; Windows gives it
/// `SETTLE`.
pub(super) fn until_thread_waits(tid: u64) -> Result<(), Failure> {
    #[cfg(unix)]
    {
        until_asleep(&format!("/proc/self/task/{tid}/stat"))
    }
    #[cfg(windows)]
    {
        let _ = tid;
        std::thread::sleep(SETTLE);
        Ok(())
    }
}

/// Returns once worker process `pid`, which said it waits (`W`), is waiting: Linux sees it
/// asleep in `/proc`; on Windows it saw the lease held before it said so, and gets `SETTLE`.
pub(super) fn until_process_waits(pid: u32) -> Result<(), Failure> {
    #[cfg(unix)]
    {
        until_asleep(&format!("/proc/{pid}/stat"))
    }
    #[cfg(windows)]
    {
        let _ = pid;
        std::thread::sleep(SETTLE);
        Ok(())
    }
}

/// Whether a thread or process (`/proc/.../stat` path) is asleep in the kernel. Used to know a
/// waiter has really started waiting before the event it waits for is triggered.
#[cfg(unix)]
fn asleep(stat_path: &str) -> bool {
    std::fs::read_to_string(stat_path)
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "S"))
        })
        .unwrap_or(false)
}

/// Spins (yielding) until `stat_path` shows a sleeping task; fails after a generous bound.
#[cfg(unix)]
pub(super) fn until_asleep(stat_path: &str) -> Result<(), Failure> {
    let end = Instant::now() + LINE_LIMIT;
    // Twice in a row with a yield between, so a task merely descheduled for a moment in
    // its setup is not mistaken for one blocked in its wait.
    let mut streak = 0;
    while streak < 2 {
        if Instant::now() > end {
            return Err(Failure::failed("bench: a waiter never started waiting"));
        }
        std::thread::yield_now();
        streak = if asleep(stat_path) { streak + 1 } else { 0 };
    }
    Ok(())
}
