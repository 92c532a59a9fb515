//! The one platform seam of the verbs with worker processes (the lab's `bench` and `torture`,
//! and the CLI's `run --etcd` supervisor): how this binary is started as a worker, the clock that crosses
//! process boundaries, how a worker is started so that it can be killed whole, the kill
//! itself, and how its end is recognised as that kill.
//!
//! Everything else those verbs do between processes is portable already: parent and
//! workers talk through the child's stdin and stdout (one line per event, `std::process`
//! pipes), never through signals or sleeps. What differs:
//!
//! | | POSIX | Windows |
//! |---|---|---|
//! | clock ([`mono_ns`]) | `CLOCK_MONOTONIC` | `GetSystemTimePreciseAsFileTime` (std's `SystemTime`: the lab has no `unsafe`) |
//! | worker start ([`isolate`]) | own process group | nothing |
//! | kill ([`kill`]) | `SIGKILL` to the process group: the worker and whatever it started (`leasehold run`, its COMMAND) | `TerminateProcess` of the worker (`Child::kill`): Windows has no process groups, so a torture worker starts no processes there (see `torture`) |
//! | killed? ([`ended_by_kill`]) | ended by signal 9 | exit code 1, the code `Child::kill` passes to `TerminateProcess` |
//! | process CPU ([`process_cpu_ns`]) | `CLOCK_PROCESS_CPUTIME_ID` | none (`GetProcessTimes` would need `unsafe`) |

use std::io;
use std::process::{Child, Command, ExitStatus};

use crate::exit::Failure;

/// The arguments that make this binary a worker: `exe worker VERB ...` (`crates/leasehold-cli/src/cmd/worker.rs`).
pub const WORKER_ARGS: [&str; 1] = ["worker"];

/// The command that starts this binary as a worker of `verb` (add the worker's arguments).
pub fn worker_command(verb: &str) -> Result<Command, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::failed(format!("cannot find this executable: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.args(WORKER_ARGS).arg(verb);
    Ok(cmd)
}

/// How the platform ends a worker, for reports ("takeover after SIGKILL").
#[cfg(unix)]
pub const KILL: &str = "SIGKILL";
/// How the platform ends a worker, for reports ("takeover after TerminateProcess").
#[cfg(windows)]
pub const KILL: &str = "TerminateProcess";

/// Nanoseconds of a monotonic clock that every process of the machine reads alike, so that
/// a timestamp taken in one process can be compared with one taken in another.
pub fn mono_ns() -> u64 {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        (t.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec as u64)
    }
    #[cfg(windows)]
    {
        // std's SystemTime is GetSystemTimePreciseAsFileTime here: 100 ns steps, and one
        // clock for all processes. (QueryPerformanceCounter would need an unsafe Win32 call,
        // and the library exposes nothing for benchmarks.) It can step when the
        // system clock is set; a bench run or torture spanning such a step says so in an odd
        // figure or a checker complaint, never in a silent pass.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// CPU time this process has used, in nanoseconds, where the platform offers it safely.
pub fn process_cpu_ns() -> Option<u64> {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64)
    }
    #[cfg(windows)]
    {
        None
    }
}

/// Prepares a worker's command so that [`kill`] ends everything the worker starts: on POSIX
/// a process group of its own (so `leasehold run` and its COMMAND die with it).
pub fn isolate(cmd: &mut Command) -> &mut Command {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0)
    }
    #[cfg(windows)]
    {
        cmd
    }
}

/// Kills `child` at once, without letting it run another instruction of its own: SIGKILL
/// to its process group on POSIX (see [`isolate`]), `TerminateProcess` on Windows (an
/// error, and no kill, if it has already ended). The kernel releases whatever the killed
/// processes held (flock locks, named objects).
pub fn kill(child: &mut Child) -> io::Result<()> {
    #[cfg(unix)]
    {
        let pid = rustix::process::Pid::from_raw(child.id() as i32)
            .ok_or_else(|| io::Error::other("a worker without a pid"))?;
        rustix::process::kill_process_group(pid, rustix::process::Signal::KILL)
            .map_err(io::Error::from)
    }
    #[cfg(windows)]
    {
        // A worker that already ended by itself is not killed (and not counted as killed):
        // its exit code would look like the kill's (see `ended_by_kill`).
        if child.try_wait()?.is_some() {
            return Err(io::Error::other("the worker had already ended"));
        }
        child.kill()
    }
}

/// Whether a reaped worker ended by [`kill`] (rather than by itself).
///
/// On Windows this is the exit code `Child::kill` gives `TerminateProcess` (1), which a
/// worker failing by itself also returns: a worker counts as killed only if [`kill`] found
/// it still running (`Child::try_wait` first) and it then ended with 1.
pub fn ended_by_kill(status: &ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(9)
    }
    #[cfg(windows)]
    {
        status.code() == Some(1)
    }
}

/// Pauses the process group of the worker `pid` for `pause` (SIGSTOP, then SIGCONT): a
/// holder that stands still past its lease's TTL, renewing nothing. Windows cannot pause a
/// process from outside: nothing happens there (the runs that pause are refused first).
pub fn pause(pid: u32, pause: std::time::Duration) {
    #[cfg(unix)]
    {
        use rustix::process::{Pid, Signal, kill_process_group};
        let Some(group) = Pid::from_raw(pid as i32) else {
            return;
        };
        if kill_process_group(group, Signal::STOP).is_ok() {
            std::thread::sleep(pause);
            let _ = kill_process_group(group, Signal::CONT);
        }
    }
    #[cfg(windows)]
    {
        let _ = (pid, pause);
    }
}
