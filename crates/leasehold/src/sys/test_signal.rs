//! Tests only: interrupting one thread's blocking system call with a signal, as an
//! interpreter's own handler does (CPython installs its SIGINT handler without
//! `SA_RESTART`), so that `flock` fails with `EINTR`.

/// The signal the tests interrupt with.
const SIGNAL: libc::c_int = libc::SIGUSR1;

/// Does nothing: its running is what interrupts the system call.
extern "C" fn ignore(_sig: libc::c_int) {}

/// A thread of this process, as [`interrupt`] addresses it.
#[derive(Clone, Copy)]
pub(crate) struct Thread(libc::pthread_t);

/// Installs the handler (without `SA_RESTART`) and names the calling thread.
pub(crate) fn this_thread() -> Thread {
    // SAFETY: `sigaction` is given a zeroed, then filled, `sigaction` struct that lives for
    // the call; the handler is an `extern "C"` function that touches nothing (so it is
    // async-signal-safe); no `SA_SIGINFO`, so `sa_sigaction` is read as a plain handler.
    let installed = unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = ignore as extern "C" fn(libc::c_int) as libc::sighandler_t;
        act.sa_flags = 0;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(SIGNAL, &act, std::ptr::null_mut())
    };
    assert_eq!(installed, 0, "install the test's signal handler");
    // SAFETY: `pthread_self` has no preconditions.
    Thread(unsafe { libc::pthread_self() })
}

/// Sends the signal to `thread`, which must still be running (the tests join it later).
pub(crate) fn interrupt(thread: Thread) {
    // SAFETY: `thread` names a thread of this process that has not been joined (the caller
    // keeps its `JoinHandle`), so its id is valid.
    let sent = unsafe { libc::pthread_kill(thread.0, SIGNAL) };
    assert_eq!(sent, 0, "signal the waiting thread");
}
