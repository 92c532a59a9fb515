//! COMMAND and the terminal (`run --etcd`): COMMAND runs in a
//! process group of its own (C, so that its whole tree can be signalled), which to the
//! terminal is a background job — one that reads the terminal is stopped (SIGTTIN) while it
//! holds the lease, and Ctrl-C reaches `run` only. So when `run` is in the terminal's
//! foreground group, it makes C the foreground group for COMMAND's lifetime, and the
//! supervisor gives the terminal back to `run`'s group once COMMAND's tree is gone.
//!
//! Compare coreutils `timeout --foreground`, which keeps COMMAND in its own group for the
//! same reason and gives up signalling COMMAND's children; here the tree stays bound to the
//! lease, and the terminal follows COMMAND instead. Ctrl-C at the terminal then reaches
//! group C directly; signals sent to `run` itself are forwarded as before.
//!
//! Giving the terminal needs no signal mask: `run` calls `tcsetpgrp` while it is in the
//! foreground group (it checks first), so the kernel sends no SIGTTOU. (If the shell moves
//! `run` to the background between the check and the call, SIGTTOU stops `run` as it would
//! any background job touching the terminal.) Taking it back comes from a background group,
//! where `tcsetpgrp` raises SIGTTOU unless the caller blocks or ignores it: the supervisor
//! blocks it in its calling thread for that one call (`pthread_sigmask`, safe through
//! `nix`; the kernel then sends nothing, see `tty_check_change`).
//!
//! Job control ([`follow_stop`]): the terminal's stop signals reach group C only, so when
//! COMMAND is stopped by one `run` takes the terminal back (the same masked call) and stops
//! its own group with the same signal, and gives the terminal to C again when the shell
//! continues the job in the foreground.

use std::os::fd::{AsFd, BorrowedFd};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::Pid;

/// If stdin or stdout is this process's controlling terminal and this process's group is
/// its foreground group, makes `group` the foreground group and returns `true`. Otherwise
/// (no terminal, or `run` is a background job) changes nothing and returns `false`.
pub fn hand_to(group: Pid) -> bool {
    let ours = rustix::process::getpgrp();
    [rustix::stdio::stdin(), rustix::stdio::stdout()]
        .into_iter()
        .any(|fd| is_foreground(fd, ours) && rustix::termios::tcsetpgrp(fd, group).is_ok())
}

/// Whether `fd` is a terminal whose foreground group is `group` (`tcgetpgrp` fails on a
/// terminal that is not the caller's controlling one).
fn is_foreground(fd: BorrowedFd<'_>, group: Pid) -> bool {
    rustix::termios::isatty(fd) && rustix::termios::tcgetpgrp(fd).is_ok_and(|fg| fg == group)
}

/// Gives the terminal `tty` back to `caller` (`run`'s group) if it is still where `run` put
/// it — the foreground group is `command`'s, or a group with nobody left in it (one COMMAND
/// made foreground itself). Never takes it from a group that is alive: the shell that took
/// the terminal back when `run` died or was stopped keeps it.
pub fn take_back(tty: &impl AsFd, command: Pid, caller: i32) {
    let tty = tty.as_fd();
    let Some(caller) = Pid::from_raw(caller) else {
        return;
    };
    let Ok(fg) = rustix::termios::tcgetpgrp(tty) else {
        return;
    };
    // A group is alive while a member exists (EPERM: one exists that we may not signal).
    let alive = |g: Pid| {
        !matches!(
            rustix::process::test_kill_process_group(g),
            Err(rustix::io::Errno::SRCH)
        )
    };
    if fg == caller || (fg != command && alive(fg)) {
        return;
    }
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut before = SigSet::empty();
    if pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut before)).is_err() {
        return; // without the mask the call would stop us: leave it to the shell
    }
    // Fails when `caller` is gone (a job of its own that died): its shell takes it back.
    let _ = rustix::termios::tcsetpgrp(tty, caller);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
}

