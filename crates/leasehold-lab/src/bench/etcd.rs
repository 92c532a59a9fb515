//! `leasehold bench --etcd ENDPOINTS | --etcd-server`: leasehold-on-etcd against the anchor,
//! `etcdctl lock NAME COMMAND` (Debian's etcd-client), in the same run on the same etcd.
//!
//! Three figures, each a median over repeats, the two tools interleaved repeat by repeat so
//! that both see the same machine load. Both run the same COMMAND (`sh -c 'echo in; read
//! x < FIFO'`: etcdctl does not pass its stdin on, so COMMAND is ended through a FIFO) with
//! the same lease TTL (2 s); a lock name is used once.
//!
//! * **acquire**: from spawning the tool (uncontended lock) until COMMAND's `in` arrives —
//!   process start, connection, lease grant, lock and COMMAND's start, as a user sees it;
//! * **hand-over after a clean release**: a waiter queued behind a holder (its key is in
//!   etcd); from telling the holder's COMMAND to end until the waiter's COMMAND says `in`.
//!   The release follows the queueing at once, so a waiter whose watch etcd counts as "slow"
//!   (one that starts at, not after, etcd's current revision, as etcd's own mutex.go
//!   watches) waits for etcd's catch-up loop, up to 100 ms;
//! * **the same, waiter queued [`SETTLED`] before**: a waiter that has waited a while, whose
//!   watch etcd has caught up either way: what is left is etcd's commit of the release and
//!   each tool's own path from the event to COMMAND;
//! * **takeover after SIGKILL**: as above, but the holder's process group is SIGKILLed: the
//!   lease must expire (≈ the TTL), so the figure is compared with the TTL too.
//!
//! Timestamps are the parent's CLOCK_MONOTONIC when it writes or reads a pipe; the queueing
//! handshake is the waiter's key appearing under the lock's prefix.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::arbiters::etcd::EtcdArbiter;
use rustix::process::{Pid, Signal, kill_process_group};
use serde_json::json;

use super::report::median;
use crate::exit::{Failure, OK, Outcome};
use crate::private_etcd::PrivateEtcd;
use leasehold_stores::registry::ETCD_RUN_LOCKS as LOCK_PREFIX;

const TTL: &str = "2";
/// How long the settled hand-over's waiter has been queued before the release: longer than
/// etcd's 100 ms catch-up loop for slow watchers (a measured scenario, not a synchronisation).
const SETTLED: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Leasehold,
    Etcdctl,
}

struct Tools {
    dir: PathBuf,
    exe: PathBuf,
    etcdctl: PathBuf,
    endpoint: String,
}

impl Tools {
    /// The tool holding lock `name` while COMMAND says `in` and waits for a line on `fifo`.
    fn command(&self, tool: Tool, name: &str, fifo: &Path) -> Command {
        let mut c = match tool {
            Tool::Leasehold => {
                let mut c = Command::new(&self.exe);
                c.args(["run", "--etcd", &self.endpoint, "--ttl", TTL, name, "--"]);
                c
            }
            Tool::Etcdctl => {
                let mut c = Command::new(&self.etcdctl);
                c.env("ETCDCTL_API", "3")
                    .arg(format!("--endpoints={}", self.endpoint))
                    .args(["lock", "--ttl", TTL, name, "--"]);
                c
            }
        };
        c.args(["sh", "-c", "echo in; read _x < \"$0\""]).arg(fifo);
        c
    }

    /// The key prefix the tool's lock keys live under.
    fn prefix(tool: Tool, name: &str) -> String {
        match tool {
            Tool::Leasehold => format!("{LOCK_PREFIX}/{name}"),
            Tool::Etcdctl => name.to_string(),
        }
    }
}

struct Proc {
    fifo: PathBuf,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(t: &Tools, tool: Tool, name: &str, role: &str) -> Result<Proc, Failure> {
        let fifo = t.dir.join(format!("{name}-{role}.fifo"));
        let made = Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            return Err(Failure::failed(format!(
                "bench: cannot create FIFO {}",
                fifo.display()
            )));
        }
        let mut child = t
            .command(tool, name, &fifo)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| Failure::failed(format!("bench: cannot start a holder: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(Failure::failed("bench: a holder has no pipes"));
        };
        Ok(Proc {
            fifo,
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
        })
    }

