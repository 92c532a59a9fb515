//! Tests only: running a closure in a forked child (no `exec`), as Python's `os.fork` and
//! `multiprocessing` do, to test what a child's copies of this process's descriptors do.

/// Forks; the child runs `f` and exits with status 0 (`_exit`: no destructors, no atexit
/// handlers of the parent's copy); the parent waits for it and answers its exit status
/// (`None` when it did not exit normally). `f` must be async-signal-safe: the test process
/// is multi-threaded, and only the forking thread exists in the child (closing descriptors
/// is fine; taking a lock or allocating is not).
pub(crate) fn in_child(f: &mut dyn FnMut()) -> Option<i32> {
    in_child_status(&mut || {
        f();
        0
    })
}

/// [`in_child`], the child exiting with the status `f` answers, or 101 if `f` panicked
/// (unwinding on, the child would return into its copy of the test harness, whose thread
/// then ends the process with status 0). A child still running a minute after the fork is
/// ended by `SIGALRM` (the answer is then `None`): a test whose child hangs (waits for a
/// thread of the parent's, which does not exist in it) fails instead of hanging.
pub(crate) fn in_child_status(f: &mut dyn FnMut() -> i32) -> Option<i32> {
    // SAFETY: `fork` has no preconditions; in the child only `alarm`, `f` (async-signal-safe,
    // see above) and `_exit` run before the process ends.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: `alarm` has no preconditions; SIGALRM's default action ends the process.
        unsafe { libc::alarm(60) };
        let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: `_exit` has no preconditions and never returns.
        unsafe { libc::_exit(status) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child, not yet reaped; `status` lives for the call.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid");
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}