/// Job control, `run`'s side: COMMAND (in group `command`) was stopped by `sig`. A COMMAND
/// in `run`'s own group — `leasehold run` on the kernel arbiter, `flock(1)` — is stopped
/// with its whole job by the terminal's SIGTSTP (Ctrl-Z), SIGTTIN or SIGTTOU, and the shell
/// sees the job stopped; here the terminal's signal reached group C only. So `run` takes
/// the terminal back for its group if C has it, and stops its group with the same signal:
/// the shell sees its job stopped, says so, and has the terminal. Once continued (`fg` or
/// `bg`: SIGCONT, which `continued` reads a byte for), `run` gives the terminal to C again
/// if the shell gave it to `run`'s group (`fg`), and continues C. Returns whether it gave
/// the terminal to C.
///
/// Only the terminal's stop signals are followed (a SIGSTOP of COMMAND stops COMMAND alone,
/// as it would in `run`'s own group). Where the kernel would discard the stop for a COMMAND
/// in `run`'s group — the group is orphaned (no shell can continue it), or `run` ignores the
/// signal (so COMMAND inherited the ignoring) — `run` continues C at once instead; and so it
/// does once `run` has had a SIGHUP (`hung_up`): a job being hung up is ending, and one
/// stopped now might be continued by nobody (the supervisor continues `run`'s group once
/// the tree is gone after a hang-up, for a stop already under way).
pub fn follow_stop(
    sig: i32,
    command: Pid,
    continued: &std::os::unix::net::UnixStream,
    hung_up: &std::sync::atomic::AtomicBool,
) -> bool {
    use rustix::process::{Signal, kill_process_group};
    let Some(sig) = Signal::from_named_raw(sig)
        .filter(|s| matches!(*s, Signal::TSTP | Signal::TTIN | Signal::TTOU))
    else {
        return false;
    };
    let ours = rustix::process::getpgrp();
    if !hung_up.load(std::sync::atomic::Ordering::SeqCst) && !discarded(sig, ours) {
        if let Some(tty) = controlling() {
            take_back(&tty, command, ours.as_raw_nonzero().get());
        }
        // A SIGCONT that came before is not the one awaited.
        let _ = continued.set_nonblocking(true);
        let mut buf = [0u8; 16];
        while std::io::Read::read(&mut &*continued, &mut buf).is_ok_and(|n| n > 0) {}
        let _ = continued.set_nonblocking(false);
        if kill_process_group(ours, sig).is_ok() {
            // Stopped until the shell (or anyone) continues the group; a SIGCONT before the
            // stop took effect cancels it, and is read here as well. The group may become
            // orphaned before the stop is delivered (the shell hung up and gone): the kernel
            // then discards it, which a look every tenth of a second finds (a stopped
            // process does not look).
            let tenth = rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 100_000_000,
            };
            loop {
                let mut fds = [PollFd::new(continued, PollFlags::IN)];
                let ready = matches!(poll(&mut fds, Some(&tenth)), Ok(n) if n > 0);
                if ready {
                    let _ = std::io::Read::read(&mut &*continued, &mut buf);
                    break;
                }
                if discarded(sig, ours) {
                    break;
                }
            }
        }
    }
    let handed = hand_to(command);
    let _ = kill_process_group(command, Signal::CONT);
    handed
}

/// The controlling terminal among stdin and stdout, if either is it.
fn controlling() -> Option<BorrowedFd<'static>> {
    [rustix::stdio::stdin(), rustix::stdio::stdout()]
        .into_iter()
        .find(|fd| rustix::termios::isatty(fd) && rustix::termios::tcgetpgrp(fd).is_ok())
}

/// Whether the kernel would discard the terminal stop signal `sig` sent to `group` (this
/// process's): the group is orphaned — no member has a parent in another group of the same
/// session, so no shell can continue it — or this process ignores `sig` (Linux, from
/// `/proc`; elsewhere: never, as far as this knows).
fn discarded(sig: rustix::process::Signal, group: Pid) -> bool {
    #[cfg(target_os = "linux")]
    {
        ignored(sig) || orphaned(group)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (sig, group);
        false
    }
}

/// Whether this process ignores `sig` (`SigIgn` of `/proc/self/status`).
#[cfg(target_os = "linux")]
fn ignored(sig: rustix::process::Signal) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1u64 << (sig.as_raw() - 1)) != 0)
}

/// Whether process group `group` is orphaned (POSIX): no member has a parent in another
/// group of the same session. From `/proc/*/stat` ("PID (comm) S PPID PGRP SID …"); off
/// Linux, never as far as this knows.
#[cfg(not(target_os = "linux"))]
pub(super) fn orphaned(_: Pid) -> bool {
    false
}

/// Whether process group `group` is orphaned (POSIX): no member has a parent in another
/// group of the same session (`procs.rs`).
#[cfg(target_os = "linux")]
pub(super) fn orphaned(group: Pid) -> bool {
    crate::procs::orphaned(group)
}