    /// Reads lines until COMMAND's `in` (etcdctl may print the lock key first).
    fn wait_in(&mut self) -> Result<Instant, Failure> {
        let mut line = String::new();
        loop {
            line.clear();
            match self.stdout.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    return Err(Failure::failed(
                        "bench: a holder ended before its COMMAND ran",
                    ));
                }
                Ok(_) if line.trim_end() == "in" => return Ok(Instant::now()),
                Ok(_) => {}
            }
        }
    }

    fn end(&mut self) -> Result<Instant, Failure> {
        let t = Instant::now();
        self.stdin = None;
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.fifo)
            .map_err(|e| Failure::failed(format!("bench: {}: {e}", self.fifo.display())))?;
        writeln!(w, "end").map_err(|e| Failure::failed(format!("bench: {e}")))?;
        Ok(t)
    }

    fn kill(&mut self) -> Instant {
        let t = Instant::now();
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        t
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait()
            && let Some(pid) = Pid::from_raw(self.child.id() as i32)
        {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

fn find_etcdctl() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_string_lossy()
        .split(':')
        .map(|d| Path::new(d).join("etcdctl"))
        .find(|p| p.is_file())
}

/// Waits until `n` keys are under the tool's prefix (the waiter has queued), within 10 s.
fn queued(counter: &EtcdArbiter, n: usize) -> Result<(), Failure> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let count = counter
            .contenders()
            .map_err(|e| Failure::failed(format!("bench: {e}")))?;
        if count >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Failure::failed("bench: a waiter never queued"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn acquire(t: &Tools, tool: Tool, name: &str) -> Result<f64, Failure> {
    let started = Instant::now();
    let mut p = Proc::spawn(t, tool, name, "holder")?;
    let dt = p.wait_in()?.duration_since(started);
    p.end()?;
    let _ = p.child.wait();
    Ok(dt.as_secs_f64() * 1e3)
}

fn handover(
    t: &Tools,
    tool: Tool,
    name: &str,
    kill: bool,
    settle: Duration,
) -> Result<f64, Failure> {
    let counter = EtcdArbiter::connect(
        &t.endpoint,
        &Tools::prefix(tool, name),
        Duration::from_secs(2),
    )
    .map_err(|e| Failure::failed(format!("bench: {e}")))?;
    let mut holder = Proc::spawn(t, tool, name, "holder")?;
    holder.wait_in()?;
    let mut waiter = Proc::spawn(t, tool, name, "waiter")?;
    queued(&counter, 2)?;
    std::thread::sleep(settle);
    let released = if kill { holder.kill() } else { holder.end()? };
    let dt = waiter.wait_in()?.duration_since(released);
    waiter.end()?;
    let _ = waiter.child.wait();
    let _ = holder.child.wait();
    Ok(dt.as_secs_f64() * 1e3)
}

pub fn run(endpoints: Option<String>, quick: bool, json: bool) -> Outcome {
    let etcdctl = find_etcdctl().ok_or_else(|| {
        Failure::failed(
            "bench --etcd: etcdctl is not installed (Debian: etcd-client); it is the anchor",
        )
    })?;
    let dir = tempfile::Builder::new()
        .prefix("leasehold-bench-etcd-")
        .tempdir()
        .map_err(|e| Failure::failed(format!("bench: {e}")))?;
    let private = match endpoints {
        Some(_) => None,
        None => Some(PrivateEtcd::start(dir.path())?),
    };
    let endpoint = match (&endpoints, &private) {
        (Some(e), _) => e.clone(),
        (None, Some(p)) => p.endpoint.clone(),
        (None, None) => return Err(Failure::failed("bench: no etcd")),
    };
    let tools = Tools {
        dir: dir.path().to_path_buf(),
        exe: std::env::current_exe().map_err(|e| Failure::failed(format!("bench: {e}")))?,
        etcdctl,
        endpoint,
    };
    let (fast, slow) = if quick { (3, 1) } else { (15, 5) };
    let started = Instant::now();
    let tag = std::process::id();
    type Scenario = fn(&Tools, Tool, &str) -> Result<f64, Failure>;
    let scenarios: [(&str, Scenario, usize); 4] = [
        (
            "acquire (uncontended, process start to COMMAND)",
            acquire,
            fast,
        ),
        (
            "hand-over after a clean release",
            |t, tool, n| handover(t, tool, n, false, Duration::ZERO),
            fast,
        ),
        (
            "hand-over, waiter queued 200 ms before",
            |t, tool, n| handover(t, tool, n, false, SETTLED),
            fast,
        ),
        (
            "takeover after SIGKILL of the holder (TTL 2 s)",
            |t, tool, n| handover(t, tool, n, true, Duration::ZERO),
            slow,
        ),
    ];
    let mut rows = Vec::new();
    for (s, (figure, f, repeats)) in scenarios.iter().enumerate() {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for i in 0..*repeats {
            ours.push(f(&tools, Tool::Leasehold, &format!("b{tag}-{s}-{i}-l"))?);
            theirs.push(f(&tools, Tool::Etcdctl, &format!("b{tag}-{s}-{i}-e"))?);
        }
        rows.push((*figure, median(&ours), median(&theirs), *repeats));
    }
    drop(private);
    let elapsed = started.elapsed().as_secs_f64();
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(f, a, b, n)| json!({"figure": f, "leasehold_ms": a, "etcdctl_lock_ms": b, "ratio": a / b, "repeats": n}))
            .collect();
        println!("{}", json!({"etcd": v, "seconds": elapsed}));
    } else {
        println!(
            "leasehold on etcd vs `etcdctl lock` (same etcd, same TTL, medians; {elapsed:.0} s)"
        );
        println!(
            "{:<50} {:>12} {:>14} {:>7}",
            "figure", "leasehold", "etcdctl lock", "ratio"
        );
        for (f, a, b, n) in &rows {
            println!("{f:<50} {a:>9.1} ms {b:>11.1} ms {:>7.2}  (n={n})", a / b);
        }
    }
    Ok(OK)
}
