//! COMMAND and the terminal (`run --etcd`, issue 22 item 2 follow-up): COMMAND runs in a
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

use std::os::fd::{AsFd, BorrowedFd};

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
